//! The server driven by the official OpenAI and Anthropic Python SDKs (from PyPI, in
//! the virtualenv `scripts/python-env` makes), on the real SmolLM2.

use std::path::PathBuf;
use std::process::Command;

use crate::common::server::{start, Server};

/// The virtualenv's Python (`TOOLGATE_PYENV` overrides where it lives).
pub(crate) fn python() -> PathBuf {
    let env =
        std::env::var("TOOLGATE_PYENV").map(PathBuf::from).unwrap_or_else(|_| crate::common::cache_dir().join("pyenv"));
    let py = env.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/python-env first", py.display());
    py
}

fn run_script(script: &str) {
    run_script_on(script, &["--tool-fallback", "generic"]);
}

/// Run `script` against SmolLM2 served with `serve_args`.
fn run_script_on(script: &str, serve_args: &[&str]) {
    drive(script, &start(serve_args), "SmolLM2-135M-Instruct.Q4_1");
}

/// Run `script` against the server `s` serving `model`; it must print `ok errors`
/// last.
fn drive(script: &str, s: &Server, model: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk").join(script);
    let out = Command::new(python()).arg(&path).arg(&s.base).arg(model).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    assert!(stdout.trim_end().ends_with("ok errors"), "{script} did not run to the end:\n{stdout}");
}

/// Serve Qwen2.5-Coder-0.5B (its own template); the server and the model id.
fn serve_qwen_coder() -> (Server, &'static str) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("serve").arg("--model").arg(crate::common::model(crate::common::QWEN_CODER));
    let s = crate::common::server::spawn_on_any_port(cmd).expect("server did not come up");
    (s, crate::common::QWEN_CODER.trim_end_matches(".gguf"))
}

#[test]
fn openai_python_sdk() {
    run_script("openai_sdk.py");
}

/// The Responses API (`/v1/responses`) through `client.responses.create` / `.stream`, and
/// the openai-agents Runner, whose default model uses it.
#[test]
fn openai_python_sdk_responses_api() {
    run_script("responses_sdk.py");
}

#[test]
fn anthropic_python_sdk() {
    run_script("anthropic_sdk.py");
}

/// A template that reasons (Qwen 3.5's opens `<think>` in the generation prompt):
/// Anthropic `thinking` blocks and events, `thinking: disabled` and OpenAI
/// `chat_template_kwargs` reaching the template, structured output after reasoning.
#[test]
fn sdks_on_a_reasoning_template() {
    let template = crate::common::template("Qwen3.5-4B.jinja");
    run_script_on("reasoning_template.py", &["--chat-template", template.to_str().unwrap()]);
}

/// `/v1/completions` through `client.completions.create` on Qwen2.5-Coder-0.5B, whose
/// vocabulary has fill-in-the-middle tokens (`suffix` → FIM).
#[test]
fn openai_python_sdk_completions_with_fim() {
    let (s, model) = serve_qwen_coder();
    drive("completions_sdk.py", &s, model);
}

/// What agents send, through the OpenAI and Anthropic SDKs on Qwen2.5-Coder-0.5B: every
/// `max_tokens` from 1 to 64 (forced and `auto`) returns either the call an unbounded
/// run writes or no call with a `length` finish — never a call completed with values
/// the model did not write; `developer` steers as `system` does; a legacy `function`
/// result renders as a `tool` result; `/metrics` counts the cut calls.
#[test]
fn sdks_with_tight_budgets_developer_and_legacy_function_messages() {
    let (s, model) = serve_qwen_coder();
    drive("budget_sdk.py", &s, model);
}

/// The OpenAI SDK's agent loop in `tool_choice: "auto"` on Qwen2.5-Coder-0.5B, a real
/// model whose own (Hermes) template declares tools and which answers with a bare
/// JSON call instead of `<tool_call>`: call recovery turns it into a call.
#[test]
fn openai_python_sdk_agent_loop_in_auto_on_a_real_tool_model() {
    let (s, model) = serve_qwen_coder();
    drive("agent_loop.py", &s, model);
    let mut r = crate::common::server::agent().get(format!("{}/metrics", s.base)).call().unwrap();
    let metrics = r.body_mut().read_to_string().unwrap();
    let recovered = metrics
        .lines()
        .find_map(|l| l.strip_prefix("toolgate_tool_calls_recovered_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(recovered >= 2.0, "the first turn's calls (plain and streamed) were recovered: {recovered}\n{metrics}");
}
