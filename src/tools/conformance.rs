//! Checking a call layout against text: the round trip a derived or chosen layout
//! must pass ([`conformance`]: the parser reads the calls a template rendered back
//! to the probe calls, and the constrained grammar accepts that text), and the
//! answer to "why didn't my call parse" ([`check_calls`], `toolgate tools parse`).

use serde_json::{json, Value};

use super::format::{BodyKind, ToolFormat};
use super::stream::StreamParser;
use super::{Tool, ToolChoice};
use crate::grammar::dialect::Quoted;
use crate::grammar::regex::Spacing;

/// The probe tools' names (never in a real template).
pub const PROBE_NAMES: [&str; 2] = ["tg_probe_alpha", "tg_probe_beta"];

/// The two probe tools: a string parameter `xa_q` and an integer `xb_n`, both required.
pub fn probe_tools() -> Vec<Tool> {
    PROBE_NAMES
        .iter()
        .map(|name| {
            serde_json::from_value(json!({"type": "function", "function": {
                "name": name, "description": "A probe.",
                "parameters": {"type": "object", "properties": {
                    "xa_q": {"type": "string", "description": "A text."}, "xb_n": {"type": "integer", "description": "A count."}}, "required": ["xa_q", "xb_n"]}}}))
            .expect("a valid tool")
        })
        .collect()
}

/// The probe calls' arguments: `{"xa_q": "vq_alpha", "xb_n": 4711}` and
/// `{"xa_q": "vq_beta", "xb_n": 815}`.
pub fn probe_arguments(i: usize) -> Value {
    [json!({"xa_q": "vq_alpha", "xb_n": 4711}), json!({"xa_q": "vq_beta", "xb_n": 815})][i].clone()
}

/// `s` cut to its first 160 characters, for an error message.
pub(super) fn shorten(s: &str) -> String {
    s.chars().take(160).collect()
}

/// Check `f` against calls a template rendered for the probe tools (`sample`, one call
/// or, with `parallel`, two): the parser reads them back to the probe calls, and the
/// constrained grammar for the probe tools accepts the text.
///
/// Cost: one parse and one grammar compile and match over a short text.
///
/// # Errors
/// What differed: the calls read, or where the grammar rejected the text.
pub fn conformance(f: &ToolFormat, sample: &str, parallel: bool) -> Result<(), String> {
    let tools = probe_tools();
    let mut p = StreamParser::new(Some(f.clone()), false, 1).with_tools(&tools);
    p.push(sample);
    p.finish();
    let out = p.into_output();
    let n = if parallel { 2 } else { 1 };
    let read: Vec<(String, Option<Value>)> =
        out.calls.iter().map(|c| (c.function.name.clone(), serde_json::from_str(&c.function.arguments).ok())).collect();
    let want: Vec<(String, Option<Value>)> =
        (0..n).map(|i| (PROBE_NAMES[i].to_string(), Some(probe_arguments(i)))).collect();
    if read != want || !out.content.trim().is_empty() {
        return Err(format!(
            "the `{}` parser read {read:?} and content {:?} from {:?}",
            f.family,
            out.content,
            shorten(sample)
        ));
    }
    let calls = super::calls_grammar_plain(f, &tools, &ToolChoice::Required, parallel).map_err(|e| e.to_string())?;
    let grammar = calls.compile().map_err(|e| e.to_string())?;
    // JSON's indentation is not part of a layout: the grammar writes JSON on one line,
    // the parser reads indented JSON too (Command R+ indents its calls). A layout with
    // a fixed `spacing` was read off text without indentation, and keeps its spaces.
    // (Only where the whole body is JSON: a name-then-arguments layout may spell its
    // markers with braces, Apertus's `{"NAME": {…}}`.)
    let json_body = f.body == BodyKind::JsonNameArguments && f.spacing == Spacing::Optional;
    let compact = if json_body { compact_json_objects(sample) } else { sample.to_string() };
    let bytes = as_generated(f, &compact);
    if !grammar.matches(&bytes) {
        return Err(format!("the `{}` grammar rejects the template's calls {:?}", f.family, shorten(sample)));
    }
    Ok(())
}

/// `text` with the whitespace inside JSON objects removed (outside strings); the text
/// around them, markers included, is kept as it is.
fn compact_json_objects(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    let mut quoted = Quoted::default();
    for c in text.chars() {
        if quoted.inside() {
            out.push(c);
            // A character beyond ASCII is never a quote or a backslash.
            quoted.step(u8::try_from(c).unwrap_or(u8::MAX));
            continue;
        }
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            // Quotes outside any object are the text's own, not a JSON string.
            '"' if depth > 0 => quoted.open(b'"'),
            c if depth > 0 && c.is_whitespace() => continue,
            _ => {}
        }
        out.push(c);
    }
    out
}

/// `text` as the grammar of `f` reads it when its markers are plain text: the control
/// tokens of its argument dialect (Gemma 4's string quote) become their generated bytes
/// (the special prefix, then the text).
fn as_generated(f: &ToolFormat, text: &str) -> Vec<u8> {
    let tokens = f.dialect.syntax().control_tokens(f);
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, token)) = tokens.iter().filter_map(|t| rest.find(t).map(|at| (at, *t))).min() {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        out.push(crate::tokenizer::SPECIAL_PREFIX);
        out.extend_from_slice(token.as_bytes());
        rest = &rest[at + token.len()..];
    }
    out.extend_from_slice(rest.as_bytes());
    out
}

/// Whether the constrained grammar for `tools` (one or more calls, `tool_choice:
/// required`) accepts the calls in model output `text`: from the layout's trigger
/// (the section or call start; not one followed by [`ToolFormat::text_start`]) to the
/// end, trailing whitespace aside — or to where
/// `turn_end` (what the template writes after the calls:
/// [`super::layout::CallLayout::turn_end`]) or a prefix of it begins, since generation
/// ends there (what follows a whole turn end, such as the next turn's header, is not
/// the model's and is not checked). What `toolgate tools parse` reports, so "why
/// didn't my call parse" has an answer. `Ok` says `accepted` (naming the turn end when
/// one followed), or that the calls are accepted once their JSON's indentation is
/// taken out (the constraint writes compact JSON).
///
/// Cost: one grammar compile, one walk of the lazy DFA per place a piece of the turn
/// end could start, then a binary search over prefixes of the text (each a
/// walk of the lazy DFA) when it is rejected.
///
/// # Errors
/// `"no call in the text"`, `"rejected at byte N: …"` (N counts from the start of
/// `text`), or the grammar's compile error.
pub fn check_calls(f: &ToolFormat, tools: &[Tool], text: &str, turn_end: &str) -> Result<String, String> {
    let trigger = f.trigger();
    // The first trigger that opens calls: one followed by the layout's text start
    // (Functionary v3.2's `>>>all\n`) opens text.
    let opens_text = |at: usize| !f.text_start.is_empty() && text[at + trigger.len()..].starts_with(&f.text_start);
    let at = text.match_indices(trigger).map(|(at, _)| at).find(|&at| !opens_text(at));
    let Some(at) = at else { return Err(format!("no call in the text (no {trigger:?})")) };
    let calls = text[at..].trim_end();
    let grammar = super::calls_grammar_plain(f, tools, &ToolChoice::Required, true)
        .and_then(|c| c.compile())
        .map_err(|e| e.to_string())?;
    // The calls whole, then without a trailing piece of the turn's end.
    let ends = std::iter::once(calls.len()).chain((0..calls.len()).filter(|&k| {
        calls.is_char_boundary(k) && {
            let rest = calls[k..].trim_start();
            !rest.is_empty() && !turn_end.is_empty() && (turn_end.starts_with(rest) || rest.starts_with(turn_end))
        }
    }));
    for end in ends {
        let (body, rest) = calls.split_at(end);
        let then = if rest.is_empty() { String::new() } else { format!(" (then the turn's end {rest:?})") };
        if grammar.matches(&as_generated(f, body)) {
            return Ok(format!("accepted{then}"));
        }
        if f.body == BodyKind::JsonNameArguments && grammar.matches(&as_generated(f, &compact_json_objects(body))) {
            return Ok(format!(
                "accepted as compact JSON (the constraint writes these calls without indentation){then}"
            ));
        }
    }
    let bytes = as_generated(f, calls);
    // The longest prefix the grammar can still extend (prefixes of a prefix are too).
    let (mut ok, mut bad) = (0, bytes.len() + 1);
    while bad - ok > 1 {
        let mid = (ok + bad) / 2;
        if grammar.is_prefix(&bytes[..mid]) {
            ok = mid
        } else {
            bad = mid
        }
    }
    let special = crate::tokenizer::SPECIAL_PREFIX;
    let offset = at + ok - bytes[..ok].iter().filter(|&&b| b == special).count();
    if ok == bytes.len() {
        return Err(format!("rejected at byte {offset}: the calls end before the grammar does"));
    }
    let next: Vec<u8> = bytes[ok..].iter().copied().filter(|&b| b != special).take(40).collect();
    Err(format!("rejected at byte {offset}: {:?} cannot continue there", String::from_utf8_lossy(&next)))
}
