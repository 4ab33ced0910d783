//! Arrays and objects: items and their counts, declared, required, pattern and extra
//! properties, `dependencies`, and the property counts the grammar can hold.

use serde_json::{Map, Value};

use super::super::error::BuildErrorKind as Kind;
use super::super::machine::Machine;
use super::keywords::merge_objects;
use super::overlap::patterns_disjoint;
use super::{any_value, err, escape_ptr, names_machine, simplify_any, Compiler, Mode, Node, Objects};
use crate::Result;

impl Compiler<'_> {
    pub(super) fn array(&self, obj: &Map<String, Value>, ptr: &str, depth: usize) -> Result<Node> {
        let mut prefix = Vec::new();
        if let Some(p) = obj.get("prefixItems") {
            let p =
                p.as_array().ok_or_else(|| err(&format!("{ptr}/prefixItems"), Kind::Invalid, "must be an array"))?;
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

    /// Whether `minProperties` asks for more than the `required` properties give: `1`
    /// excludes `{}`; more is refused in strict mode (lenient: `{}` excluded only).
    pub(super) fn min_properties(&self, obj: &Map<String, Value>, ptr: &str, required: usize) -> Result<bool> {
        let at = format!("{ptr}/minProperties");
        let n = match obj.get("minProperties") {
            None => return Ok(false),
            Some(v) => {
                v.as_u64().ok_or_else(|| err(&at, Kind::Invalid, "`minProperties` must be a non-negative integer"))?
            }
        };
        if n <= required as u64 {
            return Ok(false);
        }
        if n > 1 && self.mode == Mode::Strict {
            return Err(err(
                &at,
                Kind::Unsupported,
                format!("`minProperties: {n}` beyond the {required} required properties is not enforced"),
            ));
        }
        Ok(true)
    }

    pub(super) fn object(&self, obj: &Map<String, Value>, ptr: &str, depth: usize) -> Result<Node> {
        let required: Vec<&str> = match obj.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => {
                return Err(err(&format!("{ptr}/required"), Kind::Invalid, "`required` must be an array of names"))
            }
        };
        let mut properties = Vec::new();
        let pattern_schemas = obj.get("patternProperties").and_then(Value::as_object);
        if let Some(p) = obj.get("properties") {
            let p = p
                .as_object()
                .ok_or_else(|| err(&format!("{ptr}/properties"), Kind::Invalid, "`properties` must be an object"))?;
            for (name, s) in p {
                let at = format!("{ptr}/properties/{}", escape_ptr(name));
                // A declared name a pattern also matches owes both schemas: merged, as
                // `allOf` would (strict mode refuses what cannot be merged; lenient
                // keeps the declared schema).
                let mut s = std::borrow::Cow::Borrowed(s);
                for (pat, ps) in pattern_schemas.into_iter().flatten() {
                    if self.pattern_matches(pat, name).unwrap_or(false) {
                        match (s.as_object().and_then(|o| merge_objects(o, ps)), self.mode) {
                            (Some(m), _) => s = std::borrow::Cow::Owned(m),
                            (None, Mode::Lenient) => {}
                            (None, Mode::Strict) => {
                                return Err(err(
                                    &format!("{ptr}/patternProperties/{}", escape_ptr(pat)),
                                    Kind::Unsupported,
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
            let pp = pp
                .as_object()
                .ok_or_else(|| err(&format!("{ptr}/patternProperties"), Kind::Invalid, "must be an object"))?;
            for (pat, s) in pp {
                let at = format!("{ptr}/patternProperties/{}", escape_ptr(pat));
                // A name matching two patterns owes both schemas: not expressible as
                // one choice per key, so refused (strict) rather than loosened. A
                // declared name the pattern matches (its schemas merged above) needs
                // pattern keys that skip it, which only machines can say.
                if self.mode == Mode::Strict {
                    if !self.machines {
                        for (name, _, _) in &properties {
                            if self.pattern_matches(pat, name).map_err(|e| e.at(&at))? {
                                return Err(err(
                                    &at,
                                    Kind::Unsupported,
                                    format!("pattern also matches the declared property `{name}`"),
                                ));
                            }
                        }
                    }
                    for other in pp.keys().filter(|o| *o != pat) {
                        if !patterns_disjoint(pat, other) {
                            return Err(err(
                                &at,
                                Kind::Unsupported,
                                format!("a name may match both this pattern and `{other}`: not supported"),
                            ));
                        }
                    }
                }
                super::super::regex::pattern_body(pat, &super::super::regex::Json).map_err(|e| e.at(&at))?;
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
                            Kind::Unsupported,
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
                let by_pattern = patterns.iter().find(|(p, _)| self.pattern_matches(p, r) == Ok(true));
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
        if !dependencies.is_empty() && properties.len() > super::super::rules::ANY_ORDER_MAX_PROPERTIES {
            if self.mode == Mode::Strict {
                return Err(err(
                    &format!("{ptr}/dependencies"),
                    Kind::Unsupported,
                    format!(
                        "`dependencies` on an object of more than {} properties",
                        super::super::rules::ANY_ORDER_MAX_PROPERTIES
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
    /// with shared rules, whose properties are a [`super::super::rules::PropertySet`] (the
    /// set of properties written decides whether the object may close). `None`
    /// otherwise, or for the schema form.
    pub(super) fn dependencies(&self, v: &Value) -> Option<Vec<(String, Vec<String>)>> {
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
    pub(super) fn extra_keys(
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
    pub(super) fn max_properties(&self, obj: &Map<String, Value>, ptr: &str, object: Node) -> Result<Node> {
        let at = format!("{ptr}/maxProperties");
        let Some(v) = obj.get("maxProperties") else { return Ok(object) };
        let max = v.as_u64().ok_or_else(|| err(&at, Kind::Invalid, "`maxProperties` must be a non-negative integer"))?
            as usize;
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
            return Err(err(&at, Kind::Unsupported, format!("`maxProperties: {max}` is not enforced on this object")));
        }
        Ok(Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty })
    }
}
