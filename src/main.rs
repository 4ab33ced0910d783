//! The `toolgate` command-line interface.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::model::{DeviceChoice, LoadOptions};
use toolgate::sampling::SamplingParams;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Run(args) => run(args),
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
    };
    let prompt = engine.tokenizer().encode_prompt(&args.prompt, args.special)?;
    let mut out = std::io::stdout().lock();
    let gen = engine.generate(&prompt, &params, |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
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
