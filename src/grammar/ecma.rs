//! JSON Schema `pattern`s (ECMA-262) translated to regex-syntax: matched on the
//! string's spelling in a dialect ([`pattern_body`]), on its decoded characters
//! ([`decoded_pattern`]), with length bounds ([`pattern_with_length`]), and as
//! automata over property names ([`names_machine`]).

use super::dialect::{Dialect, Json};
use super::error::{BuildError, BuildErrorKind as Kind};
use super::machine::{Automaton, Machine, Not, Pattern, MAX_STATES};
use super::part::{repeat, NEVER};

/// JSON Schema's `pattern` (ECMA-262 syntax, matched anywhere in the decoded
/// string unless anchored) → regex over the string's spelling in dialect `d`.
///
/// ECMA semantics where they differ from Rust's: `\d` and `\w` are ASCII, `.`
/// excludes `\r` and U+2028/U+2029 as well as `\n`. Characters a JSON string must
/// escape are matched as their escapes. `^`/`$` are honoured at the pattern's ends;
/// anywhere else, and look-around, are an error.
///
/// # Errors
/// A message when the pattern does not parse or uses an unsupported construct.
pub fn pattern_body(p: &str, d: &dyn Dialect) -> std::result::Result<String, BuildError> {
    // `a|b` matches somewhere exactly when `a` or `b` does: each alternative keeps its
    // own anchors (`^\d+$|^none$`).
    let alternatives = top_level_alternatives(p);
    if alternatives.len() > 1 {
        let bodies: std::result::Result<Vec<String>, BuildError> =
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
/// # Errors
/// As [`pattern_body`].
pub fn decoded_pattern(p: &str) -> std::result::Result<String, BuildError> {
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
/// # Errors
/// As [`pattern_body`].
pub fn pattern_with_length(
    p: &str,
    min: usize,
    max: Option<usize>,
    d: &dyn Dialect,
) -> std::result::Result<Option<String>, BuildError> {
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
        return Ok(Some(NEVER.to_string()));
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
fn parse_ecma(core: &str) -> std::result::Result<regex_syntax::hir::Hir, BuildError> {
    regex_syntax::ParserBuilder::new()
        .build()
        .parse(&ecma_classes(core))
        .map_err(|e| BuildError::new(Kind::Pattern, format!("invalid or unsupported regex: {e}")))
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

/// A `patternProperties` pattern compiled once, to test property names against it
/// (ECMA-262 semantics, by the same translation [`pattern_body`] uses).
#[derive(Debug)]
pub struct NameMatcher {
    dfa: super::dfa::Dfa,
}

impl NameMatcher {
    /// Compile `pattern`. Cost: one translation and one NFA build.
    ///
    /// # Errors
    /// As [`pattern_body`], or when the translated pattern does not compile.
    pub fn new(pattern: &str) -> std::result::Result<Self, BuildError> {
        let body = pattern_body(pattern, &Json)?;
        let dfa = super::dfa::Dfa::new(&body, super::dfa::NFA_SIZE_LIMIT).map_err(BuildError::from_error)?;
        Ok(Self { dfa })
    }

    /// Whether the name `text` matches. Cost: a walk of the name's JSON spelling on
    /// a fresh lazy DFA cache.
    pub fn matches(&self, text: &str) -> bool {
        // Names are matched as the grammar spells them: JSON-escaped string content.
        let Ok(spelled) = serde_json::to_string(text) else { return false };
        let dfa = &self.dfa;
        let mut cache = dfa.create_cache(32 << 20);
        let walked = spelled.as_bytes()[1..spelled.len() - 1].iter().try_fold(dfa.start(&mut cache), |s, &b| {
            let n = dfa.next(&mut cache, s, b);
            (!n.is_dead()).then_some(n)
        });
        walked.is_some_and(|s| dfa.is_accepting(&cache, s))
    }
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

fn emit_pattern(h: &regex_syntax::hir::Hir, d: &dyn Dialect, out: &mut String) -> std::result::Result<(), BuildError> {
    use regex_syntax::hir::{Class, HirKind};
    match h.kind() {
        HirKind::Empty => {}
        HirKind::Literal(lit) => {
            let text =
                std::str::from_utf8(&lit.0).map_err(|_| BuildError::new(Kind::Pattern, "a byte-oriented pattern"))?;
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
        HirKind::Class(Class::Bytes(_)) => {
            return Err(BuildError::new(Kind::Pattern, "a byte-oriented class in the pattern"))
        }
        HirKind::Look(_) => {
            return Err(BuildError::new(Kind::Pattern, "`^`, `$` or `\\b` inside the pattern (only at its ends)"))
        }
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

/// The object keys (as a machine over the decoded name) that match pattern `within`
/// (ECMA-262; `None`: any name), no pattern of `avoid`, and none of `names`; `None`
/// when a pattern does not compile, the product passes [`MAX_STATES`], or no name is
/// left. Cost: the product of the patterns' automata and a trie of the names.
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

#[cfg(test)]
mod tests {
    #[test]
    fn pattern_body_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::regex::{pattern_body, Json};
        use crate::grammar::Grammar;
        let g = Grammar::from_regex(&pattern_body(r"^\d{3}$", &Json)?)?;
        assert!(g.matches(b"123") && !g.matches("١٢٣".as_bytes()));
        let g = Grammar::from_regex(&pattern_body(r#"^a"b$"#, &Json)?)?;
        assert!(g.matches(br#"a\"b"#) && !g.matches(br#"a"b"#));
        Ok(())
    }

    #[test]
    fn decoded_pattern_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::regex::decoded_pattern;
        let re = regex_automata::meta::Regex::new(&format!("^(?:{})$", decoded_pattern(r"^\d+|x$")?)).unwrap();
        assert!(re.is_match("12a") && re.is_match("a\"x") && !re.is_match("a1"));
        Ok(())
    }

    #[test]
    fn pattern_with_length_example() {
        use crate::grammar::regex::{pattern_with_length, Json};
        let re = pattern_with_length("^[a-z]+$", 2, Some(3), &Json).unwrap().unwrap();
        let re = regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
        assert!(re.is_match("ab") && re.is_match("abc") && !re.is_match("a") && !re.is_match("abcd"));
        assert_eq!(pattern_with_length("^a+b$", 1, Some(3), &Json), Ok(None));
    }

    #[test]
    fn namematcher_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::grammar::ecma::NameMatcher;
        let m = NameMatcher::new("^x-")?;
        assert!(m.matches("x-rate") && !m.matches("rate-x"));
        Ok(())
    }

    #[test]
    fn names_machine_example() {
        use crate::grammar::regex::names_machine;
        let m = names_machine(Some("^x-"), &["-id$"], &["x-a"]).unwrap();
        assert!(m.matches(b"x-b") && !m.matches(b"x-a") && !m.matches(b"x-id") && !m.matches(b"y"));
    }
}
