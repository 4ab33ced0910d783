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
    /// Keeps an earlier answer's `reasoning_content` in the prompt after later turns,
    /// with thinking on and the [`PRESERVE_REASONING`] switches set (llama.cpp's
    /// question; the chat renders with those switches set where this holds).
    pub supports_preserve_reasoning: bool,
    /// Renders string message content.
    pub supports_string_content: bool,
    /// Reads typed content parts (`[{"type":"text",…}]`): renders their text (not the
    /// list printed as it is). Where string content is not rendered
    /// ([`Caps::requires_typed_content`]), messages go to the template as parts.
    pub supports_typed_content: bool,
    /// Reads a `reasoning_effort` variable: the prompt differs between `low` and `high`
    /// (gpt-oss's `Reasoning: high`), so a request's `reasoning_effort` reaches the model.
    pub supports_reasoning_effort: bool,
}

impl Caps {
    /// Content must be typed parts: they are rendered and plain strings are not.
    pub fn requires_typed_content(&self) -> bool {
        self.supports_typed_content && !self.supports_string_content
    }

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
    let messages = Tracked::root(messages, "messages", log.clone());
    let tools = tools.map(|t| Tracked::root(t, "tools", log.clone())).unwrap_or(Value::UNDEFINED);
    let output = render_probe(t, messages, tools, gen_prompt, &serde_json::Map::new());
    let reads = log.lock().map(|l| l.clone()).unwrap_or_default();
    Outcome { output, reads }
}

/// One probe render: `messages`, `tools` (undefined: none), the generation prompt as
/// `gen_prompt` says, the probe's BOS and EOS texts, and the extra variables `vars`.
fn render_probe(
    t: &ChatTemplate,
    messages: Value,
    tools: Value,
    gen_prompt: bool,
    vars: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, String> {
    let mut ctx: std::collections::BTreeMap<String, Value> =
        vars.iter().map(|(k, v)| (k.clone(), Value::from(minijinja::value::Serde(v.clone())))).collect();
    ctx.insert("messages".into(), messages);
    ctx.insert("tools".into(), tools);
    ctx.insert("add_generation_prompt".into(), Value::from(gen_prompt));
    ctx.insert("bos_token".into(), Value::from("<BOS>"));
    ctx.insert("eos_token".into(), Value::from("<EOS>"));
    t.render_value(Value::from(ctx)).map_err(|e| e.to_string())
}

/// The variables templates read to keep earlier reasoning in the prompt, each with the
/// value that keeps it (llama.cpp sets the same when preserving reasoning).
pub const PRESERVE_REASONING: [(&str, bool); 4] = [
    ("preserve_thinking", true),
    ("clear_thinking", false),
    ("truncate_history_thinking", false),
    ("drop_thinking", false),
];

/// The names templates read a request's reasoning effort under (`reasoning_effort`:
/// gpt-oss, DeepSeek V4; `reasoning_strength`: others); a request's effort sets both.
pub const REASONING_EFFORT_VARS: [&str; 2] = ["reasoning_effort", "reasoning_strength"];

/// The efforts the probe renders: a template reads the effort if any two prompts differ
/// (Cohere's tells only `none` apart, DeepSeek V4's only `max`).
const EFFORT_LEVELS: [&str; 5] = ["low", "medium", "high", "max", "none"];

/// Thinking switched on (`enable_thinking`, and DeepSeek V4's `thinking`) plus
/// `switches`, as template variables.
fn thinking_on(switches: &[(&str, bool)]) -> serde_json::Map<String, serde_json::Value> {
    let mut vars = serde_json::Map::new();
    vars.insert("enable_thinking".into(), json!(true));
    vars.insert("thinking".into(), json!(true));
    for (name, on) in switches {
        vars.insert((*name).into(), json!(on));
    }
    vars
}

/// `messages` rendered without tools, with the generation prompt and the extra
/// variables `vars`.
fn with_vars(
    t: &ChatTemplate,
    messages: serde_json::Value,
    vars: &serde_json::Map<String, serde_json::Value>,
) -> Result<String, String> {
    render_probe(t, Value::from(minijinja::value::Serde(messages)), Value::UNDEFINED, true, vars)
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
    // Typed parts: the template takes the text out of them (printing the list as it
    // is, a Python repr of the parts, is not reading them).
    let typed = run(template, json!([user(json!([{"type": "text", "text": USER_NEEDLE}]))]), None, true);
    let printed_whole = ["'type': 'text'", "\"type\": \"text\"", "\"type\":\"text\""].iter().any(|p| typed.contains(p));
    caps.supports_typed_content = typed.contains(USER_NEEDLE) && !printed_whole;
    reasons.insert(
        "supports_typed_content",
        why(
            caps.supports_typed_content,
            "user message with content [{type: text}]",
            match (&typed.output, typed.contains(USER_NEEDLE), printed_whole) {
                (Err(_), _, _) => typed.describe(),
                (Ok(_), true, false) => "the part's text was rendered".into(),
                (Ok(_), true, true) => "the parts were printed as a list, not read".into(),
                (Ok(_), false, _) => "the part's text was not rendered".into(),
            },
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

    // Reasoning kept in the history, llama.cpp's question: an earlier answer's
    // reasoning_content, with another user turn after it, rendered with thinking on and
    // the switches templates read to keep it ([`PRESERVE_REASONING`]) set to keep it.
    let history = json!([
        user(json!(USER_NEEDLE)),
        {"role": "assistant", "content": "An answer.", "reasoning_content": REASONING_NEEDLE},
        user(json!("Another question?")),
        {"role": "assistant", "content": "Another answer.", "reasoning_content": "Later reasoning."},
        user(json!("A third question?")),
    ]);
    let kept = with_vars(template, history, &thinking_on(&PRESERVE_REASONING));
    caps.supports_preserve_reasoning = kept.as_ref().is_ok_and(|o| o.contains(REASONING_NEEDLE));
    reasons.insert(
        "supports_preserve_reasoning",
        why(
            caps.supports_preserve_reasoning,
            "an answer with reasoning_content, then two more turns (thinking on, the preserve switches set)",
            match &kept {
                Err(e) => format!("rendering failed: {e}"),
                Ok(_) if caps.supports_preserve_reasoning => "the earlier reasoning was rendered".into(),
                Ok(_) => "the earlier reasoning was dropped".into(),
            },
        ),
    );
    // Reasoning effort: the variable gpt-oss (and others) read, under both names
    // templates use, with thinking on (some read it only then).
    let effort = |level: &str| {
        let mut vars = thinking_on(&[]);
        for name in REASONING_EFFORT_VARS {
            vars.insert(name.into(), json!(level));
        }
        with_vars(template, json!([user(json!(USER_NEEDLE))]), &vars)
    };
    // A template may refuse the levels it does not know (Hunyuan's raises): the ones it
    // renders decide.
    let renders: Vec<Result<String, String>> = EFFORT_LEVELS.iter().map(|l| effort(l)).collect();
    let rendered: Vec<&String> = renders.iter().filter_map(|r| r.as_ref().ok()).collect();
    caps.supports_reasoning_effort = rendered.iter().any(|p| *p != rendered[0]);
    reasons.insert(
        "supports_reasoning_effort",
        why(
            caps.supports_reasoning_effort,
            "user message rendered with reasoning_effort low, medium, high, max and none (thinking on)",
            match rendered.len() {
                0 => renders
                    .iter()
                    .find_map(|r| r.as_ref().err())
                    .map(|e| format!("rendering failed: {e}"))
                    .unwrap_or_default(),
                n if caps.supports_reasoning_effort => format!("the prompts differ ({n} levels rendered)"),
                n => format!("the prompts are the same ({n} levels rendered)"),
            },
        ),
    );
    ProbeReport { caps, reasons }
}
