//! The bench suite, CI-sized: `toolgate bench tools` on the real SmolLM2 over one
//! BFCL task from three categories plus one task in toolgate's own format, in
//! constrained and native modes, so the bench never rots. The numbers of a full run
//! are in BENCHMARKS.md; here only what must hold for any model: constrained calls
//! always parse and always validate, every task is judged, the chart and JSON exist.

use crate::common;

use std::process::Command;

use serde_json::Value;

fn bfcl_dir() -> std::path::PathBuf {
    let dir = toolgate::bench::tasks::default_bfcl_dir();
    assert!(dir.join("BFCL_v4_simple_python.json").exists(), "{} is missing: run scripts/fetch-bfcl", dir.display());
    dir
}

#[test]
fn bfcl_categories_load_and_convert() {
    let dir = bfcl_dir();
    for (cat, n) in
        [("simple_python", 400), ("multiple", 200), ("parallel", 200), ("parallel_multiple", 200), ("irrelevance", 240)]
    {
        let tasks = toolgate::bench::tasks::load_bfcl(&dir, cat).unwrap();
        assert_eq!(tasks.len(), n, "{cat}");
        for t in &tasks {
            assert_eq!(t.expects_no_call(), cat == "irrelevance", "{}", t.id);
            for tool in &t.tools {
                // Every converted schema is one the constraint engine compiles (lenient).
                let text = tool.function.parameters.to_string();
                assert!(
                    !text.contains("\"dict\"") && !text.contains("\"float\"") && !text.contains("\"tuple\""),
                    "{text}"
                );
                jsonschema::validator_for(&tool.function.parameters).unwrap();
            }
        }
    }
}

#[test]
fn smoke_run_constrained_always_parses_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let (json, chart) = (dir.path().join("bench.json"), dir.path().join("bench.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["bench", "tools", "--model"])
        .arg(common::model(common::SMOLLM2))
        .args(["--tool-fallback", "generic", "--categories", "simple_python,parallel,irrelevance"])
        .args(["--per-category", "1", "--modes", "constrained,native,prompt-only", "--max-tokens", "96"])
        .arg("--bfcl")
        .arg(bfcl_dir())
        .arg("--tasks")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bench_tasks.jsonl"))
        .arg("--json")
        .arg(&json)
        .arg("--chart")
        .arg(&chart)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("constrained") && stdout.contains("AST"), "{stdout}");
    // SmolLM2 is served with the generic template: prompt-only is native, not run twice.
    assert!(stderr.contains("prompt-only = native"), "{stderr}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = doc["results"].as_array().unwrap();
    // One task per category (the own file's first task too) × constrained, native.
    assert_eq!(results.len(), 2 * 4, "{results:?}");
    let summary = |mode: &str, cat: &str| {
        doc["summaries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["mode"] == mode && s["category"] == cat)
            .cloned()
            .unwrap()
    };
    let all = summary("constrained", "all");
    assert_eq!(all["tasks"], 4);
    assert_eq!(all["parse_rate"], 1.0, "{all}");
    assert_eq!(all["call_rate"], 1.0, "required where a call is expected: {all}");
    assert_eq!(all["schema_valid_rate"], 1.0, "{all}");
    assert_eq!(all["declared_rate"], 1.0, "{all}");
    // Required where a call is expected: the constrained answer always has a call.
    for r in results.iter().filter(|r| r["mode"] == "constrained" && r["category"] != "irrelevance") {
        assert!(r["judgement"]["calls"].as_u64().unwrap() >= 1, "{r}");
    }
    assert!(summary("native", "all")["tasks"] == 4);
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("BFCL AST accuracy") && svg.contains("own_tasks"), "{svg}");
}

/// `bench tools --server`: the same tasks over HTTP to a running OpenAI-compatible
/// server (here `toolgate serve` on SmolLM2), judged by the same rules; a wrong model
/// name or an unreachable server stops the run with the reason.
#[test]
fn bench_against_a_server_judges_its_answers() {
    let s = common::server::start(&["--tool-fallback", "generic"]);
    let (status, models) = common::server::get_json(&s, "/v1/models");
    assert_eq!(status, 200);
    let id = models["data"][0]["id"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let bench = |server: &str, model: &str| {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["bench", "tools", "--server", server, "--model", model])
            .args(["--categories", "simple_python,irrelevance", "--per-category", "1", "--max-tokens", "96"])
            .arg("--bfcl")
            .arg(bfcl_dir())
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap()
    };
    let out = bench(&format!("{}/v1", s.base), &id);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("server") && stdout.contains("AST"), "{stdout}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    for r in results {
        assert_eq!(r["mode"], "server", "{r}");
        assert!(r["judgement"]["error"].is_null() || r["category"] == "irrelevance", "{r}");
        assert!(r["prompt_tokens"].as_u64().unwrap() > 0 && r["finish_reason"] != "error", "{r}");
    }
    // Required where a call is expected, and the server constrains: a valid call.
    let simple = results.iter().find(|r| r["category"] == "simple_python").unwrap();
    assert_eq!(simple["judgement"]["calls"], 1, "{simple}");
    assert_eq!(simple["judgement"]["schema_valid"], 1, "{simple}");

    let out = bench(&s.base, "no-such-model");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("status 404") && stderr.contains("no-such-model"), "{stderr}");
    drop(s);
    let out = bench("http://127.0.0.1:9", &id);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("server http://127.0.0.1:9"), "{stderr}");
}

/// A server that answers every request with `body` (HTTP/1.1, then closes).
fn canned_server(body: Value) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut conn = conn;
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then as many body bytes as content-length says.
            while let Ok(n) = conn.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let text = body.to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    format!("http://{addr}")
}

/// Servers differ in how they send a call: OpenAI's arguments are a JSON string,
/// Ollama's an object, some leave out `id` and `type`. All are judged alike.
#[test]
fn bench_against_a_server_reads_calls_in_each_servers_shape() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        json!({"id": "w", "category": "simple", "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "expected": [{"get_weather": {"city": ["Paris"]}}]})
        .to_string(),
    )
    .unwrap();
    for arguments in [json!("{\"city\": \"Paris\"}"), json!({"city": "Paris"})] {
        let url = canned_server(json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"function": {"name": "get_weather", "arguments": arguments}}]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 9}}));
        let json_out = dir.path().join("out.json");
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["bench", "tools", "--server", &url, "--model", "any", "--categories", "none", "--tasks"])
            .arg(&tasks)
            .arg("--json")
            .arg(&json_out)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_out).unwrap()).unwrap();
        let r = &doc["results"][0];
        assert_eq!(r["judgement"]["correct"], true, "{arguments}: {r}");
        assert_eq!((r["prompt_tokens"].as_u64(), r["parsed"].as_bool()), (Some(12), Some(true)), "{r}");
        assert_eq!(doc["family"], "server");
    }
}

// ---- BFCL's checking rules on hand-made answers (no model) ----

use serde_json::json;
use toolgate::bench::check::judge;
use toolgate::bench::tasks::Task;
use toolgate::tools::{CalledFunction, ToolCall};

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: "call_0".into(),
        kind: "function".into(),
        function: CalledFunction { name: name.into(), arguments: args.to_string() },
    }
}

fn task(expected: Vec<Value>) -> Task {
    let doc = json!({"name": "area", "parameters": {"type": "dict", "required": ["base"],
        "properties": {"base": {"type": "integer"}, "h": {"type": "float"}, "unit": {"type": "string"},
                       "tags": {"type": "array", "items": {"type": "string"}}}}});
    let tool = toolgate::tools::Tool {
        kind: "function".into(),
        function: toolgate::tools::FunctionDef {
            name: "area".into(),
            description: None,
            parameters: toolgate::bench::tasks::to_openai_schema(&doc["parameters"]),
            strict: None,
        },
    };
    Task { id: "t".into(), category: "c".into(), messages: vec![], tools: vec![tool], docs: vec![doc], expected }
}

fn validators(t: &Task) -> std::collections::HashMap<String, jsonschema::Validator> {
    t.tools
        .iter()
        .map(|t| (t.function.name.clone(), jsonschema::validator_for(&t.function.parameters).unwrap()))
        .collect()
}

#[test]
fn bfcl_rules() {
    let t = task(vec![json!({"area": {"base": [10], "h": [5.0], "unit": ["units", ""], "tags": [["A b"], ""]}})]);
    let v = validators(&t);
    let ok = |args: Value| judge(&t, &[call("area", args)], &v);
    assert!(ok(json!({"base": 10, "h": 5})).correct, "int accepted for float; optional omitted");
    assert!(ok(json!({"base": 10, "h": 5.0, "unit": "Units", "tags": ["a_b"]})).correct, "standardised strings");
    let j = ok(json!({"base": 10}));
    assert!(!j.correct && j.error.unwrap().contains("`h` not provided"));
    let j = ok(json!({"base": "10", "h": 5}));
    assert!(!j.correct && j.schema_valid == 0, "a string is not an integer");
    assert!(!ok(json!({"base": 10, "h": 5, "color": "red"})).correct, "unexpected parameter");
    assert!(!ok(json!({"base": 11, "h": 5})).correct, "wrong value");
    assert!(!judge(&t, &[call("volume", json!({"base": 10}))], &v).correct, "wrong name");
    assert_eq!(judge(&t, &[call("volume", json!({}))], &v).declared, 0);
}

#[test]
fn parallel_any_order_and_irrelevance() {
    let t = task(vec![json!({"area": {"base": [1], "h": [1.0]}}), json!({"area": {"base": [2], "h": [2.0]}})]);
    let v = validators(&t);
    let calls = [call("area", json!({"base": 2, "h": 2})), call("area", json!({"base": 1, "h": 1}))];
    assert!(judge(&t, &calls, &v).correct);
    assert!(!judge(&t, &calls[..1], &v).correct, "one call of two");
    let none = task(vec![]);
    assert!(judge(&none, &[], &v).correct);
    assert!(!judge(&none, &calls[..1], &v).correct);
}
