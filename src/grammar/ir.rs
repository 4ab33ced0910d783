//! The value grammar a schema compiles to: [`Node`] and its parts, the compile
//! options ([`Mode`], [`Objects`]) and the limits every stage checks. The schema
//! compiler ([`super::schema`]) builds it, the emitters ([`super::regex`]) write it
//! as a regex; it depends only on the automata a [`Node::Machine`] holds.

use serde_json::Value;

use super::machine::Machine;

/// How unsupported keywords are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Unsupported keyword → error with its pointer.
    #[default]
    Strict,
    /// Unsupported keyword → ignored (documented over-approximation).
    Lenient,
}

/// What an object schema with declared `properties` and no `additionalProperties`
/// allows besides them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Objects {
    /// Nothing: a tool call carries exactly its declared arguments (as OpenAI strict
    /// mode reads such a schema). The default.
    #[default]
    Closed,
    /// JSON Schema's reading: any other property, anywhere among the declared ones,
    /// and (objects of at most [`super::rules::ANY_ORDER_MAX_PROPERTIES`] properties)
    /// the declared ones in any order, with [`super::Grammar::from_schema_with`]; in a
    /// plain regex, extras after the declared ones, in schema order. Extra values nest
    /// at most [`SHARED_OPEN_EXTRA_LEVELS`] ([`OPEN_EXTRA_LEVELS`]) containers. A
    /// schema without `type` takes every type, its keywords constraining the values
    /// they apply to (`Closed` reads the type they imply: `properties` → object).
    Open,
}

/// Containers an extra property's value may nest in an [`Objects::Open`] object, in a
/// plain regex ([`compile`](super::schema::compile) for [`super::regex::to_regex`]).
pub const OPEN_EXTRA_LEVELS: usize = 1;

/// Containers an unconstrained value (`{}`, `true`, `additionalProperties: true`, an
/// array without `items`) may nest, wherever it appears, in a plain regex:
/// `[{"a": [1]}]` is 3 levels. Deeper values are refused by the grammar (a plain
/// regex grows 4× per level).
pub const ANY_VALUE_LEVELS: usize = 3;

/// [`OPEN_EXTRA_LEVELS`] for grammars with shared rules ([`compile_shared`](super::schema::compile_shared)): as deep
/// as the DFA's stack (`dfa::MAX_STACK`), one rule that calls itself.
pub const SHARED_OPEN_EXTRA_LEVELS: usize = super::dfa::MAX_STACK;

/// [`ANY_VALUE_LEVELS`] for grammars with shared rules ([`compile_shared`](super::schema::compile_shared)): as deep
/// as the DFA's stack (`dfa::MAX_STACK`), one rule that calls itself.
pub const SHARED_ANY_VALUE_LEVELS: usize = super::dfa::MAX_STACK;
/// Most schema nodes one compilation visits, `$ref` expansions included: recursive
/// references that branch would otherwise expand exponentially before any size check.
pub const MAX_SCHEMA_NODES: usize = 100_000;
/// Largest grammar (regex text, estimated before it is built) a schema may expand to.
pub const MAX_GRAMMAR_BYTES: usize = 4 << 20;
/// Schemas nested deeper than this are refused with an error (no stack exhaustion
/// on hostile input).
pub const MAX_NESTING: usize = 64;
/// In a plain regex ([`compile`](super::schema::compile)), how many times one `$ref` is expanded inside
/// itself (a recursive schema); deeper, the recursive branch matches nothing (so a
/// tree's innermost `children` must be empty). With shared rules
/// ([`compile_shared`](super::schema::compile_shared)) a recursive `$ref` is a rule that calls itself
/// ([`Node::Def`]) and nests as deep as the DFA's stack instead.
pub const MAX_REF_DEPTH: usize = 6;
/// Most distinct `$ref`s expanded inside one another; deeper, the branch matches
/// nothing. A schema whose chains branch past [`MAX_SCHEMA_NODES`] this way is
/// compiled again with chains of at most [`MAX_REF_DEPTH`].
pub const MAX_REF_CHAIN: usize = 24;

/// String formats with a built-in grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `YYYY-MM-DD`.
    Date,
    /// `hh:mm:ss[.frac](Z|±hh:mm)`.
    Time,
    /// RFC 3339 date-time.
    DateTime,
    /// 8-4-4-4-12 hex.
    Uuid,
    /// `local@host.tld`: a dot-atom local part (≤ 64 characters, at most two dots)
    /// and a host name of 2–4 labels (a subset of RFC 5321 addresses).
    Email,
    /// RFC 3986 absolute URI (without user info or IP literals).
    Uri,
    /// Dotted quad, each 0–255.
    Ipv4,
    /// RFC 1123 host name: 1–6 labels of 1–41 letters, digits and inner hyphens (a
    /// subset that always stays under the 253-character limit).
    Hostname,
}

/// A bound on a [`Node::Number`], as a decimal: `value + frac / 10^16`, where `value`
/// is the bound's floor. `minimum: 0` is `NumBound { value: 0, frac: 0, exclusive:
/// false }`, `exclusiveMaximum: 2.5` is `NumBound { value: 2, frac: 5 * 10^15,
/// exclusive: true }` and `minimum: -0.25` is `NumBound { value: -1, frac: 75 *
/// 10^14, exclusive: false }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NumBound {
    /// The bound's floor, within ±10^15.
    pub value: i64,
    /// The bound's fractional part in units of 10^-16, `0..10^16`.
    pub frac: u64,
    /// Whether the bound itself is excluded.
    pub exclusive: bool,
}

/// Units of [`NumBound::frac`] in one.
pub const FRAC_UNIT: u64 = 10_000_000_000_000_000;

impl NumBound {
    /// The bound `x` (given as JSON writes it, as `f64`'s shortest decimal), or `None`
    /// when it is not finite, is beyond ±10^15, or has more than 16 decimals.
    ///
    /// ```
    /// use toolgate::grammar::schema::NumBound;
    /// let b = NumBound::new(-0.25, false).unwrap();
    /// assert_eq!((b.value, b.frac), (-1, 7_500_000_000_000_000));
    /// assert_eq!(NumBound::new(1e300, false), None);
    /// ```
    pub fn new(x: f64, exclusive: bool) -> Option<NumBound> {
        if !x.is_finite() || x.abs() > 1e15 {
            return None;
        }
        let text = format!("{}", x.abs());
        let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
        if frac.len() > 16 {
            return None;
        }
        let int: i64 = int.parse().ok()?;
        let frac: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<16}").parse().ok()? };
        Some(if x >= 0.0 || frac == 0 {
            NumBound { value: if x < 0.0 { -int } else { int }, frac, exclusive }
        } else {
            NumBound { value: -int - 1, frac: FRAC_UNIT - frac, exclusive }
        })
    }

    /// The bound's negation, with the same exclusivity.
    pub fn negated(self) -> NumBound {
        if self.frac == 0 {
            NumBound { value: -self.value, ..self }
        } else {
            NumBound { value: -self.value - 1, frac: FRAC_UNIT - self.frac, ..self }
        }
    }

    /// The fractional digits, without trailing zeros (`""` for a whole bound).
    pub fn frac_digits(self) -> String {
        if self.frac == 0 {
            return String::new();
        }
        format!("{:016}", self.frac).trim_end_matches('0').to_string()
    }
}

/// What a [`Node::Machine`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineKind {
    /// A string's characters, between the dialect's quotes and spelled with its escapes.
    String,
    /// An integer's JSON text.
    Integer,
    /// A number's JSON text (plain decimal, no exponent).
    Number,
}

/// The value grammar a schema compiles to.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Matches nothing (an exhausted recursion, an empty `enum`).
    Never,
    /// `null`.
    Null,
    /// `true` / `false`.
    Boolean,
    /// An integer in `[min, max]`.
    Integer {
        /// Inclusive lower bound.
        min: Option<i64>,
        /// Inclusive upper bound.
        max: Option<i64>,
    },
    /// A JSON number between optional integer-valued bounds. Unbounded numbers may
    /// carry an exponent; bounded ones are written in plain decimal notation (the
    /// bounds are then checked on the digits).
    Number {
        /// Lower bound.
        min: Option<NumBound>,
        /// Upper bound.
        max: Option<NumBound>,
    },
    /// A string.
    String {
        /// Minimum length in characters.
        min_len: usize,
        /// Maximum length in characters.
        max_len: Option<usize>,
        /// A regex the (unescaped) value must match.
        pattern: Option<String>,
        /// A built-in format.
        format: Option<Format>,
    },
    /// A value whose language is an explicit automaton: a `pattern` or `format` with
    /// length bounds, a `pattern` beside a `format`, or a number's `multipleOf`. Only
    /// [`compile_shared`](super::schema::compile_shared) makes these; the regex stage writes them as rules
    /// ([`super::regex::to_rules`]).
    Machine {
        /// The automaton: over the string's characters (UTF-8, unescaped) for
        /// [`MachineKind::String`], over the number's JSON text otherwise.
        machine: std::sync::Arc<Machine>,
        /// What the machine reads.
        kind: MachineKind,
    },
    /// One of these literal JSON values.
    Literals(Vec<Value>),
    /// An array.
    Array {
        /// Positional items (`prefixItems`).
        prefix: Vec<Node>,
        /// Items after the prefix (`None`: no more items).
        items: Option<Box<Node>>,
        /// `minItems`.
        min: usize,
        /// `maxItems`.
        max: Option<usize>,
    },
    /// An object with properties in schema order.
    Object {
        /// `(name, grammar, required)`. A [`Node::Never`] grammar (what
        /// `prune` leaves of a property with no value in an object open to
        /// other names): the property is never written, and its name is no extra.
        properties: Vec<(String, Node, bool)>,
        /// Extra properties allowed after the declared ones, with this value grammar.
        additional: Option<Box<Node>>,
        /// `patternProperties`: extra properties whose name matches the pattern
        /// (ECMA-262, as `pattern`), with this value grammar; written with the other
        /// extras, after the declared ones.
        patterns: Vec<(String, Node)>,
        /// The names `additional` properties may take, over the decoded name's UTF-8
        /// (a [`MachineKind::String`] machine): beside `patterns`, every name that is
        /// neither declared nor matches a pattern. `None`: every undeclared name.
        extra_keys: Option<std::sync::Arc<Machine>>,
        /// `dependencies` in array form: an object holding the first name also holds
        /// every name of the list (each a declared property). Only open objects with
        /// shared rules have these, written as a [`super::rules::PropertySet`].
        dependencies: Vec<(String, Vec<String>)>,
        /// `minProperties: 1` beyond the required properties: the empty object `{}`
        /// is excluded.
        non_empty: bool,
    },
    /// Any of these.
    AnyOf(Vec<Node>),
    /// A `$ref`'s target that refers to itself inside `body` ([`Node::Recurse`]
    /// with the same `key`): written once, as a rule that calls itself, so a
    /// recursive schema nests as deep as the DFA's stack
    /// (`dfa::MAX_STACK`). Only [`compile_shared`](super::schema::compile_shared) makes these.
    Def {
        /// The `$ref` target.
        key: String,
        /// The target's grammar.
        body: Box<Node>,
    },
    /// The innermost enclosing [`Node::Def`] with this key, again.
    Recurse(String),
    /// Any JSON value whose arrays and objects nest at most `levels` deep (`{}`,
    /// `true`, an array without `items`, free-form extra properties). Written with
    /// each level once ([`super::regex::to_rules`] references the level below), so a
    /// level costs one rule.
    AnyValue {
        /// Containers the value may nest: `[{"a": [1]}]` is 3.
        levels: usize,
    },
}

impl Node {
    /// Put the declared properties of every object in the tree in the order of their
    /// names compared case-insensitively — the order of Jinja's `dictsort`, which
    /// templates such as Gemma 4's use to print a call's arguments — so the grammar
    /// writes a call's keys in the order the model saw them in training. Literal
    /// objects (`enum`, `const`) are sorted the same way; extra properties
    /// (`additional`, `patterns`) stay after the declared ones, as before. Names equal
    /// but for case keep their schema order (the sort is stable, as Python's).
    ///
    /// Cost: one walk over the tree and a sort of each object's properties. Never fails.
    ///
    /// ```
    /// use toolgate::grammar::schema::{compile, Mode};
    /// use toolgate::grammar::ir::Node;
    /// let schema = serde_json::json!({"type": "object", "properties": {
    ///     "unit": {"type": "string"}, "City": {"type": "string"}, "days": {"type": "integer"}}});
    /// let mut node = compile(&schema, Mode::Strict)?;
    /// node.sort_keys();
    /// let Node::Object { properties, .. } = node else { panic!() };
    /// let names: Vec<&str> = properties.iter().map(|p| p.0.as_str()).collect();
    /// assert_eq!(names, ["City", "days", "unit"]);
    /// # Ok::<(), toolgate::Error>(())
    /// ```
    pub fn sort_keys(&mut self) {
        match self {
            Node::Object { properties, additional, patterns, .. } => {
                properties.sort_by_cached_key(|p| p.0.to_lowercase());
                for (_, node, _) in properties.iter_mut() {
                    node.sort_keys();
                }
                if let Some(node) = additional {
                    node.sort_keys();
                }
                for (_, node) in patterns.iter_mut() {
                    node.sort_keys();
                }
            }
            Node::Array { prefix, items, .. } => {
                prefix.iter_mut().for_each(Node::sort_keys);
                if let Some(node) = items {
                    node.sort_keys();
                }
            }
            Node::AnyOf(nodes) => nodes.iter_mut().for_each(Node::sort_keys),
            Node::Def { body, .. } => body.sort_keys(),
            Node::Literals(values) => {
                for v in values.iter_mut() {
                    sort_value_keys(v);
                }
            }
            Node::Never
            | Node::Null
            | Node::Boolean
            | Node::Integer { .. }
            | Node::Number { .. }
            | Node::String { .. }
            | Node::Machine { .. }
            | Node::Recurse(_)
            | Node::AnyValue { .. } => {}
        }
    }
}

/// `v`'s object keys, at every depth, in [`Node::sort_keys`]' order.
fn sort_value_keys(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
            entries.sort_by_cached_key(|(k, _)| k.to_lowercase());
            for (k, mut v) in entries {
                sort_value_keys(&mut v);
                map.insert(k, v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sort_value_keys),
        _ => {}
    }
}
