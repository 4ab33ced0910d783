//! Integers, numbers and strings: bounds, `multipleOf`, length, `pattern` and `format`
//! (intersected as automata where a regex cannot say them together).

use serde_json::{Map, Value};

use super::super::error::{BuildError, BuildErrorKind as Kind};
use super::super::machine::{Automaton, Length, Machine, MultipleOf, Pattern, MAX_STATES};
use super::keywords::STANDARD_FORMATS;
use super::{err, machine_node, Compiler, Format, MachineKind, Mode, Node, NumBound};
use crate::Result;

impl Compiler<'_> {
    /// Every numeric bound of `obj`: `minimum`/`maximum` (exclusive when a draft-4
    /// boolean `exclusiveMinimum`/`exclusiveMaximum` says so) and the 2020-12
    /// `exclusiveMinimum`/`exclusiveMaximum` numbers, as (keyword, value, lower,
    /// exclusive).
    pub(super) fn bounds(obj: &Map<String, Value>, ptr: &str) -> Result<Vec<(&'static str, f64, bool, bool)>> {
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
                Some(_) => return Err(err(&format!("{ptr}/{k}"), Kind::Invalid, format!("`{k}` must be a number"))),
            }
        }
        Ok(out)
    }

    pub(super) fn integer(&self, obj: &Map<String, Value>, ptr: &str) -> Result<Node> {
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
    pub(super) fn multiple_of(
        &self,
        obj: &Map<String, Value>,
        ptr: &str,
        node: Node,
        kind: MachineKind,
    ) -> Result<Node> {
        let Some(k) = obj.get("multipleOf") else { return Ok(node) };
        if !self.machines {
            return Ok(node);
        }
        let at = format!("{ptr}/multipleOf");
        let Value::Number(k) = k else { return Err(err(&at, Kind::Invalid, "`multipleOf` must be a number")) };
        // Numbers are written in plain decimal here, even unbounded ones.
        let text = match &node {
            Node::Number { min, max } => super::super::regex::number_range(*min, *max),
            n => super::super::regex::to_regex(n, &super::super::regex::Json),
        };
        let machine = MultipleOf::new(&k.to_string()).and_then(|m| {
            let mut parts: Vec<Box<dyn Automaton>> = vec![Box::new(Pattern::new(&text)?), Box::new(m)];
            Machine::intersect(&mut parts, MAX_STATES)
        });
        match machine {
            Ok(m) if m.states.is_empty() => Ok(self.never(&at, format!("no multiple of {k} is within the bounds"))),
            Ok(m) => Ok(machine_node(m, kind)),
            Err(e) if self.mode == Mode::Strict => Err(e.at(&at)),
            Err(_) => Ok(node),
        }
    }

    /// A string of `pattern` and `format` with `min..=max` characters, as a
    /// [`Node::Machine`] (`max` lowered to [`super::super::regex::MAX_REPEAT`] as for plain
    /// strings).
    pub(super) fn string_machine(
        pattern: Option<&str>,
        format: Option<Format>,
        min: usize,
        max: Option<usize>,
    ) -> std::result::Result<Node, BuildError> {
        let mut parts: Vec<Box<dyn Automaton>> = Vec::new();
        let (mut min, mut max) = (min, max.map(|m| m.min(super::super::regex::MAX_REPEAT.max(min))));
        // (regex, whether it is ASCII: its bytes are its characters)
        let regexes = pattern
            .map(|p| super::super::regex::decoded_pattern(p).map(|r| (r, false)))
            .transpose()?
            .into_iter()
            .chain(format.map(|f| (super::super::regex::format_regex(f), true)));
        for (re, ascii) in regexes {
            // Bounds the regex implies already cost no states: a format's longest value
            // under `maxLength`, a pattern's shortest over `minLength`.
            if let Some((shortest, longest)) = super::super::machine::byte_lengths(&re) {
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

    pub(super) fn number(&self, obj: &Map<String, Value>, ptr: &str) -> Result<Node> {
        let mut lower: Vec<NumBound> = Vec::new();
        let mut upper: Vec<NumBound> = Vec::new();
        for (k, x, is_lower, exclusive) in Self::bounds(obj, ptr)? {
            let Some(b) = NumBound::new(x, exclusive) else {
                if self.mode == Mode::Strict {
                    return Err(err(
                        &format!("{ptr}/{k}"),
                        Kind::Unsupported,
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

    pub(super) fn string(&self, obj: &Map<String, Value>, ptr: &str) -> Result<Node> {
        let usize_of = |k: &str| -> Result<Option<usize>> {
            match obj.get(k) {
                None => Ok(None),
                Some(v) => v.as_u64().map(|x| Some(x as usize)).ok_or_else(|| {
                    err(&format!("{ptr}/{k}"), Kind::Invalid, format!("`{k}` must be a non-negative integer"))
                }),
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
                return Err(err(&format!("{ptr}/format"), Kind::Unsupported, format!("unsupported format `{f}`")))
            }
            Some(_) => None,
        };
        let pattern = obj.get("pattern").and_then(Value::as_str).map(str::to_string);
        if let Some(p) = &pattern {
            super::super::regex::pattern_body(p, &super::super::regex::Json)
                .map_err(|e| e.at(&format!("{ptr}/pattern")))?;
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
                Some(p) if format.is_none() => super::super::regex::pattern_with_length(
                    p,
                    min_len.unwrap_or(0),
                    max_len,
                    &super::super::regex::Json,
                )
                .map_err(|e| e.at(&format!("{ptr}/pattern")))?
                .is_some(),
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
                    Err(e) if self.mode == Mode::Strict => return Err(e.at(ptr)),
                    Err(_) => {}
                }
            } else if !exact && self.mode == Mode::Strict {
                // Without machines the grammar is one regex per string.
                if format.is_some() && pattern.is_some() {
                    return Err(err(
                        &format!("{ptr}/pattern"),
                        Kind::Unsupported,
                        "`pattern` together with `format` is not enforced",
                    ));
                }
                let shape = if format.is_some() { "format" } else { "pattern" };
                for (k, v) in [("minLength", min_len.is_some()), ("maxLength", max_len.is_some())] {
                    if v {
                        return Err(err(
                            &format!("{ptr}/{k}"),
                            Kind::Unsupported,
                            format!("`{k}` together with `{shape}` is not enforced"),
                        ));
                    }
                }
            }
        }
        Ok(Node::String { min_len: min_len.unwrap_or(0), max_len, pattern, format })
    }
}
