//! Judging one task's answer: BFCL's AST rules, schema validity, declared names.
//!
//! The AST rules follow BFCL's `ast_checker`: the function name must match; every
//! required parameter is present; no parameter the function does not declare; each
//! value has the declared type (an integer is accepted where a float is declared) and
//! is one of the accepted values — strings compared after BFCL's standardisation
//! (lower case, without spaces and `,./-_*^`), lists element by element, dicts key by
//! key; a parameter left out must have `""` among its accepted values. Parallel
//! answers match calls to expected calls in any order (greedy, as BFCL does); the
//! number of calls must equal the number expected. With no expected call
//! (irrelevance), the answer is right when it makes no call.

use serde_json::{Map, Value};

use super::tasks::Task;
use crate::tools::ToolCall;

/// How one answer was judged.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Judgement {
    /// BFCL AST accuracy (or irrelevance: no call made).
    pub correct: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// Calls made.
    pub calls: usize,
    /// Calls naming a declared tool.
    pub declared: usize,
    /// Calls whose arguments are valid JSON for their tool's schema.
    pub schema_valid: usize,
}

fn standardize(s: &str) -> String {
    s.chars().filter(|c| !" ,./-_*^".contains(*c)).collect::<String>().to_lowercase().replace('\'', "\"")
}

fn same_value(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::String(a), Value::String(b)) => standardize(a) == standardize(b),
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
            _ => a == b,
        },
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_value(x, y)),
        (Value::Object(a), Value::Object(b)) => dict_matches(a, b).is_ok(),
        (a, b) => a == b,
    }
}

/// A dict value against an expected dict whose values are lists of accepted values
/// (BFCL's nested form) or plain values.
fn dict_matches(got: &Map<String, Value>, want: &Map<String, Value>) -> Result<(), String> {
    for (k, accepted) in want {
        let options: Vec<&Value> = match accepted {
            Value::Array(a) => a.iter().collect(),
            v => vec![v],
        };
        match got.get(k) {
            None if options.iter().any(|o| *o == "") => {}
            None => return Err(format!("missing key `{k}`")),
            Some(v) if options.iter().any(|o| same_value(v, o)) => {}
            Some(v) => return Err(format!("key `{k}`: {v} is not one of {accepted}")),
        }
    }
    if let Some(extra) = got.keys().find(|k| !want.contains_key(*k)) {
        return Err(format!("unexpected key `{extra}`"));
    }
    Ok(())
}

fn type_ok(value: &Value, schema: &Value) -> bool {
    let t = schema["type"].as_str().unwrap_or("any");
    match t {
        "integer" | "byte" | "short" | "long" | "Bigint" => value.is_i64() || value.is_u64(),
        "float" | "number" | "double" => value.is_number(),
        "string" | "char" | "String" => value.is_string(),
        "boolean" | "bool" => value.is_boolean(),
        "array" | "list" | "tuple" | "ArrayList" | "Array" => match value.as_array() {
            Some(items) => schema.get("items").is_none_or(|it| items.iter().all(|v| type_ok(v, it))),
            None => false,
        },
        "dict" | "object" | "HashMap" | "Hashtable" => value.is_object(),
        _ => true,
    }
}

/// One call against one expected call (`{name: {param: [accepted…]}}`).
fn call_matches(doc: &Value, name: &str, args: &Map<String, Value>, expected: &Value) -> Result<(), String> {
    let Some((want_name, want_params)) = expected.as_object().and_then(|o| o.iter().next()) else {
        return Err("malformed expected call".into());
    };
    if name != want_name {
        return Err(format!("called `{name}`, expected `{want_name}`"));
    }
    let props = doc["parameters"]["properties"].as_object().cloned().unwrap_or_default();
    for req in doc["parameters"]["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if !args.contains_key(req) {
            return Err(format!("missing required parameter `{req}`"));
        }
    }
    for (k, v) in args {
        let Some(schema) = props.get(k) else { return Err(format!("unexpected parameter `{k}`")) };
        if !type_ok(v, schema) {
            return Err(format!("parameter `{k}`: {v} is not of type {}", schema["type"]));
        }
    }
    let want = want_params.as_object().cloned().unwrap_or_default();
    for (k, accepted) in &want {
        let options = accepted.as_array().cloned().unwrap_or_else(|| vec![accepted.clone()]);
        match args.get(k) {
            None if options.iter().any(|o| o == "") => {}
            None => return Err(format!("optional parameter `{k}` not provided")),
            Some(v) if options.iter().any(|o| same_value(v, o)) => {}
            Some(v) => return Err(format!("parameter `{k}`: {v} is not one of {accepted}")),
        }
    }
    Ok(())
}

/// Judge the calls a model made on `task`. `validators` holds, per tool name, a
/// compiled validator of its (converted) parameter schema.
pub fn judge(
    task: &Task,
    calls: &[ToolCall],
    validators: &std::collections::HashMap<String, jsonschema::Validator>,
) -> Judgement {
    let mut j = Judgement { calls: calls.len(), ..Judgement::default() };
    let mut parsed: Vec<(String, Option<Map<String, Value>>)> = Vec::new();
    for c in calls {
        let args: Option<Value> = serde_json::from_str(&c.function.arguments).ok();
        if let Some(v) = validators.get(&c.function.name) {
            j.declared += 1;
            if args.as_ref().is_some_and(|a| v.is_valid(a)) {
                j.schema_valid += 1;
            }
        }
        parsed.push((c.function.name.clone(), args.and_then(|a| a.as_object().cloned())));
    }
    if task.expects_no_call() {
        j.correct = calls.is_empty();
        if !j.correct {
            j.error = Some(format!("{} call(s) made where no tool fits", calls.len()));
        }
        return j;
    }
    if calls.len() != task.expected.len() {
        j.error = Some(format!("{} call(s), expected {}", calls.len(), task.expected.len()));
        return j;
    }
    let doc_of = |name: &str| task.docs.iter().find(|d| d["name"] == name).cloned().unwrap_or(Value::Null);
    let mut used = vec![false; parsed.len()];
    for want in &task.expected {
        let mut last = String::from("no call left");
        let mut found = false;
        for (i, (name, args)) in parsed.iter().enumerate() {
            if used[i] {
                continue;
            }
            let Some(args) = args else {
                last = format!("arguments of `{name}` are not a JSON object");
                continue;
            };
            match call_matches(&doc_of(name), name, args, want) {
                Ok(()) => {
                    used[i] = true;
                    found = true;
                    break;
                }
                Err(e) => last = e,
            }
        }
        if !found {
            j.error = Some(last);
            return j;
        }
    }
    j.correct = true;
    j
}
