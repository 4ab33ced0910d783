//! Shared helpers for the integration tests: where the real models live.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod fake_hub;
pub mod server;

/// `~/.cache/toolgate` (under `XDG_CACHE_HOME` when set): where the fetch scripts
/// cache what the tests use.
pub fn cache_dir() -> PathBuf {
    std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache"))
        .join("toolgate")
}

/// The model cache `scripts/fetch-models` fills (`TOOLGATE_MODELS` overrides).
pub fn models_dir() -> PathBuf {
    std::env::var("TOOLGATE_MODELS").map(PathBuf::from).unwrap_or_else(|_| cache_dir().join("models"))
}

/// Path of a real model; panics with the fix if it has not been fetched.
pub fn model(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(p.exists(), "{} is missing: run scripts/fetch-models first", p.display());
    p
}

/// The device the llama.cpp-comparison tests run on: `TOOLGATE_TEST_DEVICE`
/// (`cpu`, `cuda`, `cuda:N`, `metal`; default `cpu`). `scripts/gpu-check` runs the
/// greedy fixtures with `cuda` on a GPU machine.
pub fn device() -> toolgate::model::DeviceChoice {
    match std::env::var("TOOLGATE_TEST_DEVICE") {
        Ok(d) => d.parse().unwrap_or_else(|e| panic!("TOOLGATE_TEST_DEVICE={d}: {e}")),
        Err(_) => toolgate::model::DeviceChoice::Cpu,
    }
}

/// Load `path` on the test device with an **f32 KV cache**: the llama.cpp reference
/// logits were made with one, and comparisons at 1e-4 of keys computed along two
/// paths (one pass and token by token) need keys stored as computed.
pub fn load_f32_kv(path: &std::path::Path) -> toolgate::engine::Engine {
    load_with_kv(path, toolgate::model::KvCacheType::F32)
}

/// Load `path` on the test device with the KV cache type `kv`.
pub fn load_with_kv(path: &std::path::Path, kv: toolgate::model::KvCacheType) -> toolgate::engine::Engine {
    let opts = toolgate::model::LoadOptions { device: device(), kv_cache: kv, ..Default::default() };
    toolgate::engine::Engine::load_with(path, &opts).unwrap()
}

/// The CUDA matmul mode under test, `TOOLGATE_CUDA_MATMUL` (`quantized`, candle's
/// MMQ/MMVQ kernels, when unset; or `f32`), or `None` when the device is not CUDA.
pub fn cuda_matmul() -> Option<String> {
    matches!(device(), toolgate::model::DeviceChoice::Cuda(_))
        .then(|| std::env::var("TOOLGATE_CUDA_MATMUL").unwrap_or_else(|_| "quantized".into()))
}

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";
/// SmolLM2 with Qwen 2.5's tool-calling template in its metadata (made by `scripts/fetch-models`).
pub const SMOLLM2_QWEN: &str = "SmolLM2-135M-Instruct.Qwen2.5-template.Q4_1.gguf";

/// Gemma 3 270M with FunctionGemma's function-calling control tokens (`<escape>` among
/// them) and a FunctionGemma-style template of ours (made by `scripts/fetch-models`).
pub const GEMMA3_FG: &str = "gemma-3-270m.functiongemma-style.Q4_K_M.gguf";

/// Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2; its own Hermes tool template).
pub const QWEN_CODER: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// A JSON fixture. `TOOLGATE_FIXTURES`: the fixtures copied beside a test binary run
/// elsewhere (`scripts/gpu-check`); by default the checkout's own `tests/fixtures`.
pub fn fixture(name: &str) -> serde_json::Value {
    serde_json::from_str(&fixture_text(name)).expect("fixture json")
}

/// The chat-template corpus `scripts/fetch-templates` caches: llama.cpp's
/// `models/templates/*.jinja` from the llama-cpp-python 0.3.36 sdist on PyPI
/// (`TOOLGATE_TEMPLATES` overrides). Panics with the fix if it has not been fetched.
pub fn templates_dir() -> PathBuf {
    fetched_dir("TOOLGATE_TEMPLATES", "llama-cpp-python-0.3.36", "Qwen-Qwen2.5-7B-Instruct.jinja", "")
}

/// The second corpus `scripts/fetch-templates vllm` caches: vLLM's tool chat templates
/// from the vllm 0.33.0 sdist on PyPI (`TOOLGATE_VLLM_TEMPLATES` overrides). Panics with
/// the fix if it has not been fetched.
pub fn vllm_templates_dir() -> PathBuf {
    fetched_dir("TOOLGATE_VLLM_TEMPLATES", "vllm-0.33.0", "tool_chat_template_hermes.jinja", " vllm")
}

/// `$var`, or `templates/name` in the cache, checked to hold `file`.
fn fetched_dir(var: &str, name: &str, file: &str, arg: &str) -> PathBuf {
    let dir = std::env::var(var).map(PathBuf::from).unwrap_or_else(|_| cache_dir().join("templates").join(name));
    assert!(dir.join(file).exists(), "{} holds no templates: run scripts/fetch-templates{arg} first", dir.display());
    dir
}

/// Path of one template of the corpus.
pub fn template(name: &str) -> PathBuf {
    templates_dir().join(name)
}

/// A fixture file's text (`tests/fixtures/NAME`, or under `TOOLGATE_FIXTURES`).
pub fn fixture_text(name: &str) -> String {
    let dir = std::env::var("TOOLGATE_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"));
    let p = dir.join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// The 39 templates the template tests are written against, with their sources: the
/// ones `tests/fixtures/templates/expected-caps.jsonl` has facts for, sorted by name.
/// The corpus's other templates are left out on purpose (`tests/fixtures/templates/README.md`).
pub fn corpus() -> Vec<(String, String)> {
    let dir = templates_dir();
    let mut out: Vec<(String, String)> = fixture_text("templates/expected-caps.jsonl")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("expected-caps.jsonl");
            let name = v["template"].as_str().expect("template").to_string();
            let src = std::fs::read_to_string(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, src)
        })
        .collect();
    out.sort();
    out
}
