//! The bench against a running OpenAI-compatible server: the same tasks, choices and
//! judge as the in-process bench, sent over HTTP to `/v1/chat/completions`. This is
//! how toolgate is compared with the server a user would otherwise run (llama.cpp's
//! `llama-server`, vLLM, Ollama, or `toolgate serve` itself) on the same GGUF.
//!
//! ```no_run
//! use toolgate::bench::{self, remote::RemoteServer, tasks, BenchOptions, ChoicePolicy};
//!
//! let server = RemoteServer::new("http://127.0.0.1:8080", None);
//! let tasks = tasks::load_bfcl(&tasks::default_bfcl_dir(), "simple_python")?;
//! let opts = BenchOptions { choice: ChoicePolicy::Auto, ..BenchOptions::default() };
//! let results = bench::remote::run(&server, &tasks[..5], &opts, |_| {})?;
//! for s in bench::summarize(&results) {
//!     println!("{} {} AST {:.0}%", s.mode, s.category, 100.0 * s.ast_accuracy);
//! }
//! # Ok::<(), toolgate::Error>(())
//! ```

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{check, choice_for, parallel_for, tasks::Task, validators, BenchOptions, Mode, TaskResult};
use crate::tools::{CalledFunction, ToolCall, ToolChoice};
use crate::{Error, Result};

/// An OpenAI-compatible chat-completions server.
#[derive(Debug, Clone)]
pub struct RemoteServer {
    /// Base URL, without `/v1` (`http://127.0.0.1:8080`).
    pub url: String,
    /// The `model` field sent (servers of one model ignore it); `None` sends `"default"`.
    pub model: Option<String>,
    /// How long one answer may take.
    pub timeout: Duration,
}

impl RemoteServer {
    /// A server at `url` (a trailing `/` or `/v1` is dropped), ten minutes per answer.
    ///
    /// Cost: nothing is sent until [`run`].
    pub fn new(url: &str, model: Option<String>) -> Self {
        let url = url.trim_end_matches('/');
        let url = url.strip_suffix("/v1").unwrap_or(url).to_string();
        Self { url, model, timeout: Duration::from_secs(600) }
    }
}

/// The request body for one task, as the in-process bench asks: `tool_choice` by the
/// options' policy, parallel calls allowed where the task expects other than one call.
fn request(task: &Task, server: &RemoteServer, opts: &BenchOptions) -> Value {
    let choice = match choice_for(task, opts.choice) {
        ToolChoice::Required => json!("required"),
        _ => json!("auto"),
    };
    json!({
        "model": server.model.as_deref().unwrap_or("default"),
        "messages": task.messages,
        "tools": task.tools,
        "tool_choice": choice,
        "parallel_tool_calls": parallel_for(task),
        "max_tokens": opts.max_tokens,
        "temperature": opts.temperature,
        "seed": opts.seed,
    })
}

/// The calls of a chat completion's first choice. Arguments given as an object (as
/// Ollama sends them) are serialized; a call without a name is kept with an empty one
/// (the judge counts it as undeclared).
fn calls_of(message: &Value) -> Vec<ToolCall> {
    let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
        return Vec::new();
    };
    calls
        .iter()
        .map(|c| {
            let f = c.get("function").unwrap_or(&Value::Null);
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            ToolCall {
                id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_string(),
                kind: "function".into(),
                function: CalledFunction {
                    name: f.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                    arguments,
                },
            }
        })
        .collect()
}

/// Run every task against `server` (mode [`Mode::Server`]; `opts.modes` is ignored),
/// calling `on_result` after each.
///
/// Cost: one request per task, answered one at a time. Timings come from the
/// server's `timings` (llama.cpp's `prompt_ms`/`predicted_ms`) when it sends them;
/// otherwise the whole answer counts as decode.
///
/// # Errors
/// [`Error::Server`] when the server cannot be reached or answers 401, 403 or 404 (a
/// wrong URL, key or model name: the run stops, as every later task would fail the
/// same way). Another status ≥ 400 or a body that is not a chat completion is
/// recorded as that task's failure and the run goes on.
pub fn run(
    server: &RemoteServer,
    tasks: &[Task],
    opts: &BenchOptions,
    mut on_result: impl FnMut(&TaskResult),
) -> Result<Vec<TaskResult>> {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_global(Some(server.timeout))
        .user_agent(concat!("toolgate-bench/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent();
    let url = format!("{}/v1/chat/completions", server.url);
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        let checks = validators(task);
        let t0 = Instant::now();
        let sent = agent.post(&url).send_json(request(task, server, opts));
        let mut resp = match sent {
            Ok(r) => r,
            Err(e @ (ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Io(_))) => {
                return Err(Error::Server { url, reason: e.to_string() })
            }
            Err(e) => {
                let r = TaskResult::failed(task, Mode::Server, e.to_string());
                on_result(&r);
                out.push(r);
                continue;
            }
        };
        let status = resp.status().as_u16();
        let body: Value = resp.body_mut().read_json().unwrap_or(Value::Null);
        let wall = t0.elapsed().as_secs_f64();
        let choice = &body["choices"][0];
        let r = if status >= 400 || !choice.is_object() {
            let reason = body["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| body.to_string());
            if matches!(status, 401 | 403 | 404) {
                // A wrong URL, model name or key: every task would get the same answer.
                return Err(Error::Server { url, reason: format!("status {status}: {reason}") });
            }
            TaskResult::failed(task, Mode::Server, format!("status {status}: {reason}"))
        } else {
            let message = &choice["message"];
            let calls = calls_of(message);
            let finish_reason = choice["finish_reason"].as_str().unwrap_or("").to_string();
            // Every call's arguments are JSON, and no call was cut by the token budget.
            let args_json = calls.iter().all(|c| serde_json::from_str::<Value>(&c.function.arguments).is_ok());
            let cut = finish_reason == "length" && !calls.is_empty();
            let timings = &body["timings"];
            let (ttft_s, decode_s) = match (timings["prompt_ms"].as_f64(), timings["predicted_ms"].as_f64()) {
                (Some(p), Some(d)) => (p / 1000.0, d / 1000.0),
                _ => (0.0, wall),
            };
            TaskResult {
                id: task.id.clone(),
                category: task.category.clone(),
                mode: Mode::Server,
                expects_call: !task.expects_no_call(),
                parsed: args_json && !cut,
                judgement: check::judge(task, &calls, &checks),
                finish_reason,
                prompt_tokens: body["usage"]["prompt_tokens"].as_u64().unwrap_or(0) as usize,
                completion_tokens: body["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize,
                forced_tokens: timings["forced_n"].as_u64().unwrap_or(0) as usize,
                ttft_s,
                decode_s,
                mask_s: 0.0,
                calls: calls.iter().map(|c| format!("{}({})", c.function.name, c.function.arguments)).collect(),
                content: message["content"].as_str().unwrap_or("").chars().take(200).collect(),
            }
        };
        on_result(&r);
        out.push(r);
    }
    Ok(out)
}
