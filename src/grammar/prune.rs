//! Emptiness: which parts of a value grammar admit a value, and the grammar without
//! the parts that admit none.
//!
//! A schema can contradict itself (`minimum` above `maximum`, a `required` property
//! whose schema is `false`, a `$ref` that requires itself), and a part that admits no
//! value is still *text* a regex can start: `{"x": ` then nothing. A token mask built
//! from such a grammar lets the model write that text and then allows no token at
//! all. [`prune`] removes every part no finite value can reach (an optional property
//! with no value, an `anyOf` branch with none, array items with none), so every
//! prefix the grammar allows can be completed, and says when nothing is left: the
//! schema compiler then refuses the schema instead of serving it.
//!
//! Recursion ([`Node::Def`] / [`Node::Recurse`]) is read as a least fixpoint: a
//! definition admits a value when its body does *without* taking the recursive branch
//! (a tree whose `children` may be empty), so `{"x": {"$ref": "#"}}` with `x`
//! required has no finite value.

use std::collections::HashMap;

use super::ir::Node;

/// `node` without the parts that admit no value; `None` when it admits none itself.
/// Each recursive definition found to have no finite value adds a sentence to `why`.
///
/// Cost: one pass over the node, plus one more over each recursive definition's body
/// per definition it is nested in (quadratic only in the nesting of `$ref`s).
pub fn prune(node: Node, why: &mut Vec<String>) -> Option<Node> {
    Pruner { productive: HashMap::new(), why }.prune(node)
}

struct Pruner<'w> {
    /// For each enclosing definition, whether it admits a value.
    productive: HashMap<String, bool>,
    why: &'w mut Vec<String>,
}

impl Pruner<'_> {
    fn prune(&mut self, node: Node) -> Option<Node> {
        match node {
            Node::Def { key, body } => {
                let saved = self.productive.insert(key.clone(), false);
                let has_value = productive(&body, &mut self.productive);
                let out = if has_value {
                    self.productive.insert(key.clone(), true);
                    self.prune(*body).map(|body| Node::Def { key: key.clone(), body: Box::new(body) })
                } else {
                    let name = key.split('\u{0}').next().unwrap_or(&key);
                    self.why.push(format!("`$ref` `{name}` has no finite value: every value of it requires itself"));
                    None
                };
                restore(&mut self.productive, key, saved);
                out
            }
            Node::Recurse(ref key) => self.productive.get(key).copied().unwrap_or(true).then_some(node),
            Node::AnyOf(alts) => {
                let mut alts: Vec<Node> = alts.into_iter().filter_map(|a| self.prune(a)).collect();
                match alts.len() {
                    0 => None,
                    1 => alts.pop(),
                    _ => Some(Node::AnyOf(alts)),
                }
            }
            Node::Array { prefix, items, min, max } => {
                // The first prefix position with no value ends the array before it.
                let mut kept = Vec::with_capacity(prefix.len());
                let mut cut = false;
                for p in prefix {
                    match self.prune(p) {
                        Some(p) if !cut => kept.push(p),
                        _ => cut = true,
                    }
                }
                let items = if cut { None } else { items.and_then(|i| self.prune(*i)).map(Box::new) };
                let longest = if items.is_some() { max } else { Some(max.map_or(kept.len(), |m| m.min(kept.len()))) };
                if longest.is_some_and(|l| l < min) {
                    return None;
                }
                Some(Node::Array { prefix: kept, items, min, max: longest })
            }
            Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty } => {
                // Where undeclared names may be written (extras, pattern names), a
                // declared name stays declared even with no value: removing it would let
                // it be written as an extra (with the extras' schema, not its own). It
                // keeps a `Never` value, which the emitters read as "never written, but
                // not an extra either"; closed objects lose such a property outright.
                let names_open = additional.is_some() || !patterns.is_empty();
                let mut kept: Vec<(String, Option<Node>, bool)> = Vec::with_capacity(properties.len());
                for (name, value, required) in properties {
                    match self.prune(value) {
                        None if required => return None,
                        v => kept.push((name, v, required)),
                    }
                }
                let mut gone: Vec<String> = kept.iter().filter(|p| p.1.is_none()).map(|p| p.0.clone()).collect();
                // A property that needs one with no value cannot be written either.
                loop {
                    let before = gone.len();
                    for (a, needs) in &dependencies {
                        if !gone.contains(a) && needs.iter().any(|n| gone.contains(n)) {
                            gone.push(a.clone());
                        }
                    }
                    if gone.len() == before {
                        break;
                    }
                }
                if kept.iter().any(|(n, _, r)| *r && gone.contains(n)) {
                    return None;
                }
                let kept: Vec<(String, Node, bool)> = kept
                    .into_iter()
                    .filter_map(|(n, v, r)| match (gone.contains(&n), v) {
                        (false, Some(v)) => Some((n, v, r)),
                        _ if names_open => Some((n, Node::Never, r)),
                        _ => None,
                    })
                    .collect();
                // A gone property brings nothing; one that stays brings only kept ones.
                let dependencies: Vec<(String, Vec<String>)> =
                    dependencies.into_iter().filter(|(a, _)| !gone.contains(a)).collect();
                let extra_keys = extra_keys.filter(|m| !m.states.is_empty());
                let additional = additional.and_then(|a| self.prune(*a)).map(Box::new);
                let patterns: Vec<(String, Node)> =
                    patterns.into_iter().filter_map(|(p, v)| self.prune(v).map(|v| (p, v))).collect();
                let writable = kept.iter().any(|p| p.1 != Node::Never);
                if non_empty && !writable && additional.is_none() && patterns.is_empty() {
                    return None;
                }
                Some(Node::Object { properties: kept, additional, patterns, extra_keys, dependencies, non_empty })
            }
            leaf => leaf_has_value(&leaf).then_some(leaf),
        }
    }
}

fn restore(map: &mut HashMap<String, bool>, key: String, saved: Option<bool>) {
    match saved {
        Some(v) => map.insert(key, v),
        None => map.remove(&key),
    };
}

/// Whether a node without children admits a value.
fn leaf_has_value(node: &Node) -> bool {
    match node {
        Node::Never => false,
        Node::Integer { min: Some(a), max: Some(b) } => a <= b,
        Node::Number { min: Some(a), max: Some(b) } => {
            let (x, y) = ((a.value, a.frac), (b.value, b.frac));
            x < y || (x == y && !a.exclusive && !b.exclusive)
        }
        Node::String { min_len, max_len, .. } => max_len.is_none_or(|m| m >= *min_len),
        Node::Machine { machine, .. } => !machine.states.is_empty(),
        Node::Literals(values) => !values.is_empty(),
        _ => true,
    }
}

/// Whether `node` admits a value, each definition in `defs` taken as admitting one or
/// not as the map says (a definition not in it: yes).
fn productive(node: &Node, defs: &mut HashMap<String, bool>) -> bool {
    match node {
        Node::Def { key, body } => {
            // Least fixpoint: assume the recursive branch has no value; if the body has
            // one anyway, so does the definition.
            let saved = defs.insert(key.clone(), false);
            let has = productive(body, defs);
            restore(defs, key.clone(), saved);
            has
        }
        Node::Recurse(key) => defs.get(key).copied().unwrap_or(true),
        Node::AnyOf(alts) => alts.iter().any(|a| productive(a, defs)),
        Node::Array { prefix, items, min, max } => {
            if max.is_some_and(|m| m < *min) {
                return false;
            }
            // Positions below `min` must hold a value.
            let needed = prefix.iter().take(*min).all(|p| productive(p, defs));
            needed && (*min <= prefix.len() || items.as_ref().is_some_and(|i| productive(i, defs)))
        }
        Node::Object { properties, additional, patterns, non_empty, .. } => {
            let required_ok = properties.iter().filter(|p| p.2).all(|(_, v, _)| productive(v, defs));
            let mut some_property = || {
                properties.iter().any(|(_, v, _)| productive(v, defs))
                    || additional.as_ref().is_some_and(|a| productive(a, defs))
                    || patterns.iter().any(|(_, v)| productive(v, defs))
            };
            required_ok && (!*non_empty || properties.iter().any(|p| p.2) || some_property())
        }
        leaf => leaf_has_value(leaf),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn module_example() {
        use crate::grammar::ir::Node;
        use crate::grammar::prune::prune;
        let tree = Node::Def {
            key: "#".into(),
            body: Box::new(Node::Object {
                properties: vec![("x".into(), Node::Recurse("#".into()), true)],
                additional: None,
                patterns: vec![],
                extra_keys: None,
                dependencies: vec![],
                non_empty: false,
            }),
        };
        let mut why = Vec::new();
        assert_eq!(prune(tree, &mut why), None);
        assert!(why[0].contains("requires itself"));
        let some = Node::AnyOf(vec![Node::Integer { min: Some(5), max: Some(1) }, Node::Null]);
        assert_eq!(prune(some, &mut why), Some(Node::Null));
    }
}
