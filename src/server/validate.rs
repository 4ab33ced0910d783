//! Typed reads of request fields: a field that is present must have the type and
//! range its API gives it, or the request is a 400 naming it. A careless client
//! (`max_tokens: "10"`, `messages: [42]`, an image the model cannot see) learns what
//! it sent wrong instead of getting an answer to a different request.

use serde_json::{Map, Value};

use super::ApiError;
use crate::tools::Tool;

type Fields = Map<String, Value>;

fn bad(message: String, param: &str) -> ApiError {
    ApiError::bad(message, Some(param))
}

/// An optional boolean (absent or `null`: `None`).
pub(crate) fn opt_bool(obj: &Fields, name: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(bad(format!("`{name}` must be a boolean, not {v}"), name)),
    }
}

/// An optional number within `min..=max`.
pub(crate) fn opt_number(obj: &Fields, name: &str, min: f64, max: f64) -> Result<Option<f64>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (min..=max).contains(&x) => Ok(Some(x)),
            _ => Err(bad(format!("`{name}` must be a number from {min} to {max}, not {v}"), name)),
        },
    }
}

/// An optional integer within `min..=max` (a JSON number with no fraction: `10` and
/// `10.0` are 10; `1.5`, `"10"` and `-1` for `min` 0 are refused).
pub(crate) fn opt_int(obj: &Fields, name: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
    let v = match obj.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let int = v.as_i64().or_else(|| v.as_f64().filter(|x| x.fract() == 0.0 && x.abs() < 9e15).map(|x| x as i64));
    match int {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(bad(format!("`{name}` must be an integer from {min} to {max}, not {v}"), name)),
    }
}

/// An optional string.
pub(crate) fn opt_str<'a>(obj: &'a Fields, name: &str) -> Result<Option<&'a str>, ApiError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(bad(format!("`{name}` must be a string, not {v}"), name)),
    }
}

/// Stop strings: absent, one string or an array of strings (`allow_single`), at most 16.
pub(crate) fn stop_strings(obj: &Fields, name: &str, allow_single: bool) -> Result<Vec<String>, ApiError> {
    let shape = if allow_single { "a string or an array of strings" } else { "an array of strings" };
    let list = match obj.get(name) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) if allow_single => return Ok(vec![s.clone()]),
        Some(Value::Array(a)) if a.len() <= 16 => a,
        Some(v) => return Err(bad(format!("`{name}` must be {shape} (at most 16), not {v}"), name)),
    };
    list.iter()
        .map(|s| match s {
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            v => Err(bad(format!("`{name}` must be {shape} of non-empty strings; found {v}"), name)),
        })
        .collect()
}

/// Content parts that carry something other than text.
const MEDIA_PARTS: [&str; 7] = ["image_url", "image", "input_image", "input_audio", "audio", "file", "document"];

/// The refusal for a media part: the model reads text only.
pub(crate) fn text_only(at: &str, kind: &str) -> String {
    format!("{at}: this model takes text only; a content part of type `{kind}` cannot be read")
}

/// OpenAI chat `messages`: objects with a known `role`, `content` a string, an array
/// of `text` parts or (assistant with `tool_calls`, or any role when empty) `null`;
/// assistant `tool_calls` with a function name. Media parts are refused as such.
pub(crate) fn openai_messages(messages: &[Value]) -> Result<(), ApiError> {
    const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Some(obj) = m.as_object() else {
            return Err(bad(format!("{at} must be an object with `role` and `content`, not {m}"), "messages"));
        };
        let role = match obj.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
            Some(v) => {
                return Err(bad(format!("{at}.role must be one of {}, not {v}", ROLES.join(", ")), "messages"));
            }
            None => return Err(bad(format!("{at}.role is missing"), "messages")),
        };
        let has_calls = obj.get("tool_calls").is_some_and(|c| !c.is_null());
        match obj.get("content") {
            Some(Value::String(_)) => {}
            None | Some(Value::Null) if role == "assistant" => {}
            None | Some(Value::Null) => {
                return Err(bad(format!("{at}.content is missing ({role} message)"), "messages"))
            }
            Some(Value::Array(parts)) => {
                for (j, p) in parts.iter().enumerate() {
                    let at = format!("{at}.content[{j}]");
                    match p.get("type").and_then(Value::as_str) {
                        Some("text") | Some("input_text") if p.get("text").is_some_and(Value::is_string) => {}
                        Some("text") | Some("input_text") => {
                            return Err(bad(format!("{at}.text must be a string"), "messages"))
                        }
                        // An assistant's refusal part is its text.
                        Some("refusal") if role == "assistant" => {}
                        Some(kind) if MEDIA_PARTS.contains(&kind) => return Err(bad(text_only(&at, kind), "messages")),
                        Some(kind) => {
                            return Err(bad(
                                format!("{at}: unknown content part type `{kind}` (text only)"),
                                "messages",
                            ))
                        }
                        None => return Err(bad(format!("{at} must be an object with a `type`"), "messages")),
                    }
                }
            }
            Some(v) => {
                return Err(bad(
                    format!("{at}.content must be a string or an array of content parts, not {v}"),
                    "messages",
                ))
            }
        }
        if let Some(call) = obj.get("function_call").filter(|c| !c.is_null()) {
            // OpenAI's legacy function calling: rendered as a one-call `tool_calls`.
            if role != "assistant" {
                return Err(bad(format!("{at}.function_call is only read on an assistant message"), "messages"));
            }
            if call.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(bad(format!("{at}.function_call.name is missing"), "messages"));
            }
            if let Some(a) = call.get("arguments").filter(|a| !a.is_string() && !a.is_object()) {
                return Err(bad(format!("{at}.function_call.arguments must be a JSON string, not {a}"), "messages"));
            }
        }
        if role == "function" && obj.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(bad(
                format!("{at}.name is missing (a `function` message names the function it answers)"),
                "messages",
            ));
        }
        if has_calls {
            let Some(calls) = obj.get("tool_calls").and_then(Value::as_array).filter(|_| role == "assistant") else {
                return Err(bad(format!("{at}.tool_calls must be an array on an assistant message"), "messages"));
            };
            for (j, c) in calls.iter().enumerate() {
                let name = c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default();
                if name.is_empty() {
                    return Err(bad(format!("{at}.tool_calls[{j}].function.name is missing"), "messages"));
                }
                if let Some(a) = c.pointer("/function/arguments").filter(|a| !a.is_string() && !a.is_object()) {
                    return Err(bad(
                        format!("{at}.tool_calls[{j}].function.arguments must be a JSON string, not {a}"),
                        "messages",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Tool declarations: type `function`, a name of 1 to 128 characters with no
/// whitespace or control characters, each name once, a schema that is an object or a
/// boolean.
pub(crate) fn tools(tools: &[Tool], param: &str) -> Result<(), ApiError> {
    let mut seen = std::collections::HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        if t.kind != "function" {
            return Err(bad(format!("{at}.type must be \"function\", not {:?}", t.kind), param));
        }
        let name = &t.function.name;
        if name.is_empty() || name.chars().count() > 128 || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(
                format!(
                    "{at}: the tool name {name:?} must be 1 to 128 characters without spaces or control characters"
                ),
                param,
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(bad(format!("{at}: the tool name {name:?} is declared twice"), param));
        }
        if !(t.function.parameters.is_object() || t.function.parameters.is_boolean()) {
            return Err(bad(format!("{at}: the parameters schema must be a JSON object"), param));
        }
    }
    Ok(())
}
