//! JSON Schema → value grammar ([`Node`]).
//!
//! The subset of draft 2020-12 that tool `parameters` and `response_format` use. A
//! keyword toolgate cannot enforce is an error naming the keyword and its JSON pointer
//! in [`Mode::Strict`], or ignored (the grammar then accepts more than the schema) in
//! [`Mode::Lenient`].

//!
//! The compiler is split by what it reads: this file holds the entry points and the
//! walk over a schema (`$ref`, `allOf`, `anyOf`/`oneOf`, `enum`/`const`, `type`);
//! `scalars.rs` integers, numbers and strings; `containers.rs` arrays and objects;
//! `keywords.rs` what the document says before any grammar; `overlap.rs` whether two
//! grammars share a value (for `oneOf`). The compiled node then loses the parts that
//! admit no value (`prune`), and a schema that admits none is an error.

use serde_json::{Map, Value};

mod containers;
mod keywords;
mod overlap;
mod scalars;

use keywords::{infer_types, is_annotation, merge_objects, value_has_type, without_ref_siblings};
use overlap::disjoint;

pub use super::ir::{
    Format, MachineKind, Mode, Node, NumBound, Objects, ANY_VALUE_LEVELS, FRAC_UNIT, MAX_GRAMMAR_BYTES, MAX_NESTING,
    MAX_REF_CHAIN, MAX_REF_DEPTH, MAX_SCHEMA_NODES, OPEN_EXTRA_LEVELS, SHARED_ANY_VALUE_LEVELS,
    SHARED_OPEN_EXTRA_LEVELS,
};
use super::machine::Machine;
use super::prune::prune;
use super::regex::names_machine;

use super::ecma::NameMatcher;
use super::error::{BuildError, BuildErrorKind as Kind};
use crate::{Error, Result};
use std::collections::HashMap;

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
            "#", Kind::TooLarge,
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
    /// The validators [`Compiler::filter_literals`] built, by the keywords they check.
    literal_checks: std::cell::RefCell<LiteralChecks>,
    /// The document as a `jsonschema` resource ([`ROOT_URI`]), for literal checks
    /// whose keywords hold a `$ref`: built at the first such check.
    registry: std::cell::OnceCell<std::result::Result<jsonschema::Registry<'a>, String>>,
    /// `patternProperties` patterns compiled for testing names, by pattern
    /// ([`Compiler::pattern_matches`]): each compiled once per schema.
    name_matchers: std::cell::RefCell<HashMap<String, std::rc::Rc<std::result::Result<NameMatcher, BuildError>>>>,
}

/// Where [`Compiler::filter_literals`] registers the schema document.
const ROOT_URI: &str = "urn:toolgate:schema";

/// Point every local `$ref` (`#…`) in `v` at the document registered as `base`.
fn rebase_refs(v: &mut Value, base: &str) {
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                match x {
                    Value::String(r) if k == "$ref" && r.starts_with('#') => *r = format!("{base}{r}"),
                    _ => rebase_refs(x, base),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rebase_refs(x, base)),
        _ => {}
    }
}

/// Validators for `enum`/`const` siblings, keyed by the siblings' JSON text; the error
/// text when they could not be built.
type LiteralChecks =
    std::collections::HashMap<String, std::result::Result<std::sync::Arc<jsonschema::Validator>, String>>;

fn err(pointer: &str, kind: Kind, reason: impl Into<String>) -> Error {
    BuildError::new(kind, reason).at(pointer)
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
            literal_checks: Default::default(),
            registry: Default::default(),
            name_matchers: Default::default(),
        }
    }

    /// Whether the property name `name` matches the `patternProperties` pattern
    /// `pattern` (ECMA-262, as `ecma::NameMatcher` reads it), the pattern compiled once per
    /// schema however many names are tested against it.
    fn pattern_matches(&self, pattern: &str, name: &str) -> std::result::Result<bool, BuildError> {
        let matcher = self
            .name_matchers
            .borrow_mut()
            .entry(pattern.to_string())
            .or_insert_with(|| std::rc::Rc::new(NameMatcher::new(pattern)))
            .clone();
        match &*matcher {
            Ok(m) => Ok(m.matches(name)),
            Err(e) => Err(e.clone()),
        }
    }

    /// [`Node::Never`], noting that the schema at `ptr` admits no value and why.
    fn never(&self, ptr: &str, reason: impl Into<String>) -> Node {
        self.empty.borrow_mut().push((ptr.to_string(), reason.into()));
        Node::Never
    }

    /// The compiled `node` without its parts that admit no value (`prune`), or the
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
        Err(err(pointer, Kind::Unsatisfiable, reason))
    }

    fn node(&self, s: &Value, ptr: &str, depth: usize) -> Result<Node> {
        if depth > MAX_NESTING {
            return Err(err(ptr, Kind::TooLarge, format!("schema nested deeper than {MAX_NESTING} levels")));
        }
        self.nodes.set(self.nodes.get() + 1);
        if self.nodes.get() > MAX_SCHEMA_NODES {
            return Err(err(
                ptr,
                Kind::TooLarge,
                format!("the schema expands to more than {MAX_SCHEMA_NODES} nodes (branching recursive `$ref`s?)"),
            ));
        }
        let obj = match s {
            Value::Bool(true) => return Ok(any_value(self.any_levels)),
            Value::Bool(false) => return Ok(self.never(ptr, "the schema `false` admits no value")),
            Value::Object(o) => o,
            _ => return Err(err(ptr, Kind::Invalid, "a schema must be an object or a boolean")),
        };
        if let Some(r) = obj.get("$ref") {
            let r = r.as_str().ok_or_else(|| err(ptr, Kind::Invalid, "`$ref` must be a string"))?;
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
                        Kind::Unsupported,
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
                let alts =
                    alts.as_array().ok_or_else(|| err(ptr, Kind::Invalid, format!("`{key}` must be an array")))?;
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
                                Kind::Unsupported,
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
                    let mut automata = Default::default();
                    for i in 0..nodes.len() {
                        for j in i + 1..nodes.len() {
                            if !disjoint(&nodes[i], &nodes[j], &mut automata) {
                                return Err(err(
                                    &format!("{ptr}/oneOf/{j}"),
                                    Kind::Unsupported,
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
            (None, Some(e)) => Some(
                e.as_array()
                    .ok_or_else(|| err(&format!("{ptr}/enum"), Kind::Invalid, "`enum` must be an array"))?
                    .clone(),
            ),
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
                .map(|t| {
                    t.as_str().ok_or_else(|| err(&format!("{ptr}/type"), Kind::Invalid, "type names must be strings"))
                })
                .collect::<Result<_>>()?,
            Some(_) => return Err(err(&format!("{ptr}/type"), Kind::Invalid, "`type` must be a string or an array")),
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
                other => return Err(err(&format!("{ptr}/type"), Kind::Invalid, format!("unknown type `{other}`"))),
            });
        }
        Ok(simplify_any(nodes))
    }

    fn resolve(&self, r: &str, ptr: &str) -> Result<&Value> {
        let frag = r
            .strip_prefix('#')
            .ok_or_else(|| err(ptr, Kind::Unsupported, format!("only local `$ref`s are supported, got `{r}`")))?;
        if frag.is_empty() {
            return Ok(self.root);
        }
        self.root.pointer(frag).ok_or_else(|| err(ptr, Kind::Invalid, format!("`$ref` `{r}` does not resolve")))
    }

    fn merge_all_of(&self, obj: &Map<String, Value>, all: &Value, ptr: &str) -> Result<Map<String, Value>> {
        let all = all.as_array().ok_or_else(|| err(ptr, Kind::Invalid, "`allOf` must be an array"))?;
        let mut merged = obj.clone();
        merged.remove("allOf");
        for (i, part) in all.iter().enumerate() {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(r) => self.resolve(r, ptr)?.clone(),
                None => part.clone(),
            };
            merged = merge_objects(&merged, &part).and_then(|v| v.as_object().cloned()).ok_or_else(|| {
                err(&format!("{ptr}/allOf/{i}"), Kind::Unsupported, "cannot merge this `allOf` branch")
            })?;
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
        // One validator per distinct set of siblings: a `$ref` target is expanded
        // wherever it is reached, and a large document's definitions are copied once.
        let key = serde_json::to_string(&siblings).unwrap_or_default();
        let cached = self.literal_checks.borrow().get(&key).cloned();
        let validator = match cached {
            Some(v) => v,
            None => {
                if let Some(v) = self.root.get("$schema") {
                    siblings.insert("$schema".into(), v.clone());
                }
                let built = if key.contains("\"$ref\"") {
                    // The siblings' local `$ref`s point into the whole document: it is
                    // registered (borrowed, once per compile) as a resource and they are
                    // rewritten to point there.
                    let mut siblings = Value::Object(siblings);
                    rebase_refs(&mut siblings, ROOT_URI);
                    let registry = self.registry.get_or_init(|| {
                        jsonschema::Registry::new()
                            .add(ROOT_URI, self.root)
                            .and_then(|r| r.prepare())
                            .map_err(|e| e.to_string())
                    });
                    registry.as_ref().map_err(Clone::clone).and_then(|registry| {
                        jsonschema::options()
                            .should_validate_formats(true)
                            .with_registry(registry)
                            .build(&siblings)
                            .map_err(|e| e.to_string())
                    })
                } else {
                    jsonschema::options()
                        .should_validate_formats(true)
                        .build(&Value::Object(siblings))
                        .map_err(|e| e.to_string())
                }
                .map(std::sync::Arc::new);
                self.literal_checks.borrow_mut().insert(key, built.clone());
                built
            }
        };
        match validator {
            Ok(v) => values.retain(|x| v.is_valid(x)),
            Err(e) if self.mode == Mode::Strict => {
                return Err(err(
                    &format!("{ptr}/{taken}"),
                    Kind::Unsupported,
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
                return Err(err(
                    &format!("{ptr}/{}", escape_ptr(k)),
                    Kind::Unsupported,
                    format!("unsupported keyword `{k}`"),
                ));
            }
        }
        Ok(())
    }
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
