//! Bench tasks: the Berkeley Function Calling Leaderboard's data files and
//! toolgate's own task format, loaded into one [`Task`] type.
//!
//! **BFCL** (`bfcl_eval/data/BFCL_v4_{category}.json` with
//! `possible_answer/BFCL_v4_{category}.json`, JSON lines): `question` is a list of turns
//! of OpenAI messages (single-turn categories use the first), `function` the function
//! docs in BFCL's dialect of JSON Schema (`dict`, `float`, `tuple`, `any` …), which
//! [`to_openai_schema`] converts; `ground_truth` is a list of calls
//! `{name: {param: [accepted values…]}}`, where `""` among the accepted values means
//! the parameter may be left out.
//!
//! **Own format** (JSON lines), the same ground-truth shape with OpenAI tools:
//!
//! ```json
//! {"id": "weather_1", "category": "simple",
//!  "messages": [{"role": "user", "content": "Weather in Paris?"}],
//!  "tools": [{"type": "function", "function": {"name": "get_weather",
//!             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
//!                            "required": ["city"]}}}],
//!  "expected": [{"get_weather": {"city": ["Paris", "paris, france"]}}]}
//! ```
//!
//! `"expected": []` means no tool fits and the right answer is no call (like BFCL's
//! `irrelevance`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::tools::{FunctionDef, Tool};
use crate::{Error, Result};

/// The BFCL categories the bench runs by default.
pub const BFCL_CATEGORIES: &[&str] = &["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"];

/// One bench task.
#[derive(Debug, Clone)]
pub struct Task {
    /// Task id (BFCL's, or the file's).
    pub id: String,
    /// Category (BFCL's name, or the file's).
    pub category: String,
    /// The conversation, OpenAI messages.
    pub messages: Vec<Value>,
    /// The tools offered, OpenAI shape.
    pub tools: Vec<Tool>,
    /// The function docs as written by the task (BFCL types), for the AST checker.
    pub docs: Vec<Value>,
    /// Accepted calls, `[{name: {param: [values…]}}]`; empty: no call is right.
    pub expected: Vec<Value>,
}

impl Task {
    /// Whether the right answer is to call no tool.
    pub fn expects_no_call(&self) -> bool {
        self.expected.is_empty()
    }
}

fn bad(path: &Path, line: usize, reason: impl std::fmt::Display) -> Error {
    Error::InvalidParameter { name: "tasks", reason: format!("{}:{line}: {reason}", path.display()) }
}

fn read_lines(path: &Path) -> Result<Vec<(usize, Value)>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io { path: path.to_path_buf(), source: e })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| bad(path, i + 1, e))?;
        out.push((i + 1, v));
    }
    Ok(out)
}

/// BFCL's type names → JSON Schema type (as BFCL's own OpenAI conversion maps them).
fn openai_type(t: &str) -> Option<&'static str> {
    Some(match t {
        "integer" | "byte" | "short" | "long" | "Bigint" => "integer",
        "number" | "float" | "double" => "number",
        "string" | "char" | "String" => "string",
        "boolean" | "bool" => "boolean",
        "array" | "list" | "tuple" | "ArrayList" | "Array" | "Queue" | "Stack" => "array",
        "dict" | "object" | "HashMap" | "Hashtable" => "object",
        _ => return None, // "any": no type constraint
    })
}

/// Convert a BFCL parameter schema to JSON Schema: `dict` → `object`, `float` →
/// `number`, `tuple` → `array`, `any` → no `type`, recursively through `properties`
/// and `items`. Keywords BFCL adds that JSON Schema lacks (`optional`) are dropped.
///
/// ```
/// use serde_json::json;
/// let s = toolgate::bench::tasks::to_openai_schema(&json!(
///     {"type": "dict", "properties": {"x": {"type": "float"}, "v": {"type": "tuple", "items": {"type": "any"}}}}));
/// assert_eq!(s, json!({"type": "object", "properties": {"x": {"type": "number"}, "v": {"type": "array", "items": {}}}}));
/// ```
pub fn to_openai_schema(v: &Value) -> Value {
    let Value::Object(o) = v else { return v.clone() };
    let mut out = Map::new();
    for (k, val) in o {
        match k.as_str() {
            "type" => {
                if let Some(t) = val.as_str().and_then(openai_type) {
                    out.insert("type".into(), Value::from(t));
                }
            }
            "properties" => {
                let props = val
                    .as_object()
                    .map(|p| p.iter().map(|(n, s)| (n.clone(), to_openai_schema(s))).collect::<Map<_, _>>())
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" => {
                out.insert(k.clone(), to_openai_schema(val));
            }
            "optional" => {}
            _ => {
                out.insert(k.clone(), val.clone());
            }
        }
    }
    Value::Object(out)
}

fn tool_from_doc(doc: &Value) -> Option<Tool> {
    let name = doc["name"].as_str()?.to_string();
    let description = doc["description"].as_str().map(str::to_string);
    let parameters = to_openai_schema(&doc["parameters"]);
    Some(Tool { kind: "function".into(), function: FunctionDef { name, description, parameters, strict: None } })
}

/// Where `scripts/fetch-bfcl` puts the BFCL data (`TOOLGATE_BFCL` overrides).
pub fn default_bfcl_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TOOLGATE_BFCL").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
    cache.join("toolgate").join("bfcl")
}

/// Load one BFCL category from `dir` (the `bfcl_eval/data` folder).
///
/// Cost: reads two JSON-lines files (a few hundred KB).
///
/// # Errors
/// [`Error::Io`] when a file is missing (run `scripts/fetch-bfcl`);
/// [`Error::InvalidParameter`] naming the file and line of a malformed entry.
pub fn load_bfcl(dir: &Path, category: &str) -> Result<Vec<Task>> {
    let questions = read_lines(&dir.join(format!("BFCL_v4_{category}.json")))?;
    let answers_path = dir.join("possible_answer").join(format!("BFCL_v4_{category}.json"));
    let answers: HashMap<String, Value> = if answers_path.exists() {
        read_lines(&answers_path)?
            .into_iter()
            .filter_map(|(_, v)| Some((v["id"].as_str()?.to_string(), v["ground_truth"].clone())))
            .collect()
    } else {
        HashMap::new()
    };
    let path = dir.join(format!("BFCL_v4_{category}.json"));
    let mut tasks = Vec::new();
    for (line, q) in questions {
        let id = q["id"].as_str().ok_or_else(|| bad(&path, line, "no id"))?.to_string();
        let messages = q["question"][0].as_array().cloned().ok_or_else(|| bad(&path, line, "no question"))?;
        let docs = q["function"].as_array().cloned().ok_or_else(|| bad(&path, line, "no function list"))?;
        let tools = docs
            .iter()
            .map(|d| tool_from_doc(d).ok_or_else(|| bad(&path, line, "function without a name")))
            .collect::<Result<Vec<_>>>()?;
        let expected = match answers.get(&id) {
            Some(Value::Array(a)) => a.clone(),
            Some(_) => return Err(bad(&answers_path, 0, format!("{id}: ground_truth is not a list"))),
            None if category.contains("irrelevance") => Vec::new(),
            None => return Err(bad(&answers_path, 0, format!("no answer for {id}"))),
        };
        tasks.push(Task { id, category: category.to_string(), messages, tools, docs, expected });
    }
    Ok(tasks)
}

/// Load a task file in toolgate's own format (see the module docs).
///
/// # Errors
/// [`Error::Io`]; [`Error::InvalidParameter`] naming the line of a malformed task.
pub fn load_file(path: &Path) -> Result<Vec<Task>> {
    let mut tasks = Vec::new();
    for (line, v) in read_lines(path)? {
        let id = v["id"].as_str().map(str::to_string).unwrap_or_else(|| format!("line_{line}"));
        let category = v["category"].as_str().unwrap_or("tasks").to_string();
        let messages = v["messages"].as_array().cloned().ok_or_else(|| bad(path, line, "`messages` must be a list"))?;
        let tools: Vec<Tool> =
            serde_json::from_value(v["tools"].clone()).map_err(|e| bad(path, line, format!("`tools`: {e}")))?;
        let expected = v["expected"].as_array().cloned().ok_or_else(|| bad(path, line, "`expected` must be a list"))?;
        let docs = tools.iter().map(|t| serde_json::to_value(&t.function).unwrap_or_default()).collect();
        tasks.push(Task { id, category, messages, tools, docs, expected });
    }
    Ok(tasks)
}
