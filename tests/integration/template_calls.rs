//! Calls as the templates render them: for every template of both corpora (llama.cpp's
//! `models/templates` from the llama-cpp-python sdist, vLLM's tool chat templates from
//! the vllm sdist; `scripts/fetch-templates`), the assistant turn with one call and with
//! two parallel calls, rendered by Python's jinja2 as Hugging Face renders chat
//! templates (`tests/fixtures/templates/expected-calls.jsonl`, made by
//! `scripts/make-template-fixtures.py --vllm`), must read back — through the same setup
//! `serve` builds and the same check `toolgate tools parse` runs — to the very calls
//! rendered, and the constrained grammar must accept that exact text. None of these
//! renders is toolgate's own: they are the text a model trained on the template writes.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use toolgate::template::inspect;
use toolgate::template::probe::read_output;
use toolgate::template::source::GgufTemplates;
use toolgate::tools::Tool;

use crate::common::{fixture_text, templates_dir, vllm_templates_dir};

/// Templates whose rendered calls toolgate does not read back yet, and what the report
/// says (a part of it). A listed template that starts passing fails the test: take it
/// off the list.
const KNOWN_GAPS: &[(&str, &str)] = &[];

/// Templates jinja2 renders no call turn for (the template raised, or renders none),
/// which toolgate's gate nonetheless passes, and why that is right.
const GATE_DIFFERS: &[(&str, &str)] = &[(
    // jinja2's `tojson` fails on the generator the template builds; minijinja (and
    // llama.cpp's engine) render it, and it renders calls there.
    "/llama-cpp-deepseek-r1.jinja",
    "TypeError: Object of type generator is not JSON serializable",
)];

/// The tools and calls `scripts/make-template-fixtures.py` renders.
fn tools() -> Vec<Tool> {
    serde_json::from_value(json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"},
                "days": {"type": "integer", "description": "Days"},
                "metric": {"type": "boolean", "description": "Metric units"}}, "required": ["city", "days"]}}},
        {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string", "description": "Zone"}},
                "required": ["zone"]}}}
    ]))
    .unwrap()
}

fn calls(n: usize) -> Vec<(String, Value)> {
    [("get_weather", json!({"city": "Paris", "days": 3})), ("get_time", json!({"zone": "Europe/Paris"}))]
        .into_iter()
        .take(n)
        .map(|(name, args)| (name.to_string(), args))
        .collect()
}

#[test]
fn every_tool_capable_template_reads_back_the_calls_jinja2_renders() {
    let tools = tools();
    let (mut passed, mut failures, mut table) = (BTreeSet::new(), Vec::new(), Vec::new());
    let mut capable = BTreeSet::new();
    for line in fixture_text("templates/expected-calls.jsonl").lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let (corpus, name, n) = (
            row["corpus"].as_str().unwrap(),
            row["template"].as_str().unwrap(),
            row["calls"].as_u64().unwrap() as usize,
        );
        let dir = if corpus.starts_with("vllm") { vllm_templates_dir() } else { templates_dir() };
        let source = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let setup = inspect(&GgufTemplates { default: Some(source), tool_use: None }, None, None).unwrap();
        let key = format!("{corpus}/{name}");
        let Some(text) = row["text"].as_str() else {
            let why = row["skip"].as_str().unwrap();
            let one_of_two = why.starts_with("renders one call");
            if setup.report.caps.tool_capable() && !one_of_two && n == 1 {
                match GATE_DIFFERS.iter().find(|(t, _)| key.ends_with(t)) {
                    Some(_) => capable.insert(key.clone()),
                    None => {
                        failures.push(format!("{key}: jinja2 renders no call ({why}), yet the gate passes it"));
                        false
                    }
                };
            }
            table.push(format!("{key:70} {n} skipped: {why}"));
            continue;
        };
        // Templates the gate refuses (they render calls but no tool list, as llama.cpp
        // finds too) are read back all the same, and not counted.
        if setup.report.caps.tool_capable() {
            capable.insert(key.clone());
        }
        let verdict = match read_output(&setup, &tools, text) {
            Err(e) => format!("no layout: {e}"),
            Ok(report) => {
                let got: Vec<(String, Value)> = report
                    .tool_calls
                    .iter()
                    .map(|c| (c.function.name.clone(), serde_json::from_str(&c.function.arguments).unwrap()))
                    .collect();
                if got != calls(n) {
                    format!("read {got:?} ({} unparsed): {}", report.unparsed_calls, report.grammar)
                } else if !report.ok {
                    format!("calls read, grammar: {}", report.grammar)
                } else {
                    "ok".into()
                }
            }
        };
        table.push(format!("{key:70} {n} {verdict}"));
        let gap = KNOWN_GAPS.iter().find(|(t, _)| key.ends_with(t));
        match (verdict == "ok", gap) {
            (true, None) => {
                passed.insert(key);
            }
            (true, Some(_)) => failures.push(format!("{key} ({n} calls) passes now: take it off KNOWN_GAPS")),
            (false, Some((_, why))) if verdict.contains(why) => {}
            (false, _) => failures.push(format!("{key} ({n} calls): {verdict}\n    text: {text:?}")),
        }
    }
    // A template passes when every call turn it renders reads back.
    let failed: BTreeSet<String> =
        KNOWN_GAPS.iter().filter_map(|(t, _)| capable.iter().find(|k| k.ends_with(t)).cloned()).collect();
    let passed: Vec<&String> = passed.iter().filter(|k| !failed.contains(*k) && capable.contains(*k)).collect();
    eprintln!("{}", table.join("\n"));
    eprintln!("{} of {} tool-capable templates read back every call turn jinja2 renders", passed.len(), capable.len());
    assert!(failures.is_empty(), "{} not as expected:\n{}", failures.len(), failures.join("\n"));
    assert!(passed.len() >= 60, "only {} templates read back", passed.len());
}
