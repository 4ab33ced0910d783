//! Request-side transforms that make a conversation acceptable to a template: OpenAI's
//! `developer` role and legacy `function` messages mapped to the roles the template
//! knows, folding the system message into the first user turn when the template has
//! no system role, and merging consecutive same-role messages when it demands strict
//! user/assistant alternation.
//!
//! Whether a template needs them is decided from three sources, in this order of
//! authority: positive signals in the template text (`[SYSTEM_PROMPT]`,
//! `[AVAILABLE_TOOLS]`), negative signals ("System role not supported",
//! "Conversation roles must alternate") together with the prober's result, and an
//! architecture registry for GGUFs that carry no template.

use serde::Serialize;
use serde_json::Value;

/// Signals read from a template's source text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TemplateSignals {
    /// The template names a system slot (`[SYSTEM_PROMPT]`, `[AVAILABLE_TOOLS]`).
    pub system_positive: bool,
    /// The template refuses system messages ("System role not supported").
    pub system_negative: bool,
    /// The template refuses non-alternating turns ("Conversation roles must alternate").
    pub strict_turns: bool,
    /// The template names the `developer` role itself (a quoted `'developer'`, as
    /// gpt-oss, Gemma 4 and DeepSeek V3.2+ do): such messages reach it as they are.
    pub developer_role: bool,
}

/// Scan template source for the signals.
///
/// ```
/// use toolgate::template::transform::signals;
/// let s = signals("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}");
/// assert!(s.strict_turns && !s.system_positive);
/// ```
pub fn signals(source: &str) -> TemplateSignals {
    let lower = source.to_lowercase();
    TemplateSignals {
        system_positive: source.contains("[SYSTEM_PROMPT]") || source.contains("[AVAILABLE_TOOLS]"),
        system_negative: lower.contains("system role not supported"),
        strict_turns: lower.contains("conversation roles must alternate"),
        developer_role: source.contains("'developer'") || source.contains("\"developer\""),
    }
}

/// What the conversation must look like for this template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ConversationPolicy {
    /// The template renders a `system` message.
    pub system_role: bool,
    /// Consecutive messages of the same role must be merged.
    pub strict_alternation: bool,
    /// The template renders `developer` messages itself; otherwise they are system
    /// messages (what OpenAI's SDKs and agent frameworks send instructions as).
    pub developer_role: bool,
}

/// Architecture backstop for files without a template (or without signals).
///
/// Returns `(system_role, strict_alternation)`.
pub fn arch_policy(arch: &str) -> Option<(bool, bool)> {
    match arch {
        "mistral" => Some((false, true)),
        "mistral3" => Some((true, true)),
        _ => None,
    }
}

/// Combine the prober's `supports_system_role`, the template signals and the
/// architecture backstop. Positive signals win over negative ones.
pub fn policy(
    probed_system_role: bool,
    sig: TemplateSignals,
    arch: Option<&str>,
    has_template: bool,
) -> ConversationPolicy {
    let backstop = if has_template { None } else { arch.and_then(arch_policy) };
    let system_role = if sig.system_positive {
        true
    } else if sig.system_negative {
        false
    } else if let Some((sys, _)) = backstop {
        sys
    } else {
        probed_system_role
    };
    let strict_alternation = sig.strict_turns || backstop.is_some_and(|(_, strict)| strict);
    ConversationPolicy { system_role, strict_alternation, developer_role: sig.developer_role }
}

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| {
                if p.get("type").and_then(Value::as_str) == Some("text") {
                    p.get("text").and_then(Value::as_str)
                } else {
                    None
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Apply `policy` to OpenAI-style messages.
///
/// * roles: `developer` becomes `system` unless the template knows the developer role;
///   OpenAI's legacy function calling (an assistant `function_call`, then a `function`
///   message with the result) becomes a one-call `tool_calls` and a `tool` message
///   answering it, so every message a client sends reaches the template;
/// * no system role: system messages are removed and their text is prepended to the
///   first user message (separated by a blank line), or becomes a user message if
///   there is none;
/// * strict alternation: consecutive `user` (or `assistant` without tool calls)
///   messages are merged with a blank line between their texts.
///
/// ```
/// use serde_json::json;
/// use toolgate::template::transform::{apply, ConversationPolicy};
/// let msgs = vec![json!({"role":"system","content":"Be brief."}), json!({"role":"user","content":"Hi"}),
///                 json!({"role":"user","content":"Still there?"})];
/// let out = apply(msgs, ConversationPolicy { system_role: false, strict_alternation: true, developer_role: false });
/// assert_eq!(out, vec![json!({"role":"user","content":"Be brief.\n\nHi\n\nStill there?"})]);
///
/// let legacy = vec![json!({"role":"developer","content":"Answer in French."}), json!({"role":"user","content":"Weather?"}),
///     json!({"role":"assistant","content":null,"function_call":{"name":"get_weather","arguments":"{}"}}),
///     json!({"role":"function","name":"get_weather","content":"15 C"})];
/// let out = apply(legacy, ConversationPolicy { system_role: true, strict_alternation: false, developer_role: false });
/// assert_eq!(out[0]["role"], "system");
/// assert_eq!(out[2]["tool_calls"][0]["function"]["name"], "get_weather");
/// assert_eq!(out[3], json!({"role":"tool","name":"get_weather","content":"15 C","tool_call_id":out[2]["tool_calls"][0]["id"]}));
/// ```
pub fn apply(messages: Vec<Value>, policy: ConversationPolicy) -> Vec<Value> {
    let mut msgs = openai_roles(messages, policy.developer_role);
    if !policy.system_role {
        let system: Vec<String> = msgs
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .map(|m| content_text(m.get("content").unwrap_or(&Value::Null)))
            .collect();
        if !system.is_empty() {
            msgs.retain(|m| m.get("role").and_then(Value::as_str) != Some("system"));
            let sys = system.join("\n\n");
            match msgs.iter_mut().find(|m| m.get("role").and_then(Value::as_str) == Some("user")) {
                Some(first_user) => {
                    let text = content_text(first_user.get("content").unwrap_or(&Value::Null));
                    first_user["content"] = Value::String(format!("{sys}\n\n{text}"));
                }
                None => msgs.insert(0, serde_json::json!({"role": "user", "content": sys})),
            }
        }
    }
    if policy.strict_alternation {
        let mut merged: Vec<Value> = Vec::with_capacity(msgs.len());
        for m in msgs {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("").to_string();
            let mergeable = |x: &Value| {
                (role == "user" || role == "assistant")
                    && x.get("tool_calls").is_none_or(|t| t.is_null())
                    && m.get("tool_calls").is_none_or(|t| t.is_null())
            };
            if let Some(prev) = merged.last_mut() {
                if prev.get("role").and_then(Value::as_str) == Some(role.as_str()) && mergeable(prev) {
                    let a = content_text(prev.get("content").unwrap_or(&Value::Null));
                    let b = content_text(m.get("content").unwrap_or(&Value::Null));
                    prev["content"] = Value::String(format!("{a}\n\n{b}"));
                    continue;
                }
            }
            merged.push(m);
        }
        msgs = merged;
    }
    msgs
}

/// `developer` → `system` (unless the template keeps it), legacy `function_call` /
/// `function` → `tool_calls` / `tool` (see [`apply`]). The ids given to legacy calls
/// are `call_legacy_N`, N counting legacy calls in the conversation; a `function`
/// message answers the latest legacy call of its name.
fn openai_roles(messages: Vec<Value>, developer_role: bool) -> Vec<Value> {
    let mut legacy: Vec<(String, String)> = Vec::new();
    messages
        .into_iter()
        .map(|mut m| {
            let Some(obj) = m.as_object_mut() else { return m };
            match obj.get("role").and_then(Value::as_str) {
                Some("developer") if !developer_role => {
                    obj.insert("role".into(), "system".into());
                }
                Some("assistant") => {
                    if let Some(call) = obj.remove("function_call").filter(|c| !c.is_null()) {
                        let name = call.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                        let id = format!("call_legacy_{}", legacy.len());
                        legacy.push((name, id.clone()));
                        let calls = obj.entry("tool_calls").or_insert_with(|| Value::Array(Vec::new()));
                        if let Value::Array(list) = calls {
                            list.push(serde_json::json!({"id": id, "type": "function", "function": call}));
                        }
                    }
                }
                Some("function") => {
                    obj.insert("role".into(), "tool".into());
                    let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
                    if let Some((_, id)) = legacy.iter().rev().find(|(n, _)| n == name) {
                        obj.insert("tool_call_id".into(), Value::String(id.clone()));
                    }
                }
                _ => {}
            }
            m
        })
        .collect()
}

/// Shape message fields the way the template's capabilities need them:
///
/// * tool-call `arguments` become JSON objects when the template renders object
///   arguments (OpenAI clients send them as JSON strings), and stay strings otherwise;
/// * content given as typed parts is flattened to text unless the template requires
///   typed parts, and string content is wrapped as `[{"type":"text"}]` when it does.
///
/// ```
/// use serde_json::json;
/// use toolgate::template::transform::shape_fields;
/// let m = vec![json!({"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]})];
/// let out = shape_fields(m, true, false);
/// assert_eq!(out[0]["tool_calls"][0]["function"]["arguments"], json!({"a": 1}));
/// ```
pub fn shape_fields(messages: Vec<Value>, object_arguments: bool, typed_content: bool) -> Vec<Value> {
    messages
        .into_iter()
        .map(|mut m| {
            if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for c in calls {
                    let Some(args) = c.get_mut("function").and_then(|f| f.get_mut("arguments")) else { continue };
                    match (&*args, object_arguments) {
                        (Value::String(s), true) => {
                            if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s) {
                                *args = v;
                            }
                        }
                        (Value::Object(_), false) => *args = Value::String(args.to_string()),
                        _ => {}
                    }
                }
            }
            if let Some(content) = m.get_mut("content") {
                match (&*content, typed_content) {
                    (Value::Array(_), false) => *content = Value::String(content_text(content)),
                    (Value::String(s), true) => *content = serde_json::json!([{"type": "text", "text": s}]),
                    _ => {}
                }
            }
            m
        })
        .collect()
}
