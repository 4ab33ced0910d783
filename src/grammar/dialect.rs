//! How values are spelled: the [`Dialect`] trait and JSON, the dialect the grammar
//! itself writes ([`Json`], [`JsonWith`] for a template's [`Spacing`]). Each answers
//! with small regexes (a quote, a string character, a key, a literal); the emitters
//! ([`super::regex`]) assemble them into a value's grammar.
//!
//! The other spellings tool calls use (Gemma 4's, Python literals, bare text between
//! tags) are argument dialects and live with their readers and converters, one file
//! each, in `tools::dialect`; they implement this trait.

use super::part::Built;
use super::rules::Rules;
use regex_syntax::escape;
use serde_json::Value;

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
    /// [`Dialect::any_key`] as a [`Built`] part made without parsing (its shared
    /// parts put in `rules`), for dialects that build it so: the key trie is large
    /// for objects with many declared names, and parsing it back was a large part
    /// of compiling such a schema. `None`: the dialect gives text only.
    fn any_key_built(&self, _except: &[&str], _rules: &mut Rules) -> Option<Built> {
        None
    }
    /// Regex for a literal JSON value (`enum`, `const`).
    fn literal(&self, v: &Value) -> String;
    /// Whether an object key is spelled as a string of this dialect (so a key
    /// machine, [`super::ir::Node::Object`]'s `extra_keys`, can be written as one).
    fn keys_are_strings(&self) -> bool {
        true
    }
    /// Regex for the separator between key and value.
    fn colon(&self) -> String {
        Spacing::Optional.colon().into()
    }
    /// Regex for the separator between items.
    fn comma(&self) -> String {
        Spacing::Optional.comma().into()
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
    /// Regex for an object key whose name matches a `patternProperties` pattern, given
    /// the pattern already translated for JSON strings (`body`, from
    /// `ecma::pattern_body`); `None` where the dialect's keys cannot spell
    /// such names (then those properties are never generated).
    fn pattern_key(&self, body: &str) -> Option<String> {
        let q = self.quote();
        Some(format!("{q}{body}{q}"))
    }
    /// Regex for a boolean.
    fn boolean(&self) -> String {
        "(?:true|false)".into()
    }
    /// Regex for null.
    fn null(&self) -> String {
        "null".into()
    }
    /// The regex of a second spelling of a string that has no pattern, format or
    /// length bounds (`None`: only [`Dialect::quote`] around [`Dialect::string_char`]s):
    /// Python's `repr` writes a string that holds `'` in double quotes (`"it's"`).
    fn other_string(&self) -> Option<String> {
        None
    }
}

/// RFC 8259 JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

const JSON_CHAR: &str = r#"(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})"#;

/// One character that stands in a JSON string as itself.
const PLAIN_CHAR: &str = r#"[^"\\\x00-\x1F]"#;

/// A JSON key's characters holding at least one escape of a character that cannot
/// stand plain.
const JSON_ESCAPED_KEY: &str =
    r#"[^"\\\x00-\x1F]*\\(?:["\\bfnrt]|u00[01][0-9a-fA-F])(?:[^"\\\x00-\x1F]|\\(?:["\\bfnrt]|u00[01][0-9a-fA-F]))*"#;

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
    key_except_text(&Trie::of(names), first, rest)
}

/// [`key_except`] over the names' trie.
fn key_except_text(trie: &Trie, first: &str, rest: &str) -> String {
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
    rec(trie, first, rest, &mut out);
    out
}

/// Longest declared name [`key_except_built`] builds a trie `Hir` for.
pub const MAX_BUILT_KEY_CHARS: usize = 256;

/// [`key_except`] followed by `close`, as a [`Built`] part made without parsing:
/// at each node of the names' trie the key may close (unless a name ends there),
/// leave every name (a character no name continues with) or follow a name one
/// character further. Once it left every name, the rest of the key (`rest*` then
/// `close`) is one rule of `rules` that every node calls, so it is compiled once
/// rather than once per node. `None` when `first` or `rest` is not a bracketed
/// class, a byte class meets a name holding a character past ASCII, or a name is
/// longer than [`MAX_BUILT_KEY_CHARS`].
///
/// Cost: linear in the names' total length, as [`key_except`].
///
/// ```
/// use toolgate::grammar::regex::{key_except, key_except_built};
/// use toolgate::grammar::part::Built;
/// use toolgate::grammar::rules::Rules;
/// use toolgate::grammar::Grammar;
/// let mut rules = Rules::new();
/// let end = rules.leaf("!".into());
/// let built = key_except_built("[a-z]", "[a-z]", &["ab", "b"], end, &mut rules).unwrap();
/// let g = Grammar::from_rules(&built.text, &rules)?;
/// assert!(["a!", "abc!", "ba!", "c!", "!"].iter().all(|k| g.matches(k.as_bytes())));
/// assert!(!g.matches(b"ab!") && !g.matches(b"b!") && !g.matches(b"a"));
/// # Ok::<(), toolgate::Error>(())
/// ```
pub fn key_except_built(first: &str, rest: &str, names: &[&str], close: Built, rules: &mut Rules) -> Option<Built> {
    // The trie nests one level per character, and the NFA compiler recurses per
    // level: past this many characters the text form (and the parser's nesting limit)
    // decides.
    if names.iter().any(|n| n.chars().count() > MAX_BUILT_KEY_CHARS) {
        return None;
    }
    use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind};
    // Dialects pass a few constant classes: each is parsed once per process.
    static CLASSES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, Option<Class>>>> =
        std::sync::LazyLock::new(Default::default);
    let class = |text: &str| {
        let mut cache = CLASSES.lock().unwrap_or_else(|p| p.into_inner());
        let parsed =
            cache.entry(text.to_string()).or_insert_with(|| match Built::parse(text).ok()?.hir()?.into_kind() {
                HirKind::Class(c) => Some(c),
                _ => None,
            });
        parsed.clone()
    };
    let (first_class, rest_class) = (class(first)?, class(rest)?);
    // `class` without the characters in `taken`.
    fn minus(class: &Class, taken: &[char]) -> Option<Class> {
        Some(match class {
            Class::Unicode(u) => {
                let mut u = u.clone();
                u.difference(&ClassUnicode::new(taken.iter().map(|&c| ClassUnicodeRange::new(c, c))));
                Class::Unicode(u)
            }
            Class::Bytes(b) => {
                let bytes: Option<Vec<u8>> = taken.iter().map(|&c| u8::try_from(c).ok().filter(u8::is_ascii)).collect();
                let mut b = b.clone();
                b.difference(&ClassBytes::new(bytes?.into_iter().map(|x| ClassBytesRange::new(x, x))));
                Class::Bytes(b)
            }
        })
    }
    /// A class split where keys are cheap to compile: its ASCII characters as bytes
    /// (one NFA state), and a reference to one rule holding its characters from
    /// U+0080 on followed by `tail` (their UTF-8 trie is a dozen states: compiled
    /// once, not once per trie node). `None` for a byte class.
    struct Wide {
        ascii: ClassBytes,
        /// The rule `[class&&[^\x00-\x7F]]tail`; `None` when the class has no such
        /// characters.
        rule: Option<Built>,
    }
    fn wide(text: &str, class: &Class, tail: &Built, rules: &mut Rules) -> Option<Wide> {
        let Class::Unicode(u) = class else { return None };
        let ascii_range = ClassUnicode::new([ClassUnicodeRange::new('\0', '\x7F')]);
        let mut ascii = u.clone();
        ascii.intersect(&ascii_range);
        let mut above = u.clone();
        above.difference(&ascii_range);
        let ascii = ClassBytes::new(ascii.iter().map(|r| ClassBytesRange::new(r.start() as u8, r.end() as u8)));
        let rule = (!above.ranges().is_empty()).then(|| {
            let class = Built::from_hir(format!("[{text}&&[^\\x00-\\x7F]]"), Hir::class(Class::Unicode(above)));
            rules.share_part_always(Built::cat(vec![class, tail.clone()]))
        });
        Some(Wide { ascii, rule })
    }
    struct Node<'a> {
        rest: (&'a str, &'a Class, Option<&'a Wide>),
        close: &'a Built,
        tail: &'a Built,
    }
    /// The trie from node `t` on, its text written to `out` as it goes (the parts are
    /// built without text: joining it level by level would copy it once per level).
    fn rec(t: &Trie, class: (&str, &Class, Option<&Wide>), n: &Node, out: &mut String) -> Option<Built> {
        let mut alts = Vec::with_capacity(t.next.len() + 3);
        out.push_str("(?:");
        // Each alternative's text, after a bar past the first.
        fn spell(alts: &[Built], text: &[&str], out: &mut String) {
            if !alts.is_empty() {
                out.push('|');
            }
            text.iter().for_each(|t| out.push_str(t));
        }
        if !t.end {
            spell(&alts, &[&n.close.text], out);
            alts.push(n.close.clone());
        }
        let taken: Vec<char> = t.next.keys().copied().collect();
        match class.2 {
            // Names of ASCII characters (most): the ASCII characters no name
            // continues with as bytes, the others through the shared rule.
            Some(wide) if taken.iter().all(char::is_ascii) => {
                let mut ascii = wide.ascii.clone();
                ascii.difference(&ClassBytes::new(taken.iter().map(|&c| ClassBytesRange::new(c as u8, c as u8))));
                if !ascii.ranges().is_empty() {
                    let spelled: String =
                        ascii.iter().map(|r| format!("\\x{:02X}-\\x{:02X}", r.start(), r.end())).collect();
                    let leave = Built::from_hir(String::new(), Hir::class(Class::Bytes(ascii)));
                    spell(&alts, &["(?-u:[", &spelled, "])", &n.tail.text], out);
                    alts.push(Built::cat_unspelled(vec![leave, n.tail.clone()]));
                }
                if let Some(rule) = &wide.rule {
                    spell(&alts, &[&rule.text], out);
                    alts.push(rule.clone());
                }
            }
            _ => {
                let (leave, text) = match taken.is_empty() {
                    true => (Hir::class(class.1.clone()), class.0.to_string()),
                    false => {
                        let spelled: String = taken.iter().map(|c| escape(&c.to_string())).collect();
                        (Hir::class(minus(class.1, &taken)?), format!("[{}&&[^{spelled}]]", class.0))
                    }
                };
                spell(&alts, &[&text, &n.tail.text], out);
                alts.push(Built::cat_unspelled(vec![Built::from_hir(String::new(), leave), n.tail.clone()]));
            }
        }
        for (c, child) in &t.next {
            spell(&alts, &[&escape(&c.to_string())], out);
            let bytes = Built::bytes(String::new(), c.encode_utf8(&mut [0; 4]).as_bytes());
            alts.push(Built::cat_unspelled(vec![bytes, rec(child, n.rest, n, out)?]));
        }
        out.push(')');
        Some(Built::bar_unspelled(alts))
    }
    let rest_star = Built::from_hir(rest.to_string(), Hir::class(rest_class.clone())).star();
    let tail = rules.share_part_always(Built::cat(vec![rest_star, close.clone()]));
    let first_wide = wide(first, &first_class, &tail, rules);
    let rest_own = (first != rest).then(|| wide(rest, &rest_class, &tail, rules)).flatten();
    let rest_wide = if first == rest { first_wide.as_ref() } else { rest_own.as_ref() };
    let node = Node { rest: (rest, &rest_class, rest_wide), close: &close, tail: &tail };
    let mut text = String::new();
    let built = rec(&Trie::of(names), (first, &first_class, first_wide.as_ref()), &node, &mut text)?;
    Some(built.spelled(text))
}

/// The names' trie: each node says whether a name ends there and where each next
/// character leads.
#[derive(Default)]
struct Trie {
    end: bool,
    next: std::collections::BTreeMap<char, Trie>,
}

impl Trie {
    fn of(names: &[&str]) -> Self {
        let mut root = Trie::default();
        for n in names {
            let mut at = &mut root;
            for c in n.chars() {
                at = at.next.entry(c).or_default();
            }
            at.end = true;
        }
        root
    }
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
        match names.len() == except.len() {
            true => format!("\"(?:{plain}|{JSON_ESCAPED_KEY})\""),
            // A declared name that needs an escape: extra keys stay plain.
            false => format!("\"{plain}\""),
        }
    }
    fn any_key_built(&self, except: &[&str], rules: &mut Rules) -> Option<Built> {
        // As `any_key`, the closing quote carried into the trie (so the rest of a key
        // is one rule in tail position).
        let names: Vec<&str> = except.iter().copied().filter(|n| n.chars().all(is_plain_char)).collect();
        let quote = Built::bytes("\"".into(), &b"\""[..]);
        let plain = key_except_built(PLAIN_CHAR, PLAIN_CHAR, &names, quote.clone(), rules)?;
        match names.len() == except.len() {
            true => {
                static ESCAPED: std::sync::LazyLock<Option<Built>> =
                    std::sync::LazyLock::new(|| Built::parse(JSON_ESCAPED_KEY).ok());
                let escaped = Built::cat(vec![ESCAPED.clone()?, quote.clone()]);
                Some(Built::cat(vec![quote, Built::bar(vec![plain, escaped]).group()]))
            }
            false => Some(Built::cat(vec![quote, plain])),
        }
    }
    fn literal(&self, v: &Value) -> String {
        json_literal(v, Spacing::Compact)
    }
}

/// Regex for the JSON literal `v`, its members and items separated as `spacing` says.
fn json_literal(v: &Value, spacing: Spacing) -> String {
    let (colon, comma) = (spacing.colon(), spacing.comma());
    match v {
        Value::Number(n) => number_literal(n),
        Value::Array(a) => {
            format!(r"\[{}\]", a.iter().map(|x| json_literal(x, spacing)).collect::<Vec<_>>().join(comma))
        }
        Value::Object(o) => format!(
            r"\{{{}\}}",
            o.iter()
                .map(|(k, x)| format!("{}{colon}{}", Json.key(k), json_literal(x, spacing)))
                .collect::<Vec<_>>()
                .join(comma)
        ),
        other => escape(&serde_json::to_string(other).unwrap_or_default()),
    }
}

/// What JSON text writes after its `:` and `,` separators.
///
/// Python's `json.dumps` (and so transformers' `tojson`, which chat templates render
/// tool calls with) writes `": "` and `", "`; `serde_json` and `JSON.stringify` write
/// neither space. A model learns its template's spelling, so a tool-call grammar can
/// follow it: one spelling instead of a choice at every separator lets
/// jump-forward decoding feed a closed object's keys and separators as one run.
///
/// ```
/// use toolgate::grammar::regex::{Dialect, JsonWith, Spacing};
/// assert_eq!((JsonWith(Spacing::Spaced).colon(), JsonWith(Spacing::Compact).comma()), (": ".into(), ",".into()));
/// assert_eq!(JsonWith(Spacing::Optional).colon(), ": ?");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Spacing {
    /// At most one space after each separator, as the text comes (the model chooses).
    #[default]
    Optional,
    /// One space after every `:` and `,` (`{"a": 1, "b": 2}`), as Python writes JSON.
    Spaced,
    /// No space (`{"a":1,"b":2}`).
    Compact,
}

impl Spacing {
    /// The spacing of the JSON `text` (one value): [`Spacing::Spaced`] when one space
    /// follows every `:` and `,` outside strings, [`Spacing::Compact`] when none does,
    /// and `None` when the text mixes them, puts other whitespace there (a newline, an
    /// indent), or has no `:` or no `,` to tell by.
    ///
    /// Cost: one pass over `text`.
    ///
    /// ```
    /// use toolgate::grammar::regex::Spacing;
    /// assert_eq!(Spacing::of(r#"{"a": "x, y", "b": [1, 2]}"#), Some(Spacing::Spaced));
    /// assert_eq!(Spacing::of(r#"{"a":"x: y","b":2}"#), Some(Spacing::Compact));
    /// // An escaped quote does not end the string: its `:  ` is text.
    /// assert_eq!(Spacing::of(r#"{"a":"x\":  y","b":2}"#), Some(Spacing::Compact));
    /// assert_eq!(Spacing::of(r#"{"a": 1,"b": 2}"#), None);
    /// assert_eq!(Spacing::of("{\n  \"a\": 1,\n  \"b\": 2\n}"), None);
    /// assert_eq!(Spacing::of(r#"{"a": 1}"#), None);
    /// ```
    pub fn of(text: &str) -> Option<Spacing> {
        let (mut spaced, mut compact, mut colons, mut commas) = (0, 0, 0, 0);
        let mut quoted = Quoted::default();
        let bytes = text.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if quoted.inside() {
                quoted.step(b);
                continue;
            }
            match b {
                b'"' => quoted.open(b'"'),
                b':' | b',' => {
                    if b == b':' {
                        colons += 1
                    } else {
                        commas += 1
                    }
                    match (bytes.get(i + 1), bytes.get(i + 2)) {
                        (Some(b' '), next) if !next.is_some_and(u8::is_ascii_whitespace) => spaced += 1,
                        (Some(c), _) if !c.is_ascii_whitespace() => compact += 1,
                        _ => return None,
                    }
                }
                _ => {}
            }
        }
        match (colons > 0 && commas > 0, spaced, compact) {
            (false, _, _) => None,
            (true, _, 0) => Some(Spacing::Spaced),
            (true, 0, _) => Some(Spacing::Compact),
            _ => None,
        }
    }

    /// Regex for the separator between a key and its value.
    pub fn colon(self) -> &'static str {
        match self {
            Spacing::Optional => ": ?",
            Spacing::Spaced => ": ",
            Spacing::Compact => ":",
        }
    }

    /// Regex for the separator between items and members.
    pub fn comma(self) -> &'static str {
        match self {
            Spacing::Optional => ", ?",
            Spacing::Spaced => ", ",
            Spacing::Compact => ",",
        }
    }
}

/// Where a string of JSON-like text ends: the one reading of quotes and backslash
/// escapes that every scanner of such text shares (the spacing reader above, the call
/// parsers in `tools`). The caller says where a string opens; bytes fed inside it
/// close it at the unescaped closing quote.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Quoted {
    /// The open string's closing quote and whether it takes backslash escapes
    /// (`None`: outside any string).
    open: Option<(Option<u8>, bool)>,
    /// The previous byte inside the string was an escaping backslash.
    escaped: bool,
}

impl Quoted {
    /// Whether the text read so far ends inside a string.
    pub(crate) fn inside(&self) -> bool {
        self.open.is_some()
    }

    /// A string opens, closed by `quote` and taking backslash escapes (JSON's `"`,
    /// Python's `'`).
    pub(crate) fn open(&mut self, quote: u8) {
        self.open = Some((Some(quote), true));
        self.escaped = false;
    }

    /// A string opens that no byte closes and that has no escapes (Gemma 4's, between
    /// quote tokens): the caller [`close`](Self::close)s it.
    pub(crate) fn open_raw(&mut self) {
        self.open = Some((None, false));
        self.escaped = false;
    }

    /// The open string ends (a closing token the caller read).
    pub(crate) fn close(&mut self) {
        self.open = None;
    }

    /// Read `b`, a byte inside the open string: whether it closed the string. Bytes
    /// of a multi-byte character never equal a quote or a backslash (UTF-8), so text
    /// may be fed byte by byte.
    pub(crate) fn step(&mut self, b: u8) -> bool {
        let Some((close, escapes)) = self.open else { return false };
        if self.escaped {
            self.escaped = false;
        } else if escapes && b == b'\\' {
            self.escaped = true;
        } else if Some(b) == close {
            self.open = None;
            return true;
        }
        false
    }
}

/// RFC 8259 JSON with its separators spelled as a [`Spacing`] says ([`Json`] is
/// `JsonWith(Spacing::Optional)`, literals compact): the values of tool calls whose
/// template fixes the spelling.
///
/// ```
/// use toolgate::grammar::{regex::{to_regex, JsonWith, Spacing}, schema, Grammar};
/// let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": [[1, 2]]}}, "required": ["a", "b"]});
/// let node = schema::compile(&schema, schema::Mode::Strict)?;
/// let g = Grammar::from_regex(&to_regex(&node, &JsonWith(Spacing::Spaced)))?;
/// assert!(g.matches(br#"{"a": 1, "b": [1, 2]}"#) && !g.matches(br#"{"a":1, "b": [1, 2]}"#));
/// # Ok::<(), toolgate::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonWith(pub Spacing);

/// The [`Dialect`] methods of object keys, as [`Json`] spells them: for dialects whose
/// keys are JSON strings ([`JsonWith`], and the Python and tagged-text spellings in
/// `tools::dialect`).
macro_rules! json_keys {
    () => {
        fn key(&self, name: &str) -> String {
            $crate::grammar::dialect::Json.key(name)
        }
        fn any_key(&self, except: &[&str]) -> String {
            $crate::grammar::dialect::Json.any_key(except)
        }
        fn any_key_built(
            &self,
            except: &[&str],
            rules: &mut $crate::grammar::rules::Rules,
        ) -> Option<$crate::grammar::part::Built> {
            $crate::grammar::dialect::Json.any_key_built(except, rules)
        }
    };
}
pub(crate) use json_keys;

/// [`json_keys`], and strings as [`Json`] spells them ([`JsonWith`], Python's
/// double-quoted literals).
macro_rules! json_strings_and_keys {
    () => {
        fn quote(&self) -> String {
            $crate::grammar::dialect::Json.quote()
        }
        fn string_char(&self) -> String {
            $crate::grammar::dialect::Json.string_char()
        }
        $crate::grammar::dialect::json_keys!();
    };
}
pub(crate) use json_strings_and_keys;

impl Dialect for JsonWith {
    json_strings_and_keys!();
    fn literal(&self, v: &Value) -> String {
        match self.0 {
            // Literals of `Json` are compact.
            Spacing::Optional => Json.literal(v),
            s => json_literal(v, s),
        }
    }
    fn colon(&self) -> String {
        self.0.colon().into()
    }
    fn comma(&self) -> String {
        self.0.comma().into()
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
