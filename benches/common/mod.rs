//! What the benches share: where the fetch scripts cache their data.

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
