//! What the benches share: where the fetch scripts cache their data, and which models
//! and device a model bench runs (`BENCH_MODELS`, `BENCH_DEVICE`).

use std::path::PathBuf;

/// `~/.cache/toolgate/<what>` — under `XDG_CACHE_HOME` when set, or the folder in the
/// environment variable `var` — as `scripts/fetch-models` and the other fetch scripts
/// write it.
pub fn cache_dir(var: &str, what: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(var) {
        return dir.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    base.join("toolgate").join(what)
}

/// The test models `scripts/fetch-models` caches (or the folder in `TOOLGATE_MODELS`).
#[allow(dead_code)] // not every bench loads a model
pub fn models_dir() -> PathBuf {
    cache_dir("TOOLGATE_MODELS", "models")
}

/// The device `BENCH_DEVICE` names (`cpu`, the default, or `cuda[:N]`).
#[allow(dead_code)] // not every bench loads a model
pub fn bench_device() -> toolgate::model::DeviceChoice {
    std::env::var("BENCH_DEVICE").map_or(toolgate::model::DeviceChoice::Cpu, |d| d.parse().expect("BENCH_DEVICE"))
}

/// The model files a bench runs: `BENCH_MODELS` (comma-separated file names in
/// [`models_dir`], or paths), else the two test models; only those whose name holds
/// one of `filter` (the bench's arguments), when any.
#[allow(dead_code)] // not every bench loads a model
pub fn bench_models(filter: &[String]) -> Vec<PathBuf> {
    let files: Vec<String> = match std::env::var("BENCH_MODELS") {
        Ok(list) => list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        Err(_) => vec!["SmolLM2-135M-Instruct.Q4_1.gguf".into(), "gemma-3-270m-q4_k_m.gguf".into()],
    };
    files
        .iter()
        .filter(|f| filter.is_empty() || filter.iter().any(|x| f.contains(x.as_str())))
        .map(|f| if f.contains('/') { PathBuf::from(f) } else { models_dir().join(f) })
        .collect()
}
