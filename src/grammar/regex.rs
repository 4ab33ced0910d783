//! Value grammar → regex, through a serialization [`Dialect`].
//!
//! The same [`Node`] becomes compact JSON (`{"city":"Paris"}`) with [`Json`], or Gemma
//! 4's native call syntax (`{city:<|"|>Paris<|"|>}`) with [`Gemma4`]. Whitespace is
//! bounded: at most one space after `:` and `,`, never a loop.

use regex_syntax::escape;
use serde_json::Value;

use super::ir::{Format, MachineKind, Node, NumBound, ANY_VALUE_LEVELS};
use super::machine::Machine;
use super::machine::{Automaton, Not, Pattern, MAX_STATES};
use super::rules::{alt, NEVER};
use super::rules::{Rules, SHARE_MIN_COUNT};

/// Largest repetition count written out (`maxLength`, `maxItems`). A larger maximum
/// is lowered to this one (or to the minimum, when that is larger): the grammar then
/// generates only the shorter values, every one of them valid. Minimums are exact.
pub const MAX_REPEAT: usize = 1024;

/// How values are spelled.
pub trait Dialect {
    /// Regex for a string's opening and closing quote.
    fn quote(&self) -> String;
    /// Regex for one character inside a string.
    fn string_char(&self) -> String;
    /// Regex for an object key.
    fn key(&self, name: &str) -> String;
    /// Regex for an object key other than `except` (additional properties: a
    /// declared name must go through its own schema).
    fn any_key(&self, except: &[&str]) -> String;
    /// Regex for a literal JSON value (`enum`, `const`).
    fn literal(&self, v: &Value) -> String;
    /// Whether an object key is spelled as a string of this dialect (so a key
    /// machine, [`Node::Object`]'s `extra_keys`, can be written as one).
    fn keys_are_strings(&self) -> bool {
        true
    }
    /// Regex for the separator between key and value.
    fn colon(&self) -> String {
        ": ?".into()
    }
    /// Regex for the separator between items.
    fn comma(&self) -> String {
        ", ?".into()
    }
    /// Regex for character `c` inside a string (patterns are matched on the decoded
    /// value, the grammar on its spelling): JSON writes `"`, `\` and control
    /// characters as escapes (the short forms where RFC 8259 has them, else `\u00XX`).
    fn string_literal_char(&self, c: char) -> String {
        match c {
            '"' => r#"\\""#.into(),
            '\\' => r"\\\\".into(),
            '\u{8}' => r"\\b".into(),
            '\u{c}' => r"\\f".into(),
            '\n' => r"\\n".into(),
            '\r' => r"\\r".into(),
            '\t' => r"\\t".into(),
            c if c < ' ' => {
                format!(r"\\u00[{:x}{:X}][{:x}{:X}]", c as u32 >> 4, c as u32 >> 4, c as u32 & 15, c as u32 & 15)
            }
            c => escape(c.encode_utf8(&mut [0; 4])),
        }
    }
    /// Whether byte `b` stands for itself inside a string; the others are spelled by
    /// [`Dialect::string_literal_char`] (JSON: all but `"`, `\` and control characters).
    fn plain_byte(&self, b: u8) -> bool {
        !(b < 0x20 || b == b'"' || b == b'\\')
    }
    /// Regex for an object key whose name matches `pattern` (`patternProperties`);
    /// `None` where the dialect's keys cannot spell such names (then those
    /// properties are never generated).
    fn pattern_key(&self, pattern: &str) -> Option<String> {
        let q = self.quote();
        pattern_body(pattern, &Json).ok().map(|b| format!("{q}{b}{q}"))
    }
    /// Regex for a boolean.
    fn boolean(&self) -> String {
        "(?:true|false)".into()
    }
    /// Regex for null.
    fn null(&self) -> String {
        "null".into()
    }
}

/// RFC 8259 JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

const JSON_CHAR: &str = r#"(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})"#;

/// One character that stands in a JSON string as itself.
const PLAIN_CHAR: &str = r#"[^"\\\x00-\x1F]"#;

fn is_plain_char(c: char) -> bool {
    c >= ' ' && c != '"' && c != '\\'
}

/// Regex for a key that is not one of `names`: first character from the class
/// `first`, the others from `rest` (both bracketed classes that every character of
/// `names` belongs to). Built on the trie of the names: at each node the key may end
/// (unless a name ends there), continue with a character no name continues with, or
/// follow a name one character further. Size: linear in the names' total length.
///
/// ```
/// use toolgate::grammar::{regex::key_except, Grammar};
/// let g = Grammar::from_regex(&key_except("[a-z]", "[a-z]", &["ab", "b"]))?;
/// assert!(["a", "abc", "ba", "c", ""].iter().all(|k| g.matches(k.as_bytes())));
/// assert!(!g.matches(b"ab") && !g.matches(b"b"));
/// # Ok::<(), toolgate::Error>(())
/// ```
pub fn key_except(first: &str, rest: &str, names: &[&str]) -> String {
    #[derive(Default)]
    struct Trie {
        end: bool,
        next: std::collections::BTreeMap<char, Trie>,
    }
    let mut root = Trie::default();
    for n in names {
        let mut at = &mut root;
        for c in n.chars() {
            at = at.next.entry(c).or_default();
        }
        at.end = true;
    }
    fn rec(t: &Trie, class: &str, rest: &str, out: &mut String) {
        out.push_str("(?:");
        let mut alts = 0;
        let mut alt = |out: &mut String| {
            if alts > 0 {
                out.push('|');
            }
            alts += 1;
        };
        if !t.end {
            alt(out); // end here (the empty alternative)
        }
        alt(out);
        if t.next.is_empty() {
            out.push_str(&format!("{class}{rest}*"));
        } else {
            let taken: String = t.next.keys().map(|c| escape(&c.to_string())).collect();
            out.push_str(&format!("[{class}&&[^{taken}]]{rest}*"));
        }
        for (c, child) in &t.next {
            alt(out);
            out.push_str(&escape(&c.to_string()));
            rec(child, rest, rest, out);
        }
        out.push(')');
    }
    let mut out = String::new();
    rec(&root, first, rest, &mut out);
    out
}

impl Dialect for Json {
    fn quote(&self) -> String {
        "\"".into()
    }
    fn string_char(&self) -> String {
        JSON_CHAR.into()
    }
    fn key(&self, name: &str) -> String {
        escape(&serde_json::to_string(name).unwrap_or_default())
    }
    fn any_key(&self, except: &[&str]) -> String {
        // "Not a declared name" is a question about characters, so a key is either
        // plain characters that spell no declared name, or holds an escape of a
        // character that cannot stand plain (`\\`, `\"`, `\n`, `\u001f`): no
        // all-plain name decodes from it. Escapes of plain characters (`"\u0061"`
        // spells `a`) are never written in keys.
        let names: Vec<&str> = except.iter().copied().filter(|n| n.chars().all(is_plain_char)).collect();
        let plain = key_except(PLAIN_CHAR, PLAIN_CHAR, &names);
        if names.len() == except.len() {
            const ESCAPE: &str = r#"\\(?:["\\bfnrt]|u00[01][0-9a-fA-F])"#;
            format!("\"(?:{plain}|{PLAIN_CHAR}*{ESCAPE}(?:{PLAIN_CHAR}|{ESCAPE})*)\"")
        } else {
            // A declared name that needs an escape: extra keys stay plain.
            format!("\"{plain}\"")
        }
    }
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::Number(n) => number_literal(n),
            Value::Array(a) => format!(r"\[{}\]", a.iter().map(|x| self.literal(x)).collect::<Vec<_>>().join(",")),
            Value::Object(o) => format!(
                r"\{{{}\}}",
                o.iter().map(|(k, x)| format!("{}:{}", self.key(k), self.literal(x))).collect::<Vec<_>>().join(",")
            ),
            other => escape(&serde_json::to_string(other).unwrap_or_default()),
        }
    }
}

/// Regex for a number literal (`enum`, `const`) in every plain spelling of its value:
/// JSON Schema compares numbers by value, so `2`, `2.0` and `2.00` are one (trailing
/// zeros at most 16, so generation cannot run away). Exponent spellings are not
/// included.
///
/// ```
/// use toolgate::grammar::{regex::{Dialect, Json}, Grammar};
/// let g = Grammar::from_regex(&Json.literal(&serde_json::json!(2.0)))?;
/// assert!(g.matches(b"2") && g.matches(b"2.00") && !g.matches(b"2.01"));
/// let g = Grammar::from_regex(&Json.literal(&serde_json::json!(-1.5)))?;
/// assert!(g.matches(b"-1.5") && g.matches(b"-1.50") && !g.matches(b"-1"));
/// # Ok::<(), toolgate::Error>(())
/// ```
fn number_literal(n: &serde_json::Number) -> String {
    let text = n.to_string();
    let integral = match n.as_f64() {
        Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => Some(format!("{}", f as i64)),
        _ if !n.is_f64() => Some(text.clone()),
        _ => None,
    };
    match (integral, text.split_once('.')) {
        (Some(i), _) => format!(r"{}(?:\.0{{1,16}})?", escape(&i)),
        (None, Some((int, frac))) if frac.bytes().all(|b| b.is_ascii_digit()) => {
            format!(r"{}\.{frac}0{{0,16}}", escape(int))
        }
        _ => escape(&text),
    }
}

/// Gemma 4's native tool-call syntax: bare keys, strings between `<|"|>` special
/// tokens (spelled `0xFF<|"|>`, which no text can produce).
#[derive(Debug, Clone, Copy, Default)]
pub struct Gemma4;

const GEMMA_QUOTE: &str = r#"(?-u:\xFF)<\|"\|>"#;

impl Dialect for Gemma4 {
    fn quote(&self) -> String {
        GEMMA_QUOTE.into()
    }
    /// Keys are bare identifiers.
    fn keys_are_strings(&self) -> bool {
        false
    }
    fn string_char(&self) -> String {
        // Any character; a string ends only at the special quote token.
        r"[^\x00]".into()
    }
    fn key(&self, name: &str) -> String {
        escape(name)
    }
    fn any_key(&self, except: &[&str]) -> String {
        let ident = |n: &&str| {
            n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let names: Vec<&str> = except.iter().copied().filter(ident).collect();
        key_except("[A-Za-z_]", "[A-Za-z0-9_]", &names)
    }
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) => format!("{GEMMA_QUOTE}{}{GEMMA_QUOTE}", escape(s)),
            Value::Array(a) => format!(r"\[{}\]", a.iter().map(|x| self.literal(x)).collect::<Vec<_>>().join(",")),
            Value::Object(o) => format!(
                r"\{{{}\}}",
                o.iter().map(|(k, x)| format!("{}:{}", escape(k), self.literal(x))).collect::<Vec<_>>().join(",")
            ),
            other => escape(&other.to_string()),
        }
    }
    fn colon(&self) -> String {
        ":".into()
    }
    fn comma(&self) -> String {
        ",".into()
    }
    fn string_literal_char(&self, c: char) -> String {
        escape(c.encode_utf8(&mut [0; 4]))
    }
    fn pattern_key(&self, _pattern: &str) -> Option<String> {
        None // bare identifier keys: a pattern's names need not be identifiers
    }
}

/// The regex for `node` in dialect `d` (unanchored text; callers anchor).
///
/// A [`Node::Machine`] (which only [`super::schema::compile_shared`] makes) is written
/// out when its automaton has no loops and its regex stays under [`MAX_INLINE`]
/// bytes, and as matching nothing otherwise: grammars with machines are built with
/// [`to_rules`].
pub fn to_regex(node: &Node, d: &dyn Dialect) -> String {
    let mut rules = Rules::none();
    let main = emit(node, d, &mut rules);
    if rules.bodies().is_empty() {
        return main;
    }
    rules.inline(&main, MAX_INLINE).unwrap_or_else(|| emit(&Node::Never, d, &mut Rules::none()))
}

/// Largest regex [`to_regex`] writes for a [`Node::Machine`].
pub const MAX_INLINE: usize = 1 << 16;

/// [`to_regex`], with large parts emitted once into `rules` and referenced (see
/// [`Rules`]). Compile the result with [`super::Grammar::from_rules`].
///
/// Cost: linear in the schema's size, where [`to_regex`] copies shared parts.
pub fn to_rules(node: &Node, d: &dyn Dialect, rules: &mut Rules) -> String {
    emit(node, d, rules)
}

fn emit(node: &Node, d: &dyn Dialect, rules: &mut Rules) -> String {
    match node {
        Node::Never => NEVER.into(),
        Node::Null => d.null(),
        Node::Boolean => d.boolean(),
        Node::Integer { min, max } => int_range(*min, *max),
        // The exponent stops at ±292: with at most 16 integer digits every number the
        // grammar allows is a finite f64 (`6.5e555` is RFC 8259 JSON, but no JSON
        // parser that reads into doubles accepts it). Integer parts of 17 or 18 digits
        // (64-bit ids, nanosecond times) take no exponent.
        Node::Number { min: None, max: None } => concat!(
            r"-?(?:(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?(?:[0-9]{1,2}|1[0-9]{2}|2[0-8][0-9]|29[0-2]))?",
            r"|[1-9][0-9]{16,17}(?:\.[0-9]{1,16})?)"
        )
        .into(),
        Node::Number { min, max } => number_range(*min, *max),
        Node::String { min_len, max_len, pattern, format } => {
            let q = d.quote();
            // A count past a few dozen (`maxLength`, a pattern's `{1,255}`).
            let long = (*min_len).max(max_len.unwrap_or(0)) > SHARE_MIN_COUNT;
            let body = match (format, pattern) {
                (Some(f), _) => format_regex(*f),
                // Length bounds beside a pattern hold where they meet exactly
                // ([`pattern_with_length`]); elsewhere (lenient mode only) the pattern.
                (None, Some(p)) => match pattern_with_length(p, *min_len, *max_len, d) {
                    Ok(Some(re)) if *min_len > 0 || max_len.is_some() => re,
                    _ => pattern_body(p, d).unwrap_or_else(|_| to_regex(&Node::Never, d)),
                },
                // Past a few dozen, each count calls the one character rule instead of
                // holding a copy of it.
                (None, None) if long && rules.shares() => {
                    let char = rules.share_always(d.string_char());
                    repeat(&char, *min_len, *max_len)
                }
                (None, None) => repeat(&d.string_char(), *min_len, *max_len),
            };
            // A long count or a pattern is thousands of NFA states: compiled once,
            // however many properties share it.
            if (long || pattern.is_some()) && rules.shares() {
                rules.share_always(format!("{q}{body}{q}"))
            } else {
                format!("{q}{body}{q}")
            }
        }
        Node::Machine { machine, kind } => {
            let start = machine_rules(machine, *kind == MachineKind::String, d, rules);
            if *kind == MachineKind::String {
                format!("{q}{start}{q}", q = d.quote())
            } else {
                start
            }
        }
        Node::Literals(vs) => alt(vs.iter().map(|v| d.literal(v)).collect()),
        Node::AnyOf(ns) => alt(ns.iter().map(|n| emit(n, d, rules)).collect()),
        // One rule, its body referencing itself where the schema recurses. A plain
        // regex cannot hold it: `to_regex` writes such a grammar as matching nothing.
        Node::Def { key, body } => {
            let rule = rules.reserve(1);
            let outer = rules.defs.insert(key.clone(), rule);
            let text = emit(body, d, rules);
            match outer {
                Some(o) => rules.defs.insert(key.clone(), o),
                None => rules.defs.remove(key),
            };
            rules.define(rule, text);
            Rules::reference(rule)
        }
        Node::Recurse(key) => match rules.defs.get(key) {
            Some(&rule) => Rules::reference(rule),
            None => NEVER.into(),
        },
        Node::AnyValue { levels } => {
            let string = Node::String { min_len: 0, max_len: None, pattern: None, format: None };
            let scalars = [Node::Null, Node::Boolean, Node::Number { min: None, max: None }, string];
            let scalars = alt(scalars.iter().map(|n| emit(n, d, rules)).collect());
            let (comma, colon, key) = (d.comma(), d.colon(), d.any_key(&[]));
            let containers = |inner: &str| {
                let member = format!("{key}{colon}{inner}");
                format!(r"\[(?:{inner}(?:{comma}{inner})*)?\]|\{{(?:{member}(?:{comma}{member})*)?\}}")
            };
            if rules.shares() && *levels >= super::dfa::MAX_STACK {
                // One rule that calls itself: the DFA's stack bounds the nesting.
                return rules.share_recursive(|me| format!("{scalars}|{}", containers(me)));
            }
            // One level after the other, down to scalars; a plain regex holds at
            // most `ANY_VALUE_LEVELS` (each level copies the one below four times).
            let levels = if rules.shares() { *levels } else { (*levels).min(ANY_VALUE_LEVELS) };
            let scalars = rules.share(scalars);
            let mut value = scalars.clone();
            for _ in 0..levels {
                let inner = rules.share(value);
                value = format!("{scalars}|{}", containers(&inner));
            }
            format!("(?:{value})")
        }
        Node::Array { prefix, items, min, max } => {
            // Positional items are optional from `minItems` on (`[1]` satisfies two
            // `prefixItems`); the others follow, as many as the bounds allow.
            let comma = d.comma();
            let k = prefix.len().min(max.unwrap_or(usize::MAX));
            let item = items.as_ref().map(|n| {
                let re = emit(n, d, rules);
                rules.share(re)
            });
            let never = to_regex(&Node::Never, d);
            let inner = if k == 0 {
                match &item {
                    Some(item) => list(item, &comma, *min, *max),
                    None if *min > 0 => never,
                    None => String::new(),
                }
            } else {
                // After all `k` positional items.
                let mut seq = match &item {
                    Some(item) => repeat(&format!("(?:{comma}{item})"), min.saturating_sub(k), max.map(|m| m - k)),
                    None if *min > k => never,
                    None => String::new(),
                };
                for i in (1..k).rev() {
                    let item = emit(&prefix[i], d, rules);
                    let step = format!("{comma}{}{seq}", rules.share(item));
                    seq = if i >= *min { format!("(?:{step})?") } else { step };
                }
                let first = emit(&prefix[0], d, rules);
                let body = format!("{}{seq}", rules.share(first));
                if *min == 0 {
                    format!("(?:{body})?")
                } else {
                    body
                }
            };
            format!(r"\[{inner}\]")
        }
        Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty } => {
            let colon = d.colon();
            let comma = d.comma();
            let elems: Vec<(String, bool)> = properties
                .iter()
                .map(|(name, n, req)| {
                    let value = emit(n, d, rules);
                    (format!("{}{colon}{}", d.key(name), rules.share(value)), *req)
                })
                .collect();
            let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
            let mut extras: Vec<String> = Vec::new();
            let key = match extra_keys {
                Some(m) if d.keys_are_strings() => {
                    Some(emit(&Node::Machine { machine: m.clone(), kind: MachineKind::String }, d, rules))
                }
                // Names that must avoid a pattern, in a dialect whose keys are no
                // strings: not generated.
                Some(_) => None,
                None => Some(d.any_key(&names)),
            };
            if let (Some(n), Some(key)) = (additional, key) {
                let value = emit(n, d, rules);
                extras.push(format!("{key}{colon}{}", rules.share(value)));
            }
            for (p, n) in patterns {
                // Declared names the pattern also matches go through their own
                // (merged) schema: the pattern's keys skip them, as a machine.
                let declared: Vec<&str> =
                    names.iter().copied().filter(|name| pattern_matches(p, name) == Ok(true)).collect();
                let key = match declared.is_empty() {
                    true => d.pattern_key(p),
                    false if d.keys_are_strings() && rules.shares() => {
                        names_machine(Some(p), &[], &declared).map(|m| {
                            let machine = std::sync::Arc::new(m);
                            emit(&Node::Machine { machine, kind: MachineKind::String }, d, rules)
                        })
                    }
                    // A plain regex cannot skip them (strict mode refused the schema;
                    // lenient lets the pattern's keys take them too).
                    false => d.pattern_key(p),
                };
                if let Some(key) = key {
                    let value = emit(n, d, rules);
                    extras.push(format!("{key}{colon}{}", rules.share(value)));
                }
            }
            let extra = match extras.len() {
                0 => None,
                1 => extras.pop(),
                _ => Some(format!("(?:{})", extras.join("|"))),
            };
            // `dependencies` as bit masks over the properties (every name is one).
            let index = |name: &str| properties.iter().position(|(n, _, _)| n == name);
            let deps: Option<Vec<(usize, u128)>> = dependencies
                .iter()
                .map(|(a, bs)| {
                    let mask = bs.iter().try_fold(0u128, |m, b| index(b).filter(|&i| i < 128).map(|i| m | 1 << i))?;
                    Some((index(a)?, mask))
                })
                // A property bringing only itself (or nothing) asks for nothing.
                .filter(|d| d.as_ref().is_none_or(|&(i, mask)| mask & !(1u128 << i) != 0))
                .collect();
            // A dependency that cannot be said as a mask: nothing matches.
            let Some(deps) = deps else { return NEVER.into() };
            let members = Members { comma: &comma, non_empty: *non_empty, deps: &deps };
            format!(r"\{{{}\}}", props_first(&elems, extra.as_deref(), members, rules))
        }
    }
}

/// How an object's members are joined: the separator, whether at least one is
/// needed, and `dependencies` (`(i, mask)`: property `i` brings every property in
/// `mask`).
#[derive(Clone, Copy)]
struct Members<'a> {
    comma: &'a str,
    non_empty: bool,
    deps: &'a [(usize, u128)],
}

impl<'a> Members<'a> {
    fn new(comma: &'a str, non_empty: bool) -> Self {
        Self { comma, non_empty, deps: &[] }
    }
}

/// `m` as right-linear rules: one rule per state, an alternative per target state (the
/// bytes leading there, then a tail call to the target's rule), and the empty
/// alternative where the state accepts. Returns the start state's reference. In a
/// string (`string`), the bytes JSON escapes are spelled as the dialect spells them.
/// Cost: linear in the machine's edges.
fn machine_rules(m: &Machine, string: bool, d: &dyn Dialect, rules: &mut Rules) -> String {
    if m.states.is_empty() {
        return emit(&Node::Never, d, rules);
    }
    let base = rules.reserve(m.states.len());
    for (i, state) in m.states.iter().enumerate() {
        let mut by_target: std::collections::BTreeMap<u32, Vec<(u8, u8)>> = Default::default();
        for &(lo, hi, t) in &state.edges {
            by_target.entry(t).or_default().push((lo, hi));
        }
        let mut alts = Vec::new();
        if state.accepting {
            alts.push(String::new());
        }
        for (t, ranges) in by_target {
            let escaped = |b: u8| string && !d.plain_byte(b);
            let mut taken = [false; 256];
            for (lo, hi) in ranges {
                (lo..=hi).for_each(|b| taken[usize::from(b)] = true);
            }
            let (mut spelled, mut class) = (Vec::new(), String::new());
            let mut b = 0usize;
            while b < 256 {
                if !taken[b] {
                    b += 1;
                } else if escaped(b as u8) {
                    spelled.push(d.string_literal_char(char::from(b as u8)));
                    b += 1;
                } else {
                    // A run of plain bytes.
                    let start = b;
                    while b + 1 < 256 && taken[b + 1] && !escaped(b as u8 + 1) {
                        b += 1;
                    }
                    class.push_str(&format!("\\x{start:02X}-\\x{b:02X}"));
                    b += 1;
                }
            }
            if !class.is_empty() {
                spelled.push(format!("(?-u:[{class}])"));
            }
            alts.push(format!("(?:{}){}", spelled.join("|"), Rules::reference(base + t as usize)));
        }
        rules.define(base + i, alts.join("|"));
    }
    Rules::reference(base)
}

/// An upper estimate of the length of `to_regex(node, _)` in bytes, computed without
/// building it (saturating). [`super::schema::compile`] refuses a schema whose
/// estimate passes [`super::schema::MAX_GRAMMAR_BYTES`]: nested objects multiply
/// (see [`MAX_OPENING_PROPERTIES`]), and a few kilobytes of schema could otherwise
/// expand to gigabytes of regex.
pub fn size_estimate(node: &Node) -> usize {
    match node {
        Node::Never | Node::Null | Node::Boolean => 24,
        Node::Def { body, .. } => size_estimate(body),
        Node::Recurse(_) => 24,
        // Ranges are a few hundred bytes, built in microseconds: measured, not guessed.
        Node::Integer { min, max } => int_range(*min, *max).len(),
        Node::Number { min: None, max: None } => 160,
        Node::Number { min, max } => number_range(*min, *max).len(),
        Node::String { pattern, format, .. } => {
            96 + pattern.as_ref().map_or(0, |p| p.len().saturating_mul(16)) + format.map_or(0, |_| 1200)
        }
        Node::Literals(vs) => {
            vs.iter().fold(8usize, |a, v| a.saturating_add(v.to_string().len().saturating_mul(2) + 8))
        }
        Node::Machine { machine, .. } => {
            machine.states.iter().fold(16usize, |a, s| a.saturating_add(24 + s.edges.len() * 40))
        }
        Node::AnyOf(ns) => ns.iter().fold(8usize, |a, n| a.saturating_add(size_estimate(n))),
        // Each level holds the one below twice in an array and twice in an object.
        Node::AnyValue { levels } => {
            (0..(*levels).min(ANY_VALUE_LEVELS)).fold(400usize, |a, _| a.saturating_mul(4).saturating_add(700))
        }
        Node::Array { prefix, items, .. } => {
            let p = prefix.iter().fold(32usize, |a, n| a.saturating_add(size_estimate(n)));
            p.saturating_add(items.as_ref().map_or(0, |i| size_estimate(i).saturating_mul(3)))
        }
        Node::Object { properties, additional, patterns, .. } => {
            let sizes: Vec<usize> =
                properties.iter().map(|(n, p, _)| size_estimate(p).saturating_add(n.len() * 2 + 16)).collect();
            let extra = patterns
                .iter()
                .map(|(p, n)| size_estimate(n).saturating_add(p.len().saturating_mul(16)))
                .chain(additional.iter().map(|a| size_estimate(a).saturating_add(256)))
                .fold(0usize, |a, x| a.saturating_add(x))
                .saturating_mul(3);
            // One copy of the rest of the object per property that can open it.
            let mut suffix = vec![extra; sizes.len() + 1];
            for j in (0..sizes.len()).rev() {
                suffix[j] = suffix[j + 1].saturating_add(sizes[j]);
            }
            let mut total = extra.saturating_add(16);
            for (j, (_, _, required)) in properties.iter().enumerate() {
                if *required || j < MAX_OPENING_PROPERTIES {
                    total = total.saturating_add(suffix[j]);
                }
                if *required {
                    break;
                }
            }
            total
        }
    }
}

/// How many optional properties may be the first one written in an object, in a plain
/// regex ([`to_regex`]): it holds one copy of "the rest of the object" per property
/// that can open it (a regex cannot share a suffix), so without a bound a schema of 100
/// optional properties would need 100 copies of everything. [`to_rules`] shares those
/// rests and has no such bound. Past the bound, an
/// optional property can still appear, after an earlier one; the first required
/// property can always open the object.
pub const MAX_OPENING_PROPERTIES: usize = 8;

/// Nothing emitted yet: the whole property list (`non_empty`: not the empty one).
fn props_first(e: &[(String, bool)], extra: Option<&str>, m: Members, rules: &mut Rules) -> String {
    let Members { comma, non_empty, deps } = m;
    // `dependencies` only hold in a property set (see `schema::Node::Object`).
    if !deps.is_empty() && !rules.takes_any_order(e.len()) {
        return NEVER.into();
    }
    if rules.shares() {
        return props_first_shared(e, extra, comma, non_empty, deps, rules);
    }
    let mut alts = Vec::new();
    let mut all_optional = true;
    for (j, (re, required)) in e.iter().enumerate() {
        if *required || j < MAX_OPENING_PROPERTIES {
            alts.push(format!("{re}{}", props_rest(e, j + 1, extra, comma)));
        }
        if *required {
            all_optional = false;
            break;
        }
    }
    if all_optional {
        match (extra, non_empty) {
            (Some(x), false) => alts.push(format!("(?:{x}(?:{comma}{x})*)?")),
            (Some(x), true) => alts.push(format!("{x}(?:{comma}{x})*")),
            (None, false) => alts.push(String::new()),
            (None, true) => {}
        }
    }
    alt(alts)
}

/// [`props_first`] with "the rest of the object from property `i` on" shared through
/// `rules` (each built on the next), so an object of `n` properties costs `O(n)`:
/// every optional property may open the object (no [`MAX_OPENING_PROPERTIES`]), and
/// extra properties may stand anywhere between the declared ones, as JSON Schema
/// allows.
fn props_first_shared(
    e: &[(String, bool)],
    extra: Option<&str>,
    comma: &str,
    non_empty: bool,
    deps: &[(usize, u128)],
    rules: &mut Rules,
) -> String {
    // An extra property is written once, as a rule, however often it may appear.
    let extra = extra.map(|x| rules.share(x.to_string()));
    let extra = extra.as_deref();
    let extras = extra.map(|x| format!("(?:{comma}{x})*")).unwrap_or_default();
    if rules.takes_any_order(e.len()) {
        return rules.property_set(e, extra, comma, non_empty, deps);
    }
    let mut rest = vec![String::new(); e.len() + 1];
    rest[e.len()] = extras.clone();
    // `rest[0]` is only needed after an extra property opened the object.
    let first = if extra.is_some() { 0 } else { 1 };
    for i in (first..e.len()).rev() {
        let own = rest_element(&e[i].0, e[i].1, comma);
        rest[i] = rules.share(format!("{extras}{own}{}", rest[i + 1]));
    }
    let mut alts = Vec::new();
    for (j, (re, required)) in e.iter().enumerate() {
        alts.push(format!("{re}{}", rest[j + 1]));
        if *required {
            break;
        }
    }
    if let Some(x) = extra {
        alts.push(format!("{x}{}", rest[0]));
    }
    if !non_empty && e.iter().all(|(_, required)| !required) {
        alts.push(String::new());
    }
    alt(alts)
}

/// Something emitted, at element `i`.
fn props_rest(e: &[(String, bool)], i: usize, extra: Option<&str>, comma: &str) -> String {
    let mut out = String::new();
    for (re, required) in &e[i..] {
        out.push_str(&rest_element(re, *required, comma));
    }
    if let Some(x) = extra {
        out.push_str(&format!("(?:{comma}{x})*"));
    }
    out
}

fn rest_element(re: &str, required: bool, comma: &str) -> String {
    if required {
        format!("{comma}{re}")
    } else {
        format!("(?:{comma}{re})?")
    }
}

/// The enforced maximum for `min..=max` (see [`MAX_REPEAT`]).
fn cap(min: usize, max: Option<usize>) -> usize {
    max.unwrap_or(usize::MAX).min(MAX_REPEAT.max(min))
}

fn list(item: &str, comma: &str, lo: usize, hi: Option<usize>) -> String {
    let hi = hi.map(|_| cap(lo, hi));
    match (lo, hi) {
        (0, Some(0)) => String::new(),
        (0, Some(h)) => format!("(?:{item}(?:{comma}{item}){{0,{}}})?", h - 1),
        (0, None) => format!("(?:{item}(?:{comma}{item})*)?"),
        (l, Some(h)) => format!("{item}(?:{comma}{item}){{{},{}}}", l - 1, h.max(l) - 1),
        (l, None) => format!("{item}(?:{comma}{item}){{{},}}", l - 1),
    }
}

fn repeat(unit: &str, min: usize, max: Option<usize>) -> String {
    match max {
        None if min == 0 => format!("{unit}*"),
        None => format!("{unit}{{{min},}}"),
        Some(_) => format!("{unit}{{{min},{}}}", cap(min, max).max(min)),
    }
}

/// JSON Schema's `pattern` (ECMA-262 syntax, matched anywhere in the decoded
/// string unless anchored) → regex over the string's spelling in dialect `d`.
///
/// ECMA semantics where they differ from Rust's: `\d` and `\w` are ASCII, `.`
/// excludes `\r` and U+2028/U+2029 as well as `\n`. Characters a JSON string must
/// escape are matched as their escapes. `^`/`$` are honoured at the pattern's ends;
/// anywhere else, and look-around, are an error.
///
/// ```
/// use toolgate::grammar::regex::{pattern_body, Json};
/// use toolgate::grammar::Grammar;
/// let g = Grammar::from_regex(&pattern_body(r"^\d{3}$", &Json)?)?;
/// assert!(g.matches(b"123") && !g.matches("١٢٣".as_bytes()));
/// let g = Grammar::from_regex(&pattern_body(r#"^a"b$"#, &Json)?)?;
/// assert!(g.matches(br#"a\"b"#) && !g.matches(br#"a"b"#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// A message when the pattern does not parse or uses an unsupported construct.
pub fn pattern_body(p: &str, d: &dyn Dialect) -> std::result::Result<String, String> {
    // `a|b` matches somewhere exactly when `a` or `b` does: each alternative keeps its
    // own anchors (`^\d+$|^none$`).
    let alternatives = top_level_alternatives(p);
    if alternatives.len() > 1 {
        let bodies: std::result::Result<Vec<String>, String> =
            alternatives.iter().map(|a| pattern_body(a, d)).collect();
        return Ok(format!("(?:{})", bodies?.join("|")));
    }
    let (anchored_start, core, anchored_end) = split_anchors(p);
    let mut body = String::new();
    emit_pattern(&parse_ecma(core)?, d, &mut body)?;
    let any = d.string_char();
    Ok(format!(
        "{}(?:{body}){}",
        if anchored_start { String::new() } else { format!("{any}*") },
        if anchored_end { String::new() } else { format!("{any}*") }
    ))
}

/// An ECMA-262 `pattern` as a regex over the string's own characters (unescaped),
/// matched whole: unanchored ends take any characters. This is the form automata
/// intersect ([`super::machine::Pattern`]); [`pattern_body`] is the same language as
/// the string's JSON spelling.
///
/// ```
/// use toolgate::grammar::regex::decoded_pattern;
/// let re = regex_automata::meta::Regex::new(&format!("^(?:{})$", decoded_pattern(r"^\d+|x$")?)).unwrap();
/// assert!(re.is_match("12a") && re.is_match("a\"x") && !re.is_match("a1"));
/// # Ok::<(), String>(())
/// ```
///
/// # Errors
/// As [`pattern_body`].
pub fn decoded_pattern(p: &str) -> std::result::Result<String, String> {
    pattern_body(p, &Json)?;
    let alternatives: Vec<String> = top_level_alternatives(p)
        .into_iter()
        .map(|a| {
            let (anchored_start, core, anchored_end) = split_anchors(a);
            let any = "(?s:.)*";
            format!(
                "(?:{}(?:{}){})",
                if anchored_start { "" } else { any },
                ecma_classes(core),
                if anchored_end { "" } else { any }
            )
        })
        .collect();
    Ok(alternatives.join("|"))
}

/// A `pattern` together with `minLength`/`maxLength`, where the two meet exactly: a
/// pattern anchored at both ends that is one character class (or one character),
/// repeated, whose repetition the length bounds narrow (`^[a-z0-9]+$` with
/// `maxLength: 8` is `[a-z0-9]{1,8}`). `Ok(None)` for any other pattern. Cost: one
/// parse of the pattern.
///
/// ```
/// use toolgate::grammar::regex::{pattern_with_length, Json};
/// let re = pattern_with_length("^[a-z]+$", 2, Some(3), &Json).unwrap().unwrap();
/// let re = regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
/// assert!(re.is_match("ab") && re.is_match("abc") && !re.is_match("a") && !re.is_match("abcd"));
/// assert_eq!(pattern_with_length("^a+b$", 1, Some(3), &Json), Ok(None));
/// ```
///
/// # Errors
/// As [`pattern_body`].
pub fn pattern_with_length(
    p: &str,
    min: usize,
    max: Option<usize>,
    d: &dyn Dialect,
) -> std::result::Result<Option<String>, String> {
    use regex_syntax::hir::HirKind;
    let (true, core, true) = split_anchors(p) else { return Ok(None) };
    if top_level_alternatives(p).len() > 1 {
        return Ok(None);
    }
    let hir = parse_ecma(core)?;
    let mut h = &hir;
    while let HirKind::Capture(c) = h.kind() {
        h = &c.sub;
    }
    let one_char = |h: &regex_syntax::hir::Hir| match h.kind() {
        HirKind::Class(regex_syntax::hir::Class::Unicode(_)) => true,
        HirKind::Literal(l) => std::str::from_utf8(&l.0).is_ok_and(|t| t.chars().count() == 1),
        _ => false,
    };
    let (unit, lo, hi) = match h.kind() {
        HirKind::Repetition(r) if one_char(&r.sub) => (&*r.sub, r.min as usize, r.max.map(|m| m as usize)),
        _ if one_char(h) => (h, 1, Some(1)),
        _ => return Ok(None),
    };
    let (lo, hi) = (
        lo.max(min),
        match (hi, max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        },
    );
    if hi.is_some_and(|h| h < lo) {
        return Ok(Some(to_regex(&Node::Never, d)));
    }
    let mut body = String::new();
    emit_pattern(unit, d, &mut body)?;
    Ok(Some(repeat(&format!("(?:{body})"), lo, hi)))
}

/// `p` as (anchored at the start, the pattern between its anchors, anchored at the
/// end); an escaped `\$` is a character, not an anchor.
fn split_anchors(p: &str) -> (bool, &str, bool) {
    let core = p.strip_prefix('^').unwrap_or(p);
    let anchored_end = core.ends_with('$') && !core.ends_with("\\$");
    (p.starts_with('^'), if anchored_end { &core[..core.len() - 1] } else { core }, anchored_end)
}

/// Parse an ECMA-262 pattern (without its end anchors) with ECMA's class meanings.
fn parse_ecma(core: &str) -> std::result::Result<regex_syntax::hir::Hir, String> {
    regex_syntax::ParserBuilder::new()
        .build()
        .parse(&ecma_classes(core))
        .map_err(|e| format!("invalid or unsupported regex: {e}"))
}

/// `p` split at its `|`s outside groups and character classes.
fn top_level_alternatives(p: &str) -> Vec<&str> {
    let (mut parts, mut start, mut depth, mut in_class, mut escaped) = (Vec::new(), 0, 0usize, false, false);
    for (i, c) in p.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => depth = depth.saturating_sub(1),
            '|' if !in_class && depth == 0 => {
                parts.push(&p[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&p[start..]);
    parts
}

/// Whether the name `text` matches `pattern` (ECMA-262, unanchored unless `^`/`$`
/// say otherwise), by the same translation [`pattern_body`] uses.
///
/// # Errors
/// As [`pattern_body`].
pub fn pattern_matches(pattern: &str, text: &str) -> std::result::Result<bool, String> {
    let body = pattern_body(pattern, &Json)?;
    let spelled = serde_json::to_string(text).map_err(|e| e.to_string())?;
    let dfa = super::dfa::Dfa::new(&body, super::dfa::NFA_SIZE_LIMIT).map_err(|e| e.to_string())?;
    let mut cache = dfa.create_cache(32 << 20);
    let walked = spelled.as_bytes()[1..spelled.len() - 1].iter().try_fold(dfa.start(&mut cache), |s, &b| {
        let n = dfa.next(&mut cache, s, b);
        (!n.is_dead()).then_some(n)
    });
    Ok(walked.is_some_and(|s| dfa.is_accepting(&cache, s)))
}

/// Rewrite ECMA-262's ASCII `\d`, `\D`, `\w`, `\W` and its `.` into Rust syntax
/// with the same meaning (Rust's are Unicode-wide).
fn ecma_classes(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('d') => out.push_str("[0-9]"),
                Some('D') => out.push_str("[^0-9]"),
                Some('w') => out.push_str("[0-9A-Za-z_]"),
                Some('W') => out.push_str("[^0-9A-Za-z_]"),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A `]` right after `[` or `[^` is a literal.
                let rest = chars.as_str();
                let lead = if rest.starts_with('^') { 1 } else { 0 };
                if rest[lead..].starts_with(']') {
                    out.push_str(&rest[..lead + 1]);
                    chars = rest[lead + 1..].chars();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '.' if !in_class => out.push_str(r"[^\n\r\x{2028}\x{2029}]"),
            c => out.push(c),
        }
    }
    out
}

fn emit_pattern(h: &regex_syntax::hir::Hir, d: &dyn Dialect, out: &mut String) -> std::result::Result<(), String> {
    use regex_syntax::hir::{Class, HirKind};
    match h.kind() {
        HirKind::Empty => {}
        HirKind::Literal(lit) => {
            let text = std::str::from_utf8(&lit.0).map_err(|_| "a byte-oriented pattern".to_string())?;
            for c in text.chars() {
                out.push_str(&d.string_literal_char(c));
            }
        }
        HirKind::Class(Class::Unicode(cls)) => {
            // Plain characters as one class, the rest as their spellings.
            let mut alts = Vec::new();
            let mut plain = String::new();
            for r in cls.ranges() {
                let (lo, hi) = (r.start() as u32, r.end() as u32);
                let mut c = lo;
                while c <= hi {
                    let ch = char::from_u32(c).unwrap_or(' ');
                    if c < 0x20 || ch == '"' || ch == '\\' {
                        alts.push(d.string_literal_char(ch));
                        c += 1;
                        continue;
                    }
                    // The longest run from `c` with no character needing an escape.
                    let stop = [0x22u32, 0x5C].into_iter().filter(|&x| x > c).min().unwrap_or(u32::MAX).min(hi + 1);
                    plain.push_str(&format!("\\x{{{c:X}}}-\\x{{{:X}}}", stop - 1));
                    c = stop;
                }
            }
            if !plain.is_empty() {
                alts.push(format!("[{plain}]"));
            }
            if alts.is_empty() {
                out.push_str(NEVER);
            } else {
                out.push_str(&format!("(?:{})", alts.join("|")));
            }
        }
        HirKind::Class(Class::Bytes(_)) => return Err("a byte-oriented class in the pattern".into()),
        HirKind::Look(_) => return Err("`^`, `$` or `\\b` inside the pattern (only at its ends)".into()),
        HirKind::Repetition(rep) => {
            out.push_str("(?:");
            emit_pattern(&rep.sub, d, out)?;
            out.push(')');
            match rep.max {
                Some(max) => out.push_str(&format!("{{{},{max}}}", rep.min)),
                None => out.push_str(&format!("{{{},}}", rep.min)),
            }
        }
        HirKind::Capture(cap) => {
            out.push_str("(?:");
            emit_pattern(&cap.sub, d, out)?;
            out.push(')');
        }
        HirKind::Concat(hs) => {
            for h in hs {
                emit_pattern(h, d, out)?;
            }
        }
        HirKind::Alternation(hs) => {
            out.push_str("(?:");
            for (i, h) in hs.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                emit_pattern(h, d, out)?;
            }
            out.push(')');
        }
    }
    Ok(())
}

/// The regex of a built-in format, over the string's characters (no character in it
/// needs a JSON escape).
pub fn format_regex(f: Format) -> String {
    // Days per month, and 29 February only in leap years (divisible by 4, and by
    // 400 when by 100).
    const DATE: &str = concat!(
        r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)",
        r"|02-(?:0[1-9]|1[0-9]|2[0-8]))",
        r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)"
    );
    const TIME: &str =
        r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    const OCTET: &str = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    match f {
        Format::Date => DATE.into(),
        Format::Time => TIME.into(),
        Format::DateTime => format!("{DATE}T{TIME}"),
        Format::Uuid => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".into(),
        // A dot-atom local part of at most 64 characters, then a host name of letter-
        // or digit-edged labels (RFC 5321/1035): a subset of valid addresses, so every
        // generated one is valid.
        Format::Email => {
            const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
            format!(r"[A-Za-z0-9_%+-]{{1,32}}(?:\.[A-Za-z0-9_%+-]{{1,15}}){{0,2}}@(?:{LABEL}\.){{1,3}}[A-Za-z]{{2,24}}")
        }
        // RFC 3986 absolute URI: scheme, optional `//host[:port]`, path, query,
        // fragment, with `%` only before two hex digits (user info and IP literals
        // are left out).
        Format::Uri => {
            const PCHAR: &str = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
            const HOST: &str = r"(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*";
            format!(
                r"[A-Za-z][A-Za-z0-9+.-]*:(?://{HOST}(?::[0-9]*)?(?:/{PCHAR}*)*|/(?:{PCHAR}+(?:/{PCHAR}*)*)?|{PCHAR}+(?:/{PCHAR}*)*)?(?:\?(?:{PCHAR}|[/?])*)?(?:#(?:{PCHAR}|[/?])*)?"
            )
        }
        Format::Ipv4 => format!(r"{OCTET}\.{OCTET}\.{OCTET}\.{OCTET}"),
        // Letter- or digit-edged labels; 6 × 41 characters and 5 dots stay within
        // RFC 1123's 253.
        Format::Hostname => {
            const LABEL: &str = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,39}[A-Za-z0-9])?";
            format!(r"{LABEL}(?:\.{LABEL}){{0,5}}")
        }
    }
}

/// Regex for the decimal integers in `[min, max]` (either side open).
///
/// ```
/// use toolgate::grammar::regex::int_range;
/// let re = regex_automata::meta::Regex::new(&format!("^(?:{})$", int_range(Some(-5), Some(120)))).unwrap();
/// for i in -5..=120 { assert!(re.is_match(&i.to_string())); }
/// for s in ["-6", "121", "007", "-0", "1000"] { assert!(!re.is_match(s)); }
/// ```
pub fn int_range(min: Option<i64>, max: Option<i64>) -> String {
    // At most 18 digits: every value fits an `i64`.
    const ANY_POS: &str = "(?:0|[1-9][0-9]{0,17})";
    const ANY_NEG: &str = "-[1-9][0-9]{0,17}";
    let cap = 10i64.pow(18) - 1;
    // Bounds past 18 digits: nothing beyond them, or only the values within reach.
    if min.is_some_and(|m| m > cap) || max.is_some_and(|m| m < -cap) {
        return NEVER.into();
    }
    let (min, max) = (min.map(|m| m.max(-cap)), max.map(|m| m.min(cap)));
    let mut alts = Vec::new();
    match (min, max) {
        (None, None) => return "(?:-?[1-9][0-9]{0,17}|0)".to_string(),
        (Some(lo), None) => {
            if lo <= 0 {
                alts.push(ANY_POS.to_string());
                if lo < 0 {
                    alts.push(format!("-(?:{})", nonneg_range(1, -lo)));
                }
            } else {
                alts.push(nonneg_range(lo, cap));
            }
        }
        (None, Some(hi)) => {
            if hi >= 0 {
                alts.push(ANY_NEG.to_string());
                alts.push(nonneg_range(0, hi));
            } else {
                alts.push(format!("-(?:{})", nonneg_range(-hi, cap)));
            }
        }
        (Some(lo), Some(hi)) => {
            if hi >= 0 {
                alts.push(nonneg_range(lo.max(0), hi));
            }
            if lo < 0 {
                let a = if hi < 0 { -hi } else { 1 };
                alts.push(format!("-(?:{})", nonneg_range(a, -lo)));
            }
        }
    }
    format!("(?:{})", alts.join("|"))
}

/// Regex for decimal numbers (no exponent) between decimal bounds.
///
/// A number is a sign, an integer part `I` and a fraction `f`. For `x = I.f ≥ 0` and a
/// bound `L = Li.Lf`: every `I` strictly between the bounds' integer parts takes any
/// fraction, and `I = Li` (or `I = Ui`) takes the fractions on the right side of
/// `Lf` (of `Uf`), compared digit by digit ([`fraction_range`]). A negative number
/// `-y` is bounded by the mirrored bounds on `y`. Cost: a few integer ranges and two
/// digit-wise comparisons, built in microseconds.
///
/// ```
/// use toolgate::grammar::regex::number_range;
/// use toolgate::grammar::schema::NumBound;
/// let range = |lo: f64, hi: f64| {
///     let re = number_range(NumBound::new(lo, true), NumBound::new(hi, false));
///     regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap()
/// };
/// let re = range(0.0, 1.0);
/// assert!(re.is_match("0.5") && re.is_match("1") && re.is_match("1.000"));
/// assert!(!re.is_match("0") && !re.is_match("-0.0") && !re.is_match("1.01"));
/// let re = range(-0.25, 2.5);
/// assert!(re.is_match("-0.2") && re.is_match("-0.2499") && re.is_match("2.50") && re.is_match("0"));
/// assert!(!re.is_match("-0.25") && !re.is_match("-0.3") && !re.is_match("2.51") && !re.is_match("3"));
/// ```
pub fn number_range(min: Option<NumBound>, max: Option<NumBound>) -> String {
    let mut alts = Vec::new();
    let positive = magnitude_range(min, max);
    if !positive.is_empty() {
        alts.push(positive);
    }
    // `-y` with `y` in the mirrored range; `-0` is zero, which the mirror handles.
    let negative = magnitude_range(max.map(NumBound::negated), min.map(NumBound::negated));
    if !negative.is_empty() {
        alts.push(format!("-(?:{negative})"));
    }
    if alts.is_empty() {
        return to_regex(&Node::Never, &Json);
    }
    format!("(?:{})", alts.join("|"))
}

/// Regex for unsigned decimals `I.f` (`I` without leading zeros, at most 16 digits)
/// with `lo ⋚ I.f ⋚ hi`; empty when no such number exists.
fn magnitude_range(lo: Option<NumBound>, hi: Option<NumBound>) -> String {
    const CAP: i64 = 10i64.pow(16) - 1;
    const ANY_FRAC: &str = r"(?:\.[0-9]{1,16})?";
    if hi.is_some_and(|h| h.value < 0 || (h.value == 0 && h.frac == 0 && h.exclusive)) {
        return String::new();
    }
    // A lower bound below zero says nothing about a magnitude.
    let lo = lo.filter(|l| l.value >= 0);
    let (lo_digits, hi_digits) = (lo.map(NumBound::frac_digits), hi.map(NumBound::frac_digits));
    let lo_frac = lo.as_ref().zip(lo_digits.as_deref()).map(|(l, d)| (d, l.exclusive));
    let hi_frac = hi.as_ref().zip(hi_digits.as_deref()).map(|(h, d)| (d, h.exclusive));
    let mut parts = Vec::new();
    let full_lo = lo.map_or(0, |l| l.value.saturating_add(1));
    let full_hi = hi.map_or(CAP, |h| (h.value - 1).min(CAP));
    if full_lo <= full_hi {
        parts.push(format!("(?:{}){ANY_FRAC}", nonneg_range(full_lo, full_hi)));
    }
    match (lo, hi) {
        (Some(l), Some(h)) if l.value == h.value => {
            if let Some(f) = fraction_range(lo_frac, hi_frac) {
                parts.push(format!("{}{f}", l.value));
            }
        }
        _ => {
            if let Some(l) = lo.filter(|l| l.value <= CAP) {
                if let Some(f) = fraction_range(lo_frac, None) {
                    parts.push(format!("{}{f}", l.value));
                }
            }
            if let Some(h) = hi.filter(|h| h.value <= CAP && lo.is_none_or(|l| l.value < h.value)) {
                if let Some(f) = fraction_range(None, hi_frac) {
                    parts.push(format!("{}{f}", h.value));
                }
            }
        }
    }
    parts.join("|")
}

/// Regex for the fraction after an integer part (nothing, or `.` and 1–16 digits)
/// whose value `f` lies on the right side of `lo` and `hi`, each given as its digits
/// without trailing zeros (`""` is zero) and whether it is exclusive. `None` when no
/// fraction does.
fn fraction_range(lo: Option<(&str, bool)>, hi: Option<(&str, bool)>) -> Option<String> {
    const MAX_DIGITS: usize = 16;
    // Digit `i` of a bound (zeros past its end).
    let digit = |b: Option<(&str, bool)>, i: usize| b.map_or(0, |(d, _)| d.as_bytes().get(i).map_or(0, |c| c - b'0'));
    let exhausted = |b: Option<(&str, bool)>, i: usize| b.is_none_or(|(d, _)| i >= d.len());
    let strict = |b: Option<(&str, bool)>| b.is_some_and(|(_, s)| s);
    // The digits from position `i` on, `tight_lo`/`tight_hi` while equal to that bound so
    // far; `nonempty`: at least one digit.
    fn rest(
        i: usize,
        tl: bool,
        th: bool,
        nonempty: bool,
        ctx: &dyn Fn(usize) -> (u8, u8, bool, bool),
        strict: (bool, bool),
    ) -> Option<String> {
        let (lo_i, hi_i, lo_done, hi_done) = ctx(i);
        let n = usize::from(nonempty);
        let left = MAX_DIGITS.saturating_sub(i);
        // Both bounds used up (or loose): the remaining digits in closed form.
        if (!tl || lo_done) && (!th || hi_done) {
            return match (tl, th) {
                (false, false) => Some(format!("[0-9]{{{n},{left}}}")),
                (true, false) if !strict.0 => Some(format!("[0-9]{{{n},{left}}}")),
                (true, false) => {
                    Some(format!("0{{0,{}}}[1-9][0-9]{{0,{}}}", left.saturating_sub(1), left.saturating_sub(1)))
                }
                (false, true) | (true, true) if strict.1 || (tl && strict.0) => None,
                _ => Some(format!("0{{{n},{left}}}")),
            };
        }
        if left == 0 {
            return None;
        }
        let mut alts = Vec::new();
        // Ending here: the value is the digits so far, followed by zeros.
        let end_ok = (!tl || (lo_done && !strict.0)) && (!th || !hi_done || !strict.1);
        if end_ok && !nonempty {
            alts.push(String::new());
        }
        let (a, b) = (if tl { lo_i } else { 0 }, if th { hi_i } else { 9 });
        if a > b {
            return (!alts.is_empty()).then(|| alts.concat());
        }
        // Digits strictly inside the window leave both bounds behind.
        let (inner_lo, inner_hi) = (a + u8::from(tl), b.saturating_sub(u8::from(th)));
        if inner_lo <= inner_hi && !(th && b == 0) {
            alts.push(format!("[{inner_lo}-{inner_hi}][0-9]{{0,{}}}", left - 1));
        }
        if tl {
            if let Some(r) = rest(i + 1, true, th && a == b, false, ctx, strict) {
                alts.push(format!("{a}{r}"));
            }
        }
        if th && !(tl && a == b) {
            if let Some(r) = rest(i + 1, false, true, false, ctx, strict) {
                alts.push(format!("{b}{r}"));
            }
        }
        (!alts.is_empty()).then(|| format!("(?:{})", alts.join("|")))
    }
    let ctx = |i: usize| (digit(lo, i), digit(hi, i), exhausted(lo, i), exhausted(hi, i));
    let strict_pair = (strict(lo), strict(hi));
    let (tl, th) = (lo.is_some(), hi.is_some());
    let digits = rest(0, tl, th, true, &ctx, strict_pair);
    // No fraction at all: the value zero.
    let zero_ok = (!tl || (exhausted(lo, 0) && !strict_pair.0)) && (!th || !exhausted(hi, 0) || !strict_pair.1);
    match (digits, zero_ok) {
        (Some(d), true) => Some(format!("(?:\\.{d})?")),
        (Some(d), false) => Some(format!("\\.{d}")),
        (None, true) => Some(String::new()),
        (None, false) => None,
    }
}

/// Regex for integers in `[lo, hi]`, `0 <= lo <= hi`, without leading zeros.
fn nonneg_range(lo: i64, hi: i64) -> String {
    let mut parts = Vec::new();
    let (lo_len, hi_len) = (lo.to_string().len(), hi.to_string().len());
    for len in lo_len..=hi_len {
        let floor = if len == 1 { 0 } else { 10i64.pow(len as u32 - 1) };
        let ceil = 10i64.pow(len as u32) - 1;
        let (a, b) = (lo.max(floor), hi.min(ceil));
        if a <= b {
            parts.push(same_len(&a.to_string(), &b.to_string()));
        }
    }
    parts.join("|")
}

/// Regex for the numbers between two digit strings of equal length.
fn same_len(a: &str, b: &str) -> String {
    let (a0, b0) = (a.as_bytes()[0] - b'0', b.as_bytes()[0] - b'0');
    let n = a.len() - 1;
    if n == 0 {
        return if a0 == b0 { a.to_string() } else { format!("[{a0}-{b0}]") };
    }
    let (ar, br) = (&a[1..], &b[1..]);
    if a0 == b0 {
        return format!("{a0}(?:{})", same_len(ar, br));
    }
    let (zeros, nines) = ("0".repeat(n), "9".repeat(n));
    if ar == zeros && br == nines {
        return format!("[{a0}-{b0}][0-9]{{{n}}}");
    }
    let mut parts = vec![format!("{a0}(?:{})", same_len(ar, &nines))];
    if a0 + 1 < b0 {
        parts.push(format!("[{}-{}][0-9]{{{n}}}", a0 + 1, b0 - 1));
    }
    parts.push(format!("{b0}(?:{})", same_len(&zeros, br)));
    parts.join("|")
}

/// Bare text inside an XML-style parameter: quoted by nothing, ended by the closing tag.
#[derive(Debug, Clone, Copy, Default)]
pub struct XmlText;

impl Dialect for XmlText {
    fn quote(&self) -> String {
        String::new()
    }
    fn string_char(&self) -> String {
        // Constrained strings (formats, patterns, lengths) leave `<` out, which keeps
        // them clear of the closing tag.
        "[^<]".into()
    }
    fn key(&self, name: &str) -> String {
        Json.key(name)
    }
    fn any_key(&self, except: &[&str]) -> String {
        Json.any_key(except)
    }
    fn literal(&self, v: &Value) -> String {
        match v {
            Value::String(s) => escape(s),
            other => Json.literal(other),
        }
    }
    fn plain_byte(&self, b: u8) -> bool {
        b != b'<'
    }
    /// Bare text: every character as itself, but `<` (which could open the closing
    /// tag) has no spelling.
    fn string_literal_char(&self, c: char) -> String {
        if c == '<' {
            NEVER.into()
        } else {
            escape(c.encode_utf8(&mut [0; 4]))
        }
    }
}

/// Regex of any text that does not contain `literal`, for a literal whose first
/// character appears nowhere else in it (`</parameter>`), built from the automaton
/// that tracks how much of the literal was just seen.
///
/// ```
/// use toolgate::grammar::{regex::without_literal, Grammar};
/// let g = Grammar::from_regex(&without_literal("</p>"))?;
/// assert!(g.matches(b"a < b </ c </q> <</p"));
/// assert!(!g.matches(b"x</p>y") && !g.matches(b"<</p>"));
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: a regex of size quadratic in the literal's length.
pub fn without_literal(literal: &str) -> String {
    let l: Vec<char> = literal.chars().collect();
    let first = escape(&l[0].to_string());
    let class = |c: char| format!("[^{}{}]", escape(&c.to_string()), escape(&l[0].to_string()));
    // Having seen l[..i], an optional further advance that stays short of the whole.
    fn advance(l: &[char], i: usize) -> String {
        if i + 1 >= l.len() {
            return String::new();
        }
        format!("(?:{}{})?", escape(&l[i].to_string()), advance(l, i + 1))
    }
    // Having seen l[..i], advance and then break the match with another character.
    fn breaks(l: &[char], i: usize, class: &dyn Fn(char) -> String) -> String {
        if i + 1 >= l.len() {
            return class(l[i]);
        }
        format!("(?:{}|{}{})", class(l[i]), escape(&l[i].to_string()), breaks(l, i + 1, class))
    }
    let back_to_first = format!("(?:{}{first})*", advance(&l, 1));
    let other = format!("[^{first}]");
    format!("(?:{other}|{first}{back_to_first}{})*(?:{first}{back_to_first}{})?", breaks(&l, 1, &class), advance(&l, 1))
}

/// How a tagged-parameters layout spells one parameter: `key_start KEY key_end VALUE
/// value_end`, repeated, then `end`. Qwen3-Coder's `<parameter=KEY>VALUE</parameter>`
/// … `</function>` is the default; GLM's `<arg_key>KEY</arg_key><arg_value>VALUE
/// </arg_value>` (no `end`: the arguments end where no further key starts), MiniMax's
/// `<parameter name="KEY">VALUE</parameter>`, and layouts that mark a value's type in
/// the key's tag (DeepSeek DSML's `string="true"` / `string="false"`: a different
/// `key_end_json` for values written as JSON) are others.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamTags {
    /// Text before a parameter's name.
    pub key_start: String,
    /// Text between the name and a string value (bare text).
    pub key_end: String,
    /// Text between the name and a value written as JSON (`None`: `key_end`).
    #[serde(default)]
    pub key_end_json: Option<String>,
    /// Text after a value; its first character appears nowhere else in it.
    pub value_end: String,
    /// Text after the last parameter (`""`: none).
    #[serde(default)]
    pub end: String,
}

impl Default for ParamTags {
    fn default() -> Self {
        Self {
            key_start: "<parameter=".into(),
            key_end: ">".into(),
            key_end_json: None,
            value_end: "</parameter>".into(),
            end: "</function>".into(),
        }
    }
}

impl ParamTags {
    /// The text between a name and a value written as JSON.
    pub fn key_end_json(&self) -> &str {
        self.key_end_json.as_deref().unwrap_or(&self.key_end)
    }
}

/// Tagged parameters for an arguments schema, spelled by `tags` (Qwen3-Coder's
/// `<parameter=NAME>\n?VALUE\n?</parameter>\n?` by default): each declared property
/// in schema order (optional ones skippable), extra properties if the schema allows
/// them, then `tags.end`. String values are bare text without `tags.value_end`; other
/// values are JSON. Large parts go into `rules` as [`to_rules`] puts them
/// ([`Rules::none`] for one plain regex).
///
/// Cost: linear in the schema's size, as [`to_rules`].
pub fn xml_parameters(node: &Node, rules: &mut Rules, tags: &ParamTags) -> String {
    let close = tags.value_end.as_str();
    // `(is JSON, regex)` alternatives of a value: bare text and JSON values take
    // different key ends when the layout types its values.
    fn value(n: &Node, rules: &mut Rules, close: &str) -> Vec<(bool, String)> {
        match n {
            Node::String { min_len: 0, max_len: None, pattern: None, format: None } => {
                vec![(false, without_literal(close))]
            }
            Node::String { .. } | Node::Machine { .. } => vec![(false, emit(n, &XmlText, rules))],
            Node::Literals(vs) => {
                let (strings, others): (Vec<&Value>, Vec<&Value>) = vs.iter().partition(|v| v.is_string());
                let mut out = Vec::new();
                for (json, group) in [(false, strings), (true, others)] {
                    if !group.is_empty() {
                        let lit = Node::Literals(group.into_iter().cloned().collect());
                        out.push((json, emit(&lit, if json { &Json as &dyn Dialect } else { &XmlText }, rules)));
                    }
                }
                out
            }
            Node::AnyOf(ns) => ns.iter().flat_map(|n| value(n, rules, close)).collect(),
            // A string is bare text here, the other values JSON.
            Node::AnyValue { .. } => vec![(false, without_literal(close)), (true, emit(n, &Json, rules))],
            other => vec![(true, emit(other, &Json, rules))],
        }
    }
    let param = |key: &str, alts: Vec<(bool, String)>| {
        let mut text = Vec::new();
        let mut json = Vec::new();
        for (is_json, v) in alts {
            if is_json {
                json.push(v)
            } else {
                text.push(v)
            }
        }
        let mut out = Vec::new();
        let ends = [(false, escape(&tags.key_end), text), (true, escape(tags.key_end_json()), json)];
        if tags.key_end_json() == tags.key_end {
            let [(_, ke, t), (_, _, j)] = ends;
            let all: Vec<String> = t.into_iter().chain(j).collect();
            out.push(format!("{ke}\\n?{}", alt(all)));
        } else {
            for (_, ke, vs) in ends {
                if !vs.is_empty() {
                    out.push(format!("{ke}\\n?{}", alt(vs)));
                }
            }
        }
        format!("{}{key}(?:{})\\n?{}\\n?", escape(&tags.key_start), out.join("|"), escape(close))
    };
    let body = match node {
        // (`patternProperties` names are not generated in this layout.)
        Node::Object { properties, additional, non_empty, extra_keys, .. } => {
            let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
            let key = key_except("[A-Za-z_]", "[A-Za-z0-9_.-]", &names);
            // Extras that must avoid a pattern are not generated in this layout either.
            let additional = additional.as_ref().filter(|_| extra_keys.is_none());
            let extra = additional.map(|extra| param(&key, value(extra, rules, close)));
            if *non_empty {
                // At least one parameter: the JSON objects' layout, without separators.
                let elems: Vec<(String, bool)> = properties
                    .iter()
                    .map(|(name, n, required)| (param(&escape(name), value(n, rules, close)), *required))
                    .collect();
                props_first(&elems, extra.as_deref(), Members::new("", true), rules)
            } else {
                let mut out = String::new();
                for (name, n, required) in properties {
                    let p = param(&escape(name), value(n, rules, close));
                    out.push_str(&if *required { p } else { format!("(?:{p})?") });
                }
                if let Some(x) = extra {
                    out.push_str(&format!("(?:{x})*"));
                }
                out
            }
        }
        other => format!("(?:{})*", param("[A-Za-z_][A-Za-z0-9_.-]*", value(other, rules, close))),
    };
    format!("\\n?{body}{}", escape(&tags.end))
}

/// Python literals, as pythonic tool calls write values: strings in double quotes with
/// JSON's escapes (valid Python), numbers as in JSON, `True`/`False`/`None`, lists
/// `[…]`, dicts `{"key": …}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Python;

/// Strings and keys are JSON's (valid Python); literals and constants differ.
impl Dialect for Python {
    fn quote(&self) -> String {
        Json.quote()
    }
    fn string_char(&self) -> String {
        Json.string_char()
    }
    fn key(&self, name: &str) -> String {
        Json.key(name)
    }
    fn any_key(&self, except: &[&str]) -> String {
        Json.any_key(except)
    }
    fn literal(&self, v: &Value) -> String {
        escape(&python_repr(v))
    }
    fn boolean(&self) -> String {
        "(?:True|False)".into()
    }
    fn null(&self) -> String {
        "None".into()
    }
}

/// A JSON value written as a Python literal (`true` → `True`, `null` → `None`).
///
/// ```
/// use toolgate::grammar::regex::python_repr;
/// assert_eq!(python_repr(&serde_json::json!({"a": [true, null, "x"]})), r#"{"a": [True, None, "x"]}"#);
/// ```
pub fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Array(a) => format!("[{}]", a.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, x)| format!("{}: {}", Value::String(k.clone()), python_repr(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Keyword arguments of a pythonic call for an arguments schema: `(name=VALUE, …)` with
/// the declared properties in schema order (optional ones skippable), extra ones if
/// the schema allows them, values as [`Python`] literals. Large parts go into `rules`
/// as [`to_rules`] puts them ([`Rules::none`] for one plain regex).
///
/// Cost: linear in the schema's size, as [`to_rules`].
pub fn python_kwargs(node: &Node, rules: &mut Rules) -> String {
    let comma = ", ?";
    match node {
        // (`patternProperties` names are not generated as keyword arguments.)
        Node::Object { properties, additional, non_empty, extra_keys, .. } => {
            let elems: Vec<(String, bool)> = properties
                .iter()
                .map(|(name, n, req)| (format!("{}={}", escape(name), emit(n, &Python, rules)), *req))
                .collect();
            let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
            let key = key_except("[A-Za-z_]", "[A-Za-z0-9_]", &names);
            // (Nor extras that must avoid a pattern.)
            let additional = additional.as_ref().filter(|_| extra_keys.is_none());
            let extra = additional.map(|n| format!("{key}={}", emit(n, &Python, rules)));
            format!(r"\({}\)", props_first(&elems, extra.as_deref(), Members::new(comma, *non_empty), rules))
        }
        other => {
            let v = emit(other, &Python, rules);
            let v = rules.share(v);
            format!(r"\((?:[A-Za-z_][A-Za-z0-9_]*={v}(?:{comma}[A-Za-z_][A-Za-z0-9_]*={v})*)?\)")
        }
    }
}

/// The object keys (as a machine over the decoded name) that match pattern `within`
/// (ECMA-262; `None`: any name), no pattern of `avoid`, and none of `names`; `None`
/// when a pattern does not compile, the product passes [`MAX_STATES`], or no name is
/// left. Cost: the product of the patterns' automata and a trie of the names.
///
/// ```
/// use toolgate::grammar::regex::names_machine;
/// let m = names_machine(Some("^x-"), &["-id$"], &["x-a"]).unwrap();
/// assert!(m.matches(b"x-b") && !m.matches(b"x-a") && !m.matches(b"x-id") && !m.matches(b"y"));
/// ```
pub fn names_machine(within: Option<&str>, avoid: &[&str], names: &[&str]) -> Option<Machine> {
    let mut parts: Vec<Box<dyn Automaton>> = vec![match within {
        Some(p) => name_pattern(p)?,
        None => Box::new(Pattern::new("(?s:.)*").ok()?),
    }];
    if !names.is_empty() {
        let names: Vec<String> = names.iter().map(|n| regex_syntax::escape(n)).collect();
        parts.push(Box::new(Not(Box::new(Pattern::new(&names.join("|")).ok()?))));
    }
    for p in avoid {
        parts.push(Box::new(Not(name_pattern(p)?)));
    }
    let m = Machine::intersect(&mut parts, MAX_STATES).ok()?;
    (!m.states.is_empty()).then_some(m)
}

/// The names (decoded) an ECMA-262 `patternProperties` pattern matches, as an
/// automaton; `None` when it does not compile.
pub(crate) fn name_pattern(p: &str) -> Option<Box<dyn Automaton>> {
    Some(Box::new(Pattern::new(&decoded_pattern(p).ok()?).ok()?))
}
