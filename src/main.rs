//! The `toolgate` command-line interface.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory, Parser, Subcommand};
use toolgate::engine::chat::{tool_turn, ToolMode};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::gguf::GgufFile;
use toolgate::grammar::ir::Objects;
use toolgate::grammar::regex::Json;
use toolgate::grammar::schema::Mode;
use toolgate::grammar::Grammar;
use toolgate::hub::{GateOptions, Hub, HubConfig, PullOptions};
use toolgate::model::{DeviceChoice, LoadOptions};
use toolgate::sampling::SamplingParams;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{ChatTemplate, ToolFallback};

/// toolgate: a pure-Rust inference engine and server for LLM tool calling.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about, long_about = None)]
struct Cli {
    /// A TOML file of settings, keyed by flag name (`port = 8080`,
    /// `tool-fallback = "generic"`, `model = "…"`). Precedence: flags, then environment
    /// variables, then this file, then defaults.
    #[arg(long, global = true, env = "TOOLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Log filter (e.g. `info`, `toolgate=debug`); also read from `TOOLGATE_LOG`.
    #[arg(long, global = true, env = "TOOLGATE_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text from a raw prompt and stream it to stdout; speed goes to stderr.
    Run(RunArgs),
    /// One chat turn through the model's own chat template, behind the tool-calling gate.
    Chat(ChatArgs),
    /// Serve the OpenAI (`/v1/chat/completions`) and Anthropic (`/v1/messages`) APIs
    /// with tools, plus `/v1/models`, `/props`, `/health` and `/metrics`. The model must
    /// pass the tool-calling gate; `--model` may be a Hub repository id.
    Serve(ServeArgs),
    /// Probe a GGUF model (metadata only) or a Jinja template file: capabilities,
    /// reasons, tool-call family, as JSON.
    Probe(ProbeArgs),
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
enum ToolsCommand {
    /// Read model output text on stdin as the model's template lays out calls and print
    /// JSON: `content`, `reasoning_content`, `tool_calls` (OpenAI shape), and `grammar`
    /// (`accepted`, or where the constrained grammar for these tools rejects the calls),
    /// with the layout used and how it was chosen. Exit status 0 when the calls parse
    /// and the grammar accepts them, 1 otherwise, 2 on errors.
    Parse(ToolsParseArgs),
}

#[derive(Debug, Args)]
struct ToolsParseArgs {
    /// A GGUF model (only its header is read) whose template lays out the calls.
    #[arg(long, short = 'm', required_unless_present = "chat_template")]
    model: Option<PathBuf>,
    /// A Jinja chat template file (instead of, or overriding, the model's).
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// The tools: a JSON file with an OpenAI `tools` array (or an object holding one).
    #[arg(long)]
    tools: PathBuf,
    /// Read the calls in this `grammars/` family's layout instead of the derived one.
    #[arg(long)]
    tool_format: Option<String>,
}

#[derive(Debug, Subcommand)]
enum GrammarCommand {
    /// Whether the constraint for a JSON Schema accepts each instance, token by token:
    /// the instance's compact JSON is tokenized with the model's vocabulary and walked
    /// through the masks, then must end in an accepting state. Exit status 0 when every
    /// instance is accepted, 1 when one is rejected, 2 on errors.
    Check(GrammarCheckArgs),
}

#[derive(Debug, Args)]
struct GrammarCheckArgs {
    /// The GGUF model whose vocabulary is used (only its header is read).
    #[arg(long, short = 'm')]
    model: PathBuf,
    /// The JSON Schema file.
    #[arg(long)]
    schema: PathBuf,
    /// Unsupported schema keywords: `strict` refuses them, `lenient` ignores them.
    #[arg(long, default_value = "strict", value_parser = ["strict", "lenient"])]
    schema_mode: String,
    /// Undeclared object properties: `closed` refuses them where `additionalProperties`
    /// is absent (as tool calls and `response_format` are constrained); `open` allows
    /// them, as JSON Schema reads the schema.
    #[arg(long, value_enum, default_value = "closed")]
    objects: ObjectsArg,
    /// JSON instance files.
    #[arg(required = true)]
    instances: Vec<PathBuf>,
}

/// `--objects`: what an object schema admits besides its declared properties.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ObjectsArg {
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

/// The grammar of a JSON Schema file, as `--schema-mode` and `--objects` say.
fn schema_grammar(path: &Path, schema_mode: &str, objects: ObjectsArg) -> anyhow::Result<Grammar> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let mode = if schema_mode == "lenient" { Mode::Lenient } else { Mode::Strict };
    Ok(Grammar::from_schema_with(&schema, mode, objects.into(), &Json)?)
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Tool-calling reliability: BFCL tasks (or your own) in constrained, native and
    /// prompt-only modes, judged by BFCL's AST rules; a table, JSON and an SVG chart.
    Tools(BenchToolsArgs),
}

#[derive(Debug, Args)]
struct BenchToolsArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    gate: GateArgs,
    /// The BFCL data folder (`bfcl_eval/data`; `scripts/fetch-bfcl` fills the default).
    #[arg(long, env = "TOOLGATE_BFCL")]
    bfcl: Option<PathBuf>,
    /// BFCL categories, comma-separated (`none` for only --tasks files).
    #[arg(long, default_value = "simple_python,multiple,parallel,parallel_multiple,irrelevance")]
    categories: String,
    /// Task files in toolgate's own format (JSON lines; see docs/bench.md), repeatable.
    #[arg(long)]
    tasks: Vec<PathBuf>,
    /// Tasks per category, spread evenly over it (0 = all).
    #[arg(long, default_value_t = 40)]
    per_category: usize,
    /// Modes, comma-separated: constrained, native, prompt-only.
    #[arg(long, default_value = "constrained,native,prompt-only")]
    modes: String,
    /// `required-where-expected` (required where a call is expected, auto elsewhere,
    /// as BFCL runs) or `auto` everywhere.
    #[arg(long, default_value = "required-where-expected", value_parser = ["required-where-expected", "auto"])]
    tool_choice: String,
    /// Token budget per answer.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Seed (the same for every mode).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the summaries and every task's result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the chart (SVG) here.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Write the summary table as Markdown here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Bench another OpenAI-compatible server at this URL (llama.cpp's llama-server,
    /// vLLM, Ollama, `toolgate serve`) instead of loading the model: `--model` is then
    /// only the name sent and reported, `--modes` is ignored.
    #[arg(long)]
    server: Option<String>,
}

#[derive(Debug, Args, Clone)]
struct HubArgs {
    /// Hub endpoint (a mirror, or a local hub).
    #[arg(long, env = "HF_ENDPOINT", default_value = toolgate::hub::DEFAULT_ENDPOINT)]
    endpoint: String,
    /// Branch, tag or commit of a Hub repository.
    #[arg(long, env = "TOOLGATE_REVISION", default_value = "main")]
    revision: String,
    /// The `.gguf` file of a Hub repository (default: the preferred quantization,
    /// Q4_K_M first).
    #[arg(long = "hf-file", visible_alias = "file", env = "TOOLGATE_HF_FILE")]
    file: Option<String>,
}

#[derive(Debug, Args)]
struct PullArgs {
    /// Repository id, `ORG/NAME`.
    repo: String,
    #[command(flatten)]
    hub: HubArgs,
    #[command(flatten)]
    gate: GateArgs,
    /// Download even when the pre-check refuses the model (it is still verified, and
    /// quarantined if it fails).
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RmArgs {
    /// Repository id, `ORG/NAME`.
    repo: String,
    /// Remove only this file.
    #[arg(long)]
    file: Option<String>,
}

#[derive(Debug, Args, Clone)]
struct GateArgs {
    /// Use this Jinja chat template instead of the model's.
    #[arg(long, env = "TOOLGATE_CHAT_TEMPLATE")]
    chat_template: Option<PathBuf>,
    /// For a model whose template cannot do tools: `none` refuses it, `generic` serves
    /// it with toolgate's generic tool template.
    #[arg(long, env = "TOOLGATE_TOOL_FALLBACK", default_value = "none")]
    tool_fallback: ToolFallback,
    /// Read and write tool calls in this family's format instead of the one derived
    /// from the chat template: a file in `grammars/` (hermes, generic, mistral,
    /// mistral-v11, llama3-json, llama3-python-tag, functionary-v3.1, deepseek-v3.1,
    /// deepseek-r1, kimi-k2, apriel, qwen3-coder, seed-oss, gemma4, granite, functools,
    /// pythonic; docs/tool-formats.md).
    #[arg(long, env = "TOOLGATE_TOOL_FORMAT")]
    tool_format: Option<String>,
    /// In `tool_choice: auto`, read a declared tool's call written as bare or fenced
    /// JSON (`{"name": …, "arguments": …}`) as a call, constrained from its name on
    /// (`on`, the default), or leave it as text (`off`).
    #[arg(long, env = "TOOLGATE_CALL_RECOVERY", default_value = "on", value_parser = ["on", "off"])]
    call_recovery: String,
}

#[derive(Debug, Args)]
struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    gate: GateArgs,
    /// The user message.
    #[arg(long)]
    message: String,
    /// An optional system message.
    #[arg(long)]
    system: Option<String>,
    /// A JSON file with an array of OpenAI tools (`{"type":"function","function":{…}}`).
    #[arg(long)]
    tools: Option<PathBuf>,
    /// Maximum tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the rendered prompt to stderr.
    #[arg(long)]
    show_prompt: bool,
    /// With --tools: `auto`, `none`, `required`, or a function name.
    #[arg(long, default_value = "auto")]
    tool_choice: String,
    /// With --tools: allow several calls in one turn.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    parallel_tool_calls: bool,
    /// `constrained`: calls always valid for the schemas; `native`: free generation + parser.
    #[arg(long, env = "TOOLGATE_TOOL_MODE", default_value = "constrained", value_parser = ["constrained", "native"])]
    tool_mode: String,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    gate: GateArgs,
    /// Address to bind.
    #[arg(long, env = "TOOLGATE_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to bind (0 picks a free one).
    #[arg(long, env = "TOOLGATE_PORT", default_value_t = 8080)]
    port: u16,
    /// `constrained`: tool calls always valid for the schemas; `native`: free generation + parser.
    #[arg(long, env = "TOOLGATE_TOOL_MODE", default_value = "constrained", value_parser = ["constrained", "native"])]
    tool_mode: String,
    /// Requests that may wait for or hold the model at once; more get 429 with Retry-After.
    #[arg(long, env = "TOOLGATE_MAX_QUEUE", default_value_t = toolgate::server::DEFAULT_MAX_QUEUE)]
    max_queue: usize,
    /// Requests that generate at the same time, each with its own KV cache, their decode
    /// steps batched on one copy of the weights (1: one at a time).
    #[arg(long, env = "TOOLGATE_PARALLEL", default_value_t = toolgate::server::DEFAULT_PARALLEL as u16,
          value_parser = clap::value_parser!(u16).range(1..=toolgate::server::MAX_PARALLEL as i64))]
    parallel: u16,
    /// Seconds a client has to send a whole request head (also the idle time allowed
    /// between requests on a kept-alive connection).
    #[arg(long, env = "TOOLGATE_HEADER_TIMEOUT", default_value_t = 10.0, value_parser = positive_secs)]
    header_timeout: f64,
    /// Seconds a client has to send a whole request body once its head arrived (then 408).
    #[arg(long, env = "TOOLGATE_BODY_TIMEOUT", default_value_t = 30.0, value_parser = positive_secs)]
    body_timeout: f64,
    /// Client connections held at once; more are closed when accepted.
    #[arg(long, env = "TOOLGATE_MAX_CONNECTIONS", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_connections: u32,
}

/// A duration flag in seconds: finite and above zero.
fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds in (0, 86400]")),
    }
}

#[derive(Debug, Args)]
struct ProbeArgs {
    /// A `.gguf` model file (only its header is read) or a Jinja template file.
    target: PathBuf,
    /// Probe this template instead of the model's.
    #[arg(long)]
    chat_template: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ModelArgs {
    /// A GGUF model file, or a Hugging Face repository id (`ORG/NAME`) that is pulled
    /// into the cache first (see `toolgate pull`; `HF_HUB_OFFLINE=1` uses the cache only).
    #[arg(long, short = 'm', env = "TOOLGATE_MODEL")]
    model: String,
    #[command(flatten)]
    hub: HubArgs,
    /// Device: cpu, cuda, cuda:N or metal (cuda/metal need the cargo features).
    #[arg(long, env = "TOOLGATE_DEVICE", default_value = "cpu")]
    device: DeviceChoice,
    /// Context window to allocate, in tokens (default: min(model's, 8192)).
    #[arg(long, env = "TOOLGATE_CTX_SIZE")]
    ctx_size: Option<usize>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt, used verbatim (no chat template).
    #[arg(long, short = 'p')]
    prompt: String,
    /// Recognise special-token text (e.g. `<|im_start|>`) in the prompt.
    #[arg(long)]
    special: bool,
    /// Maximum tokens to generate.
    #[arg(long, short = 'n', default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Top-p / nucleus (1 = off).
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Min-p (0 = off).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Repetition penalty (1 = off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Presence penalty, OpenAI semantics (0 = off).
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    /// Frequency penalty, OpenAI semantics (0 = off).
    #[arg(long, default_value_t = 0.0)]
    frequency_penalty: f32,
    /// Random seed; the same seed gives the same output.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Stop strings (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating past end-of-turn tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Constrain the output to JSON valid for this JSON Schema file.
    #[arg(long)]
    json_schema: Option<PathBuf>,
    /// Unsupported schema keywords: `strict` refuses them, `lenient` ignores them.
    #[arg(long, default_value = "strict", value_parser = ["strict", "lenient"])]
    schema_mode: String,
    /// Undeclared object properties: `closed` refuses them where `additionalProperties`
    /// is absent (as tool calls and `response_format` are constrained); `open` allows
    /// them, as JSON Schema reads the schema.
    #[arg(long, value_enum, default_value = "closed")]
    objects: ObjectsArg,
}

fn main() {
    if let Err(e) = apply_config_file() {
        eprintln!("Error: {e:#}");
        std::process::exit(2);
    }
    let cli = Cli::parse();
    let grammar_check = matches!(cli.command, Command::Grammar(_) | Command::Tools(_));
    if let Err(e) = real_main(cli) {
        eprintln!("Error: {e:#}");
        // `grammar check` keeps 1 for "an instance was rejected".
        std::process::exit(if grammar_check { 2 } else { 1 });
    }
}

/// The config file named by `--config FILE` (or `TOOLGATE_CONFIG`): each key is a
/// flag's long name; its value becomes that flag's environment variable unless the
/// variable is already set, so flags beat the environment, which beats the file.
/// Unknown keys and values that are not scalars are errors naming the key.
fn apply_config_file() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let from_args = args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--config") {
        Some("") => args.get(i + 1).cloned(),
        Some(v) => v.strip_prefix('=').map(str::to_string),
        None => None,
    });
    let Some(path) = from_args.or_else(|| std::env::var("TOOLGATE_CONFIG").ok()) else { return Ok(()) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading config file {path}"))?;
    let table: toml::Table = text.parse().with_context(|| format!("config file {path} is not valid TOML"))?;
    // Flag long name → its environment variable, over every subcommand.
    let mut envs = std::collections::BTreeMap::new();
    fn collect(cmd: &clap::Command, envs: &mut std::collections::BTreeMap<String, String>) {
        for a in cmd.get_arguments() {
            if let (Some(long), Some(env)) = (a.get_long(), a.get_env()) {
                envs.insert(long.to_string(), env.to_string_lossy().into_owned());
            }
        }
        for sub in cmd.get_subcommands() {
            collect(sub, envs);
        }
    }
    collect(&Cli::command(), &mut envs);
    envs.remove("config");
    for (key, value) in table {
        let long = key.replace('_', "-");
        let Some(env) = envs.get(&long) else {
            anyhow::bail!(
                "config file {path}: unknown key `{key}` (keys: {})",
                envs.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        };
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => anyhow::bail!(
                "config file {path}: `{key}` must be a string, number or boolean, not {}",
                other.type_str()
            ),
        };
        if std::env::var_os(env).is_none() {
            std::env::set_var(env, value);
        }
    }
    Ok(())
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Run(args) => run(args),
        Command::Chat(args) => chat(args),
        Command::Probe(args) => probe(args),
        Command::Serve(args) => serve(args),
        Command::Pull(args) => pull(args),
        Command::List(args) => list(args),
        Command::Rm(args) => rm(args),
        Command::Bench(BenchCommand::Tools(args)) => bench_tools(args),
        Command::Grammar(GrammarCommand::Check(args)) => grammar_check(args),
        Command::Tools(ToolsCommand::Parse(args)) => tools_parse(args),
    }
}

fn grammar_check(args: GrammarCheckArgs) -> anyhow::Result<()> {
    let gguf = GgufFile::open(&args.model)?;
    let tokenizer = toolgate::tokenizer::Tokenizer::from_gguf(&gguf)?;
    let vocab = std::sync::Arc::new(toolgate::grammar::TokenVocab::from_tokenizer(&tokenizer));
    let grammar = std::sync::Arc::new(schema_grammar(&args.schema, &args.schema_mode, args.objects)?);
    let mut rejected = 0;
    for path in &args.instances {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        let compact = serde_json::to_string(&value)?;
        let tokens = tokenizer.encode(&compact, toolgate::tokenizer::EncodeOptions::TEXT)?;
        match grammar.check_tokens(vocab.clone(), &tokens) {
            Ok(()) => println!("accepted  {} ({} tokens)", path.display(), tokens.len()),
            Err((step, reason)) => {
                rejected += 1;
                println!("rejected  {} at token {step} of {}: {reason}", path.display(), tokens.len());
            }
        }
    }
    if rejected > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn bench_tools(args: BenchToolsArgs) -> anyhow::Result<()> {
    use toolgate::bench::{self, tasks, BenchOptions, ChoicePolicy, Mode};
    let modes: Vec<Mode> =
        args.modes.split(',').map(|m| m.trim().parse()).collect::<Result<_, _>>().context("--modes")?;
    let dir = args.bfcl.clone().unwrap_or_else(tasks::default_bfcl_dir);
    let mut all = Vec::new();
    for cat in args.categories.split(',').map(str::trim).filter(|c| !c.is_empty() && *c != "none") {
        let loaded = tasks::load_bfcl(&dir, cat)
            .with_context(|| format!("BFCL category {cat} in {} (run scripts/fetch-bfcl)", dir.display()))?;
        all.extend(bench::sample(loaded, args.per_category));
    }
    for f in &args.tasks {
        all.extend(bench::sample(tasks::load_file(f)?, args.per_category));
    }
    anyhow::ensure!(!all.is_empty(), "no tasks: give --categories or --tasks");

    let opts = BenchOptions {
        modes,
        choice: if args.tool_choice == "auto" { ChoicePolicy::Auto } else { ChoicePolicy::RequiredWhereExpected },
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        seed: args.seed,
    };
    let progress = |runs: usize| {
        let bar = indicatif::ProgressBar::new(runs as u64);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} [{elapsed_precise} < {eta}] {msg}")
        {
            bar.set_style(style);
        }
        bar
    };
    let t0 = std::time::Instant::now();
    let (name, template, family, results) = if let Some(url) = &args.server {
        let server = bench::remote::RemoteServer::new(url, Some(args.model.model.clone()));
        eprintln!("{} tasks against {}", all.len(), server.url);
        let bar = progress(all.len());
        let results = bench::remote::run(&server, &all, &opts, |r| {
            bar.set_message(r.id.clone());
            bar.inc(1);
        })?;
        bar.finish_and_clear();
        (args.model.model.clone(), server.url.clone(), "server".to_string(), results)
    } else {
        let (mut engine, source) = load(&args.model, Some(&args.gate))?;
        let setup = gated_setup(&engine, &source, &args.gate)?;
        let arch = engine.gguf().architecture().ok().map(str::to_string);
        let name = model_id(&source.path);
        // Prompt-only: toolgate's generic tool template, whatever the model's own is.
        // When the model is already served with it, native is the same run.
        let generic =
            toolgate::template::gate(&name, &Default::default(), arch.as_deref(), None, ToolFallback::Generic)?;
        let same = setup.source == generic.source;
        if same && opts.modes.contains(&Mode::PromptOnly) {
            eprintln!("prompt-only = native here: the model is served with the generic template; not run twice");
        }
        let runs = opts.modes.iter().filter(|m| !(same && **m == Mode::PromptOnly)).count() * all.len();
        eprintln!(
            "{} tasks × {} mode(s) on {name} (template: {}, family {})",
            all.len(),
            runs / all.len().max(1),
            setup.source,
            setup.family()
        );
        let bar = progress(runs);
        let results = bench::run(&mut engine, &setup, (!same).then_some(&generic), &all, &opts, |r| {
            bar.set_message(format!("{} {}", r.mode, r.id));
            bar.inc(1);
        });
        bar.finish_and_clear();
        (name, setup.source.to_string(), setup.family().to_string(), results)
    };
    let summaries = bench::summarize(&results);
    println!("{}", bench::report::table(&summaries));
    eprintln!("{} runs in {:.0} s", results.len(), t0.elapsed().as_secs_f64());
    if let Some(p) = &args.json {
        let doc = serde_json::json!({
            "model": name,
            "template_source": template,
            "family": family,
            "options": opts,
            "summaries": summaries,
            "results": results,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.markdown {
        std::fs::write(p, bench::report::markdown(&summaries)).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.chart {
        std::fs::write(p, bench::report::svg(&name, &summaries)).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// A model to load: its file, the id it is served under, and where it came from.
struct ModelSource {
    path: PathBuf,
    id: String,
    /// `(repo, file)` when pulled from the Hub.
    hub: Option<(String, String)>,
}

fn hub_client(args: &HubArgs) -> Hub {
    Hub::new(HubConfig { endpoint: args.endpoint.clone(), ..HubConfig::from_env() })
}

fn gate_options(gate: Option<&GateArgs>) -> GateOptions {
    match gate {
        Some(g) => GateOptions { fallback: g.tool_fallback, chat_template: g.chat_template.clone() },
        // Without a gate (`run`), only the architecture matters.
        None => GateOptions { fallback: ToolFallback::Generic, chat_template: None },
    }
}

/// A local path as is; a repository id pulled (or found in the cache).
fn model_source(args: &ModelArgs, gate: Option<&GateArgs>) -> anyhow::Result<ModelSource> {
    let local = Path::new(&args.model);
    if !toolgate::hub::looks_like_repo_id(&args.model) {
        let id = local.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        return Ok(ModelSource { path: local.to_path_buf(), id, hub: None });
    }
    let hub = hub_client(&args.hub);
    let opts = PullOptions {
        revision: args.hub.revision.clone(),
        file: args.hub.file.clone(),
        force: false,
        gate: gate_options(gate),
    };
    let pulled = hub.pull(&args.model, &opts, &mut CliProgress::default()).with_context(|| {
        format!("`--model {}` is not a file here, so it was taken as a Hugging Face repository id", args.model)
    })?;
    Ok(ModelSource { path: pulled.path, id: args.model.clone(), hub: Some((pulled.repo, pulled.file)) })
}

fn load(args: &ModelArgs, gate: Option<&GateArgs>) -> anyhow::Result<(Engine, ModelSource)> {
    let source = model_source(args, gate)?;
    let opts = LoadOptions { device: args.device, context_length: args.ctx_size };
    match Engine::load_with(&source.path, &opts) {
        Ok(engine) => Ok((engine, source)),
        Err(e) => {
            // A pulled file that does not load is moved out of the cache, with the reason
            // (not one that is sound but of a weight type toolgate does not read).
            let unreadable = matches!(e, toolgate::Error::UnsupportedTensorType { .. });
            if let (Some((repo, file)), false) = (&source.hub, unreadable) {
                if let Ok(q) = hub_client(&args.hub).cache().quarantine(repo, file, &source.path, &e.to_string()) {
                    eprintln!("quarantined {} ({e})", q.display());
                }
            }
            Err(anyhow::Error::new(e).context(format!("loading {}", source.path.display())))
        }
    }
}

/// Pull progress on stderr: stage messages and an indicatif bar (bytes, rate, ETA).
#[derive(Default)]
struct CliProgress {
    bar: Option<indicatif::ProgressBar>,
}

impl toolgate::hub::Progress for CliProgress {
    fn note(&mut self, message: &str) {
        match &self.bar {
            Some(bar) if !bar.is_finished() => bar.println(message),
            _ => eprintln!("{message}"),
        }
    }
    fn start(&mut self, total: u64, done: u64) {
        let bar = self.bar.get_or_insert_with(|| indicatif::ProgressBar::new(total));
        bar.set_length(total);
        bar.set_position(done);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} [{wide_bar}] {bytes_per_sec}, ETA {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
    }
    fn advance(&mut self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }
    fn finish(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn pull(args: PullArgs) -> anyhow::Result<()> {
    let hub = hub_client(&args.hub);
    let opts = PullOptions {
        revision: args.hub.revision.clone(),
        file: args.hub.file.clone(),
        force: args.force,
        gate: gate_options(Some(&args.gate)),
    };
    let pulled = hub.pull(&args.repo, &opts, &mut CliProgress::default())?;
    eprintln!(
        "{} {}/{} ({}, {:.1} MiB, commit {})",
        if pulled.from_cache { "cached" } else { "pulled" },
        pulled.repo,
        pulled.file,
        pulled.choice,
        pulled.size as f64 / (1 << 20) as f64,
        pulled.commit
    );
    println!("{}", pulled.path.display());
    Ok(())
}

fn list(args: ListArgs) -> anyhow::Result<()> {
    let cache = HubConfig::from_env().cache;
    let rows: Vec<serde_json::Value> = cache
        .list()
        .into_iter()
        .map(|c| {
            let (quant, caps) = match GgufFile::open(&c.path) {
                Ok(g) => {
                    let arch = g.architecture().ok().map(str::to_string);
                    let caps = GgufTemplates::from_gguf(&g)
                        .and_then(|t| toolgate::template::inspect(&t, arch.as_deref(), None))
                        .map(|s| {
                            if s.report.caps.tool_capable() {
                                format!("tools ({})", s.family())
                            } else {
                                "no tools (needs --tool-fallback generic)".to_string()
                            }
                        })
                        .unwrap_or_else(|e| format!("unreadable template: {e}"));
                    (g.quantization(), caps)
                }
                Err(e) => ("?".to_string(), format!("unreadable: {e}")),
            };
            serde_json::json!({ "repo": c.repo, "file": c.file, "commit": c.commit, "size": c.size,
                                "quantization": quant, "caps": caps, "path": c.path })
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        eprintln!("no models in {}", cache.root().display());
        return Ok(());
    }
    println!("{:<40} {:<44} {:>9} {:<8} CAPS", "REPO", "FILE", "SIZE", "QUANT");
    for r in &rows {
        let mib = r["size"].as_u64().unwrap_or(0) as f64 / (1 << 20) as f64;
        println!(
            "{:<40} {:<44} {:>5.0} MiB {:<8} {}",
            r["repo"].as_str().unwrap_or(""),
            r["file"].as_str().unwrap_or(""),
            mib,
            r["quantization"].as_str().unwrap_or(""),
            r["caps"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

fn rm(args: RmArgs) -> anyhow::Result<()> {
    let cache = HubConfig::from_env().cache;
    for p in cache.remove(&args.repo, args.file.as_deref())? {
        println!("removed {}", p.display());
    }
    Ok(())
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let t0 = std::time::Instant::now();
    let (mut engine, _) = load(&args.model, None)?;
    let load_time = t0.elapsed();
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repeat_penalty: args.repeat_penalty,
            presence_penalty: args.presence_penalty,
            frequency_penalty: args.frequency_penalty,
            seed: args.seed,
            ..SamplingParams::default()
        },
        stop: args.stop.clone(),
        stop_on_eog: !args.ignore_eos,
        ..GenerateParams::default()
    };
    let prompt = engine.tokenizer().encode_prompt(&args.prompt, args.special)?;
    let mut out = std::io::stdout().lock();
    let mut emit = |piece: &str| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    };
    let gen = match &args.json_schema {
        Some(path) => {
            let grammar = std::sync::Arc::new(schema_grammar(path, &args.schema_mode, args.objects)?);
            let vocab = engine.token_vocab();
            let mut matcher = grammar.matcher(vocab);
            engine.generate_constrained(&prompt, &params, &mut matcher, &mut emit)?
        }
        None => engine.generate(&prompt, &params, &mut emit)?,
    };
    let _ = writeln!(out);
    eprintln!(
        "load {:.2}s | prompt {} tokens, {:.1} tok/s | decode {} tokens, {:.1} tok/s | finish: {}",
        load_time.as_secs_f64(),
        gen.prompt_tokens,
        gen.prompt_tps(),
        gen.completion_tokens,
        gen.decode_tps(),
        gen.finish_reason.as_str()
    );
    Ok(())
}

fn model_id(path: &std::path::Path) -> String {
    path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// The loaded model's chat setup, through the tool-calling gate.
fn gated_setup(
    engine: &Engine,
    source: &ModelSource,
    gate: &GateArgs,
) -> anyhow::Result<toolgate::template::ChatSetup> {
    let templates = GgufTemplates::from_gguf(engine.gguf())?;
    let arch = engine.gguf().architecture().ok();
    let setup = toolgate::template::gate(
        &model_id(&source.path),
        &templates,
        arch,
        gate.chat_template.as_deref(),
        gate.tool_fallback,
    )?;
    let setup = setup.with_call_recovery(gate.call_recovery == "on");
    Ok(match &gate.tool_format {
        Some(family) => setup.with_family(family)?,
        None => setup,
    })
}

fn chat(args: ChatArgs) -> anyhow::Result<()> {
    let (mut engine, source) = load(&args.model, Some(&args.gate))?;
    let setup = gated_setup(&engine, &source, &args.gate)?;
    let mut messages = Vec::new();
    if let Some(sys) = &args.system {
        messages.push(serde_json::json!({"role": "system", "content": sys}));
    }
    messages.push(serde_json::json!({"role": "user", "content": args.message}));
    let tools = match &args.tools {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let v: Vec<serde_json::Value> = serde_json::from_str(&text)
                .with_context(|| format!("{}: expected a JSON array of tools", p.display()))?;
            Some(v)
        }
        None => None,
    };
    if args.show_prompt {
        // The prompt the turn renders: with the tools unless `--tool-choice none`.
        let shown = tools.clone().filter(|_| args.tool_choice != "none");
        let (text, ids) = toolgate::engine::chat::encode_chat(
            &setup,
            engine.tokenizer(),
            messages.clone(),
            shown,
            Default::default(),
        )?;
        eprintln!("--- prompt ({} tokens, template: {}) ---\n{text}\n---", ids.len(), setup.source);
    }
    if let Some(tools) = &tools {
        let tools: Vec<toolgate::tools::Tool> = serde_json::from_value(serde_json::Value::Array(tools.clone()))
            .context("tools must be OpenAI function tools")?;
        let choice = match args.tool_choice.as_str() {
            "auto" | "none" | "required" => {
                toolgate::tools::ToolChoice::from_json(&serde_json::json!(args.tool_choice))?
            }
            name => toolgate::tools::ToolChoice::Named(name.to_string()),
        };
        let mode = if args.tool_mode == "native" { ToolMode::Native } else { ToolMode::Constrained };
        let params = GenerateParams {
            max_tokens: args.max_tokens,
            sampling: SamplingParams { temperature: args.temperature, seed: args.seed, ..SamplingParams::default() },
            ..GenerateParams::default()
        };
        let turn = tool_turn(&mut engine, &setup, messages, &tools, &choice, args.parallel_tool_calls, mode, &params)?;
        println!("{}", serde_json::to_string_pretty(&turn)?);
        return Ok(());
    }
    let (_, ids) =
        toolgate::engine::chat::encode_chat(&setup, engine.tokenizer(), messages, tools, Default::default())?;
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling: SamplingParams { temperature: args.temperature, seed: args.seed, ..SamplingParams::default() },
        ..GenerateParams::default()
    };
    let mut out = std::io::stdout().lock();
    let gen = engine.generate(&ids, &params, |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
    let _ = writeln!(out);
    eprintln!(
        "prompt {} tokens, {:.1} tok/s | decode {} tokens, {:.1} tok/s | finish: {}",
        gen.prompt_tokens,
        gen.prompt_tps(),
        gen.completion_tokens,
        gen.decode_tps(),
        gen.finish_reason.as_str()
    );
    Ok(())
}

fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let t0 = std::time::Instant::now();
    let is_gguf = std::fs::File::open(&args.target)
        .and_then(|mut f| {
            let mut magic = [0u8; 4];
            std::io::Read::read_exact(&mut f, &mut magic).map(|_| &magic == b"GGUF")
        })
        .with_context(|| format!("reading {}", args.target.display()))?;
    let (templates, arch, n_params) = if is_gguf {
        let gguf = GgufFile::open(&args.target)?;
        let arch = gguf.architecture().ok().map(str::to_string);
        (GgufTemplates::from_gguf(&gguf)?, arch, Some(gguf.n_params()))
    } else {
        let src =
            std::fs::read_to_string(&args.target).with_context(|| format!("reading {}", args.target.display()))?;
        ChatTemplate::new(args.target.display().to_string(), src.clone())?;
        (GgufTemplates { default: Some(src), tool_use: None }, None, None)
    };
    let setup = toolgate::template::inspect(&templates, arch.as_deref(), args.chat_template.as_deref())?;
    let caps = setup.report.caps;
    let info = serde_json::json!({
        "type": "model_info",
        "model": model_id(&args.target),
        "architecture": arch,
        "n_params": n_params,
        "supports_tools": caps.tool_capable(),
        "caps": caps,
        "reasons": setup.report.reasons,
        "chat_format": setup.family(),
        "tool_format": setup.layout,
        "has_tool_use_template": templates.tool_use.is_some(),
        "template_source": setup.source.to_string(),
        "conversation_policy": setup.policy,
        "template_signals": setup.signals,
        "probe_ms": t0.elapsed().as_secs_f64() * 1000.0,
    });
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(())
}

fn tools_parse(args: ToolsParseArgs) -> anyhow::Result<()> {
    let (templates, arch) = match &args.model {
        Some(path) => {
            let gguf = GgufFile::open(path)?;
            (GgufTemplates::from_gguf(&gguf)?, gguf.architecture().ok().map(str::to_string))
        }
        None => (GgufTemplates::default(), None),
    };
    let mut setup = toolgate::template::inspect(&templates, arch.as_deref(), args.chat_template.as_deref())?;
    if let Some(family) = &args.tool_format {
        setup = setup.with_family(family)?;
    }
    let text = std::fs::read(&args.tools).with_context(|| format!("reading {}", args.tools.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).with_context(|| format!("{} is not JSON", args.tools.display()))?;
    let list = v.get("tools").cloned().unwrap_or(v);
    let tools: Vec<toolgate::tools::Tool> =
        serde_json::from_value(list).with_context(|| format!("{}: not an OpenAI tools array", args.tools.display()))?;
    let mut output = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut output).context("reading the model output on stdin")?;
    let Some(format) = setup.layout.format.clone() else {
        anyhow::bail!("no tool-call layout for this template: {} (try --tool-format)", setup.layout.round_trip);
    };
    let mut parser = toolgate::tools::stream::StreamParser::new(Some(format.clone()), false, 1).with_tools(&tools);
    if let Some((start, end)) = setup.reasoning {
        parser = parser.with_reasoning(start, end, false);
    }
    parser.push(&output);
    parser.finish();
    let out = parser.into_output();
    let (grammar, accepted) = match toolgate::tools::derive::check_calls(&format, &tools, &output) {
        Ok(verdict) => (verdict, true),
        Err(e) => (e, false),
    };
    let ok = out.failures == 0 && accepted;
    let doc = serde_json::json!({
        "content": out.content,
        "reasoning_content": out.reasoning,
        "tool_calls": out.calls,
        "unparsed_calls": out.failures,
        "grammar": grammar,
        "tool_format": setup.layout,
        "layout": toolgate::tools::derive::summary(&format),
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let (engine, source) = load(&args.model, Some(&args.gate))?;
    let setup = gated_setup(&engine, &source, &args.gate)?;
    let id = source.id.clone();
    let mode = if args.tool_mode == "native" { ToolMode::Native } else { ToolMode::Constrained };
    let state = toolgate::server::AppState::parallel(engine, args.parallel.into(), setup, id, mode)?;
    let limits = toolgate::server::ConnLimits {
        header_timeout: std::time::Duration::from_secs_f64(args.header_timeout),
        body_timeout: std::time::Duration::from_secs_f64(args.body_timeout),
        max_connections: args.max_connections as usize,
    };
    let state = std::sync::Arc::new(state.with_max_queue(args.max_queue).with_limits(limits));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(toolgate::server::serve(state, &args.host, args.port))?;
    Ok(())
}
