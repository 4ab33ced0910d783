//! Loading the model a command names: a local file, or a Hub repository pulled first,
//! with pull progress on stderr.

use std::path::{Path, PathBuf};

use anyhow::Context;
use toolgate::engine::Engine;
use toolgate::hub::{GateOptions, Hub, HubConfig, PullOptions};
use toolgate::model::LoadOptions;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{ChatSetup, ToolFallback};

use crate::args::{GateArgs, HubArgs, ModelArgs, Switch};

/// A model to load: its file, the id it is served under, and where it came from.
pub(crate) struct ModelSource {
    pub(crate) path: PathBuf,
    pub(crate) id: String,
    /// `(repo, file)` when pulled from the Hub.
    pub(crate) hub: Option<(String, String)>,
}

pub(crate) fn hub_client(args: &HubArgs) -> Hub {
    Hub::new(HubConfig { endpoint: args.endpoint.clone(), ..HubConfig::from_env() })
}

pub(crate) fn gate_options(gate: Option<&GateArgs>) -> GateOptions {
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

/// Load the model `args` names; a pulled file that does not load is quarantined.
pub(crate) fn load(args: &ModelArgs, gate: Option<&GateArgs>) -> anyhow::Result<(Engine, ModelSource)> {
    let source = model_source(args, gate)?;
    let opts = LoadOptions { device: args.device, context_length: args.ctx_size, kv_cache: args.kv_cache.into() };
    match Engine::load_with(&source.path, &opts) {
        Ok(engine) => Ok((engine, source)),
        Err(e) => {
            if let Some((repo, file)) = &source.hub {
                if let Some(q) = hub_client(&args.hub).quarantine_unloadable(repo, file, &source.path, &e) {
                    eprintln!("quarantined {} ({e})", q.display());
                }
            }
            Err(anyhow::Error::new(e).context(format!("loading {}", source.path.display())))
        }
    }
}

/// The file name a model is reported under.
pub(crate) fn model_id(path: &Path) -> String {
    path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// The loaded model's chat setup, through the tool-calling gate.
pub(crate) fn gated_setup(engine: &Engine, source: &ModelSource, gate: &GateArgs) -> anyhow::Result<ChatSetup> {
    let templates = GgufTemplates::from_gguf(engine.gguf())?;
    let arch = engine.gguf().architecture().ok();
    let setup = toolgate::template::gate(
        &model_id(&source.path),
        &templates,
        arch,
        gate.chat_template.as_deref(),
        gate.tool_fallback,
    )?;
    let setup = setup.with_call_recovery(gate.call_recovery == Switch::On);
    Ok(match &gate.tool_format {
        Some(family) => setup.with_family(family)?,
        None => setup,
    })
}

/// Pull progress on stderr: stage messages and an indicatif bar (bytes, rate, ETA).
#[derive(Default)]
pub(crate) struct CliProgress {
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
