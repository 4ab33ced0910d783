//! The `toolgate` command-line interface: arguments ([`args`]) mapped to library calls.
//! Exit status: 0 on success, 1 on failure (for `grammar check` and `tools parse`: a
//! rejected instance or call), 2 on errors of those two and on a bad config file.

mod args;
mod load;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use toolgate::bench::{self, BenchOptions, BenchRun};
use toolgate::engine::chat::tool_turn;
use toolgate::engine::GenerateParams;
use toolgate::gguf::GgufFile;
use toolgate::grammar::Grammar;
use toolgate::hub::{HubConfig, PullOptions};
use toolgate::sampling::SamplingParams;

use args::*;
use load::{gate_options, gated_setup, hub_client, load, model_id, CliProgress};

fn main() -> ExitCode {
    if let Err(e) = apply_config_file() {
        eprintln!("Error: {e:#}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        quiet_on_closed_pipe();
    }
    // Prefill's per-layer buffers of tens of MiB are reused, not mapped afresh each time.
    toolgate::kernels::reuse_large_buffers();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    // `grammar check` and `tools parse` keep 1 for "rejected".
    let error_status = if matches!(cli.command, Command::Grammar(_) | Command::Tools(_)) { 2 } else { 1 };
    let done = match cli.command {
        Command::Run(args) => run(args),
        Command::Chat(args) => chat(args),
        Command::Probe(args) => probe(args),
        Command::Perplexity(args) => perplexity(args),
        Command::Serve(args) => serve(args),
        Command::Pull(args) => pull(args),
        Command::List(args) => list(args),
        Command::Rm(args) => rm(args),
        Command::Bench(BenchCommand::Tools(args)) => bench_tools(args),
        Command::Grammar(GrammarCommand::Check(args)) => grammar_check(args),
        Command::Tools(ToolsCommand::Parse(args)) => tools_parse(args),
    };
    done.unwrap_or_else(|e| {
        eprintln!("Error: {e:#}");
        ExitCode::from(error_status)
    })
}

/// Output piped to a reader that stops early (`toolgate tools parse … | head`) ends
/// the process quietly, as other Unix tools do, instead of a panic on the failed
/// write: writing to a closed pipe raises `SIGPIPE` again, whose default action ends
/// the process. Not for `serve`, whose writes to closed client sockets must stay
/// errors it answers.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to its default, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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

/// The grammar of a JSON Schema file, as `--schema-mode` and `--objects` say.
fn schema_grammar(path: &Path, mode: SchemaModeArg, objects: ObjectsArg) -> anyhow::Result<Grammar> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    Ok(Grammar::from_schema_with(&schema, mode.into(), objects.into(), &toolgate::grammar::regex::Json)?)
}

/// A JSON file's value; `what` names the content in errors.
fn read_json(path: &Path, what: &str) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: expected {what}", path.display()))
}

fn grammar_check(args: GrammarCheckArgs) -> anyhow::Result<ExitCode> {
    let gguf = GgufFile::open(&args.model)?;
    let tokenizer = toolgate::tokenizer::Tokenizer::from_gguf(&gguf)?;
    let vocab = std::sync::Arc::new(tokenizer.token_vocab());
    let grammar = std::sync::Arc::new(schema_grammar(&args.schema, args.schema_mode, args.objects)?);
    let mut rejected = 0;
    for path in &args.instances {
        let compact = serde_json::to_string(&read_json(path, "JSON")?)?;
        let tokens = tokenizer.encode(&compact, toolgate::tokenizer::EncodeOptions::TEXT)?;
        match grammar.check_tokens(vocab.clone(), &tokens) {
            Ok(()) => println!("accepted  {} ({} tokens)", path.display(), tokens.len()),
            Err((step, reason)) => {
                rejected += 1;
                println!("rejected  {} at token {step} of {}: {reason}", path.display(), tokens.len());
            }
        }
    }
    Ok(if rejected > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn bench_tools(args: BenchToolsArgs) -> anyhow::Result<ExitCode> {
    let dir = args.bfcl.clone().unwrap_or_else(bench::tasks::default_bfcl_dir);
    let tasks = bench::load_tasks(&dir, &args.categories, &args.tasks, args.per_category)
        .with_context(|| format!("loading the tasks (BFCL data in {}: run scripts/fetch-bfcl)", dir.display()))?;
    anyhow::ensure!(!tasks.is_empty(), "no tasks: give --categories or --tasks");
    let opts = BenchOptions {
        modes: args.modes.iter().map(|&m| m.into()).collect(),
        choice: args.tool_choice.into(),
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        seed: args.seed,
        jump_forward: args.jump_forward == args::Switch::On,
    };
    let bar = |runs: usize| {
        let bar = indicatif::ProgressBar::new(runs as u64);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} [{elapsed_precise} < {eta}] {msg}")
        {
            bar.set_style(style);
        }
        bar
    };
    let t0 = std::time::Instant::now();
    let run = if let Some(url) = &args.server {
        let server = bench::remote::RemoteServer::new(url, Some(args.model.model.clone()));
        eprintln!("{} tasks against {}", tasks.len(), server.url);
        let bar = bar(tasks.len());
        let results = bench::remote::run(&server, &tasks, &opts, |r| {
            bar.set_message(r.id.clone());
            bar.inc(1);
        })?;
        bar.finish_and_clear();
        BenchRun::new(args.model.model.clone(), server.url, "server".into(), opts, results)
    } else {
        let (mut engine, source) = load(&args.model, Some(&args.gate))?;
        let setup = gated_setup(&engine, &source, &args.gate)?;
        let name = model_id(&source.path);
        let generic = bench::prompt_only_setup(&name, &setup, engine.gguf().architecture().ok())?;
        let modes = opts.modes.iter().filter(|&&m| m != bench::Mode::PromptOnly || generic.is_some()).count();
        if generic.is_none() && opts.modes.contains(&bench::Mode::PromptOnly) {
            eprintln!("prompt-only = native here: the model is served with the generic template; not run twice");
        }
        eprintln!(
            "{} tasks × {modes} mode(s) on {name} (template: {}, family {})",
            tasks.len(),
            setup.source,
            setup.family()
        );
        let bar = bar(modes * tasks.len());
        let results = bench::run(&mut engine, &setup, generic.as_ref(), &tasks, &opts, |r| {
            bar.set_message(format!("{} {}", r.mode, r.id));
            bar.inc(1);
        });
        bar.finish_and_clear();
        BenchRun::new(name, setup.source.to_string(), setup.family().to_string(), opts, results)
    };
    println!("{}", bench::report::table(&run.summaries));
    eprintln!("{} runs in {:.0} s", run.results.len(), t0.elapsed().as_secs_f64());
    let write = |p: &Path, text: String| std::fs::write(p, text).with_context(|| format!("writing {}", p.display()));
    if let Some(p) = &args.json {
        write(p, serde_json::to_string_pretty(&run)?)?;
    }
    if let Some(p) = &args.markdown {
        write(p, bench::report::markdown(&run.summaries))?;
    }
    if let Some(p) = &args.chart {
        write(p, bench::report::svg(&run.model, &run.summaries))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let opts = PullOptions {
        revision: args.hub.revision.clone(),
        file: args.hub.file.clone(),
        force: args.force,
        gate: gate_options(Some(&args.gate)),
    };
    let pulled = hub_client(&args.hub).pull(&args.repo, &opts, &mut CliProgress::default())?;
    let size = pulled.size as f64 / (1 << 20) as f64;
    let how = if pulled.from_cache { "cached" } else { "pulled" };
    eprintln!("{how} {}/{} ({}, {size:.1} MiB, commit {})", pulled.repo, pulled.file, pulled.choice, pulled.commit);
    println!("{}", pulled.path.display());
    Ok(ExitCode::SUCCESS)
}

fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let cache = HubConfig::from_env().cache;
    let rows: Vec<_> = cache.list().iter().map(|c| c.describe()).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if rows.is_empty() {
        eprintln!("no models in {}", cache.root().display());
    } else {
        println!("{:<40} {:<44} {:>9} {:<8} CAPS", "REPO", "FILE", "SIZE", "QUANT");
        for r in &rows {
            let mib = r.file.size as f64 / (1 << 20) as f64;
            println!("{:<40} {:<44} {mib:>5.0} MiB {:<8} {}", r.file.repo, r.file.file, r.quantization, r.caps);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rm(args: RmArgs) -> anyhow::Result<ExitCode> {
    for p in HubConfig::from_env().cache.remove(&args.repo, args.file.as_deref())? {
        println!("removed {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Print generated text to stdout as it comes.
fn to_stdout() -> impl FnMut(&str) {
    let mut out = std::io::stdout();
    move |piece: &str| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    }
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
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
    let gen = match &args.json_schema {
        Some(path) => {
            let grammar = std::sync::Arc::new(schema_grammar(path, args.schema_mode, args.objects)?);
            let mut matcher = grammar.matcher(engine.token_vocab());
            engine.generate_constrained(&prompt, &params, &mut matcher, to_stdout())?
        }
        None => engine.generate(&prompt, &params, to_stdout())?,
    };
    println!();
    eprintln!("load {:.2}s | {}", load_time.as_secs_f64(), gen.speed_line());
    Ok(ExitCode::SUCCESS)
}

fn chat(args: ChatArgs) -> anyhow::Result<ExitCode> {
    let (mut engine, source) = load(&args.model, Some(&args.gate))?;
    let setup = gated_setup(&engine, &source, &args.gate)?;
    let mut messages = Vec::new();
    if let Some(sys) = &args.system {
        messages.push(serde_json::json!({"role": "system", "content": sys}));
    }
    messages.push(serde_json::json!({"role": "user", "content": args.message}));
    let tools: Option<Vec<serde_json::Value>> = match &args.tools {
        Some(p) => Some(serde_json::from_value(read_json(p, "a JSON array of tools")?).context("--tools")?),
        None => None,
    };
    let choice = toolgate::tools::ToolChoice::from_cli(&args.tool_choice);
    if args.show_prompt {
        // The prompt the turn renders: with the tools unless `--tool-choice none`.
        let shown = tools.clone().filter(|_| choice != toolgate::tools::ToolChoice::None);
        let (text, ids) = toolgate::engine::prompt::encode_chat(
            &setup,
            engine.tokenizer(),
            messages.clone(),
            shown,
            Default::default(),
        )?;
        eprintln!("--- prompt ({} tokens, template: {}) ---\n{text}\n---", ids.len(), setup.source);
    }
    let params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling: SamplingParams { temperature: args.temperature, seed: args.seed, ..SamplingParams::default() },
        ..GenerateParams::default()
    };
    if let Some(tools) = &tools {
        let tools: Vec<toolgate::tools::Tool> = serde_json::from_value(serde_json::Value::Array(tools.clone()))
            .context("tools must be OpenAI function tools")?;
        let mode = args.tool_mode.into();
        let turn = tool_turn(&mut engine, &setup, messages, &tools, &choice, args.parallel_tool_calls, mode, &params)?;
        println!("{}", serde_json::to_string_pretty(&turn)?);
        return Ok(ExitCode::SUCCESS);
    }
    let (_, ids) =
        toolgate::engine::prompt::encode_chat(&setup, engine.tokenizer(), messages, None, Default::default())?;
    let gen = engine.generate(&ids, &params, to_stdout())?;
    println!();
    eprintln!("{}", gen.speed_line());
    Ok(ExitCode::SUCCESS)
}

fn probe(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let info = toolgate::template::probe::model_info(&args.target, args.chat_template.as_deref())?;
    println!("{}", serde_json::to_string_pretty(&info)?);
    // A template that declares tools but whose calls no layout reads (the reason is in
    // `tool_format.round_trip`) is one `serve` refuses: say so in the exit status.
    let servable = !info.supports_tools || info.tool_format.format.is_some();
    Ok(if servable { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn perplexity(args: PerplexityArgs) -> anyhow::Result<ExitCode> {
    use toolgate::engine::perplexity::{chunk_tokens, score, BaseReader, BaseWriter, Scoring};
    let (mut engine, _) = load(&args.model, None)?;
    let mut base = args.kl_divergence_base.as_ref().map(BaseReader::open).transpose()?;
    let (tokens, n_ctx) = match (&base, &args.text) {
        (Some(b), _) => {
            let n = args.chunks.map_or(b.tokens().len(), |n| n.max(1) * b.n_ctx());
            (b.tokens()[..n.min(b.tokens().len())].to_vec(), b.n_ctx())
        }
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            (chunk_tokens(engine.tokenizer(), &text, args.chunk_size, args.chunks)?, args.chunk_size)
        }
        (None, None) => anyhow::bail!("--text or --kl-divergence-base is required"),
    };
    let mut save = args.save_base.as_ref().map(BaseWriter::create).transpose()?;
    let report = score(&mut engine, &tokens, n_ctx, Scoring { base: base.as_mut(), save: save.as_mut() })?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

fn tools_parse(args: ToolsParseArgs) -> anyhow::Result<ExitCode> {
    let (templates, arch) = match &args.model {
        Some(path) => {
            let gguf = GgufFile::open(path)?;
            let arch = gguf.architecture().ok().map(str::to_string);
            (toolgate::template::source::GgufTemplates::from_gguf(&gguf)?, arch)
        }
        None => Default::default(),
    };
    let mut setup = toolgate::template::inspect(&templates, arch.as_deref(), args.chat_template.as_deref())?;
    if let Some(family) = &args.tool_format {
        setup = setup.with_family(family)?;
    }
    let v = read_json(&args.tools, "JSON")?;
    let tools: Vec<toolgate::tools::Tool> = serde_json::from_value(v.get("tools").cloned().unwrap_or(v))
        .with_context(|| format!("{}: not an OpenAI tools array", args.tools.display()))?;
    let mut output = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut output).context("reading the model output on stdin")?;
    let report = toolgate::template::probe::read_output(&setup, &tools, &output)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let (engine, source) = load(&args.model, Some(&args.gate))?;
    let setup = gated_setup(&engine, &source, &args.gate)?;
    let state =
        toolgate::server::AppState::parallel(engine, args.parallel.into(), setup, source.id, args.tool_mode.into())?;
    let limits = toolgate::server::ConnLimits {
        header_timeout: std::time::Duration::from_secs_f64(args.header_timeout),
        body_timeout: std::time::Duration::from_secs_f64(args.body_timeout),
        max_connections: args.max_connections as usize,
    };
    let state = state
        .with_jump_forward(args.jump_forward == args::Switch::On)
        .with_drain(std::time::Duration::from_secs_f64(args.drain_seconds));
    let state = std::sync::Arc::new(state.with_max_queue(args.max_queue).with_limits(limits));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(toolgate::server::serve(state, &args.host, args.port))?;
    Ok(ExitCode::SUCCESS)
}
