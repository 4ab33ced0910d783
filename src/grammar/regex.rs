//! Value grammar → regex, through a serialization [`Dialect`].
//!
//! The same [`Node`] becomes compact JSON (`{"city":"Paris"}`) with [`Json`], or Gemma
//! 4's native call syntax (`{city:<|"|>Paris<|"|>}`) with the tools' Gemma 4
//! dialect. Whitespace is bounded: at most one space after `:` and `,`, never a loop.

pub use super::dialect::{
    key_except, key_except_built, without_literal, Dialect, Json, JsonWith, Spacing, MAX_BUILT_KEY_CHARS,
};
pub(crate) use super::ecma::{decoded_pattern, names_machine, pattern_body, pattern_with_length, NameMatcher};
pub(crate) use super::numbers::{format_regex, int_range, number_range};

use super::ir::{MachineKind, Node, ANY_VALUE_LEVELS};
use super::machine::Machine;
pub(crate) use super::part::MAX_REPEAT;
use super::part::{cap, Built, NEVER};
use super::rules::{Rules, SHARE_MIN_COUNT};

/// The regex for `node` in dialect `d` (unanchored text; callers anchor).
///
/// A [`Node::Machine`] (which only [`super::schema::compile_shared`] makes) is written
/// out when its automaton has no loops and its regex stays under [`MAX_INLINE`]
/// bytes, and as matching nothing otherwise: grammars with machines are built with
/// [`to_rules`].
pub fn to_regex(node: &Node, d: &dyn Dialect) -> String {
    let mut rules = Rules::none();
    let main = emit(node, d, &mut rules).text;
    if rules.bodies().is_empty() {
        return main;
    }
    rules.inline(&main, MAX_INLINE).unwrap_or_else(|| NEVER.into())
}

/// Largest regex [`to_regex`] writes for a [`Node::Machine`].
pub const MAX_INLINE: usize = 1 << 16;

/// [`to_regex`], with large parts emitted once into `rules` and referenced (see
/// [`Rules`]). Compile the result with [`super::Grammar::from_rules`]. Every part is
/// built as regex-syntax `Hir` beside its text ([`Built`]), so the compile parses
/// none of it back; a long result is itself a rule, and the returned regex
/// references it.
///
/// Cost: linear in the schema's size, where [`to_regex`] copies shared parts.
pub fn to_rules(node: &Node, d: &dyn Dialect, rules: &mut Rules) -> String {
    to_rules_part(node, d, rules).text
}

/// [`to_rules`] as a [`Built`] part (its steps kept, for a [`super::spec::Spec`]).
///
/// ```
/// use toolgate::grammar::{regex::{to_rules_part, Json}, rules::Rules, schema, spec::Spec};
/// let node = schema::compile(&serde_json::json!({"type": "array", "items": {"type": "integer"}}), schema::Mode::Strict)?;
/// let mut rules = Rules::new();
/// let main = to_rules_part(&node, &Json, &mut rules);
/// assert!(Spec::new(main, rules).compile()?.matches(b"[1,-2]"));
/// # Ok::<(), toolgate::Error>(())
/// ```
///
/// Cost: as [`to_rules`].
pub fn to_rules_part(node: &Node, d: &dyn Dialect, rules: &mut Rules) -> Built {
    let main = emit(node, d, rules);
    rules.share_part(main)
}

fn emit(node: &Node, d: &dyn Dialect, rules: &mut Rules) -> Built {
    match node {
        Node::Never => Built::never(),
        Node::Null => rules.leaf(d.null()),
        Node::Boolean => rules.leaf(d.boolean()),
        Node::Integer { min, max } => rules.leaf(int_range(*min, *max)),
        // The exponent stops at ±292: with at most 16 integer digits every number the
        // grammar allows is a finite f64 (`6.5e555` is RFC 8259 JSON, but no JSON
        // parser that reads into doubles accepts it). Integer parts of 17 or 18 digits
        // (64-bit ids, nanosecond times) take no exponent.
        Node::Number { min: None, max: None } => rules.leaf(
            concat!(
                r"-?(?:(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?(?:[0-9]{1,2}|1[0-9]{2}|2[0-8][0-9]|29[0-2]))?",
                r"|[1-9][0-9]{16,17}(?:\.[0-9]{1,16})?)"
            )
            .into(),
        ),
        Node::Number { min, max } => rules.leaf(number_range(*min, *max)),
        Node::String { min_len, max_len, pattern, format } => {
            let q = rules.leaf(d.quote());
            // A count past a few dozen (`maxLength`, a pattern's `{1,255}`).
            let long = (*min_len).max(max_len.unwrap_or(0)) > SHARE_MIN_COUNT;
            let body = match (format, pattern) {
                (Some(f), _) => rules.leaf(format_regex(*f)),
                // Length bounds beside a pattern hold where they meet exactly
                // ([`pattern_with_length`]); elsewhere (lenient mode only) the pattern.
                (None, Some(p)) => match pattern_with_length(p, *min_len, *max_len, d) {
                    Ok(Some(re)) if *min_len > 0 || max_len.is_some() => rules.leaf(re),
                    _ => pattern_body(p, d).map_or_else(|_| Built::never(), |b| rules.leaf(b)),
                },
                // Past a few dozen, each count calls the one character rule instead of
                // holding a copy of it.
                (None, None) if long && rules.shares() => {
                    let char = rules.leaf(d.string_char());
                    rules.share_part_always(char).repeat(*min_len, *max_len)
                }
                (None, None) => rules.leaf(d.string_char()).repeat(*min_len, *max_len),
            };
            let string = Built::cat(vec![q.clone(), body, q]);
            let plain = format.is_none() && pattern.is_none() && *min_len == 0 && max_len.is_none();
            let string = match d.other_string().filter(|_| plain) {
                Some(other) => Built::alt(vec![string, rules.leaf(other)]),
                None => string,
            };
            // A long count or a pattern is thousands of NFA states: compiled once,
            // however many properties share it.
            if (long || pattern.is_some()) && rules.shares() {
                rules.share_part_always(string)
            } else {
                string
            }
        }
        Node::Machine { machine, kind } => {
            let start = machine_rules(machine, *kind == MachineKind::String, d, rules);
            if *kind == MachineKind::String {
                let q = rules.leaf(d.quote());
                Built::cat(vec![q.clone(), start, q])
            } else {
                start
            }
        }
        Node::Literals(vs) => Built::alt(vs.iter().map(|v| rules.leaf(d.literal(v))).collect()),
        Node::AnyOf(ns) => Built::alt(ns.iter().map(|n| emit(n, d, rules)).collect()),
        // One rule, its body referencing itself where the schema recurses. A plain
        // regex cannot hold it: `to_regex` writes such a grammar as matching nothing.
        Node::Def { key, body } => {
            let rule = rules.reserve(1);
            let outer = rules.defs.insert(key.clone(), rule);
            let body = emit(body, d, rules);
            match outer {
                Some(o) => rules.defs.insert(key.clone(), o),
                None => rules.defs.remove(key),
            };
            rules.define_built(rule, body);
            Rules::reference_built(rule)
        }
        Node::Recurse(key) => match rules.defs.get(key) {
            Some(&rule) => Rules::reference_built(rule),
            None => Built::never(),
        },
        Node::AnyValue { levels } => {
            let string = Node::String { min_len: 0, max_len: None, pattern: None, format: None };
            let scalars = [Node::Null, Node::Boolean, Node::Number { min: None, max: None }, string];
            let scalars = Built::alt(scalars.iter().map(|n| emit(n, d, rules)).collect());
            let (comma, colon, key) = (rules.leaf(d.comma()), rules.leaf(d.colon()), rules.leaf(d.any_key(&[])));
            let [open_list, close_list, open_map, close_map] =
                [r"\[", r"\]", r"\{", r"\}"].map(|t| rules.leaf(t.into()));
            // `[inner(,inner)*]|{member(,member)*}`, each list optional.
            let containers = |inner: &Built| {
                let list = |x: Built| Built::separated(x, &comma).group().opt();
                let member = Built::cat(vec![key.clone(), colon.clone(), inner.clone()]);
                Built::bar(vec![
                    Built::cat(vec![open_list.clone(), list(inner.clone()), close_list.clone()]),
                    Built::cat(vec![open_map.clone(), list(member), close_map.clone()]),
                ])
            };
            if rules.shares() && *levels >= super::dfa::MAX_STACK {
                // One rule that calls itself: the DFA's stack bounds the nesting.
                return rules.share_recursive(|me| Built::bar(vec![scalars.clone(), containers(me)]));
            }
            // One level after the other, down to scalars; a plain regex holds at
            // most `ANY_VALUE_LEVELS` (each level copies the one below four times).
            let levels = if rules.shares() { *levels } else { (*levels).min(ANY_VALUE_LEVELS) };
            let scalars = rules.share_part(scalars);
            let mut value = scalars.clone();
            for _ in 0..levels {
                let inner = rules.share_part(value);
                value = Built::bar(vec![scalars.clone(), containers(&inner)]);
            }
            value.group()
        }
        Node::Array { prefix, items, min, max } => {
            // Positional items are optional from `minItems` on (`[1]` satisfies two
            // `prefixItems`); the others follow, as many as the bounds allow.
            let comma = rules.leaf(d.comma());
            let k = prefix.len().min(max.unwrap_or(usize::MAX));
            let item = items.as_ref().map(|n| {
                let re = emit(n, d, rules);
                rules.share_part(re)
            });
            let inner = if k == 0 {
                match item {
                    Some(item) => list(item, &comma, *min, *max),
                    None if *min > 0 => Built::never(),
                    None => Built::empty(),
                }
            } else {
                // After all `k` positional items.
                let mut seq = match item {
                    Some(item) => Built::cat(vec![comma.clone(), item])
                        .group()
                        .repeat(min.saturating_sub(k), max.map(|m| m - k)),
                    None if *min > k => Built::never(),
                    None => Built::empty(),
                };
                for i in (1..k).rev() {
                    let item = emit(&prefix[i], d, rules);
                    let step = Built::cat(vec![comma.clone(), rules.share_part(item), seq]);
                    seq = if i >= *min { step.group().opt() } else { step };
                }
                let first = emit(&prefix[0], d, rules);
                let body = Built::cat(vec![rules.share_part(first), seq]);
                if *min == 0 {
                    body.group().opt()
                } else {
                    body
                }
            };
            Built::cat(vec![rules.leaf(r"\[".into()), inner, rules.leaf(r"\]".into())])
        }
        Node::Object { properties, additional, patterns, extra_keys, dependencies, non_empty } => {
            let colon = rules.leaf(d.colon());
            let comma = rules.leaf(d.comma());
            // A declared property with no value (`Never`, left by `prune` where extras
            // are allowed) is never written, but its name stays out of the extras.
            let writable: Vec<&(String, Node, bool)> = properties.iter().filter(|p| p.1 != Node::Never).collect();
            let elems: Vec<(Built, bool)> = writable
                .iter()
                .map(|(name, n, req)| {
                    let value = emit(n, d, rules);
                    let value = rules.share_part(value);
                    (Built::cat(vec![rules.leaf(d.key(name)), colon.clone(), value]), *req)
                })
                .collect();
            let names: Vec<&str> = properties.iter().map(|(n, _, _)| n.as_str()).collect();
            let mut extras: Vec<Built> = Vec::new();
            // The extras' key, only when extras are allowed (a shared rule that nothing
            // calls would still be compiled).
            let key = additional.as_ref().and_then(|_| match extra_keys {
                Some(m) if d.keys_are_strings() => {
                    Some(emit(&Node::Machine { machine: m.clone(), kind: MachineKind::String }, d, rules))
                }
                // Names that must avoid a pattern, in a dialect whose keys are no
                // strings: not generated.
                Some(_) => None,
                // Past one name, the key trie is its own rule, built without parsing
                // (see `Dialect::any_key_built`), keyed by the names and by how the
                // dialect spells a key; names too long for that are left to the
                // parser (its nesting limit refuses them).
                None if names.len() > 1 => {
                    let key = || format!("{}\u{0}{}", d.any_key(&[]), names.join("\u{0}"));
                    let shared = rules.shares().then(|| rules.share_built_keyed(key(), |r| d.any_key_built(&names, r)));
                    Some(shared.flatten().unwrap_or_else(|| Built::text_only(d.any_key(&names))))
                }
                None => Some(rules.leaf(d.any_key(&names))),
            });
            if let (Some(n), Some(key)) = (additional, key) {
                let value = emit(n, d, rules);
                let value = rules.share_part(value);
                extras.push(Built::cat(vec![key, colon.clone(), value]));
            }
            for (p, n) in patterns {
                // Declared names the pattern also matches go through their own
                // (merged) schema: the pattern's keys skip them, as a machine.
                let declared: Vec<&str> = match NameMatcher::new(p) {
                    Ok(m) => names.iter().copied().filter(|name| m.matches(name)).collect(),
                    Err(_) => Vec::new(),
                };
                let plain_key = |rules: &mut Rules| {
                    pattern_body(p, &Json).ok().and_then(|b| d.pattern_key(&b)).map(|k| rules.leaf(k))
                };
                let key = match declared.is_empty() {
                    true => plain_key(rules),
                    false if d.keys_are_strings() && rules.shares() => {
                        names_machine(Some(p), &[], &declared).map(|m| {
                            let machine = std::sync::Arc::new(m);
                            emit(&Node::Machine { machine, kind: MachineKind::String }, d, rules)
                        })
                    }
                    // A plain regex cannot skip them (strict mode refused the schema;
                    // lenient lets the pattern's keys take them too).
                    false => plain_key(rules),
                };
                if let Some(key) = key {
                    let value = emit(n, d, rules);
                    let value = rules.share_part(value);
                    extras.push(Built::cat(vec![key, colon.clone(), value]));
                }
            }
            let extra = match extras.len() {
                0 => None,
                1 => extras.pop(),
                _ => Some(Built::alt(extras)),
            };
            // `dependencies` as bit masks over the properties (every name is one).
            let index = |name: &str| writable.iter().position(|(n, _, _)| n == name);
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
            let Some(deps) = deps else { return Built::never() };
            let members = Members { comma: &comma, non_empty: *non_empty, deps: &deps };
            let body = props_first(&elems, extra, members, rules);
            Built::cat(vec![rules.leaf(r"\{".into()), body, rules.leaf(r"\}".into())])
        }
    }
}

/// How an object's members are joined: the separator, whether at least one is
/// needed, and `dependencies` (`(i, mask)`: property `i` brings every property in
/// `mask`).
#[derive(Clone, Copy)]
struct Members<'a> {
    comma: &'a Built,
    non_empty: bool,
    deps: &'a [(usize, u128)],
}

/// `m` as a reference to one rule holding it as a graph ([`machine_graph`]) where
/// the table shares; else (a plain regex: [`to_regex`]) as right-linear rules, one
/// rule per state, an alternative per target state (the bytes leading there, then a
/// tail call to the target's rule) and the empty alternative where the state
/// accepts, returning the start state's reference. In a string (`string`), the bytes
/// JSON escapes are spelled as the dialect spells them. Cost: linear in the
/// machine's edges.
fn machine_rules(m: &Machine, string: bool, d: &dyn Dialect, rules: &mut Rules) -> Built {
    use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, Hir};
    if m.states.is_empty() {
        return Built::never();
    }
    if rules.shares() {
        if let Some(graph) = machine_graph(m, string, d, rules) {
            return rules.share_part_always(graph);
        }
    }
    let base = rules.reserve(m.states.len());
    for (i, state) in m.states.iter().enumerate() {
        let mut by_target: std::collections::BTreeMap<u32, Vec<(u8, u8)>> = Default::default();
        for &(lo, hi, t) in &state.edges {
            by_target.entry(t).or_default().push((lo, hi));
        }
        let mut alts = Vec::new();
        if state.accepting {
            alts.push(Built::empty());
        }
        for (t, ranges) in by_target {
            let escaped = |b: u8| string && !d.plain_byte(b);
            let mut taken = [false; 256];
            for (lo, hi) in ranges {
                (lo..=hi).for_each(|b| taken[usize::from(b)] = true);
            }
            // Escaped bytes as the dialect spells them (each parsed once per table),
            // runs of plain bytes as one byte class.
            let mut spelled = Vec::new();
            let (mut class, mut class_hir) = (String::new(), Vec::new());
            let mut b = 0usize;
            while b < 256 {
                if !taken[b] {
                    b += 1;
                } else if escaped(b as u8) {
                    spelled.push(rules.leaf(d.string_literal_char(char::from(b as u8))));
                    b += 1;
                } else {
                    // A run of plain bytes.
                    let start = b;
                    while b + 1 < 256 && taken[b + 1] && !escaped(b as u8 + 1) {
                        b += 1;
                    }
                    use std::fmt::Write;
                    let _ = write!(class, "\\x{start:02X}-\\x{b:02X}");
                    class_hir.push(ClassBytesRange::new(start as u8, b as u8));
                    b += 1;
                }
            }
            if !class.is_empty() {
                let text = format!("(?-u:[{class}])");
                spelled.push(match rules.shares() {
                    true => Built::from_hir(text, Hir::class(Class::Bytes(ClassBytes::new(class_hir)))),
                    false => Built::text_only(text),
                });
            }
            alts.push(Built::cat(vec![Built::bar(spelled).group(), Rules::reference_built(base + t as usize)]));
        }
        rules.define_built(base + i, Built::bar(alts));
    }
    Rules::reference_built(base)
}

/// `m` as one [`Built::graph`] part: a state per state, plain bytes as ranges, the
/// bytes a string escapes as the dialect spells them. Its text lists the states
/// (`;` between them, `!` where one accepts) and edges (`lo-hi>target` in hex,
/// `<spelling>target`), which determines the language. `None` where a spelling is
/// text only. Cost: linear in the machine's edges.
fn machine_graph(m: &Machine, string: bool, d: &dyn Dialect, rules: &mut Rules) -> Option<Built> {
    use super::part::{Graph, GraphState};
    use std::fmt::Write;
    let mut text = String::from("machine:");
    let mut graph = Graph { states: Vec::with_capacity(m.states.len()) };
    let escaped = |b: usize| string && !d.plain_byte(b as u8);
    for (i, state) in m.states.iter().enumerate() {
        if i > 0 {
            text.push(';');
        }
        if state.accepting {
            text.push('!');
        }
        let mut g =
            GraphState { accepting: state.accepting, ranges: Vec::with_capacity(state.edges.len()), parts: Vec::new() };
        for &(lo, hi, t) in &state.edges {
            let mut b = usize::from(lo);
            while b <= usize::from(hi) {
                if escaped(b) {
                    let (spelled, part) = rules.leaf(d.string_literal_char(char::from(b as u8))).into_parts();
                    let _ = write!(text, "<{spelled}>{t}");
                    g.parts.push((part?, t));
                    b += 1;
                    continue;
                }
                let start = b;
                while b < usize::from(hi) && !escaped(b + 1) {
                    b += 1;
                }
                let _ = write!(text, "{start:02x}-{b:02x}>{t}");
                g.ranges.push((start as u8, b as u8, t));
                b += 1;
            }
        }
        graph.states.push(g);
    }
    Built::graph(text, graph)
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
fn props_first(e: &[(Built, bool)], extra: Option<Built>, m: Members, rules: &mut Rules) -> Built {
    let Members { comma, non_empty, deps } = m;
    // `dependencies` only hold in a property set (see `schema::Node::Object`).
    if !deps.is_empty() && !rules.takes_any_order(e.len()) {
        return Built::never();
    }
    if rules.shares() {
        return props_first_shared(e, extra, comma, non_empty, deps, rules);
    }
    let mut alts = Vec::new();
    let mut all_optional = true;
    for (j, (re, required)) in e.iter().enumerate() {
        if *required || j < MAX_OPENING_PROPERTIES {
            alts.push(Built::cat(vec![re.clone(), props_rest(e, j + 1, extra.as_ref(), comma)]));
        }
        if *required {
            all_optional = false;
            break;
        }
    }
    if all_optional {
        match (extra, non_empty) {
            (Some(x), false) => alts.push(Built::separated(x, comma).group().opt()),
            (Some(x), true) => alts.push(Built::separated(x, comma)),
            (None, false) => alts.push(Built::empty()),
            (None, true) => {}
        }
    }
    Built::alt(alts)
}

/// [`props_first`] with "the rest of the object from property `i` on" shared through
/// `rules` (each built on the next), so an object of `n` properties costs `O(n)`:
/// every optional property may open the object (no [`MAX_OPENING_PROPERTIES`]), and
/// extra properties may stand anywhere between the declared ones, as JSON Schema
/// allows.
fn props_first_shared(
    e: &[(Built, bool)],
    extra: Option<Built>,
    comma: &Built,
    non_empty: bool,
    deps: &[(usize, u128)],
    rules: &mut Rules,
) -> Built {
    // An extra property is written once, as a rule, however often it may appear.
    let extra = extra.map(|x| rules.share_part(x));
    if rules.takes_any_order(e.len()) {
        return rules.property_set(e, extra.as_ref(), comma, non_empty, deps);
    }
    let extras = match &extra {
        Some(x) => any_more(x, comma),
        None => Built::empty(),
    };
    let mut rest = vec![Built::empty(); e.len() + 1];
    rest[e.len()] = extras.clone();
    // `rest[0]` is only needed after an extra property opened the object.
    let first = if extra.is_some() { 0 } else { 1 };
    for i in (first..e.len()).rev() {
        let own = rest_element(&e[i].0, e[i].1, comma);
        rest[i] = rules.share_part(Built::cat(vec![extras.clone(), own, rest[i + 1].clone()]));
    }
    let mut alts = Vec::new();
    for (j, (re, required)) in e.iter().enumerate() {
        alts.push(Built::cat(vec![re.clone(), rest[j + 1].clone()]));
        if *required {
            break;
        }
    }
    if let Some(x) = extra {
        alts.push(Built::cat(vec![x, rest[0].clone()]));
    }
    if !non_empty && e.iter().all(|(_, required)| !required) {
        alts.push(Built::empty());
    }
    Built::alt(alts)
}

/// Something emitted, at element `i`.
fn props_rest(e: &[(Built, bool)], i: usize, extra: Option<&Built>, comma: &Built) -> Built {
    let mut out: Vec<Built> = e[i..].iter().map(|(re, required)| rest_element(re, *required, comma)).collect();
    if let Some(x) = extra {
        out.push(any_more(x, comma));
    }
    Built::cat(out)
}

/// `(?:comma x)*`: extra properties, as many as come, each after a separator.
fn any_more(x: &Built, comma: &Built) -> Built {
    Built::cat(vec![comma.clone(), x.clone()]).group().star()
}

fn rest_element(re: &Built, required: bool, comma: &Built) -> Built {
    let element = Built::cat(vec![comma.clone(), re.clone()]);
    if required {
        element
    } else {
        element.group().opt()
    }
}

/// `item` `lo..=hi` times (`hi` capped as [`super::part::repeat`] caps), `comma`
/// between.
fn list(item: Built, comma: &Built, lo: usize, hi: Option<usize>) -> Built {
    let hi = hi.map(|_| cap(lo, hi));
    let more = Built::cat(vec![comma.clone(), item.clone()]).group();
    match (lo, hi) {
        (0, Some(0)) => Built::empty(),
        (0, Some(h)) => Built::cat(vec![item, more.times(0, Some(h - 1))]).group().opt(),
        (0, None) => Built::cat(vec![item, more.star()]).group().opt(),
        (l, Some(h)) => Built::cat(vec![item, more.times(l - 1, Some(h.max(l) - 1))]),
        (l, None) => Built::cat(vec![item, more.times(l - 1, None)]),
    }
}

/// An object's members in schema order for dialects that lay out members themselves
/// (tagged parameters, keyword arguments): `elems` are `(member regex, required)`,
/// `extra` the regex of one extra member if the schema allows them, `comma` the
/// separator, `non_empty` whether at least one member must be written. Large parts go
/// into `rules`.
///
/// Cost: linear in the members, as [`to_rules`].
pub fn members(
    elems: &[(String, bool)],
    extra: Option<&str>,
    comma: &str,
    non_empty: bool,
    rules: &mut Rules,
) -> String {
    // Members given as text stay text: the grammar's compile parses them.
    let elems: Vec<(Built, bool)> = elems.iter().map(|(e, r)| (Built::text_only(e.clone()), *r)).collect();
    let extra = extra.map(|x| Built::text_only(x.into()));
    let comma = Built::text_only(comma.into());
    props_first(&elems, extra, Members { comma: &comma, non_empty, deps: &[] }, rules).text
}
