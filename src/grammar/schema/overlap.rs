//! Whether two value grammars can match the same value: what `oneOf` needs to be
//! enforced as "any of" (exactly one holds when no value matches two branches), and
//! whether two `patternProperties` patterns share a name. Conservative: `false` when
//! unsure.

use serde_json::Value;

use super::super::dfa::Dfa;
use super::super::ecma::name_pattern;
use super::super::machine::{Machine, MAX_STATES};
use super::{Format, MachineKind, Node};

/// The JSON types a node can match, as bits (null, boolean, number, string, array,
/// object).
pub(super) fn kinds(n: &Node) -> u8 {
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

/// The automata [`disjoint`] built for scalar grammars, by regex text: a `oneOf` of
/// `n` branches compares `n²/2` pairs, and each branch's automaton is built once.
pub(super) type Automata = std::collections::HashMap<String, Option<Dfa>>;

/// Whether no value can match both nodes (conservative: `false` when unsure).
/// `automata` keeps the scalar automata built so far, for the next call.
pub(super) fn disjoint(a: &Node, b: &Node, automata: &mut Automata) -> bool {
    if kinds(a) & kinds(b) == 0 {
        return true;
    }
    match (a, b) {
        // Numbers compare by value (`2` is `2.0`).
        (Node::Literals(x), Node::Literals(y)) => {
            let same = |a: &Value, b: &Value| a == b || (a.is_number() && a.as_f64() == b.as_f64());
            x.iter().all(|v| !y.iter().any(|w| same(v, w)))
        }
        (Node::Def { body, .. }, other) | (other, Node::Def { body, .. }) => disjoint(body, other, automata),
        // A discriminator: a property both require, with values no value satisfies both.
        (
            Node::Object { properties: pa, additional: xa, patterns: qa, .. },
            Node::Object { properties: pb, additional: xb, patterns: qb, .. },
        ) => {
            let discriminated = pa
                .iter()
                .any(|(k, va, ra)| *ra && pb.iter().any(|(kb, vb, rb)| *rb && kb == k && disjoint(va, vb, automata)));
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
            xs.iter().all(|x| disjoint(x, other, automata))
        }
        // Scalars whose grammar is exactly their schema (no caps, no format subsets):
        // disjoint when their automata share no text.
        _ if exact_scalar(a) && exact_scalar(b) => {
            const MAX_PAIRS: usize = 4096;
            let d = &super::super::regex::Json;
            let [ta, tb] = [a, b].map(|n| super::super::regex::to_regex(n, d));
            for t in [&ta, &tb] {
                if !automata.contains_key(t) {
                    let dfa =
                        Dfa::from_rules(t, &super::super::rules::Rules::none(), super::super::dfa::NFA_SIZE_LIMIT);
                    automata.insert(t.clone(), dfa.ok());
                }
            }
            match (&automata[&ta], &automata[&tb]) {
                (Some(da), Some(db)) => da.intersects(db, MAX_PAIRS) == Some(false),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether `n` is a scalar whose grammar accepts exactly what its schema does: no
/// length cap (`maxLength` over [`super::super::regex::MAX_REPEAT`]) and no format that is a
/// stated subset (email, uri, times), so two such grammars that share no text are
/// two schemas that share no value.
pub(super) fn exact_scalar(n: &Node) -> bool {
    match n {
        Node::Never | Node::Null | Node::Boolean | Node::Integer { .. } | Node::Number { .. } => true,
        Node::String { max_len, format, .. } => {
            max_len.is_none_or(|m| m <= super::super::regex::MAX_REPEAT)
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
pub(super) fn patterns_disjoint(a: &str, b: &str) -> bool {
    let (Some(a), Some(b)) = (name_pattern(a), name_pattern(b)) else { return false };
    Machine::intersect(&mut [a, b], MAX_STATES).is_ok_and(|m| m.states.is_empty())
}
