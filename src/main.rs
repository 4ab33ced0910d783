//! The `toolgate` command-line interface.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use toolgate::engine::chat::{tool_turn, ToolMode};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::gguf::GgufFile;
use toolgate::grammar::regex::Json;
use toolgate::grammar::schema::Mode;
use toolgate::grammar::Grammar;
use toolgate::model::{DeviceChoice, LoadOptions};
use toolgate::sampling::SamplingParams;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{ChatTemplate, ToolFallback};

/// toolgate: a pure-Rust inference engine and server for LLM tool calling.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about, long_about = None)]
struct Cli {
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
    /// Serve the OpenAI-compatible API (`/v1/chat/completions` with tools, `/v1/models`,
    /// `/props`, `/health`). The model must pass the tool-calling gate.
    Serve(ServeArgs),
    /// Probe a GGUF model (metadata only) or a Jinja template file: capabilities,
    /// reasons, tool-call family, as JSON.
    Probe(ProbeArgs),
}

#[derive(Debug, Args)]
struct GateArgs {
    /// Use this Jinja chat template instead of the model's.
    #[arg(long, env = "TOOLGATE_CHAT_TEMPLATE")]
    chat_template: Option<PathBuf>,
    /// For a model whose template cannot do tools: `none` refuses it, `generic` serves
    /// it with toolgate's generic tool template.
    #[arg(long, env = "TOOLGATE_TOOL_FALLBACK", default_value = "none")]
    tool_fallback: ToolFallback,
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
    /// Path to a GGUF model file.
    #[arg(long, short = 'm', env = "TOOLGATE_MODEL")]
    model: PathBuf,
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
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = real_main(cli) {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
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
    }
}

fn load(args: &ModelArgs) -> anyhow::Result<Engine> {
    let opts = LoadOptions { device: args.device, context_length: args.ctx_size };
    Engine::load_with(&args.model, &opts).with_context(|| format!("loading {}", args.model.display()))
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let t0 = std::time::Instant::now();
    let mut engine = load(&args.model)?;
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
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let schema: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
            let mode = if args.schema_mode == "lenient" { Mode::Lenient } else { Mode::Strict };
            let grammar = std::sync::Arc::new(Grammar::from_schema(&schema, mode, &Json)?);
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

fn chat(args: ChatArgs) -> anyhow::Result<()> {
    let mut engine = load(&args.model)?;
    let templates = GgufTemplates::from_gguf(engine.gguf())?;
    let arch = engine.gguf().architecture().ok().map(str::to_string);
    let setup = toolgate::template::gate(
        &model_id(&args.model.model),
        &templates,
        arch.as_deref(),
        args.gate.chat_template.as_deref(),
        args.gate.tool_fallback,
    )?;
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
    let (prompt_text, ids) =
        toolgate::engine::chat::encode_chat(&setup, engine.tokenizer(), messages, tools, Default::default())?;
    if args.show_prompt {
        eprintln!("--- prompt ({} tokens, template: {}) ---\n{prompt_text}\n---", ids.len(), setup.source);
    }
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
        "chat_format": setup.family,
        "has_tool_use_template": templates.tool_use.is_some(),
        "template_source": setup.source.to_string(),
        "conversation_policy": setup.policy,
        "template_signals": setup.signals,
        "probe_ms": t0.elapsed().as_secs_f64() * 1000.0,
    });
    println!("{}", serde_json::to_string_pretty(&info)?);
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let engine = load(&args.model)?;
    let templates = GgufTemplates::from_gguf(engine.gguf())?;
    let arch = engine.gguf().architecture().ok().map(str::to_string);
    let id = args.model.model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let setup = toolgate::template::gate(
        &model_id(&args.model.model),
        &templates,
        arch.as_deref(),
        args.gate.chat_template.as_deref(),
        args.gate.tool_fallback,
    )?;
    let mode = if args.tool_mode == "native" { ToolMode::Native } else { ToolMode::Constrained };
    let state =
        std::sync::Arc::new(toolgate::server::AppState::new(engine, setup, id, mode).with_max_queue(args.max_queue));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(toolgate::server::serve(state, &args.host, args.port))?;
    Ok(())
}
