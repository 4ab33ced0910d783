//! Reading a call's body: the name of a name-then-arguments body, the
//! `{"name": …, "arguments": ` header of a JSON body while it streams, a whole JSON
//! body, and the text-scanning helpers they share (a marker cut at the end of a
//! piece, a JSON string's extent). The streaming parser ([`super::stream`]) and the
//! harmony reader use them; nothing here keeps state.

use serde_json::value::RawValue;

use super::format::{IdSlot, ToolFormat};
use crate::grammar::dialect::Quoted;

/// Longest function name read from a name-then-arguments body: a longer run before
/// `name_end` is a malformed call.
const MAX_NAME: usize = 256;

/// Bytes of whitespace at the start of `s`.
pub(super) fn leading_ws(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

/// The name at the start of a name-then-arguments body and where the text after its
/// `name_end` begins: `None` while undecided, `Err` for a malformed name (empty, too
/// long, with whitespace, without its prefix or its index).
#[allow(clippy::type_complexity)]
pub(super) fn read_name(fmt: &ToolFormat, body: &str) -> Option<Result<(String, usize), ()>> {
    let start = if fmt.name_prefix.is_empty() {
        // A newline may follow the call marker (`inner_newlines`: the grammar allows it).
        if fmt.inner_newlines {
            let ws = leading_ws(body);
            if ws == body.len() {
                return None;
            }
            ws
        } else {
            0
        }
    } else {
        let ws = leading_ws(body);
        // `ID<name_prefix>`: the call's id first (`IdSlot::BeforeName`).
        let id = match fmt.id_slot {
            IdSlot::BeforeName => body[ws..].bytes().take_while(|&b| is_id_byte(b)).count(),
            _ => 0,
        };
        let rest = &body[ws + id..];
        if id > MAX_NAME || fmt.id_slot == IdSlot::BeforeName && id == 0 && !rest.is_empty() {
            return Some(Err(()));
        }
        if !rest.starts_with(&fmt.name_prefix) {
            return if fmt.name_prefix.starts_with(rest) { None } else { Some(Err(())) };
        }
        ws + id + fmt.name_prefix.len()
    };
    let body = &body[start..];
    let sep = fmt.name_index_separator.as_str();
    let (raw, after) = if fmt.name_end.is_empty() {
        let ident = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') || sep.contains(c);
        match body.find(|c: char| !ident(c)) {
            Some(i) => (&body[..i], i),
            None if body.len() > MAX_NAME => return Some(Err(())),
            None => return None,
        }
    } else if !sep.is_empty() {
        // `NAME<sep>INDEX<name_end>`: the end marker may itself occur in the separator
        // (Kimi K3's `" index="1"` before `"`), so the index is read first.
        let Some(i) = body.find(sep) else {
            return (body.len() > MAX_NAME + sep.len()).then_some(Err(()));
        };
        let digits = body[i + sep.len()..].bytes().take_while(|&b| is_index_byte(fmt, b)).count();
        let rest = &body[i + sep.len() + digits..];
        if rest.len() < fmt.name_end.len() && fmt.name_end.starts_with(rest) {
            return None;
        }
        if digits == 0 || !rest.starts_with(&fmt.name_end) {
            return Some(Err(()));
        }
        (&body[..i + sep.len() + digits], i + sep.len() + digits + fmt.name_end.len())
    } else {
        match body.find(&fmt.name_end) {
            Some(i) => (&body[..i], i + fmt.name_end.len()),
            None if body.len() > MAX_NAME + fmt.name_end.len() => return Some(Err(())),
            None => return None,
        }
    };
    let name = if sep.is_empty() {
        Some(raw)
    } else {
        raw.rsplit_once(sep).filter(|(_, i)| !i.is_empty() && i.bytes().all(|b| is_index_byte(fmt, b))).map(|(n, _)| n)
    };
    Some(match name {
        Some(n) if !n.is_empty() && n.len() <= MAX_NAME && !n.contains(char::is_whitespace) => {
            // `NAME<name_end>NAME<name_again>`: the same name once more.
            let again = if fmt.name_again.is_empty() { String::new() } else { format!("{n}{}", fmt.name_again) };
            let rest = &body[after..];
            if !rest.starts_with(&again) {
                return if again.starts_with(rest) { None } else { Some(Err(())) };
            }
            Ok((n.to_string(), start + after + again.len()))
        }
        _ => Err(()),
    })
}

/// A byte of what follows the name's index separator: a digit of a call index, or
/// with [`IdSlot::AfterName`] a byte of a call id.
fn is_index_byte(fmt: &ToolFormat, b: u8) -> bool {
    b.is_ascii_digit() || fmt.id_slot == IdSlot::AfterName && is_id_byte(b)
}

/// A byte of a call id a model writes in a marker ([`IdSlot`]): letters, digits and
/// `_ - . :`.
fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
}

/// Length of the longest proper suffix of `s` that is a prefix of `marker`, on a char
/// boundary.
pub(super) fn partial_suffix(s: &str, marker: &str) -> usize {
    let max = marker.len().saturating_sub(1).min(s.len());
    (1..=max).rev().find(|&k| s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..])).unwrap_or(0)
}

pub(super) enum HeaderRead {
    More,
    Other,
    Found { name: String, args_start: usize },
}

/// Read `{"<name_key>": "NAME", "<arguments_key>": ` at the start of `body` (JSON
/// whitespace anywhere between tokens), up to the first character of a non-string
/// arguments value.
pub(super) fn read_header(fmt: &ToolFormat, body: &str) -> HeaderRead {
    let b = body.as_bytes();
    let mut i = 0;
    macro_rules! ws {
        () => {
            while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
                i += 1;
            }
            if i == b.len() {
                return HeaderRead::More;
            }
        };
    }
    macro_rules! byte {
        ($c:expr) => {
            ws!();
            if b[i] != $c {
                return HeaderRead::Other;
            }
            i += 1;
        };
    }
    macro_rules! string {
        () => {{
            ws!();
            if b[i] != b'"' {
                return HeaderRead::Other;
            }
            let Some(len) = json_string_len(&body[i..]) else { return HeaderRead::More };
            let Ok(s) = serde_json::from_str::<String>(&body[i..i + len]) else { return HeaderRead::Other };
            i += len;
            s
        }};
    }
    byte!(b'{');
    if string!() != fmt.name_key {
        return HeaderRead::Other;
    }
    byte!(b':');
    let name = string!();
    byte!(b',');
    if string!() != fmt.arguments_key {
        return HeaderRead::Other;
    }
    byte!(b':');
    ws!();
    if b[i] == b'"' {
        // Arguments given as a JSON string: decoded when the call is whole.
        return HeaderRead::Other;
    }
    HeaderRead::Found { name, args_start: i }
}

/// Byte length of the JSON string token at the start of `s` (which starts with `"`),
/// or `None` if it is not closed yet.
pub(super) fn json_string_len(s: &str) -> Option<usize> {
    let mut quoted = Quoted::default();
    quoted.open(b'"');
    s.bytes().enumerate().skip(1).find(|&(_, c)| quoted.step(c)).map(|(i, _)| i + 1)
}

/// Parse a whole JSON call body: `(name, arguments)`; arguments are the value's own
/// text (or the decoded string if the model wrote them as a JSON string), `{}` if
/// absent. Other keys (an `id`) are ignored. Arguments in the layout's dialect where
/// that is not JSON ([`super::format::ArgsDialect::PythonDict`]) are converted to JSON
/// in place first, after a `{"<name_key>": "NAME", "<arguments_key>": ` header.
pub(super) fn parse_body(f: &ToolFormat, body: &str) -> Option<(String, String)> {
    match serde_json::from_str::<std::collections::HashMap<String, &RawValue>>(body) {
        Ok(_) => parse_json_body(f, body),
        Err(_) if f.dialect != super::format::ArgsDialect::Json => {
            let HeaderRead::Found { args_start, .. } = read_header(f, body) else { return None };
            let syntax = f.dialect.syntax();
            let rest = &body[args_start..];
            let super::dialect::Extent::End(len) = syntax.extent(rest, f, &mut Default::default()) else {
                return None;
            };
            let args = syntax.to_json(&rest[..len], f, None)?;
            parse_json_body(f, &format!("{}{args}{}", &body[..args_start], &rest[len..]))
        }
        Err(_) => None,
    }
}

/// [`parse_body`] of a body that is JSON throughout.
fn parse_json_body(f: &ToolFormat, body: &str) -> Option<(String, String)> {
    let mut map: std::collections::HashMap<String, &RawValue> = serde_json::from_str(body).ok()?;
    // OpenAI's shape: the name and arguments inside a `function` object.
    if !map.contains_key(&f.name_key) {
        if let Some(inner) = map.get("function").filter(|v| v.get().starts_with('{')) {
            map = serde_json::from_str(inner.get()).ok()?;
        }
    }
    let name: String = serde_json::from_str(map.get(&f.name_key)?.get()).ok()?;
    let args = match map.get(&f.arguments_key) {
        Some(raw) if raw.get().starts_with('"') => serde_json::from_str::<String>(raw.get()).ok()?,
        Some(raw) => raw.get().to_string(),
        None => "{}".into(),
    };
    Some((name, args))
}
