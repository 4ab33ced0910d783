//! The capability prober: what a chat template can do, decided by running it.
//!
//! Like llama.cpp's `common/jinja/caps.cpp`, the template is rendered on small sample
//! conversations; the messages and tools are passed as [`Tracked`] values that record
//! every field the template reads, and the rendered text is searched for the sample
//! values ("needles"). A flag is true when the template both reads the relevant field
//! and renders it; every flag carries the reason (probe, what was read, what was
//! rendered, or the error the template raised).
//!
//! ```
//! use toolgate::template::{caps::probe, ChatTemplate};
//! let t = ChatTemplate::new("chatml", toolgate::template::source::CHATML)?;
//! let caps = probe(&t).caps;
//! assert!(caps.supports_system_role && !caps.supports_tools);
//! # Ok::<(), toolgate::Error>(())
//! ```

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use minijinja::value::{Enumerator, Object, ObjectRepr, Value};
use serde::Serialize;
use serde_json::json;

use super::render::ChatTemplate;

/// A JSON value exposed to a template that logs which paths are read.
#[derive(Debug)]
pub struct Tracked {
    value: serde_json::Value,
    path: String,
    log: Arc<Mutex<BTreeSet<String>>>,
}

impl Tracked {
    /// Wrap `value` (named `root` in the log).
    pub fn root(value: serde_json::Value, root: &str, log: Arc<Mutex<BTreeSet<String>>>) -> Value {
        Self::child(value, root.to_string(), &log)
    }

    fn child(value: serde_json::Value, path: String, log: &Arc<Mutex<BTreeSet<String>>>) -> Value {
        match value {
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
                Value::from_object(Tracked { value, path, log: log.clone() })
            }
            other => Value::from(minijinja::value::Serde(other)),
        }
    }

    fn record(&self, p: String) {
        if let Ok(mut l) = self.log.lock() {
            l.insert(p);
        }
    }
}

impl Object for Tracked {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        if self.value.is_array() {
            ObjectRepr::Seq
        } else {
            ObjectRepr::Map
        }
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match &self.value {
            serde_json::Value::Object(m) => {
                let k = key.as_str()?;
                let p = format!("{}.{k}", self.path);
                let v = m.get(k).cloned();
                self.record(if v.is_some() { p.clone() } else { format!("{p}?") });
                v.map(|v| Self::child(v, p, &self.log))
            }
            serde_json::Value::Array(a) => {
                let i = i64::try_from(key.clone()).ok()?;
                let idx = if i < 0 { a.len() as i64 + i } else { i };
                let v = a.get(usize::try_from(idx).ok()?)?.clone();
                let p = format!("{}[{idx}]", self.path);
                self.record(p.clone());
                Some(Self::child(v, p, &self.log))
            }
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.record(format!("{}[*]", self.path));
        match &self.value {
            serde_json::Value::Object(m) => Enumerator::Values(m.keys().map(|k| Value::from(k.as_str())).collect()),
            serde_json::Value::Array(a) => Enumerator::Seq(a.len()),
            _ => Enumerator::NonEnumerable,
        }
    }
}

/// The capability flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Caps {
    /// Renders the `tools` list given to it.
    pub supports_tools: bool,
    /// Renders assistant `tool_calls`.
    pub supports_tool_calls: bool,
    /// Renders a `system` message.
    pub supports_system_role: bool,
    /// Renders two tool calls in one assistant message.
    pub supports_parallel_tool_calls: bool,
    /// Renders tool-call `arguments` given as a JSON object.
    pub supports_object_arguments: bool,
    /// Renders an assistant's `reasoning_content`.
    pub supports_preserve_reasoning: bool,
    /// Renders string message content.
    pub supports_string_content: bool,
    /// Needs typed content parts (`[{"type":"text",…}]`): renders them but not strings.
    pub supports_typed_content: bool,
    /// Reads a `reasoning_effort` variable: the prompt differs between `low` and `high`
    /// (gpt-oss's `Reasoning: high`), so a request's `reasoning_effort` reaches the model.
    pub supports_reasoning_effort: bool,
}

impl Caps {
    /// The load gate: tools and tool calls.
    pub fn tool_capable(&self) -> bool {
        self.supports_tools && self.supports_tool_calls
    }
}

/// Flags plus, per flag, why.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    /// The flags.
    pub caps: Caps,
    /// `flag name → reason`.
    pub reasons: std::collections::BTreeMap<&'static str, String>,
}

const USER_NEEDLE: &str = "<User Needle>";
const SYSTEM_NEEDLE: &str = "<System Needle>";
const TOOL_NAME: &str = "probe_tool_needle";
const TOOL_NAME_2: &str = "probe_tool_needle_two";
const ARG_NAME: &str = "arg_needle";
const ARG_VALUE: &str = "value_needle";
const REASONING_NEEDLE: &str = "<Reasoning Needle>";

fn sample_tool(name: &str) -> serde_json::Value {
    json!({"type": "function", "function": {
        "name": name,
        "description": "A tool the capability probe offers.",
        "parameters": {"type": "object", "properties": {ARG_NAME: {"type": "string", "description": "An argument."}}, "required": [ARG_NAME]}
    }})
}

fn tool_call(id: &str, name: &str, object_args: bool) -> serde_json::Value {
    let args =
        if object_args { json!({ARG_NAME: ARG_VALUE}) } else { json!(format!("{{\"{ARG_NAME}\": \"{ARG_VALUE}\"}}")) };
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
}

struct Outcome {
    output: Result<String, String>,
    reads: BTreeSet<String>,
}

impl Outcome {
    fn contains(&self, needle: &str) -> bool {
        self.output.as_ref().is_ok_and(|o| o.contains(needle))
    }
    fn read(&self, prefix: &str) -> bool {
        self.reads.iter().any(|r| r.starts_with(prefix) && !r.ends_with('?'))
    }
    fn describe(&self) -> String {
        match &self.output {
            Err(e) => format!("rendering failed: {e}"),
            Ok(_) => String::new(),
        }
    }
}

fn run(t: &ChatTemplate, messages: serde_json::Value, tools: Option<serde_json::Value>, gen_prompt: bool) -> Outcome {
    let log = Arc::new(Mutex::new(BTreeSet::new()));
    let ctx = minijinja::context! {
        messages => Tracked::root(messages, "messages", log.clone()),
        tools => tools.map(|t| Tracked::root(t, "tools", log.clone())).unwrap_or(Value::UNDEFINED),
        add_generation_prompt => gen_prompt,
        bos_token => "<BOS>",
        eos_token => "<EOS>",
    };
    let output = t.render_value(ctx).map_err(|e| e.to_string());
    let reads = log.lock().map(|l| l.clone()).unwrap_or_default();
    Outcome { output, reads }
}

fn user(content: serde_json::Value) -> serde_json::Value {
    json!({"role": "user", "content": content})
}

/// Probe `template`. Cost: ten bounded renders (typically a few ms in all).
pub fn probe(template: &ChatTemplate) -> ProbeReport {
    let mut reasons = std::collections::BTreeMap::new();
    let mut caps = Caps::default();
    let why = |ok: bool, probe: &str, detail: String| format!("{} — {probe}: {detail}", if ok { "yes" } else { "no" });

    // Content: a plain string, then typed parts.
    let s = run(template, json!([user(json!(USER_NEEDLE))]), None, true);
    caps.supports_string_content = s.contains(USER_NEEDLE);
    reasons.insert(
        "supports_string_content",
        why(
            caps.supports_string_content,
            "user message with string content",
            match s.contains(USER_NEEDLE) {
                true => "the content was rendered".into(),
                false if s.output.is_err() => s.describe(),
                false => format!(
                    "content {} but not rendered",
                    if s.read("messages[0].content") { "read" } else { "never read" }
                ),
            },
        ),
    );
    let typed = run(template, json!([user(json!([{"type": "text", "text": USER_NEEDLE}]))]), None, true);
    let typed_ok = typed.contains(USER_NEEDLE);
    caps.supports_typed_content = typed_ok && !caps.supports_string_content;
    reasons.insert(
        "supports_typed_content",
        why(
            caps.supports_typed_content,
            "user message with content [{type: text}] (set only when typed parts are required)",
            format!(
                "typed parts {}; string content {}",
                if typed_ok { "rendered" } else { "not rendered" },
                if caps.supports_string_content { "also rendered, so not required" } else { "not rendered" }
            ),
        ),
    );

    // System role.
    let sys =
        run(template, json!([{"role": "system", "content": SYSTEM_NEEDLE}, user(json!(USER_NEEDLE))]), None, true);
    caps.supports_system_role = sys.contains(SYSTEM_NEEDLE);
    reasons.insert(
        "supports_system_role",
        why(
            caps.supports_system_role,
            "system + user",
            if caps.supports_system_role {
                "the system text was rendered".into()
            } else if sys.output.is_err() {
                sys.describe()
            } else {
                "the system text was not rendered".into()
            },
        ),
    );

    // Tools offered.
    let tl = run(template, json!([user(json!(USER_NEEDLE))]), Some(json!([sample_tool(TOOL_NAME)])), true);
    let tools_read = tl.read("tools[0].");
    caps.supports_tools = tools_read && tl.contains(TOOL_NAME);
    reasons.insert(
        "supports_tools",
        why(
            caps.supports_tools,
            "user message with one tool",
            if tl.output.is_err() {
                tl.describe()
            } else {
                format!(
                    "tools[0] {}; its name {}",
                    if tools_read { "read" } else { "never read" },
                    if tl.contains(TOOL_NAME) { "rendered" } else { "not rendered" }
                )
            },
        ),
    );

    // Tool calls, object then string arguments.
    let call_conv = |calls: serde_json::Value| {
        json!([
            user(json!(USER_NEEDLE)),
            {"role": "assistant", "content": "", "tool_calls": calls},
        ])
    };
    let tools = Some(json!([sample_tool(TOOL_NAME), sample_tool(TOOL_NAME_2)]));
    let obj = run(template, call_conv(json!([tool_call("call_0001", TOOL_NAME, true)])), tools.clone(), false);
    let st = run(template, call_conv(json!([tool_call("call_0001", TOOL_NAME, false)])), tools.clone(), false);
    let calls_read = obj.read("messages[1].tool_calls") || st.read("messages[1].tool_calls");
    let obj_ok = obj.contains(TOOL_NAME) && obj.contains(ARG_NAME);
    let str_ok = st.contains(TOOL_NAME) && st.contains(ARG_NAME);
    caps.supports_tool_calls = calls_read && (obj_ok || str_ok);
    caps.supports_object_arguments = calls_read && obj_ok;
    let call_detail = |o: &Outcome| {
        if o.output.is_err() {
            o.describe()
        } else {
            format!(
                "tool_calls {}, name {}, argument {}",
                if o.read("messages[1].tool_calls") { "read" } else { "never read" },
                if o.contains(TOOL_NAME) { "rendered" } else { "not rendered" },
                if o.contains(ARG_NAME) { "rendered" } else { "not rendered" }
            )
        }
    };
    reasons.insert(
        "supports_tool_calls",
        why(
            caps.supports_tool_calls,
            "assistant message with one tool call",
            format!("object arguments: {}; string arguments: {}", call_detail(&obj), call_detail(&st)),
        ),
    );
    reasons.insert(
        "supports_object_arguments",
        why(caps.supports_object_arguments, "tool call with arguments as a JSON object", call_detail(&obj)),
    );

    // Parallel calls.
    let args_obj = caps.supports_object_arguments;
    let par = run(
        template,
        call_conv(json!([tool_call("call_0001", TOOL_NAME, args_obj), tool_call("call_0002", TOOL_NAME_2, args_obj)])),
        tools,
        false,
    );
    caps.supports_parallel_tool_calls =
        caps.supports_tool_calls && par.read("messages[1].tool_calls[1]") && par.contains(TOOL_NAME_2);
    reasons.insert(
        "supports_parallel_tool_calls",
        why(
            caps.supports_parallel_tool_calls,
            "assistant message with two tool calls",
            if par.output.is_err() {
                par.describe()
            } else {
                format!(
                    "second call {}, its name {}",
                    if par.read("messages[1].tool_calls[1]") { "read" } else { "never read" },
                    if par.contains(TOOL_NAME_2) { "rendered" } else { "not rendered" }
                )
            },
        ),
    );

    // Reasoning kept across a tool-call turn (the agentic case: the assistant thought,
    // called a tool, and the result came back).
    let rs = run(
        template,
        json!([
            user(json!(USER_NEEDLE)),
            {"role": "assistant", "content": "", "reasoning_content": REASONING_NEEDLE,
             "tool_calls": [tool_call("call_0001", TOOL_NAME, args_obj)]},
            {"role": "tool", "tool_call_id": "call_0001", "content": "42"},
        ]),
        Some(json!([sample_tool(TOOL_NAME)])),
        true,
    );
    caps.supports_preserve_reasoning = rs.read("messages[1].reasoning_content") && rs.contains(REASONING_NEEDLE);
    reasons.insert(
        "supports_preserve_reasoning",
        why(
            caps.supports_preserve_reasoning,
            "assistant message with reasoning_content and a tool call, then the tool result",
            if rs.output.is_err() {
                rs.describe()
            } else {
                format!(
                    "reasoning_content {}, {}",
                    if rs.read("messages[1].reasoning_content") { "read" } else { "never read" },
                    if rs.contains(REASONING_NEEDLE) { "rendered" } else { "not rendered" }
                )
            },
        ),
    );
    // Reasoning effort: the template variable gpt-oss (and others) read.
    let effort = |level: &str| {
        let ctx = minijinja::context! {
            messages => Value::from(minijinja::value::Serde(json!([user(json!(USER_NEEDLE))]))),
            add_generation_prompt => true,
            bos_token => "<BOS>",
            eos_token => "<EOS>",
            reasoning_effort => level,
        };
        template.render_value(ctx).map_err(|e| e.to_string())
    };
    let (low, high) = (effort("low"), effort("high"));
    caps.supports_reasoning_effort = matches!((&low, &high), (Ok(l), Ok(h)) if l != h);
    reasons.insert(
        "supports_reasoning_effort",
        why(
            caps.supports_reasoning_effort,
            "user message rendered with reasoning_effort low, then high",
            match (&low, &high) {
                (Err(e), _) | (_, Err(e)) => format!("rendering failed: {e}"),
                _ if caps.supports_reasoning_effort => "the prompts differ".into(),
                _ => "the prompts are the same".into(),
            },
        ),
    );
    ProbeReport { caps, reasons }
}
