//! The minijinja environment that renders Hugging Face chat templates as
//! `transformers` does: `trim_blocks`, `lstrip_blocks`, loop controls, Python string /
//! dict methods, an HF-compatible `tojson`, `raise_exception`, `strftime_now`, and
//! Python's `str()` when a value is printed.
//!
//! Templates are untrusted: every render is bounded by fuel (instructions), a
//! recursion limit, an output size ([`MAX_OUTPUT_BYTES`], checked before a value is
//! printed) and the bytes its operators, filters and string methods may build
//! ([`super::bounds`]), so a looping, deeply recursive, output-flooding or
//! string-doubling template fails with an error.

use std::sync::Arc;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, State, Value};

use super::bounds::MAX_OUTPUT_BYTES;

/// Instruction budget for one render. A real template needs well under 1% of this.
pub const FUEL: u64 = 20_000_000;
/// The longest `tojson` indent (Python accepts any; a real template uses 2 or 4).
const MAX_INDENT: usize = 64;
/// Maximum nesting of macro calls / includes.
pub const RECURSION_LIMIT: usize = 64;

/// The clock `strftime_now` reads.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The local system time.
    #[default]
    System,
    /// A fixed instant (tests, reproducible prompts).
    Fixed(chrono::NaiveDateTime),
}

impl Clock {
    fn now(&self) -> chrono::NaiveDateTime {
        match self {
            Clock::System => chrono::Local::now().naive_local(),
            Clock::Fixed(t) => *t,
        }
    }
}

/// The syntax chat templates are written in: `transformers`' `trim_blocks` and
/// `lstrip_blocks`, no trailing newline kept.
pub fn syntax() -> minijinja::syntax::SyntaxConfig {
    let mut syntax = minijinja::syntax::SyntaxConfig::builder();
    syntax.trim_blocks(true).lstrip_blocks(true).keep_trailing_newline(false);
    syntax.build().expect("static syntax config is valid")
}

/// Build the environment. Cost: microseconds; build once and reuse.
pub fn environment(clock: Clock) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_syntax(syntax());
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    super::bounds::install(&mut env);
    env.set_formatter(|out, _state, value| {
        // A huge string is refused before it is copied for printing; every printed
        // value counts towards what the render builds (captured blocks included).
        if value.as_str().is_some_and(|s| s.len() > MAX_OUTPUT_BYTES) {
            return Err(JinjaError::new(ErrorKind::InvalidOperation, "a printed value passed the output limit"));
        }
        let s = python_str(value);
        super::bounds::charge(s.len())?;
        out.write_str(&s).map_err(|_| JinjaError::new(ErrorKind::WriteFailure, "write failed"))
    });
    env.add_filter("tojson", tojson);
    env.add_function("raise_exception", |msg: String| -> Result<Value, JinjaError> {
        Err(JinjaError::new(ErrorKind::InvalidOperation, format!("template raised: {msg}")))
    });
    let clock = Arc::new(clock);
    env.add_function("strftime_now", move |fmt: String| -> Result<Value, JinjaError> {
        let mut out = String::new();
        use std::fmt::Write;
        write!(out, "{}", clock.now().format(&fmt))
            .map_err(|_| JinjaError::new(ErrorKind::InvalidOperation, format!("bad strftime format {fmt:?}")))?;
        Ok(Value::from(out))
    });
    // Python: `None is iterable` is False (minijinja iterates none as empty).
    env.add_test("iterable", |v: Value| {
        !matches!(v.kind(), ValueKind::None | ValueKind::Undefined) && v.try_iter().is_ok()
    });
    // Python raises when a `for` loop iterates None; templates are rewritten so every
    // loop iterable passes through this filter.
    env.add_filter("__pyiter", |v: Value| -> Result<Value, JinjaError> {
        if v.is_none() {
            Err(JinjaError::new(ErrorKind::InvalidOperation, "'NoneType' object is not iterable"))
        } else {
            Ok(v)
        }
    });
    // Python's `Undefined` has length 0 (Apriel 1.5's `tools|length` in a turn without
    // tools); minijinja refuses the length of an undefined value.
    let length = |v: &Value| if v.is_undefined() { Ok(0) } else { minijinja::filters::length(v) };
    env.add_filter("length", length);
    env.add_filter("count", length);
    env.add_test("boolean", |v: Value| v.kind() == ValueKind::Bool);
    env.add_test("false", |v: Value| v.kind() == ValueKind::Bool && !v.is_true());
    env.add_test("true", |v: Value| v.kind() == ValueKind::Bool && v.is_true());
    env
}

/// Python's `str(value)`: strings as-is, `None`/`True`/`False`, containers as `repr`.
pub fn python_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => python_repr(v),
    }
}

/// Python's `repr(value)` for JSON-like values.
pub fn python_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::String => repr_str(v.as_str().unwrap_or_default()),
        ValueKind::Number => python_number(v),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = v.try_iter().map(|it| it.map(|x| python_repr(&x)).collect()).unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let items: Vec<String> = v
                .try_iter()
                .map(|it| {
                    it.map(|k| {
                        let val = v.get_item(&k).unwrap_or_default();
                        format!("{}: {}", python_repr(&k), python_repr(&val))
                    })
                    .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        _ => v.to_string(),
    }
}

fn python_number(v: &Value) -> String {
    if let Ok(i) = i64::try_from(v.clone()) {
        if !v.to_string().contains('.') && !v.to_string().contains('e') {
            return i.to_string();
        }
    }
    match f64::try_from(v.clone()) {
        Ok(f) => python_float(f),
        Err(_) => v.to_string(),
    }
}

/// Python's float repr: shortest round-trip, always with a `.` or exponent.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let s = format!("{f:?}");
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // Python switches to exponent notation: 1e+16, 1e-05.
        let e = format!("{f:e}");
        let (m, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    s
}

fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `json.dumps(value, ensure_ascii=False, indent=indent, separators=…, sort_keys=…)`,
/// which is what transformers' `tojson` filter does (no HTML escaping, key order kept).
fn tojson(_state: &State, value: Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v).unwrap_or(0).min(MAX_INDENT + 1))),
        },
    };
    if indent.as_ref().is_some_and(|i| i.len() > MAX_INDENT) {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("tojson: an indent over {MAX_INDENT} characters"),
        ));
    }
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let a = v.get_item(&Value::from(0))?.as_str().unwrap_or(",").to_string();
            let b = v.get_item(&Value::from(1))?.as_str().unwrap_or(":").to_string();
            (a, b)
        }
        _ => (if indent.is_some() { ",".into() } else { ", ".into() }, ": ".to_string()),
    };
    let mut out = String::new();
    let opts = JsonOpts { indent, item_sep, key_sep, sort_keys: sort_keys.unwrap_or(false) };
    write_json(&mut out, &value, &opts, 0)?;
    super::bounds::charge(out.len())?;
    // transformers' tojson returns a plain `str` (so `|e` escapes it).
    Ok(Value::from(out))
}

struct JsonOpts {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn write_json(out: &mut String, v: &Value, o: &JsonOpts, depth: usize) -> Result<(), JinjaError> {
    if depth > 128 {
        return Err(JinjaError::new(ErrorKind::InvalidOperation, "tojson: value nested too deeply"));
    }
    if out.len() > super::bounds::MAX_VALUE_BYTES {
        return Err(JinjaError::new(ErrorKind::InvalidOperation, "tojson: the output passed the limit on one value"));
    }
    let newline = |out: &mut String, d: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..d {
                out.push_str(ind);
            }
        }
    };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            let s = python_number(v);
            out.push_str(&s);
        }
        ValueKind::String => json_str(out, v.as_str().unwrap_or_default()),
        ValueKind::Iterable => {
            // A lazy iterable is a Python generator (`map`, `select`, …): json.dumps refuses it.
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                "Object of type generator is not JSON serializable",
            ));
        }
        ValueKind::Seq => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, depth + 1);
                write_json(out, x, o, depth + 1)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if o.sort_keys {
                keys.sort_by_key(|a| a.to_string());
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, depth + 1);
                match k.as_str() {
                    Some(s) => json_str(out, s),
                    None => json_str(out, &python_str(k)),
                }
                out.push_str(&o.key_sep);
                write_json(out, &v.get_item(k)?, o, depth + 1)?;
            }
            newline(out, depth);
            out.push('}');
        }
        _ => json_str(out, &v.to_string()),
    }
    Ok(())
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}
