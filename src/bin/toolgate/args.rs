//! The command line: every subcommand's arguments, and the closed sets of values they
//! take as `clap::ValueEnum`s mapped onto the library's types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use toolgate::bench::{ChoicePolicy, Mode};
use toolgate::engine::chat::ToolMode;
use toolgate::grammar::ir::Objects;
use toolgate::model::DeviceChoice;
use toolgate::template::ToolFallback;

/// toolgate: a pure-Rust inference engine and server for LLM tool calling.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about, long_about = None)]
pub(crate) struct Cli {
    /// A TOML file of settings, keyed by flag name (`port = 8080`,
    /// `tool-fallback = "generic"`, `model = "…"`). Precedence: flags, then environment
    /// variables, then this file, then defaults.
    #[arg(long, global = true, env = "TOOLGATE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Log filter (e.g. `info`, `toolgate=debug`); also read from `TOOLGATE_LOG`.
    #[arg(long, global = true, env = "TOOLGATE_LOG", default_value = "warn")]
    pub(crate) log: String,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Generate text from a raw prompt and stream it to stdout; speed goes to stderr.
    Run(RunArgs),
    /// One chat turn through the model's own chat template, behind the tool-calling gate.
    Chat(ChatArgs),
    /// Serve the OpenAI (`/v1/chat/completions`) and Anthropic (`/v1/messages`) APIs
    /// with tools, plus `/v1/models`, `/props`, `/health`, `/ready` and `/metrics`. The model must
    /// pass the tool-calling gate; `--model` may be a Hub repository id.
    Serve(ServeArgs),
    /// Probe a GGUF model (metadata only) or a Jinja template file: capabilities,
    /// reasons, tool-call family, as JSON.
    Probe(ProbeArgs),
    /// Perplexity of a text file; with `--kl-divergence-base`, the KL divergence and
    /// top-token agreement with another engine's next-token distributions over the same
    /// tokens (llama.cpp's `llama-perplexity --kl-divergence-base` file). JSON on stdout.
    Perplexity(PerplexityArgs),
    /// Download a GGUF model from the Hugging Face Hub into the cache: pick the
    /// quantization, pre-check its header against the gate (no weights downloaded),
    /// download resumably, verify sha256, verify as a model. Prints the path.
    Pull(PullArgs),
    /// List the models in the cache with size, quantization and tool capability.
    List(ListArgs),
    /// Remove a model (or one file of it) from the cache.
    Rm(RmArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The constraint engine from the shell.
    #[command(subcommand)]
    Grammar(GrammarCommand),
    /// Tool-call layouts from the shell.
    #[command(subcommand)]
    Tools(ToolsCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ToolsCommand {
    /// Read model output text on stdin as the model's template lays out calls and print
    /// JSON: `content`, `reasoning_content`, `tool_calls` (OpenAI shape), and `grammar`
    /// (`accepted`, or where the constrained grammar for these tools rejects the calls),
    /// with the layout used and how it was chosen. Exit status 0 when the calls parse
    /// and the grammar accepts them, 1 otherwise, 2 on errors.
    Parse(ToolsParseArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ToolsParseArgs {
    /// A GGUF model (only its header is read) whose template lays out the calls.
    #[arg(long, short = 'm', required_unless_present = "chat_template")]
    pub(crate) model: Option<PathBuf>,
    /// A Jinja chat template file (instead of, or overriding, the model's).
    #[arg(long)]
    pub(crate) chat_template: Option<PathBuf>,
    /// The tools: a JSON file with an OpenAI `tools` array (or an object holding one).
    #[arg(long)]
    pub(crate) tools: PathBuf,
    /// Read the calls in this `grammars/` family's layout instead of the derived one.
    #[arg(long)]
    pub(crate) tool_format: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum GrammarCommand {
    /// Whether the constraint for a JSON Schema accepts each instance, token by token:
    /// the instance's compact JSON is tokenized with the model's vocabulary and walked
    /// through the masks, then must end in an accepting state. Exit status 0 when every
    /// instance is accepted, 1 when one is rejected, 2 on errors.
    Check(GrammarCheckArgs),
}

#[derive(Debug, Args)]
pub(crate) struct GrammarCheckArgs {
    /// The GGUF model whose vocabulary is used (only its header is read).
    #[arg(long, short = 'm')]
    pub(crate) model: PathBuf,
    /// The JSON Schema file.
    #[arg(long)]
    pub(crate) schema: PathBuf,
    /// Unsupported schema keywords: `strict` refuses them, `lenient` ignores them.
    #[arg(long, value_enum, default_value = "strict")]
    pub(crate) schema_mode: SchemaModeArg,
    /// Undeclared object properties: `closed` refuses them where `additionalProperties`
    /// is absent (as tool calls and `response_format` are constrained); `open` allows
    /// them, as JSON Schema reads the schema.
    #[arg(long, value_enum, default_value = "closed")]
    pub(crate) objects: ObjectsArg,
    /// JSON instance files.
    #[arg(required = true)]
    pub(crate) instances: Vec<PathBuf>,
}

/// `--objects`: what an object schema admits besides its declared properties.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ObjectsArg {
    Closed,
    Open,
}

impl From<ObjectsArg> for Objects {
    fn from(o: ObjectsArg) -> Self {
        match o {
            ObjectsArg::Closed => Objects::Closed,
            ObjectsArg::Open => Objects::Open,
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// Tool-calling reliability: BFCL tasks (or your own) in constrained, native and
    /// prompt-only modes, judged by BFCL's AST rules; a table, JSON and an SVG chart.
    Tools(BenchToolsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct BenchToolsArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) gate: GateArgs,
    /// The BFCL data folder (`bfcl_eval/data`; `scripts/fetch-bfcl` fills the default).
    #[arg(long, env = "TOOLGATE_BFCL")]
    pub(crate) bfcl: Option<PathBuf>,
    /// BFCL categories, comma-separated (`none` for only --tasks files).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "simple_python,multiple,parallel,parallel_multiple,irrelevance"
    )]
    pub(crate) categories: Vec<String>,
    /// Task files in toolgate's own format (JSON lines; see docs/bench.md), repeatable.
    #[arg(long)]
    pub(crate) tasks: Vec<PathBuf>,
    /// Tasks per category, spread evenly over it (0 = all).
    #[arg(long, default_value_t = 40)]
    pub(crate) per_category: usize,
    /// Modes, comma-separated: constrained, native, prompt-only.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "constrained,native,prompt-only")]
    pub(crate) modes: Vec<ModeArg>,
    /// `required-where-expected` (required where a call is expected, auto elsewhere,
    /// as BFCL runs) or `auto` everywhere.
    #[arg(long, value_enum, default_value = "required-where-expected")]
    pub(crate) tool_choice: ChoiceArg,
    /// Token budget per answer.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
    /// Seed (the same for every mode).
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Jump-forward decoding in constrained mode, as `serve` has it: text the grammar
    /// forces goes through the model in chunks (the `forced` column is its share of the
    /// generated tokens).
    #[arg(long, value_enum, default_value = "on")]
    pub(crate) jump_forward: Switch,
    /// Write the summaries and every task's result as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write the chart (SVG) here.
    #[arg(long)]
    pub(crate) chart: Option<PathBuf>,
    /// Write the summary table as Markdown here.
    #[arg(long)]
    pub(crate) markdown: Option<PathBuf>,
    /// Bench another OpenAI-compatible server at this URL (llama.cpp's llama-server,
    /// vLLM, Ollama, `toolgate serve`) instead of loading the model: `--model` is then
    /// only the name sent and reported, `--modes` is ignored.
    #[arg(long)]
    pub(crate) server: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct HubArgs {
    /// Hub endpoint (a mirror, or a local hub).
    #[arg(long, env = "HF_ENDPOINT", default_value = toolgate::hub::DEFAULT_ENDPOINT)]
    pub(crate) endpoint: String,
    /// Branch, tag or commit of a Hub repository.
    #[arg(long, env = "TOOLGATE_REVISION", default_value = "main")]
    pub(crate) revision: String,
    /// The `.gguf` file of a Hub repository (default: the preferred quantization,
    /// Q4_K_M first).
    #[arg(long = "hf-file", visible_alias = "file", env = "TOOLGATE_HF_FILE")]
    pub(crate) file: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct PullArgs {
    /// Repository id, `ORG/NAME`.
    pub(crate) repo: String,
    #[command(flatten)]
    pub(crate) hub: HubArgs,
    #[command(flatten)]
    pub(crate) gate: GateArgs,
    /// Download even when the pre-check refuses the model (it is still verified, and
    /// quarantined if it fails).
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RmArgs {
    /// Repository id, `ORG/NAME`.
    pub(crate) repo: String,
    /// Remove only this file.
    #[arg(long)]
    pub(crate) file: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub(crate) struct GateArgs {
    /// Use this Jinja chat template instead of the model's.
    #[arg(long, env = "TOOLGATE_CHAT_TEMPLATE")]
    pub(crate) chat_template: Option<PathBuf>,
    /// For a model whose template cannot do tools: `none` refuses it, `generic` serves
    /// it with toolgate's generic tool template.
    #[arg(long, env = "TOOLGATE_TOOL_FALLBACK", default_value = "none")]
    pub(crate) tool_fallback: ToolFallback,
    /// Read and write tool calls in this family's format instead of the one derived
    /// from the chat template: a file in `grammars/` (hermes, generic, mistral,
    /// mistral-v11, llama3-json, llama3-python-tag, functionary-v3.1, deepseek-v3.1,
    /// deepseek-r1, kimi-k2, apriel, qwen3-coder, seed-oss, gemma4, granite, functools,
    /// pythonic; docs/tool-formats.md).
    #[arg(long, env = "TOOLGATE_TOOL_FORMAT")]
    pub(crate) tool_format: Option<String>,
    /// In `tool_choice: auto`, read a declared tool's call written as bare or fenced
    /// JSON (`{"name": …, "arguments": …}`) as a call, constrained from its name on
    /// (`on`, the default), or leave it as text (`off`).
    #[arg(long, env = "TOOLGATE_CALL_RECOVERY", value_enum, default_value = "on")]
    pub(crate) call_recovery: Switch,
}

#[derive(Debug, Args)]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) gate: GateArgs,
    /// The user message.
    #[arg(long)]
    pub(crate) message: String,
    /// An optional system message.
    #[arg(long)]
    pub(crate) system: Option<String>,
    /// A JSON file with an array of OpenAI tools (`{"type":"function","function":{…}}`).
    #[arg(long)]
    pub(crate) tools: Option<PathBuf>,
    /// Maximum tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub(crate) max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Print the rendered prompt to stderr.
    #[arg(long)]
    pub(crate) show_prompt: bool,
    /// With --tools: `auto`, `none`, `required`, or a function name.
    #[arg(long, default_value = "auto")]
    pub(crate) tool_choice: String,
    /// With --tools: allow several calls in one turn.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) parallel_tool_calls: bool,
    /// `constrained`: calls always valid for the schemas; `native`: free generation + parser.
    #[arg(long, env = "TOOLGATE_TOOL_MODE", value_enum, default_value = "constrained")]
    pub(crate) tool_mode: ToolModeArg,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) gate: GateArgs,
    /// Address to bind.
    #[arg(long, env = "TOOLGATE_HOST", default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Port to bind (0 picks a free one).
    #[arg(long, env = "TOOLGATE_PORT", default_value_t = 8080)]
    pub(crate) port: u16,
    /// `constrained`: tool calls always valid for the schemas; `native`: free generation + parser.
    #[arg(long, env = "TOOLGATE_TOOL_MODE", value_enum, default_value = "constrained")]
    pub(crate) tool_mode: ToolModeArg,
    /// Jump-forward decoding: text the constraint forces (a call's keys, separators, a
    /// named tool's name) goes through the model in chunks instead of one decode step
    /// per token (docs/server.md, "Jump-forward").
    #[arg(long, env = "TOOLGATE_JUMP_FORWARD", value_enum, default_value = "on")]
    pub(crate) jump_forward: Switch,
    /// Requests that may wait for or hold the model at once; more get 429 with Retry-After.
    #[arg(long, env = "TOOLGATE_MAX_QUEUE", default_value_t = toolgate::server::DEFAULT_MAX_QUEUE)]
    pub(crate) max_queue: usize,
    /// Requests that generate at the same time, each with its own KV cache, their decode
    /// steps batched on one copy of the weights (1: one at a time).
    #[arg(long, env = "TOOLGATE_PARALLEL", default_value_t = toolgate::server::DEFAULT_PARALLEL as u16,
          value_parser = clap::value_parser!(u16).range(1..=toolgate::server::MAX_PARALLEL as i64))]
    pub(crate) parallel: u16,
    /// Seconds a client has to send a whole request head (also the idle time allowed
    /// between requests on a kept-alive connection).
    #[arg(long, env = "TOOLGATE_HEADER_TIMEOUT", default_value_t = 10.0, value_parser = positive_secs)]
    pub(crate) header_timeout: f64,
    /// Seconds a client has to send a whole request body once its head arrived (then 408).
    #[arg(long, env = "TOOLGATE_BODY_TIMEOUT", default_value_t = 30.0, value_parser = positive_secs)]
    pub(crate) body_timeout: f64,
    /// Client connections held at once; more are closed when accepted.
    #[arg(long, env = "TOOLGATE_MAX_CONNECTIONS", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub(crate) max_connections: u32,
    /// Seconds to keep serving after SIGTERM/SIGINT while `/ready` answers 503, so a
    /// router or a Kubernetes readiness probe stops sending before the server stops
    /// accepting; then the requests in progress finish and it exits (0: stop accepting
    /// at once).
    #[arg(long, env = "TOOLGATE_DRAIN_SECONDS", default_value_t = 0.0, value_parser = drain_secs)]
    pub(crate) drain_seconds: f64,
}

/// A duration flag in seconds: finite and above zero.
pub(crate) fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds in (0, 86400]")),
    }
}

/// A drain time in seconds: finite, from 0 to an hour.
pub(crate) fn drain_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=3_600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds in [0, 3600]")),
    }
}

#[derive(Debug, Args)]
pub(crate) struct PerplexityArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// The text to score (plain UTF-8). Not needed with `--kl-divergence-base`, whose
    /// file holds the tokens it was computed over. (`--file` is the Hub's `--hf-file`.)
    #[arg(long = "text", short = 'f', required_unless_present = "kl_divergence_base")]
    pub(crate) text: Option<PathBuf>,
    /// Tokens per chunk; each chunk is evaluated from an empty cache and its second half
    /// scored (llama.cpp's `-c`).
    #[arg(long, default_value_t = 512)]
    pub(crate) chunk_size: usize,
    /// Score at most this many chunks.
    #[arg(long)]
    pub(crate) chunks: Option<usize>,
    /// Compare with this base file (written by `llama-perplexity --kl-divergence-base`
    /// or by `--save-base`): its tokens and chunk size are used.
    #[arg(long)]
    pub(crate) kl_divergence_base: Option<PathBuf>,
    /// Write this model's next-token distributions as a base file in llama.cpp's format.
    #[arg(long)]
    pub(crate) save_base: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// A `.gguf` model file (only its header is read) or a Jinja template file.
    pub(crate) target: PathBuf,
    /// Probe this template instead of the model's.
    #[arg(long)]
    pub(crate) chat_template: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    /// A GGUF model file, or a Hugging Face repository id (`ORG/NAME`) that is pulled
    /// into the cache first (see `toolgate pull`; `HF_HUB_OFFLINE=1` uses the cache only).
    #[arg(long, short = 'm', env = "TOOLGATE_MODEL")]
    pub(crate) model: String,
    #[command(flatten)]
    pub(crate) hub: HubArgs,
    /// Device: cpu, cuda, cuda:N or metal (cuda/metal need the cargo features).
    #[arg(long, env = "TOOLGATE_DEVICE", default_value = "cpu")]
    pub(crate) device: DeviceChoice,
    /// Context window to allocate, in tokens (default: min(model's, 8192)).
    #[arg(long, env = "TOOLGATE_CTX_SIZE")]
    pub(crate) ctx_size: Option<usize>,
    /// KV cache element type: f32 (keys and values as computed) or f16 (half the memory;
    /// faster decode after long prompts, slower long prefill: see BENCHMARKS.md). f16
    /// applies on the CPU only.
    #[arg(long, env = "TOOLGATE_KV_CACHE", value_enum, default_value = "f32")]
    pub(crate) kv_cache: KvCacheArg,
}

/// `--kv-cache`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum KvCacheArg {
    /// 16-bit floats.
    F16,
    /// 32-bit floats.
    F32,
}

impl From<KvCacheArg> for toolgate::model::KvCacheType {
    fn from(k: KvCacheArg) -> Self {
        match k {
            KvCacheArg::F16 => Self::F16,
            KvCacheArg::F32 => Self::F32,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// The prompt, used verbatim (no chat template).
    #[arg(long, short = 'p')]
    pub(crate) prompt: String,
    /// Recognise special-token text (e.g. `<|im_start|>`) in the prompt.
    #[arg(long)]
    pub(crate) special: bool,
    /// Maximum tokens to generate.
    #[arg(long, short = 'n', default_value_t = 128)]
    pub(crate) max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 0)]
    pub(crate) top_k: usize,
    /// Top-p / nucleus (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) repeat_penalty: f32,
    /// Presence penalty, OpenAI semantics (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) presence_penalty: f32,
    /// Frequency penalty, OpenAI semantics (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) frequency_penalty: f32,
    /// Random seed; the same seed gives the same output.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Stop strings (repeatable).
    #[arg(long)]
    pub(crate) stop: Vec<String>,
    /// Keep generating past end-of-turn tokens.
    #[arg(long)]
    pub(crate) ignore_eos: bool,
    /// Constrain the output to JSON valid for this JSON Schema file.
    #[arg(long)]
    pub(crate) json_schema: Option<PathBuf>,
    /// Unsupported schema keywords: `strict` refuses them, `lenient` ignores them.
    #[arg(long, value_enum, default_value = "strict")]
    pub(crate) schema_mode: SchemaModeArg,
    /// Undeclared object properties: `closed` refuses them where `additionalProperties`
    /// is absent (as tool calls and `response_format` are constrained); `open` allows
    /// them, as JSON Schema reads the schema.
    #[arg(long, value_enum, default_value = "closed")]
    pub(crate) objects: ObjectsArg,
}

/// `--schema-mode`: what a schema keyword toolgate cannot enforce does.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum SchemaModeArg {
    /// Refuse the schema, naming the keyword.
    Strict,
    /// Ignore the keyword.
    Lenient,
}

impl From<SchemaModeArg> for toolgate::grammar::schema::Mode {
    fn from(m: SchemaModeArg) -> Self {
        match m {
            SchemaModeArg::Strict => Self::Strict,
            SchemaModeArg::Lenient => Self::Lenient,
        }
    }
}

/// `--tool-mode`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ToolModeArg {
    /// Calls always valid for their schemas.
    Constrained,
    /// Free generation, then the family's parser.
    Native,
}

impl From<ToolModeArg> for ToolMode {
    fn from(m: ToolModeArg) -> Self {
        match m {
            ToolModeArg::Constrained => ToolMode::Constrained,
            ToolModeArg::Native => ToolMode::Native,
        }
    }
}

/// An on/off switch (`--call-recovery`, `--jump-forward`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Switch {
    On,
    Off,
}

/// `bench tools --modes`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ModeArg {
    Constrained,
    Native,
    PromptOnly,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Constrained => Mode::Constrained,
            ModeArg::Native => Mode::Native,
            ModeArg::PromptOnly => Mode::PromptOnly,
        }
    }
}

/// `bench tools --tool-choice`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ChoiceArg {
    /// `required` where a call is expected, `auto` elsewhere (as BFCL runs).
    RequiredWhereExpected,
    /// `auto` everywhere: the model decides.
    Auto,
}

impl From<ChoiceArg> for ChoicePolicy {
    fn from(c: ChoiceArg) -> Self {
        match c {
            ChoiceArg::RequiredWhereExpected => ChoicePolicy::RequiredWhereExpected,
            ChoiceArg::Auto => ChoicePolicy::Auto,
        }
    }
}
