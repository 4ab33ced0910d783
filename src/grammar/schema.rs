//! JSON Schema → value grammar ([`Node`]).
//!
//! The subset of draft 2020-12 that tool `parameters` and `response_format` use. A
//! keyword toolgate cannot enforce is an error naming the keyword and its JSON pointer
//! in [`Mode::Strict`], or ignored (the grammar then accepts more than the schema) in
//! [`Mode::Lenient`].

use serde_json::{Map, Value};

use super::dfa::Dfa;
use super::ecma::name_pattern;
pub use super::ir::{
    Format, MachineKind, Mode, Node, NumBound, Objects, ANY_VALUE_LEVELS, FRAC_UNIT, MAX_GRAMMAR_BYTES, MAX_NESTING,
    MAX_REF_CHAIN, MAX_REF_DEPTH, MAX_SCHEMA_NODES, OPEN_EXTRA_LEVELS, SHARED_ANY_VALUE_LEVELS,
    SHARED_OPEN_EXTRA_LEVELS,
};
use super::machine::{Automaton, Length, Machine, MultipleOf, Pattern, MAX_STATES};
use super::prune::prune;
pub use super::regex::names_machine;

use crate::{Error, Result};

/// Compile a JSON Schema into a [`Node`].
///
/// ```
/// use toolgate::grammar::schema::{compile, Mode, Node};
/// let n = compile(&serde_json::json!({"type": "integer", "minimum": 1, "maximum": 9}), Mode::Strict)?;
/// assert_eq!(n, Node::Integer { min: Some(1), max: Some(9) });
/// let err = compile(&serde_json::json!({"type": "string", "contentEncoding": "base64"}), Mode::Strict).unwrap_err();
/// assert!(err.to_string().contains("contentEncoding") && err.to_string().contains("#/"));
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// # Errors
/// [`Error::Schema`] for an invalid schema, an unresolvable `$ref`, a schema past
/// [`MAX_SCHEMA_NODES`] or [`MAX_NESTING`], or (strict mode) an unsupported keyword.
pub fn compile(schema: &Value, mode: Mode) -> Result<Node> {
    compile_with(schema, mode, Objects::Closed)
}

/// [`compile`], choosing what undeclared properties an object admits ([`Objects`]).
///
/// ```
/// use toolgate::grammar::schema::{compile_with, Mode, Objects, Node};
/// let s = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
/// let Node::Object { additional, .. } = compile_with(&s, Mode::Strict, Objects::Open)? else { panic!() };
/// assert!(additional.is_some());
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// # Errors
/// As [`compile`].
pub fn compile_with(schema: &Value, mode: Mode, objects: Objects) -> Result<Node> {
    let schema = without_ref_siblings(schema);
    let schema = schema.as_ref();
    let c = Compiler::new(schema, mode, objects, ANY_VALUE_LEVELS, OPEN_EXTRA_LEVELS);
    let node = c.node(schema, "#", 0)?;
    c.finish(node)
}

/// Drafts 3 to 7 (a root `$schema` naming one) ignore the keywords beside a `$ref`;
/// later drafts apply them. For the older drafts the schema is read with those
/// siblings dropped (annotations and definitions stay), before any merge could make
/// new ones. Cost: one copy of the schema, for those drafts only.
fn without_ref_siblings(schema: &Value) -> std::borrow::Cow<'_, Value> {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .filter(|(k, _)| !o.get("$ref").is_some_and(Value::is_string) || *k == "$ref" || is_annotation(k))
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let draft = schema.get("$schema").and_then(Value::as_str).unwrap_or("");
    if ["draft-03", "draft-04", "draft-06", "draft-07"].iter().any(|d| draft.contains(d)) {
        std::borrow::Cow::Owned(strip(schema))
    } else {
        std::borrow::Cow::Borrowed(schema)
    }
}

/// [`compile_with`] for a grammar with shared rules ([`super::regex::to_rules`], as
/// [`super::Grammar::from_schema`] builds it): unconstrained values nest
/// [`SHARED_ANY_VALUE_LEVELS`] containers and open objects' extras
/// [`SHARED_OPEN_EXTRA_LEVELS`].
///
/// # Errors
/// As [`compile`].
pub fn compile_shared(schema: &Value, mode: Mode, objects: Objects) -> Result<Node> {
    let schema = without_ref_siblings(schema);
    let schema = schema.as_ref();
    // The node, and whether the schema expanded past `MAX_SCHEMA_NODES`.
    let compile = |max_chain: usize| {
        let mut c = Compiler::new(schema, mode, objects, SHARED_ANY_VALUE_LEVELS, SHARED_OPEN_EXTRA_LEVELS);
        c.machines = true;
        c.max_chain = max_chain;
        (c.node(schema, "#", 0).and_then(|n| c.finish(n)), c.nodes.get() > MAX_SCHEMA_NODES)
    };
    match compile(MAX_REF_CHAIN) {
        // Distinct `$ref`s that branch into each other (Vega-Lite's) expand
        // exponentially with depth: cut such chains as a plain regex does.
        (Err(_), true) => compile(MAX_REF_DEPTH).0,
        (n, _) => n,
    }
}

/// Refuse a value grammar whose plain regex ([`super::regex::to_regex`], which copies
/// shared parts) would pass [`MAX_GRAMMAR_BYTES`], from an estimate made without
/// building it. [`super::Grammar::from_schema`] shares those parts and checks its real
/// size instead; this is for callers that emit a plain regex.
///
/// # Errors
/// [`Error::Schema`] naming the estimated size.
pub fn check_plain_size(node: &Node) -> Result<()> {
    check_grammar_size(super::regex::size_estimate(node))
}

/// Refuse a grammar of `size` bytes past [`MAX_GRAMMAR_BYTES`].
///
/// # Errors
/// [`Error::Schema`] naming the size.
pub(crate) fn check_grammar_size(size: usize) -> Result<()> {
    if size > MAX_GRAMMAR_BYTES {
        return Err(err(
            "#",
            format!(
                "the schema's grammar takes about {} MiB (limit {} MiB): too many nested optional properties or distinct values",
                size >> 20,
                MAX_GRAMMAR_BYTES >> 20
            ),
        ));
    }
    Ok(())
}

struct Compiler<'a> {
    root: &'a Value,
    mode: Mode,
    objects: Objects,
    /// Containers an unconstrained value may nest.
    any_levels: usize,
    /// Containers an open object's extra value may nest.
    extra_levels: usize,
    /// The targets of the `$ref`s being expanded on the current path.
    refs: std::cell::RefCell<Vec<String>>,
    /// Most `$ref`s expanded inside one another ([`MAX_REF_CHAIN`]).
    max_chain: usize,
    /// The targets a [`Node::Recurse`] was made for, until their expansion is wrapped
    /// in its [`Node::Def`].
    recursive: std::cell::RefCell<std::collections::HashSet<String>>,
    /// Schema nodes visited so far (bounded by [`MAX_SCHEMA_NODES`]).
    nodes: std::cell::Cell<usize>,
    /// Whether [`Node::Machine`]s may be made (the grammar will have rules).
    machines: bool,
    /// Set while the next schema is a `oneOf` branch whose untyped siblings all imply
    /// the same types: it reads those types only (see [`Compiler::node`]).
    implied_only: std::cell::Cell<bool>,
    /// Where and why a part of the schema admits no value, in the order found: the
    /// error's text when the whole schema admits none ([`Compiler::finish`]).
    empty: std::cell::RefCell<Vec<(String, String)>>,
}

/// The keywords that constrain an instance (draft 4 to 2020-12), `$ref` aside. Every
/// other keyword is an annotation (`description`, `default`, `x-…`, vendor keys), as
/// JSON Schema says of unknown keywords: ignored beside `$ref` and when `allOf`
/// branches disagree on it.
const ASSERTIONS: &[&str] = &[
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "$dynamicRef",
    "$recursiveRef",
];

fn is_annotation(keyword: &str) -> bool {
    !ASSERTIONS.contains(&keyword) && keyword != "$ref"
}

/// The string formats draft 2020-12 defines (§7.3); `format` names outside this list
/// are annotations only.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

fn err(pointer: &str, reason: impl Into<String>) -> Error {
    Error::Schema { pointer: pointer.to_string(), reason: reason.into() }
}

fn escape_ptr(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

impl<'a> Compiler<'a> {
    fn new(root: &'a Value, mode: Mode, objects: Objects, any_levels: usize, extra_levels: usize) -> Self {
        let (refs, nodes) = (Default::default(), std::cell::Cell::new(0));
        Self {
            root,
            mode,
            objects,
            any_levels,
            extra_levels,
            refs,
            recursive: Default::default(),
            max_chain: MAX_REF_CHAIN,
            nodes,
            machines: false,
            implied_only: Default::default(),
            empty: Default::default(),
        }
    }

    /// [`Node::Never`], noting that the schema at `ptr` admits no value and why.
    fn never(&self, ptr: &str, reason: impl Into<String>) -> Node {
        self.empty.borrow_mut().push((ptr.to_string(), reason.into()));
        Node::Never
    }

    /// The compiled `node` without its parts that admit no value ([`prune`]), or the
    /// error naming why the schema admits none.
    fn finish(&self, node: Node) -> Result<Node> {
        let mut recursive = Vec::new();
        if let Some(n) = prune(node, &mut recursive) {
            return Ok(n);
        }
        let found = self.empty.borrow();
        let pointer = found.first().map_or("#", |(p, _)| p.as_str());
        let reasons: Vec<String> = found
            .iter()
            .map(|(p, r)| if p == pointer { r.clone() } else { format!("{r} (at `{p}`)") })
            .chain(recursive)
            .take(4)
            .collect();
        let reason = if reasons.is_empty() {
            "no value satisfies this schema".to_string()
        } else {
            format!("no value satisfies this schema: {}", reasons.join("; "))
        };
        Err(err(pointer, reason))
    }

    fn node(&self, s: &Value, ptr: &str, depth: usize) -> Result<Node> {
        if depth > MAX_NESTING {
            return Err(err(ptr, format!("schema nested deeper than {MAX_NESTING} levels")));
        }
        self.nodes.set(self.nodes.get() + 1);
        if self.nodes.get() > MAX_SCHEMA_NODES {
            return Err(err(
                ptr,
                format!("the schema expands to more than {MAX_SCHEMA_NODES} nodes (branching recursive `$ref`s?)"),
            ));
        }
        let obj = match s {
            Value::Bool(true) => return Ok(any_value(self.any_levels)),
            Value::Bool(false) => return Ok(self.never(ptr, "the schema `false` admits no value")),
            Value::Object(o) => o,
            _ => return Err(err(ptr, "a schema must be an object or a boolean")),
        };
        if let Some(r) = obj.get("$ref") {
            let r = r.as_str().ok_or_else(|| err(ptr, "`$ref` must be a string"))?;
            // Siblings of `$ref` (2019-09 on) narrow it: merge them into the target,
            // as `allOf` does (drafts 3 to 7 ignore them: `without_ref_siblings`).
            let siblings: Map<String, Value> = obj
                .iter()
                .filter(|(k, _)| !is_annotation(k) && *k != "$ref")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            // The target compiles alike wherever it is reached, except as a `oneOf`
            // branch reading only its implied types: that one is keyed apart.
            let key = if self.implied_only.get() { format!("{r}\u{0}oneOf") } else { r.to_string() };
            let path = self.refs.borrow();
            if self.machines && siblings.is_empty() && path.contains(&key) {
                // Recursion, with shared rules: a reference to the enclosing expansion
                // (`Node::Def`), which the grammar's DFA follows as a call.
                drop(path);
                self.implied_only.set(false);
                self.recursive.borrow_mut().insert(key.clone());
                return Ok(Node::Recurse(key));
            }
            // In a plain regex, recursion is cut; a chain of distinct `$ref`s
            // (Kubernetes nests a dozen) is bounded by `MAX_REF_CHAIN`.
            if path.iter().filter(|t| **t == key).count() >= MAX_REF_DEPTH || path.len() >= self.max_chain {
                return Ok(self.never(ptr, format!("`$ref` `{r}` nested deeper than this grammar expands it")));
            }
            drop(path);
            let target = self.resolve(r, ptr)?;
            self.refs.borrow_mut().push(key.clone());
            let base = self.node(target, &format!("{ptr}/$ref"), depth + 1);
            self.refs.borrow_mut().pop();
            let base = match (base?, self.recursive.borrow_mut().remove(&key)) {
                (body, true) => Node::Def { key, body: Box::new(body) },
                (body, false) => body,
            };
            if siblings.is_empty() {
                return Ok(base);
            }
            let merged = target.as_object().and_then(|t| {
                let mut t = t.clone();
                t.remove("$ref").map_or(Some(()), |_| None)?; // a chained `$ref` cannot be merged
                merge_objects(&t, &Value::Object(siblings.clone()))
            });
            return match (merged, self.mode) {
                (Some(m), _) => {
                    // Keyed apart from the bare target: a `$ref` to it inside `m` means
                    // the target without these siblings.
                    self.refs.borrow_mut().push(format!("{r}\u{0}{}", Value::Object(siblings)));
                    let n = self.node(&m, ptr, depth + 1);
                    self.refs.borrow_mut().pop();
                    n
                }
                (None, Mode::Lenient) => Ok(base),
                (None, Mode::Strict) => {
                    let k = siblings.keys().next().map(String::as_str).unwrap_or("");
                    Err(err(
                        &format!("{ptr}/{}", escape_ptr(k)),
                        format!("keyword `{k}` next to `$ref` cannot be merged"),
                    ))
                }
            };
        }
        if let Some(all) = obj.get("allOf") {
            let merged = self.merge_all_of(obj, all, ptr)?;
            return self.node(&Value::Object(merged), ptr, depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = obj.get(key) {
                let alts = alts.as_array().ok_or_else(|| err(ptr, format!("`{key}` must be an array")))?;
                let mut rest = obj.clone();
                rest.remove(key);
                let mut nodes = Vec::new();
                // `oneOf` branches without `type` that all imply the same types (all
                // `properties`: objects): any value of another type matches every
                // branch, so exactly-one excludes it, and each branch reads only the
                // types it implies.
                let plain = |b: &Map<String, Value>| {
                    !["type", "$ref", "allOf", "anyOf", "oneOf", "enum", "const"].iter().any(|k| b.contains_key(*k))
                };
                let branches: Vec<Option<Value>> = alts.iter().map(|a| merge_objects(&rest, a)).collect();
                let implied: Vec<Option<Vec<&str>>> = branches
                    .iter()
                    .map(|b| b.as_ref().and_then(Value::as_object).filter(|b| plain(b)).map(infer_types))
                    .collect();
                let implied_only = key == "oneOf"
                    && self.objects == Objects::Open
                    && alts.len() >= 2
                    && implied[0].as_ref().is_some_and(|t| !t.is_empty())
                    && implied.iter().all(|t| *t == implied[0]);
                for (i, (a, merged)) in alts.iter().zip(branches).enumerate() {
                    // Keywords beside anyOf apply to every branch.
                    // Where they cannot be merged, strict mode refuses rather than drop
                    // them; lenient mode keeps the branch alone (wider).
                    let branch = match (merged, self.mode) {
                        (Some(b), _) => b,
                        (None, Mode::Lenient) => a.clone(),
                        (None, Mode::Strict) => {
                            return Err(err(
                                &format!("{ptr}/{key}/{i}"),
                                format!("the keywords beside `{key}` cannot be merged into this branch"),
                            ))
                        }
                    };
                    self.implied_only.set(implied_only);
                    let node = self.node(&branch, &format!("{ptr}/{key}/{i}"), depth + 1);
                    self.implied_only.set(false);
                    nodes.push(node?);
                }
                // `oneOf` means exactly one: the grammar's "any of" is that only when no
                // value can match two branches.
                if key == "oneOf" && self.mode == Mode::Strict {
                    for i in 0..nodes.len() {
                        for j in i + 1..nodes.len() {
                            if !disjoint(&nodes[i], &nodes[j]) {
                                return Err(err(
                                    &format!("{ptr}/oneOf/{j}"),
                                    format!("`oneOf` branches {i} and {j} may both match; exactly-one is not enforced"),
                                ));
                            }
                        }
                    }
                }
                return Ok(simplify_any(nodes));
            }
        }
        let literals = match (obj.get("const"), obj.get("enum")) {
            (Some(c), _) => Some(vec![c.clone()]),
            (None, Some(e)) => {
                Some(e.as_array().ok_or_else(|| err(&format!("{ptr}/enum"), "`enum` must be an array"))?.clone())
            }
            (None, None) => None,
        };
        if let Some(mut values) = literals {
            // A `type` beside them keeps only the values of that type.
            let types: Vec<&str> = match obj.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !types.is_empty() {
                values.retain(|v| types.iter().any(|t| value_has_type(v, t)));
            }
            let taken = if obj.contains_key("const") { "const" } else { "enum" };
            self.filter_literals(obj, ptr, taken, &mut values)?;
            if values.is_empty() {
                let beside: Vec<String> =
                    obj.keys().filter(|k| *k != taken && !is_annotation(k)).map(|k| format!("`{k}`")).collect();
                let reason = if beside.is_empty() {
                    format!("`{taken}` lists no value")
                } else {
                    format!("no `{taken}` value satisfies {}", beside.join(", "))
                };
                return Ok(self.never(&format!("{ptr}/{taken}"), reason));
            }
            return Ok(Node::Literals(values));
        }
        let types: Vec<&str> = match obj.get("type") {
            None => Vec::new(),
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .map(|t| t.as_str().ok_or_else(|| err(&format!("{ptr}/type"), "type names must be strings")))
                .collect::<Result<_>>()?,
            Some(_) => return Err(err(&format!("{ptr}/type"), "`type` must be a string or an array")),
        };
        let types: Vec<&str> = if !types.is_empty() {
            types
        } else {
            // Set only for a `oneOf` branch's own schema, which has no `type` and
            // implies some: consumed here, before its subschemas are read.
            let implied_only = self.implied_only.replace(false);
            let inferred = infer_types(obj);
            if self.objects == Objects::Open && !inferred.is_empty() && !implied_only {
                // Without `type`, keywords constrain only the values they apply to: read
                // as JSON Schema does, `{"properties": …}` also takes any string or array.
                let mut all = vec!["null", "boolean"];
                all.extend(["number", "string", "array", "object"].iter().filter(|t| !inferred.contains(t)));
                all.extend(inferred);
                all
            } else {
                // A generator is better served by the type the keywords imply.
                inferred
            }
        };
        self.check_keywords(obj, ptr, &types)?;
        if types.is_empty() {
            return Ok(any_value(self.any_levels));
        }
        let mut nodes = Vec::new();
        for t in types {
            nodes.push(match t {
                "null" => Node::Null,
                "boolean" => Node::Boolean,
                "integer" => self.integer(obj, ptr)?,
                "number" => self.number(obj, ptr)?,
                "string" => self.string(obj, ptr)?,
                "array" => self.array(obj, ptr, depth)?,
                "object" => self.object(obj, ptr, depth)?,
                other => return Err(err(&format!("{ptr}/type"), format!("unknown type `{other}`"))),
            });
        }
        Ok(simplify_any(nodes))
    }

    fn resolve(&self, r: &str, ptr: &str) -> Result<&Value> {
        let frag =
            r.strip_prefix('#').ok_or_else(|| err(ptr, format!("only local `$ref`s are supported, got `{r}`")))?;
        if frag.is_empty() {
            return Ok(self.root);
        }
        self.root.pointer(frag).ok_or_else(|| err(ptr, format!("`$ref` `{r}` does not resolve")))
    }

    fn merge_all_of(&self, obj: &Map<String, Value>, all: &Value, ptr: &str) -> Result<Map<String, Value>> {
        let all = all.as_array().ok_or_else(|| err(ptr, "`allOf` must be an array"))?;
        let mut merged = obj.clone();
        merged.remove("allOf");
        for (i, part) in all.iter().enumerate() {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(r) => self.resolve(r, ptr)?.clone(),
                None => part.clone(),
            };
            merged = merge_objects(&merged, &part)
                .and_then(|v| v.as_object().cloned())
                .ok_or_else(|| err(&format!("{ptr}/allOf/{i}"), "cannot merge this `allOf` branch"))?;
        }
        Ok(merged)
    }

    /// Keep only the `values` (of the `taken` keyword: `enum` or `const`) that satisfy
    /// every other keyword of `obj`, read as JSON Schema reads them (a literal is a
    /// value like any other: `{"enum": [100], "maximum": 10}` admits none). Skipped
    /// when nothing but `type` and annotations stands beside them (the common case).
    ///
    /// Cost: one validator built for the siblings (with the root's definitions, so
    /// their `$ref`s resolve) and one validation per value.
    ///
    /// # Errors
    /// Strict mode: the siblings cannot be read as a schema (a `$ref` outside the
    /// definitions, a malformed keyword): the values could not be checked.
    fn filter_literals(&self, obj: &Map<String, Value>, ptr: &str, taken: &str, values: &mut Vec<Value>) -> Result<()> {
        let mut siblings: Map<String, Value> =
            obj.iter().filter(|(k, _)| *k != taken && !is_annotation(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        if siblings.keys().all(|k| k == "type") {
            return Ok(());
        }
        for k in ["$schema", "$defs", "definitions"] {
            if let Some(v) = self.root.get(k) {
                siblings.entry(k.to_string()).or_insert_with(|| v.clone());
            }
        }
        match jsonschema::options().should_validate_formats(true).build(&Value::Object(siblings)) {
            Ok(v) => values.retain(|x| v.is_valid(x)),
            Err(e) if self.mode == Mode::Strict => {
                return Err(err(
                    &format!("{ptr}/{taken}"),
                    format!("the `{taken}` values cannot be checked against the keywords beside them: {e}"),
                ))
            }
            Err(_) => {}
        }
        Ok(())
    }

    /// Strict mode: refuse a validation keyword toolgate does not enforce, when it
    /// applies to one of `types`. Keywords of other types constrain nothing here, and
    /// unknown keywords are annotations (JSON Schema ignores them), so both pass.
    fn check_keywords(&self, obj: &Map<String, Value>, ptr: &str, types: &[&str]) -> Result<()> {
        if self.mode == Mode::Lenient {
            return Ok(());
        }
        let has = |t: &str| types.contains(&t);
        for (k, v) in obj {
            let unsupported = match k.as_str() {
                "not"
                | "if"
                | "unevaluatedProperties"
                | "unevaluatedItems"
                | "contentEncoding"
                | "contentMediaType"
                | "contentSchema"
                | "$dynamicRef"
                | "$recursiveRef" => true,
                "propertyNames" | "dependentSchemas" => has("object"),
                "dependentRequired" | "dependencies" => has("object") && self.dependencies(v).is_none(),
                "contains" | "minContains" | "maxContains" => has("array"),
                "uniqueItems" => has("array") && *v == Value::Bool(true),
                "multipleOf" => (has("integer") || has("number")) && !self.machines,
                _ => false,
            };
            if unsupported {
                return Err(err(&format!("{ptr}/{}", escape_ptr(k)), format!("unsupported keyword `{k}`")));
            }
        }
        Ok(())
    }

    /// Whether `minProperties` asks for more than the `required` properties give: `1`
    /// excludes `{}`; more is refused in strict mode (lenient: `{}` excluded only).
    fn min_properties(&self, obj: &Map<String, Value>, ptr: &str, required: usize) -> Result<bool> {
        let at = format!("{ptr}/minProperties");
        let n = match obj.get("minProperties") {
            None => return Ok(false),
            Some(v) => v.as_u64().ok_or_else(|| err(&at, "`minProperties` must be a non-negative integer"))?,
        };
        if n <= required as u64 {
            return Ok(false);
        }
        if n > 1 && self.mode == Mode::Strict {
            return Err(err(
                &at,
                format!("`minProperties: {n}` beyond the {required} required properties is not enforced"),
            ));
        }
        Ok(true)
    }

    /// Every numeric bound of `obj`: `minimum`/`maximum` (exclusive when a draft-4
    /// boolean `exclusiveMinimum`/`exclusiveMaximum` says so) and the 2020-12
    /// `exclusiveMinimum`/`exclusiveMaximum` numbers, as (keyword, value, lower,
    /// exclusive).
    fn bounds(obj: &Map<String, Value>, ptr: &str) -> Result<Vec<(&'static str, f64, bool, bool)>> {
        let draft4 = |k: &str| matches!(obj.get(k), Some(Value::Bool(true)));
        let mut out = Vec::new();
        for (k, lower, exclusive) in [
            ("minimum", true, draft4("exclusiveMinimum")),
            ("maximum", false, draft4("exclusiveMaximum")),
            ("exclusiveMinimum", true, true),
            ("exclusiveMaximum", false, true),
        ] {
            match obj.get(k) {
                None => {}
                Some(Value::Bool(_)) if k.starts_with("exclusive") => {}
                Some(Value::Number(n)) => out.push((k, n.as_f64().unwrap_or(f64::NAN), lower, exclusive)),
                Some(_) => return Err(err(&format!("{ptr}/{k}"), format!("`{k}` must be a number"))),
            }
        }
        Ok(out)
    }

    fn integer(&self, obj: &Map<String, Value>, ptr: &str) -> Result<Node> {
        // Each bound as the integer it admits first (`> 1.5` is `≥ 2`); the tightest wins.
        let (mut min, mut max): (Option<f64>, Option<f64>) = (None, None);
        for (_, x, lower, exclusive) in Self::bounds(obj, ptr)? {
            if x.is_nan() {
                continue;
            }
            if lower {
                let v = if exclusive { x.floor() + 1.0 } else { x.ceil() };
                min = Some(min.map_or(v, |m| m.max(v)));
            } else {
                let v = if exclusive { x.ceil() - 1.0 } else { x.floor() };
                max = Some(max.map_or(v, |m| m.min(v)));
            }
        }
        // Past 18 digits the grammar writes no integer (`regex::int_range`); a bound
        // further out is kept just beyond, so it still excludes what it should.
        let clamp = |x: f64| x.clamp(-1e18, 1e18) as i64;
        let (min, max) = (min.map(clamp), max.map(clamp));
        if let (Some(a), Some(b)) = (min, max) {
            if a > b {
                return Ok(self.never(ptr, format!("no integer is at least {a} and at most {b} (`minimum`/`maximum`)")));
            }
        }
        self.multiple_of(obj, ptr, Node::Integer { min, max }, MachineKind::Integer)
    }

    /// `node` (an integer or number) narrowed to the multiples of `obj`'s
    /// `multipleOf`, as a [`Node::Machine`]: the product of the node's own regex and a
    /// remainder counter. Without machines the keyword was refused (strict) or is
    /// ignored (lenient); lenient mode also keeps `node` when the product is too large.
    fn multiple_of(&self, obj: &Map<String, Value>, ptr: &str, node: Node, kind: MachineKind) -> Result<Node> {
        let Some(k) = obj.get("multipleOf") else { return Ok(node) };
        if !self.machines {
            return Ok(node);
        }
        let at = format!("{ptr}/multipleOf");
        let Value::Number(k) = k else { return Err(err(&at, "`multipleOf` must be a number")) };
        // Numbers are written in plain decimal here, even unbounded ones.
        let text = match &node {
            Node::Number { min, max } => super::regex::number_range(*min, *max),
            n => super::regex::to_regex(n, &super::regex::Json),
        };
        let machine = MultipleOf::new(&k.to_string()).and_then(|m| {
            let mut parts: Vec<Box<dyn Automaton>> = vec![Box::new(Pattern::new(&text)?), Box::new(m)];
            Machine::intersect(&mut parts, MAX_STATES)
        });
        match machine {
            Ok(m) if m.states.is_empty() => Ok(self.never(&at, format!("no multiple of {k} is within the bounds"))),
            Ok(m) => Ok(machine_node(m, kind)),
            Err(e) if self.mode == Mode::Strict => Err(err(&at, e)),
            Err(_) => Ok(node),
        }
    }

    /// A string of `pattern` and `format` with `min..=max` characters, as a
    /// [`Node::Machine`] (`max` lowered to [`super::regex::MAX_REPEAT`] as for plain
    /// strings).
    fn string_machine(
        pattern: Option<&str>,
        format: Option<Format>,
        min: usize,
        max: Option<usize>,
    ) -> std::result::Result<Node, String> {
        let mut parts: Vec<Box<dyn Automaton>> = Vec::new();
        let (mut min, mut max) = (min, max.map(|m| m.min(super::regex::MAX_REPEAT.max(min))));
        // (regex, whether it is ASCII: its bytes are its characters)
        let regexes = pattern
            .map(|p| super::regex::decoded_pattern(p).map(|r| (r, false)))
            .transpose()?
            .into_iter()
            .chain(format.map(|f| (super::regex::format_regex(f), true)));
        for (re, ascii) in regexes {
            // Bounds the regex implies already cost no states: a format's longest value
            // under `maxLength`, a pattern's shortest over `minLength`.
            if let Some((shortest, longest)) = super::machine::byte_lengths(&re) {
                if max.is_some_and(|m| longest.is_some_and(|l| l <= m)) {
                    max = None;
                }
                if (if ascii { shortest } else { shortest / 4 }) >= min {
                    min = 0;
                }
            }
            parts.push(Box::new(Pattern::new(&re)?));
        }
        if min > 0 || max.is_some() {
            parts.push(Box::new(Length::new(min, max)));
        }
        if parts.len() == 1 {
            // One constraint left: the plain string node says it.
            return Ok(Node::String { min_len: 0, max_len: None, pattern: pattern.map(str::to_string), format });
        }
        Ok(machine_node(Machine::intersect(&mut parts, MAX_STATES)?, MachineKind::String))
    }

    fn number(&self, obj: &Map<String, Value>, ptr: &str) -> Result<Node> {
        let mut lower: Vec<NumBound> = Vec::new();
        let mut upper: Vec<NumBound> = Vec::new();
        for (k, x, is_lower, exclusive) in Self::bounds(obj, ptr)? {
            let Some(b) = NumBound::new(x, exclusive) else {
                if self.mode == Mode::Strict {
                    return Err(err(
                        &format!("{ptr}/{k}"),
                        format!("`{k}` on a number is only enforced within ±10^15 and to 16 decimals"),
                    ));
                }
                continue;
            };
            if is_lower {
                lower.push(b)
            } else {
                upper.push(b)
            }
        }
        // The tightest: the largest lower bound (exclusive wins a tie), the smallest upper.
        let at = |b: &NumBound| (b.value, b.frac);
        let min = lower.iter().copied().max_by_key(|b| (at(b), b.exclusive));
        let max = upper.iter().copied().min_by_key(|b| (at(b), !b.exclusive));
        if let (Some(a), Some(b)) = (min, max) {
            if at(&a) > at(&b) || (at(&a) == at(&b) && (a.exclusive || b.exclusive)) {
                return Ok(self.never(ptr, "the lower bound is above the upper (`minimum`/`maximum`)"));
            }
        }
        self.multiple_of(obj, ptr, Node::Number { min, max }, MachineKind::Number)
    }

    fn string(&self, obj: &Map<String, Value>, ptr: &str) -> Result<Node> {
        let usize_of = |k: &str| -> Result<Option<usize>> {
            match obj.get(k) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|x| Some(x as usize))
                    .ok_or_else(|| err(&format!("{ptr}/{k}"), format!("`{k}` must be a non-negative integer"))),
            }
        };
        let format = match obj.get("format").and_then(Value::as_str) {
            None => None,
            Some("date") => Some(Format::Date),
            Some("time") => Some(Format::Time),
            Some("date-time") => Some(Format::DateTime),
            Some("uuid") => Some(Format::Uuid),
            Some("email") => Some(Format::Email),
            Some("uri") => Some(Format::Uri),
            Some("ipv4") => Some(Format::Ipv4),
            Some("hostname") => Some(Format::Hostname),
            // A format JSON Schema defines but toolgate has no grammar for: refused in
            // strict mode. Any other name (`path`, `int32`, `url` …) is an annotation
            // the specification says to ignore.
            Some(f) if self.mode == Mode::Strict && STANDARD_FORMATS.contains(&f) => {
                return Err(err(&format!("{ptr}/format"), format!("unsupported format `{f}`")))
            }
            Some(_) => None,
        };
        let pattern = obj.get("pattern").and_then(Value::as_str).map(str::to_string);
        if let Some(p) = &pattern {
            super::regex::pattern_body(p, &super::regex::Json).map_err(|e| err(&format!("{ptr}/pattern"), e))?;
        }
        let (min_len, max_len) = (usize_of("minLength")?, usize_of("maxLength")?);
        if let (Some(a), Some(b)) = (min_len, max_len) {
            if a > b {
                return Ok(self.never(ptr, format!("`minLength` {a} is above `maxLength` {b}")));
            }
        }
        // A pattern or format with length bounds, or both together: their intersection.
        let bounded = min_len.is_some() || max_len.is_some();
        if (format.is_some() || pattern.is_some()) && (bounded || (format.is_some() && pattern.is_some())) {
            // An anchored repeated class meets the length bounds exactly in a regex.
            let exact = match &pattern {
                Some(p) if format.is_none() => {
                    super::regex::pattern_with_length(p, min_len.unwrap_or(0), max_len, &super::regex::Json)
                        .map_err(|e| err(&format!("{ptr}/pattern"), e))?
                        .is_some()
                }
                _ => false,
            };
            if !exact && self.machines {
                match Self::string_machine(pattern.as_deref(), format, min_len.unwrap_or(0), max_len) {
                    Ok(Node::Never) => {
                        let what = if pattern.is_some() && format.is_some() {
                            "`pattern` and `format`"
                        } else if pattern.is_some() {
                            "`pattern`"
                        } else {
                            "`format`"
                        };
                        return Ok(self.never(ptr, format!("no string satisfies {what} within the length bounds")));
                    }
                    Ok(node) => return Ok(node),
                    Err(e) if self.mode == Mode::Strict => return Err(err(ptr, e)),
                    Err(_) => {}
                }
            } else if !exact && self.mode == Mode::Strict {
                // Without machines the grammar is one regex per string.
                if format.is_some() && pattern.is_some() {
                    return Err(err(&format!("{ptr}/pattern"), "`pattern` together with `format` is not enforced"));
                }
                let shape = if format.is_some() { "format" } else { "pattern" };
                for (k, v) in [("minLength", min_len.is_some()), ("maxLength", max_len.is_some())] {
                    if v {
                        return Err(err(
                            &format!("{ptr}/{k}"),
                            format!("`{k}` together with `{shape}` is not enforced"),
                        ));
                    }
                }
            }
        }
        Ok(Node::String { min_len: min_len.unwrap_or(0), max_len, pattern, format })
    }

    fn array(&self, obj: &Map<String, Value>, ptr: &str, depth: usize) -> Result<Node> {
        let mut prefix = Vec::new();
        if let Some(p) = obj.get("prefixItems") {
            let p = p.as_array().ok_or_else(|| err(&format!("{ptr}/prefixItems"), "must be an array"))?;
            for (i, s) in p.iter().enumerate() {
                prefix.push(self.node(s, &format!("{ptr}/prefixItems/{i}"), depth + 1)?);
            }
        }
        // Draft 4 tuples: `items` as an array, then `additionalItems` for the rest.
        if let Some(Value::Array(p)) = obj.get("items") {
            for (i, s) in p.iter().enumerate() {
                prefix.push(self.node(s, &format!("{ptr}/items/{i}"), depth + 1)?);
            }
        }
        let rest = match obj.get("items") {
            Some(Value::Array(_)) => obj.get("additionalItems"),
            other => other,
        };
        let items = match rest {
            None => Some(Box::new(any_value(self.any_levels))),
            Some(Value::Bool(false)) => None,
            Some(s) => Some(Box::new(self.node(s, &format!("{ptr}/items"), depth + 1)?)),
        };
        let items = items.filter(|n| **n != Node::Never);
        let min = obj.get("minItems").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = obj.get("maxItems").and_then(Value::as_u64).map(|x| x as usize);
        if max.is_some_and(|m| m < min) {
            return Ok(self.never(ptr, format!("`minItems` {min} is above `maxItems` {}", max.unwrap_or(0))));
        }
        if items.is_none() && min > prefix.len() {
            return Ok(self.never(ptr, format!("`minItems` {min} asks for more items than the array may hold")));
        }
        Ok(Node::Array { prefix, items, min, max })
    }

    fn object(&self, obj: &Map<String, Value>, ptr: &str, depth: usize) -> Result<Node> {
        let required: Vec<&str> = match obj.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err(err(&format!("{ptr}/required"), "`required` must be an array of names")),
        };
        let mut properties = Vec::new();
        let pattern_schemas = obj.get("patternProperties").and_then(Value::as_object);
        if let Some(p) = obj.get("properties") {
            let p = p.as_object().ok_or_else(|| err(&format!("{ptr}/properties"), "`properties` must be an object"))?;
            for (name, s) in p {
                let at = format!("{ptr}/properties/{}", escape_ptr(name));
                // A declared name a pattern also matches owes both schemas: merged, as
                // `allOf` would (strict mode refuses what cannot be merged; lenient
                // keeps the declared schema).
                let mut s = std::borrow::Cow::Borrowed(s);
                for (pat, ps) in pattern_schemas.into_iter().flatten() {
                    if super::regex::pattern_matches(pat, name).unwrap_or(false) {
                        match (s.as_object().and_then(|o| merge_objects(o, ps)), self.mode) {
                            (Some(m), _) => s = std::borrow::Cow::Owned(m),
                            (None, Mode::Lenient) => {}
                            (None, Mode::Strict) => {
                                return Err(err(
                                    &format!("{ptr}/patternProperties/{}", escape_ptr(pat)),
                                    format!(
                                        "the pattern's schema cannot be merged into the declared property `{name}`"
                                    ),
                                ))
                            }
                        }
                    }
                }
                let node = self.node(&s, &at, depth + 1)?;
                properties.push((name.clone(), node, required.contains(&name.as_str())));
            }
        }
        let mut patterns = Vec::new();
        if let Some(pp) = obj.get("patternProperties") {
            let pp = pp.as_object().ok_or_else(|| err(&format!("{ptr}/patternProperties"), "must be an object"))?;
            for (pat, s) in pp {
                let at = format!("{ptr}/patternProperties/{}", escape_ptr(pat));
                // A name matching two patterns owes both schemas: not expressible as
                // one choice per key, so refused (strict) rather than loosened. A
                // declared name the pattern matches (its schemas merged above) needs
                // pattern keys that skip it, which only machines can say.
                if self.mode == Mode::Strict {
                    if !self.machines {
                        for (name, _, _) in &properties {
                            if super::regex::pattern_matches(pat, name).map_err(|e| err(&at, e))? {
                                return Err(err(&at, format!("pattern also matches the declared property `{name}`")));
                            }
                        }
                    }
                    for other in pp.keys().filter(|o| *o != pat) {
                        if !patterns_disjoint(pat, other) {
                            return Err(err(
                                &at,
                                format!("a name may match both this pattern and `{other}`: not supported"),
                            ));
                        }
                    }
                }
                super::regex::pattern_body(pat, &super::regex::Json).map_err(|e| err(&at, e))?;
                patterns.push((pat.clone(), self.node(s, &at, depth + 1)?));
            }
        }
        let mut extra_keys = None;
        let additional = match obj.get("additionalProperties") {
            // A free-form object (no `properties` keyword at all; `"properties": {}`
            // is the closed empty object of a tool without arguments): any properties.
            None if !obj.contains_key("properties") && patterns.is_empty() && required.is_empty() => {
                Some(Box::new(any_value(self.any_levels)))
            }
            None if self.objects == Objects::Open && patterns.is_empty() => {
                Some(Box::new(any_value(self.extra_levels)))
            }
            // Beside patterns, extra names must avoid them: a complement, which only
            // an automaton (`extra_keys`) can say. Without machines, or past their
            // size, open objects keep to declared and matching names.
            None if self.objects == Objects::Open => {
                extra_keys = self.extra_keys(&properties, &required, &patterns);
                extra_keys.as_ref().map(|_| Box::new(any_value(self.extra_levels)))
            }
            // Absent beside declared properties: no extra properties (as OpenAI strict
            // mode): a tool call carries only the declared arguments.
            None | Some(Value::Bool(false)) => None,
            Some(s) if !patterns.is_empty() => {
                extra_keys = self.extra_keys(&properties, &required, &patterns);
                match (&extra_keys, self.mode) {
                    (Some(_), _) => Some(Box::new(self.node(s, &format!("{ptr}/additionalProperties"), depth + 1)?)),
                    (None, Mode::Strict) => {
                        return Err(err(
                            &format!("{ptr}/additionalProperties"),
                            "`additionalProperties` beside `patternProperties` is not supported here \
                             (the names avoiding the patterns need an automaton: too large, or a plain regex)",
                        ))
                    }
                    // Lenient: the extras take any undeclared name.
                    (None, Mode::Lenient) => match s {
                        Value::Bool(true) => Some(Box::new(any_value(self.any_levels))),
                        s => Some(Box::new(self.node(s, &format!("{ptr}/additionalProperties"), depth + 1)?)),
                    },
                }
            }
            Some(Value::Bool(true)) => Some(Box::new(any_value(self.any_levels))),
            Some(s) => Some(Box::new(self.node(s, &format!("{ptr}/additionalProperties"), depth + 1)?)),
        };
        // A required name with no declared schema (or one `dependencies` names): the
        // schema of a pattern it matches, else the extras' (nothing when
        // `additionalProperties` is false), else any value.
        let dependencies: Vec<(String, Vec<String>)> = ["dependencies", "dependentRequired"]
            .iter()
            .filter_map(|k| obj.get(*k).and_then(|v| self.dependencies(v)))
            .flatten()
            .collect();
        let named = dependencies.iter().flat_map(|(a, bs)| std::iter::once(a).chain(bs)).map(String::as_str);
        for (r, is_required) in required.iter().map(|r| (*r, true)).chain(named.map(|n| (n, false))) {
            if !properties.iter().any(|(n, _, _)| n == r) {
                let by_pattern = patterns.iter().find(|(p, _)| super::regex::pattern_matches(p, r) == Ok(true));
                let value = match (by_pattern, obj.get("additionalProperties")) {
                    (Some((_, n)), _) => n.clone(),
                    (None, Some(Value::Bool(false))) if is_required => self.never(
                        &format!("{ptr}/required"),
                        format!("`{r}` is required but `additionalProperties` is false and it is not declared"),
                    ),
                    (None, Some(Value::Bool(false))) => Node::Never,
                    (None, _) => additional.as_deref().cloned().unwrap_or_else(|| any_value(self.any_levels)),
                };
                properties.push((r.to_string(), value, is_required));
            }
        }
        let non_empty = self.min_properties(obj, ptr, properties.iter().filter(|p| p.2).count())?;
        // The set of written properties is a 128-bit mask.
        let mut dependencies = dependencies;
        if !dependencies.is_empty() && properties.len() > super::rules::ANY_ORDER_MAX_PROPERTIES {
            if self.mode == Mode::Strict {
                return Err(err(
                    &format!("{ptr}/dependencies"),
                    format!(
                        "`dependencies` on an object of more than {} properties",
                        super::rules::ANY_ORDER_MAX_PROPERTIES
                    ),
                ));
            }
            dependencies.clear();
        }
        let object = Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty };
        self.max_properties(obj, ptr, object)
    }

    /// `dependencies` / `dependentRequired` in their array form (`{"a": ["b"]}`: an
    /// object with `a` also has `b`), when this compile can hold them: open objects
    /// with shared rules, whose properties are a [`super::rules::PropertySet`] (the
    /// set of properties written decides whether the object may close). `None`
    /// otherwise, or for the schema form.
    fn dependencies(&self, v: &Value) -> Option<Vec<(String, Vec<String>)>> {
        if self.objects != Objects::Open || !self.machines {
            return None;
        }
        v.as_object()?
            .iter()
            .map(|(k, v)| {
                let names = v.as_array()?.iter().map(|n| n.as_str().map(String::from)).collect::<Option<Vec<_>>>()?;
                Some((k.clone(), names))
            })
            .collect()
    }

    /// The names neither in `properties` (nor `required`) nor matching a pattern, as a
    /// machine over the decoded name; `None` without machines, when the product passes
    /// [`MAX_STATES`], or when no name is left.
    fn extra_keys(
        &self,
        properties: &[(String, Node, bool)],
        required: &[&str],
        patterns: &[(String, Node)],
    ) -> Option<std::sync::Arc<Machine>> {
        if !self.machines {
            return None;
        }
        let names: Vec<&str> = properties.iter().map(|p| p.0.as_str()).chain(required.iter().copied()).collect();
        let patterns: Vec<&str> = patterns.iter().map(|p| p.0.as_str()).collect();
        names_machine(None, &patterns, &names).map(std::sync::Arc::new)
    }

    /// `maxProperties`, where the grammar can hold it exactly: a closed object that
    /// cannot reach the bound anyway, at most one property (each declared property
    /// alone, or the required one), or fewer than the required (nothing matches).
    /// Otherwise refused in strict mode, ignored in lenient.
    fn max_properties(&self, obj: &Map<String, Value>, ptr: &str, object: Node) -> Result<Node> {
        let at = format!("{ptr}/maxProperties");
        let Some(v) = obj.get("maxProperties") else { return Ok(object) };
        let max = v.as_u64().ok_or_else(|| err(&at, "`maxProperties` must be a non-negative integer"))? as usize;
        let Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty } = object else {
            return Ok(object);
        };
        let required = properties.iter().filter(|p| p.2).count();
        let closed = additional.is_none() && patterns.is_empty();
        if required > max {
            return Ok(self.never(&at, format!("{required} properties are required, `maxProperties` is {max}")));
        }
        if closed && properties.len() <= max {
            return Ok(Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty });
        }
        if closed && max <= 1 && dependencies.is_empty() {
            // `{}` (unless excluded) or exactly one property: the required one if any.
            let single = |(name, node, _): &(String, Node, bool)| Node::Object {
                properties: vec![(name.clone(), node.clone(), true)],
                additional: None,
                patterns: vec![],
                extra_keys: None,
                dependencies: vec![],
                non_empty: false,
            };
            let mut alts: Vec<Node> = match properties.iter().find(|p| p.2) {
                Some(p) => vec![single(p)],
                None if max == 1 => properties.iter().map(single).collect(),
                None => vec![],
            };
            if required == 0 && !non_empty {
                alts.push(Node::Object {
                    properties: vec![],
                    additional: None,
                    patterns: vec![],
                    extra_keys: None,
                    dependencies: vec![],
                    non_empty: false,
                });
            }
            return Ok(simplify_any(alts));
        }
        if self.mode == Mode::Strict {
            return Err(err(&at, format!("`maxProperties: {max}` is not enforced on this object")));
        }
        Ok(Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty })
    }
}

/// The types `obj`'s keywords apply to, for a schema without `type` (`properties` →
/// object, `items` → array, `pattern` → string, `minimum` → number).
fn infer_types(obj: &Map<String, Value>) -> Vec<&'static str> {
    const BY_TYPE: [(&str, &[&str]); 4] = [
        (
            "object",
            &[
                "properties",
                "required",
                "additionalProperties",
                "patternProperties",
                "minProperties",
                "maxProperties",
                "propertyNames",
                "dependencies",
                "dependentRequired",
                "dependentSchemas",
            ],
        ),
        ("array", &["items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"]),
        ("number", &["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]),
        ("string", &["pattern", "minLength", "maxLength", "format"]),
    ];
    BY_TYPE.iter().filter(|(_, keys)| keys.iter().any(|k| obj.contains_key(*k))).map(|(t, _)| *t).collect()
}

fn merge_objects(a: &Map<String, Value>, b: &Value) -> Option<Value> {
    let b = b.as_object()?;
    // A side closed by `additionalProperties: false` sees only its own
    // `properties`: names the other side adds would be invalid there, which a
    // union of the two lists would not say.
    let names = |m: &Map<String, Value>| -> Vec<String> {
        m.get("properties").and_then(Value::as_object).map(|p| p.keys().cloned().collect()).unwrap_or_default()
    };
    let closed = |m: &Map<String, Value>| m.get("additionalProperties") == Some(&Value::Bool(false));
    let (na, nb) = (names(a), names(b));
    if closed(a) && nb.iter().any(|n| !na.contains(n)) || closed(b) && na.iter().any(|n| !nb.contains(n)) {
        return None;
    }
    let mut out = a.clone();
    for (k, v) in b {
        match (k.as_str(), out.get(k)) {
            ("properties", Some(Value::Object(pa))) => {
                // A property both sides declare must satisfy both schemas: merge
                // them (the later one alone would drop the earlier's constraints).
                let mut p = pa.clone();
                for (pk, pv) in v.as_object()? {
                    let both = match p.get(pk) {
                        None | Some(Value::Bool(true)) => pv.clone(),
                        Some(existing) if existing == pv || pv == &Value::Bool(true) => existing.clone(),
                        Some(Value::Object(existing)) => merge_objects(existing, pv)?,
                        Some(_) => return None,
                    };
                    p.insert(pk.clone(), both);
                }
                out.insert(k.clone(), Value::Object(p));
            }
            ("required", Some(Value::Array(ra))) => {
                let mut r = ra.clone();
                for x in v.as_array()? {
                    if !r.contains(x) {
                        r.push(x.clone());
                    }
                }
                out.insert(k.clone(), Value::Array(r));
            }
            (_, Some(existing)) if existing != v && !is_annotation(k) => return None,
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Some(Value::Object(out))
}

/// Whether `v` is of JSON Schema type `t`.
fn value_has_type(v: &Value, t: &str) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

/// The JSON types a node can match, as bits (null, boolean, number, string, array,
/// object).
fn kinds(n: &Node) -> u8 {
    match n {
        Node::Never => 0,
        Node::Null => 1,
        Node::Boolean => 2,
        Node::Integer { .. } | Node::Number { .. } => 4,
        Node::String { .. } | Node::Machine { kind: MachineKind::String, .. } => 8,
        Node::Machine { .. } => 4,
        Node::Def { body, .. } => kinds(body),
        // The enclosing definition's kinds, which are not known here.
        Node::Recurse(_) => 63,
        Node::Array { .. } => 16,
        Node::Object { .. } => 32,
        Node::Literals(vs) => vs.iter().fold(0, |k, v| {
            k | match v {
                Value::Null => 1,
                Value::Bool(_) => 2,
                Value::Number(_) => 4,
                Value::String(_) => 8,
                Value::Array(_) => 16,
                Value::Object(_) => 32,
            }
        }),
        Node::AnyOf(ns) => ns.iter().fold(0, |k, n| k | kinds(n)),
        Node::AnyValue { levels: 0 } => 15,
        Node::AnyValue { .. } => 63,
    }
}

/// Whether no value can match both nodes (conservative: `false` when unsure).
fn disjoint(a: &Node, b: &Node) -> bool {
    if kinds(a) & kinds(b) == 0 {
        return true;
    }
    match (a, b) {
        // Numbers compare by value (`2` is `2.0`).
        (Node::Literals(x), Node::Literals(y)) => {
            let same = |a: &Value, b: &Value| a == b || (a.is_number() && a.as_f64() == b.as_f64());
            x.iter().all(|v| !y.iter().any(|w| same(v, w)))
        }
        (Node::Def { body, .. }, other) | (other, Node::Def { body, .. }) => disjoint(body, other),
        // A discriminator: a property both require, with values no value satisfies both.
        (
            Node::Object { properties: pa, additional: xa, patterns: qa, .. },
            Node::Object { properties: pb, additional: xb, patterns: qb, .. },
        ) => {
            let discriminated =
                pa.iter().any(|(k, va, ra)| *ra && pb.iter().any(|(kb, vb, rb)| *rb && kb == k && disjoint(va, vb)));
            // A property one side requires and the other, closed, cannot hold.
            let closed_out = |p: &[(String, Node, bool)],
                              other: &[(String, Node, bool)],
                              extra: &Option<Box<Node>>,
                              patterns: &[(String, Node)]| {
                extra.is_none()
                    && patterns.is_empty()
                    && p.iter().any(|(k, _, r)| *r && !other.iter().any(|(o, _, _)| o == k))
            };
            discriminated || closed_out(pa, pb, xb, qb) || closed_out(pb, pa, xa, qa)
        }
        (Node::Integer { min: a0, max: a1 }, Node::Integer { min: b0, max: b1 }) => {
            let below = |hi: &Option<i64>, lo: &Option<i64>| matches!((hi, lo), (Some(h), Some(l)) if h < l);
            below(a1, b0) || below(b1, a0)
        }
        (Node::AnyOf(xs), other) | (other, Node::AnyOf(xs)) if !exact_scalar(a) || !exact_scalar(b) => {
            xs.iter().all(|x| disjoint(x, other))
        }
        // Scalars whose grammar is exactly their schema (no caps, no format subsets):
        // disjoint when their automata share no text.
        _ if exact_scalar(a) && exact_scalar(b) => {
            const MAX_PAIRS: usize = 4096;
            let d = &super::regex::Json;
            let dfa = |n: &Node| {
                Dfa::from_rules(&super::regex::to_regex(n, d), &super::rules::Rules::none(), super::dfa::NFA_SIZE_LIMIT)
                    .ok()
            };
            match (dfa(a), dfa(b)) {
                (Some(da), Some(db)) => da.intersects(&db, MAX_PAIRS) == Some(false),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether `n` is a scalar whose grammar accepts exactly what its schema does: no
/// length cap (`maxLength` over [`super::regex::MAX_REPEAT`]) and no format that is a
/// stated subset (email, uri, times), so two such grammars that share no text are
/// two schemas that share no value.
fn exact_scalar(n: &Node) -> bool {
    match n {
        Node::Never | Node::Null | Node::Boolean | Node::Integer { .. } | Node::Number { .. } => true,
        Node::String { max_len, format, .. } => {
            max_len.is_none_or(|m| m <= super::regex::MAX_REPEAT)
                && matches!(format, None | Some(Format::Date | Format::Uuid | Format::Ipv4))
        }
        // (`1.0` is the integer 1 to JSON Schema, spelled unlike `1`: not compared by text.)
        Node::Literals(vs) => vs.iter().all(|v| match v {
            Value::Array(_) | Value::Object(_) => false,
            Value::Number(x) => !x.is_f64(),
            _ => true,
        }),
        Node::AnyOf(ns) => ns.iter().all(exact_scalar),
        Node::Array { .. }
        | Node::Object { .. }
        | Node::Machine { .. }
        | Node::AnyValue { .. }
        | Node::Def { .. }
        | Node::Recurse(_) => false,
    }
}

/// Whether no name matches both `patternProperties` patterns `a` and `b` (`false`
/// when unsure: a pattern that does not compile, or a product past [`MAX_STATES`]).
/// Cost: the product of the two patterns' automata.
fn patterns_disjoint(a: &str, b: &str) -> bool {
    let (Some(a), Some(b)) = (name_pattern(a), name_pattern(b)) else { return false };
    Machine::intersect(&mut [a, b], MAX_STATES).is_ok_and(|m| m.states.is_empty())
}

/// `m` as a node: [`Node::Never`] when its language is empty.
fn machine_node(m: Machine, kind: MachineKind) -> Node {
    if m.states.is_empty() {
        return Node::Never;
    }
    Node::Machine { machine: std::sync::Arc::new(m), kind }
}

fn simplify_any(nodes: Vec<Node>) -> Node {
    let mut nodes: Vec<Node> = nodes.into_iter().filter(|n| *n != Node::Never).collect();
    match nodes.len() {
        0 => Node::Never,
        1 => nodes.pop().expect("one"),
        _ => Node::AnyOf(nodes),
    }
}

/// Any JSON value, with containers nested at most `levels` deep ([`Node::AnyValue`]).
pub fn any_value(levels: usize) -> Node {
    Node::AnyValue { levels }
}
