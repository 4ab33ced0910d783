//! Recognise the tool-call family a template writes, by rendering a known tool call
//! and matching the shape of the output.
//!
//! The table is data: adding a family is one row here (and, with the tool-calling
//! stage, one file in `grammars/`).

use serde_json::json;

use super::render::{ChatTemplate, RenderRequest};
use crate::tools::harmony::HARMONY_REASONING;

/// `(family, markers that must all appear in the rendered call)`, most specific first.
pub const FAMILIES: &[(&str, &[&str])] = &[
    ("gemma4", &["<|tool_call>call:"]),
    ("seed-oss", &["<seed:tool_call>"]),
    ("qwen3-coder", &["<function=", "<parameter="]),
    ("functionary-v3.1", &["<function="]),
    ("kimi-k2", &["<|tool_calls_section_begin|>"]),
    ("deepseek-r1", &["<｜tool▁call▁begin｜>function<｜tool▁sep｜>"]),
    ("deepseek-v3.1", &["<｜tool▁calls▁begin｜>"]),
    ("mistral-v11", &["[TOOL_CALLS]", "[ARGS]"]),
    ("mistral", &["[TOOL_CALLS]"]),
    ("granite", &["<|tool_call|>"]),
    ("functools", &["functools["]),
    ("gpt-oss", &["to=functions."]),
    ("command-r", &["<|START_ACTION|>"]),
    ("apriel", &["<tool_calls>["]),
    ("hermes", &["<tool_call>"]),
    ("llama3-python-tag", &["<|python_tag|>"]),
    ("llama3-json", &["\"parameters\""]),
    ("pythonic", &["[probe_fn(", "=\"needle\")]"]),
];

/// Reasoning-block markers, `(start, end)`, most specific first: a template whose
/// source names both writes (or expects) reasoning that way. Adding a reasoning
/// dialect is one row.
pub const REASONING_MARKERS: &[(&str, &str)] =
    &[("<think>", "</think>"), ("[THINK]", "[/THINK]"), ("<|START_THINKING|>", "<|END_THINKING|>"), HARMONY_REASONING];

/// The reasoning markers of a template, from its source.
///
/// ```
/// use toolgate::template::family::reasoning_markers;
/// assert_eq!(reasoning_markers("{{ '<think>\n' + r + '\n</think>' }}"), Some(("<think>", "</think>")));
/// assert_eq!(reasoning_markers("{{ messages }}"), None);
/// ```
pub fn reasoning_markers(source: &str) -> Option<(&'static str, &'static str)> {
    REASONING_MARKERS.iter().copied().find(|(s, e)| source.contains(s) && source.contains(e))
}

/// The family of `template`, or `"unknown"` when no row matches (or the template
/// cannot render a tool call).
pub fn detect(template: &ChatTemplate) -> &'static str {
    let call = json!({"id": "call_0001", "type": "function", "function": {"name": "probe_fn", "arguments": {"arg": "needle"}}});
    let tool = json!({"type": "function", "function": {"name": "probe_fn", "description": "d",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}});
    let mut req = RenderRequest::new(vec![
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": "", "tool_calls": [call]}),
    ]);
    req.tools = Some(vec![tool]);
    req.add_generation_prompt = false;
    let Ok(out) = template.render(&req) else { return "unknown" };
    let Some(at) = out.rfind("probe_fn") else { return "unknown" };
    // Look at the text around the rendered call only (not the tool list).
    let window = &out[out[..at].char_indices().rev().nth(200).map(|(i, _)| i).unwrap_or(0)..];
    FAMILIES
        .iter()
        .find(|(_, markers)| markers.iter().all(|m| window.contains(m)))
        .map(|(name, _)| *name)
        .unwrap_or("unknown")
}
