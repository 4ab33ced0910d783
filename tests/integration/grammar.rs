//! The constraint engine: schema keywords, masks on real vocabularies, and
//! constrained generation that always validates.

use crate::common;

use std::sync::Arc;

use serde_json::{json, Value};
use toolgate::engine::{Engine, FinishReason, GenerateParams};
use toolgate::gguf::GgufFile;
use toolgate::grammar::regex::Json;
use toolgate::grammar::rules::Rules;
use toolgate::grammar::schema::{Mode, Objects};
use toolgate::grammar::{Grammar, TokenMask, TokenVocab};
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;
use toolgate::tokenizer::{TokenKind, Tokenizer};
use toolgate::Error;

fn grammar(schema: Value) -> Grammar {
    Grammar::from_schema(&schema, Mode::Strict, &Json).unwrap()
}

fn check(schema: Value, valid: &[&str], invalid: &[&str]) {
    let g = grammar(schema.clone());
    for v in valid {
        assert!(g.matches(v.as_bytes()), "{schema}: should accept {v}");
        serde_json::from_str::<Value>(v).expect("test instance is JSON");
    }
    for v in invalid {
        assert!(!g.matches(v.as_bytes()), "{schema}: should reject {v}");
    }
}

#[test]
fn types_and_unions() {
    check(json!({"type": "null"}), &["null"], &["nul", "\"null\""]);
    check(json!({"type": "boolean"}), &["true", "false"], &["True", "1"]);
    check(json!({"type": ["string", "null"]}), &["\"a\"", "null"], &["1"]);
    check(
        json!({"type": "number"}),
        &["0", "-1.5", "3e10", "2.25E-3", "12345"],
        &["01", "1.", ".5", "+1", "NaN", "1e"],
    );
    check(json!({"type": "integer"}), &["0", "-7", "42"], &["-0", "1.0", "007"]);
    // 64-bit ids and nanosecond times: 18 digits; an exponent only up to 16.
    check(json!({"type": "integer"}), &["123456789012345678", "-123456789012345678"], &["1234567890123456789"]);
    check(json!({"type": "number"}), &["234567890123456789", "12345678901234567.5", "1e5"], &["123456789012345678e2"]);
    check(json!({"type": "integer", "minimum": 1e17}), &["100000000000000000"], &["99999999999999999"]);
    check(json!({"type": "integer", "minimum": 1e19}), &[], &["1", "999999999999999999"]);
    // Literals compare numbers by value, as JSON Schema does.
    check(json!({"enum": [2.0, "a", [1]]}), &["2", "2.0", "2.000", "\"a\"", "[1.0]"], &["2.5", "3", "2.", "[2]"]);
    check(json!({"const": 0.5}), &["0.5", "0.50"], &["0.05", "5"]);
}

/// Every number the grammar allows is a finite double: the largest mantissa with the
/// largest exponent still parses, one step further does not match (Gemma 3 once wrote
/// `6.5555555555555555e555` under the old 3-digit exponent, which serde_json refuses).
#[test]
fn numbers_stay_finite_doubles() {
    let largest = "9999999999999999.9999999999999999e292";
    check(
        json!({"type": "number"}),
        &[largest, "-9999999999999999e292", "1e-292", "6.5e99", "0.75e55"],
        &["6.5555555555555555e555", "1e293", "1e300", "1e999"],
    );
    let v: f64 = serde_json::from_str(largest).unwrap();
    assert!(v.is_finite());
}

#[test]
fn integer_bounds() {
    check(json!({"type": "integer", "minimum": -3, "maximum": 12}), &["-3", "0", "9", "12"], &["-4", "13", "100"]);
    check(json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100}), &["1", "99"], &["0", "100"]);
    check(json!({"type": "integer", "minimum": 1000}), &["1000", "99999"], &["999", "-1"]);
    check(json!({"type": "integer", "maximum": -10}), &["-10", "-500"], &["-9", "0"]);
}

/// Number bounds against arithmetic: every decimal from -13 to 13 in steps the digits
/// can tell apart (`-0`, `2.0`, `2.000`, `2.01`, `2.5` …) is accepted exactly when its
/// value is within the bounds, for every kind of bound on either side.
#[test]
fn number_bounds_follow_arithmetic() {
    let mut texts = Vec::new();
    for i in 0..=13 {
        for frac in ["", ".0", ".000", ".01", ".5", ".99"] {
            texts.push(format!("{i}{frac}"));
            texts.push(format!("-{i}{frac}"));
        }
    }
    let bounds = [None, Some(-10), Some(-1), Some(0), Some(2), Some(11)];
    let mut checked = 0;
    for lo in bounds {
        for hi in bounds {
            for (lo_ex, hi_ex) in [(false, false), (true, false), (false, true), (true, true)] {
                let mut schema = json!({"type": "number"});
                if let Some(lo) = lo {
                    schema[if lo_ex { "exclusiveMinimum" } else { "minimum" }] = json!(lo);
                }
                if let Some(hi) = hi {
                    schema[if hi_ex { "exclusiveMaximum" } else { "maximum" }] = json!(hi);
                }
                // Crossed bounds admit no number: refused (issue 29), naming them.
                let empty = matches!((lo, hi), (Some(l), Some(h)) if l > h || (l == h && (lo_ex || hi_ex)));
                if empty {
                    let e = Grammar::from_schema(&schema, Mode::Strict, &Json).unwrap_err().to_string();
                    assert!(e.contains("`minimum`/`maximum`"), "{schema}: {e}");
                    continue;
                }
                let g = grammar(schema.clone());
                let node = toolgate::grammar::schema::compile(&schema, Mode::Strict).unwrap();
                let (len, estimate) = (g.regex().len(), toolgate::grammar::regex::size_estimate(&node));
                assert!(len <= estimate, "{schema}: regex of {len} bytes, estimated {estimate}");
                for t in &texts {
                    let x: f64 = t.parse().unwrap();
                    let above = lo.is_none_or(|l| if lo_ex { x > l as f64 } else { x >= l as f64 });
                    let below = hi.is_none_or(|h| if hi_ex { x < h as f64 } else { x <= h as f64 });
                    assert_eq!(g.matches(t.as_bytes()), above && below, "{schema}: {t}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 11_000);
    // The size estimate holds for the widest ragged bounds too.
    for schema in [
        json!({"type": "number", "minimum": -987654321012345i64, "exclusiveMaximum": 987654321012344i64}),
        json!({"type": "number", "exclusiveMinimum": 123456789098765i64}),
        json!({"type": "number", "exclusiveMinimum": -1e15, "maximum": 1e15}),
        json!({"type": "integer", "minimum": -987654321012345i64, "maximum": 987654321012344i64}),
    ] {
        let node = toolgate::grammar::schema::compile(&schema, Mode::Strict).unwrap();
        let (len, estimate) = (grammar(schema.clone()).regex().len(), toolgate::grammar::regex::size_estimate(&node));
        assert!(len <= estimate, "{schema}: regex of {len} bytes, estimated {estimate}");
    }
    // Bounds in the draft-4 spelling, and several bounds at once (the tightest wins).
    check(json!({"type": "number", "minimum": 0, "exclusiveMinimum": true}), &["0.1"], &["0", "0.0"]);
    check(json!({"type": "number", "minimum": -5, "exclusiveMinimum": 1, "maximum": 3}), &["1.5", "3"], &["1", "3.1"]);
    // Bounds that cross admit nothing: refused, naming them (issue 29).
    let e = Grammar::from_schema(&json!({"type": "number", "minimum": 2.0, "maximum": 1}), Mode::Strict, &Json);
    assert!(e.unwrap_err().to_string().contains("`minimum`/`maximum`"));
    // Fractional bounds compare the fraction digit by digit, on both sides of zero.
    check(
        json!({"type": "number", "exclusiveMinimum": -0.25, "maximum": 0.5}),
        &["-0.2", "-0.249", "0", "0.5", "0.50", "0.4999"],
        &["-0.25", "-0.250", "-0.3", "0.5001", "0.51", "1"],
    );
    check(
        json!({"type": "number", "minimum": 0.05, "exclusiveMaximum": 0.06}),
        &["0.05", "0.0599"],
        &["0.06", "0.049"],
    );
    check(json!({"type": "number", "minimum": 2.5, "maximum": 2.5}), &["2.5", "2.50"], &["2.4", "2.51", "2"]);
    check(json!({"type": "number", "maximum": 99999999999.99}), &["99999999999.99", "-5"], &["99999999999.991"]);
    // A bound past ±10^15 or 16 decimals is refused in strict mode, naming the keyword.
    let e = Grammar::from_schema(&json!({"type": "number", "minimum": 1e16}), Mode::Strict, &Json).unwrap_err();
    assert!(e.to_string().contains("#/minimum"), "{e}");
    let lenient = Grammar::from_schema(&json!({"type": "number", "minimum": 1e16}), Mode::Lenient, &Json).unwrap();
    assert!(lenient.matches(b"0.25"));
}

/// The automata against the `jsonschema` crate on random values: strings drawn from
/// an alphabet that hits the patterns, formats, escapes and multi-byte characters,
/// and numbers around the bounds and multiples. Every verdict must agree.
#[test]
fn machines_agree_with_jsonschema_on_random_values() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(3);
    // Each schema with the pieces its strings are drawn from (up to `n` of them).
    let strings: [(Value, &[&str], usize); 6] = [
        (
            json!({"type": "string", "pattern": "^[a-c]+-\\d$", "minLength": 3, "maxLength": 5}),
            &["ab-1", "a-9", "c", "-", "1", "日"],
            3,
        ),
        (json!({"type": "string", "pattern": "b", "maxLength": 4}), &["a", "b", "日", "\"", "\\"], 6),
        (json!({"type": "string", "pattern": "^(a|日)*$", "minLength": 2}), &["a", "日", "b"], 4),
        (json!({"type": "string", "pattern": "\\\\|\"", "maxLength": 3}), &["\\", "\"", "a", "\n"], 5),
        (
            json!({"type": "string", "format": "date", "pattern": "^2024-0[12]"}),
            &["2024-", "2024-01-", "2024-02-", "2023-02-", "03-", "29", "28", "31", "1"],
            2,
        ),
        (json!({"type": "string", "format": "ipv4", "maxLength": 8}), &["1.", "0.", "25.", "255.", "9", "1", "0"], 5),
    ];
    for (schema, pieces, most) in strings {
        let oracle = jsonschema::options().should_validate_formats(true).build(&schema).unwrap();
        let g = grammar(schema.clone());
        let mut accepted = 0;
        for _ in 0..3000 {
            let n = rng.random_range(0..=most);
            let text: String = (0..n).map(|_| pieces[rng.random_range(0..pieces.len())]).collect();
            let v = Value::String(text);
            let ok = oracle.is_valid(&v);
            accepted += usize::from(ok);
            assert_eq!(g.matches(v.to_string().as_bytes()), ok, "{schema}: {v}");
        }
        assert!(accepted > 10, "{schema}: {accepted} valid values drawn");
    }
    let numbers = [
        json!({"type": "integer", "multipleOf": 7, "minimum": -30, "exclusiveMaximum": 50}),
        json!({"type": "integer", "multipleOf": 12}),
        json!({"type": "number", "multipleOf": 0.25, "minimum": -2.5, "maximum": 3.75}),
        json!({"type": "number", "multipleOf": 1.5, "exclusiveMinimum": -3}),
        json!({"type": "number", "exclusiveMinimum": -1.05, "maximum": 2.375}),
        // Past 4096 product states before the integer part was tracked modulo
        // 125 / gcd(125, 1000) = 1.
        json!({"type": "number", "multipleOf": 0.125}),
        json!({"type": "number", "multipleOf": 2.5, "maximum": 40}),
        json!({"type": "number", "multipleOf": 0.05, "minimum": -1}),
    ];
    for schema in numbers {
        let oracle = jsonschema::options().should_validate_formats(true).build(&schema).unwrap();
        let g = grammar(schema.clone());
        let mut accepted = 0;
        for _ in 0..3000 {
            let whole = rng.random_range(-60i64..60);
            let text = match rng.random_range(0..3) {
                0 => whole.to_string(),
                1 => format!("{whole}.{}", rng.random_range(0..100)),
                _ => {
                    format!("{}{}.{:03}", if whole < 0 { "-" } else { "" }, whole.abs() % 4, rng.random_range(0..1000))
                }
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if schema["type"] == "integer" && !v.is_i64() {
                continue;
            }
            let ok = oracle.is_valid(&v);
            accepted += usize::from(ok);
            assert_eq!(g.matches(text.as_bytes()), ok, "{schema}: {text}");
        }
        assert!(accepted > 10, "{schema}: {accepted} valid values drawn");
    }
}

/// Intersections as automata (`grammar::machine`): a pattern or format with length
/// bounds, a pattern beside a format, and `multipleOf`, each exact.
#[test]
fn machines_intersect_patterns_lengths_formats_and_multiples() {
    // Lengths count characters, not bytes or escapes.
    let s = json!({"type": "string", "pattern": "^a+b$", "maxLength": 4});
    check(s, &["\"ab\"", "\"aaab\""], &["\"aaaab\"", "\"b\"", "\"a\""]);
    let s = json!({"type": "string", "pattern": "x", "minLength": 2, "maxLength": 3});
    check(s, &["\"x\\\"\"", "\"日x\"", "\"\\nx\\t\""], &["\"x\"", "\"abcx\"", "\"ab\""]);
    check(
        json!({"type": "string", "format": "email", "maxLength": 8}),
        &["\"a@b.io\"", "\"ab@c.de\""],
        &["\"abc@d.com\"", "\"ab\""],
    );
    check(
        json!({"type": "string", "format": "date", "pattern": "-02-"}),
        &["\"2024-02-29\""],
        &["\"2023-02-29\"", "\"2024-03-01\""],
    );
    // Integers and decimals: multiples of whole numbers and of decimals.
    check(
        json!({"type": "integer", "multipleOf": 7, "minimum": -20}),
        &["0", "-14", "7", "700", "12348"],
        &["-21", "1", "8", "700.0"],
    );
    check(json!({"type": "integer", "multipleOf": 3}), &["0", "-3", "99", "1000000002"], &["1", "-4", "1000000001"]);
    check(
        json!({"type": "number", "multipleOf": 0.25, "maximum": 1}),
        &["0", "0.25", "-1.75", "1", "0.5000", "-100"],
        &["0.1", "1.25", "0.255", "1e2"],
    );
    check(
        json!({"type": "number", "multipleOf": 1.5, "exclusiveMinimum": 0}),
        &["1.5", "3", "4.50"],
        &["0", "2", "-1.5"],
    );
    // A machine is one rule (compiled state by state: an NFA state per machine
    // state), shared by every place that writes it, and no plain regex spells it.
    let node = toolgate::grammar::schema::compile_shared(
        &json!({"type": "array", "items": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 40}}),
        Mode::Strict,
        Objects::Closed,
    )
    .unwrap();
    let mut rules = Rules::new();
    let main = toolgate::grammar::regex::to_rules(&node, &Json, &mut rules);
    let machines: Vec<&String> = rules.bodies().iter().filter(|b| b.starts_with("machine:")).collect();
    assert_eq!(machines.len(), 1, "{:?}", rules.bodies());
    assert_eq!(rules.inline(&main, 1 << 20), None);
    let g = Grammar::from_rules(&main, &rules).unwrap();
    let forty = "a".repeat(40);
    assert!(g.matches(format!(r#"["{forty}","b-c"]"#).as_bytes()) && g.matches(b"[]"));
    assert!(!g.matches(format!(r#"["{forty}a"]"#).as_bytes()) && !g.matches(br#"["a-"]"#) && !g.matches(br#"[""]"#));
    // Too large a product is refused in strict mode, at the string's pointer; lenient
    // mode keeps the pattern alone.
    let huge = json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[ab]*a[ab]{14}$", "maxLength": 900}}});
    let e = Grammar::from_schema(&huge, Mode::Strict, &Json).unwrap_err();
    assert!(e.to_string().contains("#/properties/s") && e.to_string().contains("states"), "{e}");
    let lenient = Grammar::from_schema(&huge, Mode::Lenient, &Json).unwrap();
    assert!(lenient.matches(br#"{"s":"abbbbbbbbbbbbbb"}"#));
    // The plain node compiler (`schema::compile`, for one plain regex) still refuses
    // what needs an automaton.
    let e = toolgate::grammar::schema::compile(&json!({"type": "integer", "multipleOf": 3}), Mode::Strict).unwrap_err();
    assert!(e.to_string().contains("multipleOf"), "{e}");
}

#[test]
fn strings_escapes_unicode_and_lengths() {
    check(
        json!({"type": "string"}),
        &["\"\"", "\"a b\"", "\"\\\"q\\\"\"", "\"\\u00e9\\n\"", "\"日本語 😀\""],
        &["\"a", "\"\\x\"", "\"line\nbreak\"", "'a'"],
    );
    check(json!({"type": "string", "minLength": 2, "maxLength": 3}), &["\"ab\"", "\"日本語\""], &["\"a\"", "\"abcd\""]);
    check(json!({"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"}), &["\"ABC-12\""], &["\"AB-1\"", "\"ABC-\""]);
    check(json!({"type": "string", "pattern": "cat"}), &["\"a cat!\"", "\"cat\""], &["\"dog\""]);
}

#[test]
fn formats() {
    check(json!({"type": "string", "format": "date"}), &["\"2026-11-22\""], &["\"2026-13-01\"", "\"26-1-1\""]);
    check(json!({"type": "string", "format": "time"}), &["\"12:30:00Z\"", "\"23:59:59.5+01:00\""], &["\"24:00:00Z\""]);
    check(json!({"type": "string", "format": "date-time"}), &["\"2026-11-22T10:00:00Z\""], &["\"2026-11-22 10:00\""]);
    check(
        json!({"type": "string", "format": "uuid"}),
        &["\"123e4567-e89b-12d3-a456-426614174000\""],
        &["\"123e4567e89b12d3a456426614174000\""],
    );
    check(json!({"type": "string", "format": "email"}), &["\"a.b@example.org\""], &["\"a@b\"", "\"@x.org\""]);
    check(json!({"type": "string", "format": "uri"}), &["\"https://example.org/a?b=c\""], &["\"no scheme\""]);
    check(
        json!({"type": "string", "format": "ipv4"}),
        &["\"192.168.0.1\"", "\"0.0.0.0\""],
        &["\"256.1.1.1\"", "\"1.2.3\""],
    );
    check(
        json!({"type": "string", "format": "hostname"}),
        &["\"example.com\"", "\"a-1.b.example.co.uk\"", "\"localhost\""],
        &["\"-a.com\"", "\"a..b\"", "\"a_b.com\"", "\"a.com-\"", "\"a.b.c.d.e.f.g\""],
    );
}

#[test]
fn enum_const_anyof_oneof_allof() {
    check(json!({"enum": ["a", 1, null, {"k": [true]}]}), &["\"a\"", "1", "null", "{\"k\":[true]}"], &["\"b\"", "2"]);
    check(json!({"const": "fixed"}), &["\"fixed\""], &["\"other\""]);
    check(json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}), &["5", "\"x\""], &["\"xy\""]);
    check(json!({"oneOf": [{"type": "boolean"}, {"type": "null"}]}), &["true", "null"], &["0"]);
    check(
        json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]}
        ]}),
        &["{\"a\":1,\"b\":\"x\"}"],
        &["{\"a\":1}", "{\"b\":\"x\"}"],
    );
}

#[test]
fn objects_keep_schema_order_and_skip_optionals() {
    let schema = json!({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}, "d": {"type": "null"}
    }, "required": ["b", "d"]});
    check(
        schema.clone(),
        &[
            "{\"b\":\"x\",\"d\":null}",
            "{\"a\":1,\"b\":\"x\",\"d\":null}",
            "{\"a\": 1, \"b\": \"x\", \"c\": true, \"d\": null}",
        ],
        &[
            "{\"d\":null,\"b\":\"x\"}",
            "{\"b\":\"x\"}",
            "{\"b\":\"x\",\"d\":null,\"e\":1}",
            "{\"b\":\"x\",  \"d\":null}",
            "{ \"b\":\"x\",\"d\":null}",
        ],
    );
    // Declared properties close the object; no `properties` at all leaves it free-form.
    check(json!({"type": "object", "properties": {}}), &["{}"], &["{\"x\":1}"]);
    check(json!({"type": "object"}), &["{}", "{\"x\":1}", "{\"x\":[{\"y\":null}]}"], &["{\"x\":}", "[]"]);
    check(
        json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}),
        &["{\"a\":1,\"x\":\"y\"}", "{\"x\":\"y\",\"z\":\"w\"}", "{}"],
        &["{\"x\":1}"],
    );
    check(json!({"type": "object", "additionalProperties": true}), &["{\"x\":{\"y\":[1,null]}}"], &["{\"x\":}"]);
}

#[test]
fn arrays() {
    check(json!({"type": "array", "items": {"type": "integer"}}), &["[]", "[1]", "[1,2, 3]"], &["[1,]", "[\"a\"]"]);
    check(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}),
        &["[1,2]", "[1,2,3]"],
        &["[1]", "[1,2,3,4]"],
    );
    check(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}),
        &["[\"a\",1]"],
        &["[1,\"a\"]", "[\"a\",1,2]"],
    );
}

#[test]
fn refs_and_bounded_recursion() {
    let schema = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}
        }, "required": ["v", "kids"]}},
        "$ref": "#/$defs/node"
    });
    check(
        schema.clone(),
        &["{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[]}]}]}"],
        &["{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2}]}"],
    );
    // A recursive `$ref` is one rule that calls itself: 40 levels (a plain regex stops
    // at `MAX_REF_DEPTH`, 6), as deep as the DFA's stack allows.
    let g = grammar(schema.clone());
    let deep = (0..40).fold(r#"{"v":0,"kids":[]}"#.to_string(), |inner, i| format!(r#"{{"v":{i},"kids":[{inner}]}}"#));
    assert!(g.matches(deep.as_bytes()));
    assert!(!g.matches(deep.replace(r#""v":0,"#, "").as_bytes()), "the innermost node misses `v`");
    let too_deep =
        (0..300).fold(r#"{"v":0,"kids":[]}"#.to_string(), |inner, _| format!(r#"{{"v":1,"kids":[{inner}]}}"#));
    assert!(!g.matches(too_deep.as_bytes()), "past the DFA's stack");
    // Mutual recursion, and a `$ref` with siblings inside its own target (the
    // siblings hold only there).
    let s = json!({"$defs": {
        "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "additionalProperties": false},
        "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "maxItems": 2}}, "$ref": "#/$defs/a"});
    check(s, &[r#"{"b":[{"b":[{},{"b":[{"b":[]}]}]}]}"#], &[r#"{"b":[{},{},{}]}"#, r#"{"b":[{"c":1}]}"#]);
    let s = json!({"$defs": {"n": {"type": "object", "properties": {
        "x": {"type": "integer"}, "next": {"$ref": "#/$defs/n", "required": ["x"]}}}}, "$ref": "#/$defs/n"});
    check(s, &[r#"{"next":{"x":1,"next":{"x":2}}}"#, "{}"], &[r#"{"next":{"next":{"x":2}}}"#]);
    // A chain of distinct `$ref`s (Kubernetes nests a dozen) is not recursion: all
    // of it holds, however deep.
    let mut defs = serde_json::Map::new();
    for i in 0..12 {
        let next = if i == 11 {
            json!({"type": "integer", "minimum": 5})
        } else {
            json!({"$ref": format!("#/$defs/d{}", i + 1)})
        };
        defs.insert(format!("d{i}"), json!({"type": "object", "properties": {"k": next}, "required": ["k"]}));
    }
    let chain = json!({"$defs": defs, "$ref": "#/$defs/d0"});
    let value = |leaf: &str| (0..12).fold(leaf.to_string(), |inner, _| format!(r#"{{"k":{inner}}}"#));
    check(chain, &[&value("7")], &[&value("4"), &value("{}")]);
    // Siblings of `$ref` narrow it from 2019-09 on; drafts 3 to 7 ignore them.
    let s = |draft: &str| {
        json!({"$schema": draft, "$defs": {"t": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            "type": "object", "properties": {"s": {"type": "string", "$ref": "#/$defs/t"}}})
    };
    check(s("http://json-schema.org/draft-07/schema#"), &[r#"{"s":{"a":1}}"#], &[r#"{"s":"x"}"#]);
    // Only siblings written beside `$ref` are ignored, not keywords a merge puts there
    // (`allOf` of two `$ref`s, keywords beside `anyOf`).
    let s2 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "definitions": {
        "a": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        "b": {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"]}},
        "allOf": [{"$ref": "#/definitions/a"}, {"$ref": "#/definitions/b"}]});
    let open = Grammar::from_schema_with(&s2, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.matches(br#"{"x":1,"y":"s"}"#) && !open.matches(br#"{"x":1,"y":2}"#) && !open.matches(br#"{"x":1}"#));
    let s3 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "definitions": {"r": {"type": "object"}},
        "additionalProperties": {"minProperties": 1, "anyOf": [{"type": "string"}, {"$ref": "#/definitions/r"}]}});
    // `minProperties` beside the `anyOf` applies to the object branch only: a string
    // or an object of at least one property.
    let g = Grammar::from_schema_with(&s3, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(!g.matches(br#"{"k":{}}"#) && g.matches(br#"{"k":{"a":1}}"#) && g.matches(br#"{"k":"s"}"#));
    let e = Grammar::from_schema(&s("https://json-schema.org/draft/2020-12/schema"), Mode::Strict, &Json);
    assert!(e.is_err_and(|e| e.to_string().contains("next to `$ref`")));
}

/// Open objects with `patternProperties` take other names too (JSON Schema's
/// reading), as long as they match no pattern and no declared name: an automaton
/// for the complement. `additionalProperties` with a schema beside patterns works
/// the same way, in every mode.
#[test]
fn extras_beside_pattern_properties_avoid_the_patterns() {
    let s = json!({"type": "object", "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}}});
    let open = Grammar::from_schema_with(&s, Mode::Strict, Objects::Open, &Json).unwrap();
    for ok in [r#"{"x-a":"s","other":[1,{"y":null}],"id":3}"#, r#"{"x":1}"#, r#"{"y-x-":true}"#] {
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [r#"{"x-a":1}"#, r#"{"id":"3"}"#, r#"{"other":1,"x-b":2}"#] {
        assert!(!open.matches(bad.as_bytes()), "{bad}");
    }
    let s = json!({"type": "object", "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^[0-9]+$": {"type": "boolean"}}, "additionalProperties": {"type": "string"}});
    let g = grammar(s);
    for ok in [r#"{"id":1,"7":true,"n":"s","7a":"t"}"#, r#"{"12":false}"#] {
        assert!(g.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [r#"{"7":"s"}"#, r#"{"n":true}"#, r#"{"id":"s"}"#] {
        assert!(!g.matches(bad.as_bytes()), "{bad}");
    }
    // Several patterns, when no name can match two of them (their automata share no
    // text); overlapping ones owe both schemas at once and are refused.
    let s = json!({"type": "object", "patternProperties": {"^x-": {"type": "string"}, "^[0-9]+$": {"type": "integer"}},
        "additionalProperties": false});
    check(s, &[r#"{"x-a":"s","12":3}"#, "{}"], &[r#"{"x-a":3}"#, r#"{"12":"s"}"#, r#"{"y":1}"#]);
    // A declared name that a pattern also matches owes both schemas (merged).
    let s = json!({"type": "object", "properties": {"x-id": {"type": "string", "minLength": 2}},
        "patternProperties": {"^x-": {"type": "string", "maxLength": 3}}, "additionalProperties": false});
    check(s, &[r#"{"x-id":"abc"}"#, r#"{"x-b":""}"#], &[r#"{"x-id":"a"}"#, r#"{"x-id":"abcd"}"#]);
    let s = json!({"type": "object", "patternProperties": {"^x": {"type": "string"}, "y$": {"type": "integer"}}});
    let e = Grammar::from_schema(&s, Mode::Strict, &Json).unwrap_err().to_string();
    assert!(e.contains("may match both"), "{e}");
}

/// Schema errors name the keyword's JSON pointer and their kind (typed by the stage
/// that found them, `grammar::error::BuildErrorKind`), so a caller can tell a wrong
/// schema from one toolgate cannot enforce, an empty one, a too-large one, or an
/// unreadable pattern.
#[test]
fn unsupported_keywords_name_the_pointer_or_are_ignored_in_lenient_mode() {
    use toolgate::grammar::error::BuildErrorKind as Kind;
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "not": {"const": 3}}}});
    match Grammar::from_schema(&schema, Mode::Strict, &Json) {
        Err(Error::Schema { pointer, kind, reason }) => {
            assert_eq!(pointer, "#/properties/n/not");
            assert_eq!(kind, Kind::Unsupported);
            assert!(reason.contains("`not`"));
        }
        other => panic!("expected a schema error, got {other:?}"),
    }
    let lenient = Grammar::from_schema(&schema, Mode::Lenient, &Json).unwrap();
    assert!(lenient.matches(b"{\"n\":3}"));
    for (bad, want, at) in [
        (json!({"type": "strin"}), Kind::Invalid, "#/type"),
        (json!({"$ref": "#/nowhere"}), Kind::Invalid, "#"),
        (json!(3), Kind::Invalid, "#"),
        (
            json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]}),
            Kind::Unsatisfiable,
            "#/properties/a",
        ),
        (json!({"type": "array", "items": {"uniqueItems": true}}), Kind::Unsupported, "#/items/uniqueItems"),
        (json!({"type": "string", "pattern": "(("}), Kind::Pattern, "#/pattern"),
        (json!({"type": "string", "pattern": "a(?=b)"}), Kind::Pattern, "#/pattern"),
        (
            json!({"type": "string", "pattern": "^[a-z]*x[a-z]*$", "minLength": 5000, "maxLength": 6000}),
            Kind::TooLarge,
            "#",
        ),
    ] {
        match Grammar::from_schema(&bad, Mode::Strict, &Json) {
            Err(Error::Schema { pointer, kind, reason }) => {
                assert_eq!((kind, pointer.as_str()), (want, at), "{bad}: {reason}")
            }
            other => panic!("{bad}: expected a schema error, got {other:?}"),
        }
    }
}

/// Shared rules (`grammar::rules::Rules`): schemas whose plain regex would copy the
/// rest of an object per optional property, and an array's item twice per level,
/// compile to grammars linear in the schema, and accept what JSON Schema accepts.
#[test]
fn shared_rules_keep_large_schemas_small_and_exact() {
    // 40 optional properties: any of them may come first (a plain regex allowed only
    // the first 8 to open the object), in schema order.
    let props: serde_json::Map<String, Value> =
        (0..40).map(|i| (format!("p{i}"), json!({"type": "integer"}))).collect();
    let wide = json!({"type": "object", "properties": props});
    let g = grammar(wide.clone());
    assert!(!g.rules().is_empty());
    for ok in [r#"{}"#, r#"{"p39":1}"#, r#"{"p12":1,"p30":2}"#, r#"{"p0":0,"p1":1,"p39":3}"#] {
        assert!(g.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [r#"{"p30":2,"p12":1}"#, r#"{"p40":1}"#, r#"{"p1":1,"p1":1}"#, r#"{"p3":"x"}"#] {
        assert!(!g.matches(bad.as_bytes()), "{bad}");
    }
    // Arrays of objects of arrays … 12 levels deep, each object with three optional
    // properties: the plain regex was refused as tens of GiB; shared, it compiles, and
    // its size is a few kilobytes.
    let mut deep = json!({"type": "string"});
    for level in 0..12 {
        deep = json!({"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "name": {"type": "string"}, format!("child{level}"): deep}}});
    }
    let node = toolgate::grammar::schema::compile(&deep, Mode::Strict).unwrap();
    assert!(toolgate::grammar::schema::check_plain_size(&node).is_err());
    let g = grammar(deep);
    let size = g.regex().len() + g.rules().iter().map(String::len).sum::<usize>();
    assert!(size < 64 << 10, "{size} bytes");
    assert!(g.matches(br#"[{"id":1,"child11":[{"name":"x","child10":[]}]},{}]"#));
    assert!(!g.matches(br#"[{"id":1,"child11":[{"name":"x","child10":[{"id":"2"}]}]}]"#));
    // Open objects: extra properties anywhere between the declared ones, never with a
    // declared name, and (small objects) the declared ones in any order, each once.
    let person = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name"]});
    let open = Grammar::from_schema_with(&person, Mode::Strict, Objects::Open, &Json).unwrap();
    let ok = [r#"{"x":1,"name":"a"}"#, r#"{"name":"a","x":1,"age":3}"#, r#"{"x":1,"age":3,"y":2,"name":"a","z":[]}"#];
    for ok in ok {
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [
        r#"{"x":1}"#,
        r#"{"age":3}"#,
        r#"{"name":"a","age":3,"age":4}"#,
        r#"{"age":3,"name":"a","name":"b"}"#,
        r#"{"x":1,"name":2}"#,
    ] {
        assert!(!open.matches(bad.as_bytes()), "{bad}");
    }
    // Extra keys beside declared names: any key that spells no declared name, with
    // characters past ASCII on either side (the key trie takes ASCII characters as
    // bytes and the others through one shared rule).
    let names = json!({"type": "object", "properties": {"ab": {"type": "integer"}, "é": {"type": "integer"},
        "aé": {"type": "integer"}, "日本": {"type": "integer"}}});
    let open = Grammar::from_schema_with(&names, Mode::Strict, Objects::Open, &Json).unwrap();
    for extra in ["a", "abc", "b", "ée", "aéx", "aê", "日", "日本語", "本", "ü", "a😀", "", "\\\"", "a\\n"] {
        let ok = format!(r#"{{"ab":1,"{extra}":"x"}}"#);
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    for declared in ["ab", "é", "aé", "日本"] {
        let twice = format!(r#"{{"{declared}":1,"{declared}":"x"}}"#);
        assert!(!open.matches(twice.as_bytes()), "{twice}");
    }
    // Large objects too: the set of properties written lives on the DFA's stack
    // (`PropertySet`), so 40 declared properties cost 40 rules, not 2^40.
    let props: serde_json::Map<String, serde_json::Value> =
        (0..40).map(|i| (format!("p{i}"), json!({"type": "integer", "minimum": i}))).collect();
    let big = json!({"type": "object", "properties": props, "required": ["p3", "p31"],
        "additionalProperties": {"type": "string"}});
    let open = Grammar::from_schema_with(&big, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.rules().len() < 100, "{} rules", open.rules().len());
    let body = |keys: &[usize]| keys.iter().map(|i| format!(r#""p{i}":{i}"#)).collect::<Vec<_>>().join(",");
    let order: Vec<usize> = (0..40).rev().collect();
    for ok in [
        format!("{{{}}}", body(&order)),
        format!("{{{}}}", body(&[31, 3])),
        format!(r#"{{"x":"1",{},"y":"2"}}"#, body(&[39, 31, 0, 3])),
    ] {
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [
        format!("{{{}}}", body(&[31, 39])),         // p3 missing
        format!("{{{}}}", body(&[3, 31, 7, 8, 7])), // p7 twice
        r#"{"p3":3,"p31":30}"#.to_string(),         // p31 below its minimum
        format!(r#"{{{},"x":1}}"#, body(&[3, 31])), // an extra must be a string
    ] {
        assert!(!open.matches(bad.as_bytes()), "{bad}");
    }
    // `dependencies` (array form) decide, with the set of properties written, when
    // the object may close; a name only `dependencies` mentions takes the extras'
    // schema.
    let deps = json!({"type": "object", "properties": {"card": {"type": "integer"}, "billing": {"type": "string"},
        "name": {"type": "string"}}, "dependencies": {"card": ["billing", "zip"]},
        "additionalProperties": {"type": "integer"}});
    let open = Grammar::from_schema_with(&deps, Mode::Strict, Objects::Open, &Json).unwrap();
    for ok in [r#"{"name":"a"}"#, r#"{"zip":1,"card":1,"billing":"x"}"#, r#"{"billing":"x"}"#, "{}"] {
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [r#"{"card":1}"#, r#"{"card":1,"billing":"x"}"#, r#"{"card":1,"zip":"1","billing":"x"}"#] {
        assert!(!open.matches(bad.as_bytes()), "{bad}");
    }
    let lone = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "dependencies": {"a": []}});
    let open = Grammar::from_schema_with(&lone, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.matches(br#"{"a":1}"#) && open.matches(b"{}"));
    // Closed objects keep schema order, where the set is not tracked: refused.
    assert!(Grammar::from_schema(&deps, Mode::Strict, &Json).is_err());
    // A set inside a value of the same set (recursion) keeps its own seen-set.
    let tree = json!({"$defs": {"t": {"type": "object", "required": ["v"], "properties": {
        "v": {"type": "integer"}, "l": {"$ref": "#/$defs/t"}, "r": {"$ref": "#/$defs/t"}}}}, "$ref": "#/$defs/t"});
    let open = Grammar::from_schema_with(&tree, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.matches(br#"{"r":{"l":{"v":1},"v":2},"v":3,"l":{"v":4}}"#));
    assert!(!open.matches(br#"{"r":{"l":{"v":1},"v":2,"v":5},"v":3}"#));
    assert!(!open.matches(br#"{"r":{"l":{"v":1}},"v":3}"#));
    // Closed (the default): schema order.
    assert!(grammar(person.clone()).matches(br#"{"name":"a","age":3}"#));
    assert!(!grammar(person).matches(br#"{"age":3,"name":"a"}"#));
    // A required name only a pattern declares takes the pattern's schema; with
    // `additionalProperties: false` and no pattern, nothing can satisfy it.
    let fstab = json!({"type": "object", "additionalProperties": false, "required": ["/"],
        "patternProperties": {"^/": {"type": "integer", "minimum": 0}}});
    let open = Grammar::from_schema_with(&fstab, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.matches(br#"{"/":1}"#) && !open.matches(br#"{"/":-1}"#) && !open.matches(br#"{"/":"x"}"#));
    let nothing = json!({"type": "object", "additionalProperties": false, "required": ["a"]});
    let e = Grammar::from_schema(&nothing, Mode::Strict, &Json).unwrap_err().to_string();
    assert!(e.contains("`a` is required but `additionalProperties` is false"), "{e}");
}

/// `allOf` branches that declare the same property must both hold for it, and keywords
/// beside `anyOf` that cannot merge into a branch are refused, never dropped.
#[test]
fn all_of_merges_shared_properties_and_any_of_keeps_its_siblings() {
    let s = json!({"type": "object", "allOf": [
        {"properties": {"o": {"type": "object"}}, "required": ["o"]},
        {"properties": {"o": {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false}}}
    ]});
    let open = Grammar::from_schema_with(&s, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.matches(br#"{"o":{"a":1}}"#));
    assert!(!open.matches(br#"{"o":{"a":1,"b":2}}"#));
    let s = json!({"type": "object", "properties": {"k": {"type": "string"}}, "additionalProperties": false,
        "anyOf": [{"properties": {"k": {"const": "a"}, "extra": {"type": "integer"}}}, {"required": ["k"]}]});
    let err = Grammar::from_schema(&s, Mode::Strict, &Json).unwrap_err().to_string();
    assert!(err.contains("#/anyOf/0") && err.contains("cannot be merged"), "{err}");
    assert!(Grammar::from_schema(&s, Mode::Lenient, &Json).is_ok());
    // Annotations (vendor keys) beside `$ref`, or disagreeing between the target and
    // its siblings, constrain nothing and never block the merge.
    let s = json!({"$defs": {"a": {"type": "integer", "x-doc": "one"}}, "$ref": "#/$defs/a", "x-doc": "two",
        "x-intellij-html-description": "<b>n</b>", "maximum": 5});
    let g = Grammar::from_schema(&s, Mode::Strict, &Json).unwrap();
    assert!(g.matches(b"3") && !g.matches(b"6") && !g.matches(b"\"3\""));
}

#[test]
fn real_world_keywords_follow_json_schema() {
    // Objects without `additionalProperties`: closed for tool calls (the default), open
    // in JSON Schema's reading (extras among the declared properties, never repeating
    // one, values nesting as deep as the DFA's stack, `SHARED_OPEN_EXTRA_LEVELS`).
    let person = json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    let open = Grammar::from_schema_with(&person, Mode::Strict, Objects::Open, &Json).unwrap();
    for ok in [
        r#"{"name":"a"}"#,
        r#"{"name":"a","age":3}"#,
        r#"{"name":"a","tags":["x"],"m":{"k":null}}"#,
        r#"{"name":"a","x":[[[1]]]}"#,
        r#"{"name":"a","x":[{"y":[{"z":[[[[{"w":null}]]]]}]}]}"#,
    ] {
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    let too_deep = format!(r#"{{"name":"a","x":{}1{}}}"#, "[".repeat(300), "]".repeat(300));
    for bad in [r#"{"name":1}"#, r#"{"name":"a","name":"b"}"#, r#"{"age":3}"#, too_deep.as_str()] {
        assert!(!open.matches(bad.as_bytes()), "{bad}");
    }
    // Extra keys may hold escapes of characters that cannot stand plain.
    for ok in [r#"{"name":"a","Vendor\\Ns\\":"src/"}"#, r#"{"a\"b":1,"name":"a"}"#, r#"{"name":"a","t\u001fab":0}"#] {
        assert!(open.matches(ok.as_bytes()), "{ok}");
    }
    assert!(!grammar(person).matches(br#"{"name":"a","age":3}"#));
    // Without `type`, keywords constrain only the values they apply to in JSON
    // Schema's reading; closed objects read the type the keywords imply.
    let untyped = json!({"properties": {"a": {"type": "integer"}}, "required": ["a"]});
    let open_untyped = Grammar::from_schema_with(&untyped, Mode::Strict, Objects::Open, &Json).unwrap();
    for ok in [r#"{"a":1}"#, r#""text""#, r#"[1,{"b":[]}]"#, "null", "2.5", "true"] {
        assert!(open_untyped.matches(ok.as_bytes()), "{ok}");
    }
    for bad in [r#"{"a":"x"}"#, "{}"] {
        assert!(!open_untyped.matches(bad.as_bytes()), "{bad}");
    }
    assert!(!grammar(untyped.clone()).matches(br#""text""#) && grammar(untyped).matches(br#"{"a":1}"#));
    let hosts = json!({"patternProperties": {"^h": {"type": "integer"}}});
    let open_hosts = Grammar::from_schema_with(&hosts, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open_hosts.matches(br#"{"h1":1,"h2":2}"#) && open_hosts.matches(b"[]"));
    assert!(!open_hosts.matches(br#"{"h1":"x"}"#), "patternProperties alone still constrain objects");
    // `oneOf` branches that all imply objects: a value of another type matches every
    // branch, so exactly-one excludes it.
    let card = json!({"oneOf": [
        {"properties": {"p": {"const": "m"}}, "required": ["p"], "additionalProperties": false},
        {"properties": {"p": {"const": "v"}, "c": {"type": "integer"}}, "required": ["p", "c"], "additionalProperties": false}]});
    let open_card = Grammar::from_schema_with(&card, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open_card.matches(br#"{"p":"m"}"#) && open_card.matches(br#"{"p":"v","c":1}"#));
    for bad in [r#""x""#, "null", r#"{"p":"v"}"#, r#"{"p":"m","c":1}"#] {
        assert!(!open_card.matches(bad.as_bytes()), "{bad}");
    }
    let min = Grammar::from_schema_with(&json!({"minimum": 3}), Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(min.matches(b"3") && min.matches(br#""x""#) && !min.matches(b"2"));
    // `minProperties: 1` over optional properties excludes `{}` (in every layout);
    // more than the required properties give is refused in strict mode.
    let filters = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "minProperties": 1});
    check(filters.clone(), &[r#"{"a":1}"#, r#"{"b":"x"}"#, r#"{"a":1,"b":"x"}"#], &["{}"]);
    check(
        json!({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1}),
        &[r#"{"k":1}"#],
        &["{}"],
    );
    check(
        json!({"type": "object", "properties": {"a": {}}, "required": ["a"], "minProperties": 1}),
        &[r#"{"a":1}"#],
        &["{}"],
    );
    let e = Grammar::from_schema(
        &json!({"type": "object", "properties": {"a": {}}, "minProperties": 2}),
        Mode::Strict,
        &Json,
    )
    .unwrap_err();
    assert!(e.to_string().contains("#/minProperties"), "{e}");
    // `maxProperties` where it is exact: at most one of the optional properties, a
    // bound the closed object cannot reach, or below the required count.
    let one_of = json!({"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}, "maxProperties": 1});
    check(one_of, &["{}", r#"{"id":1}"#, r#"{"name":"x"}"#], &[r#"{"id":1,"name":"x"}"#]);
    let loose = json!({"type": "object", "properties": {"a": {}}, "maxProperties": 5});
    check(loose, &["{}", r#"{"a":[1]}"#], &[r#"{"b":1}"#]);
    let none = json!({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"], "maxProperties": 1});
    let e = Grammar::from_schema(&none, Mode::Strict, &Json).unwrap_err().to_string();
    assert!(e.contains("#/maxProperties") && e.contains("2 properties are required"), "{e}");
    let open = json!({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2});
    assert!(Grammar::from_schema(&open, Mode::Strict, &Json).unwrap_err().to_string().contains("#/maxProperties"));
    // Length bounds beside an anchored repeated class narrow its repetition; beside
    // other patterns they are refused in strict mode.
    let code = json!({"type": "string", "pattern": "^[a-z0-9]+$", "minLength": 3, "maxLength": 5});
    check(code, &["\"abc\"", "\"a1b2c\""], &["\"ab\"", "\"abcdef\"", "\"ABC\""]);
    check(
        json!({"type": "string", "pattern": "^\\d{2,}$", "maxLength": 3}),
        &["\"12\"", "\"123\""],
        &["\"1\"", "\"1234\""],
    );
    check(json!({"type": "string", "pattern": "^.$", "minLength": 2}), &[], &["\"a\"", "\"ab\""]);
    let mixed = json!({"type": "string", "pattern": "^a+b$", "maxLength": 4});
    let e = toolgate::grammar::schema::compile(&mixed, Mode::Strict).unwrap_err();
    assert!(e.to_string().contains("#/maxLength"), "{e}");
    // Top-level alternatives keep their own anchors; `|` in a class or group stays.
    let alts = json!({"type": "string", "pattern": "^[0-9]+$|^none$|x[|]y"});
    check(alts, &["\"42\"", "\"none\"", "\"ax|yb\""], &["\"4a\"", "\"nones\"", "\"xy\""]);
    check(json!({"type": "string", "pattern": "^(a|b)$"}), &["\"a\""], &["\"ab\""]);
    // Unknown keywords are annotations; keywords of another type constrain nothing.
    // So are format names JSON Schema does not define; a defined one without a grammar
    // is refused in strict mode.
    check(json!({"type": "string", "format": "int32"}), &["\"anything\""], &["1"]);
    let e = Grammar::from_schema(&json!({"type": "string", "format": "ipv6"}), Mode::Strict, &Json).unwrap_err();
    assert!(e.to_string().contains("#/format"), "{e}");
    check(json!({"type": "string", "x-vendor": 1, "id": "a", "properties": {"p": {}}}), &["\"s\""], &["1"]);
    // Draft 4: boolean exclusive bounds and tuple `items` + `additionalItems`.
    check(json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true, "maximum": 3}), &["1", "3"], &["0", "4"]);
    check(
        json!({"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": false}),
        &["[1,\"a\"]", "[1]", "[]"],
        &["[1,\"a\",2]", "[\"a\"]"],
    );
    // `$ref` siblings narrow the target.
    check(json!({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2}), &["\"ab\""], &["\"abc\""]);
    // `type` beside `enum` keeps only that type's values.
    check(json!({"type": "string", "enum": ["a", 1, null]}), &["\"a\""], &["1", "null"]);
    // `oneOf`: disjoint branches (types, discriminators) are exact; overlapping ones are refused.
    check(json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}), &["\"a\"", "1"], &["null"]);
    let tagged = json!({"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]}]});
    check(tagged, &["{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"z\"}"], &["{\"kind\":\"a\",\"y\":\"z\"}"]);
    // Closed objects told apart by a property only one of them may hold; integer ranges
    // that do not meet.
    let shapes = json!({"oneOf": [
        {"type": "object", "properties": {"radius": {"type": "number"}}, "required": ["radius"]},
        {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}}, "required": ["w"]}]});
    check(shapes, &["{\"radius\":1}", "{\"w\":2,\"h\":3}"], &["{\"radius\":1,\"w\":2}", "{}"]);
    check(
        json!({"oneOf": [{"type": "integer", "maximum": 0}, {"type": "integer", "minimum": 10}]}),
        &["-3", "12"],
        &["5"],
    );
    // Scalars whose automata share no text: patterns, literals, empty strings.
    let id = json!({"oneOf": [{"type": "string", "pattern": "^[0-9]+$"}, {"enum": ["any", "none"]}, {"type": "string", "maxLength": 0}]});
    check(id, &["\"42\"", "\"any\"", "\"\""], &["\"anyx\"", "\"4a\""]);
    let both = json!({"oneOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"enum": ["any", "NONE"]}]});
    assert!(Grammar::from_schema(&both, Mode::Strict, &Json).is_err(), "\"any\" matches both");
    let open = json!({"oneOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": true},
        {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"], "additionalProperties": true}]});
    assert!(Grammar::from_schema(&open, Mode::Strict, &Json).is_err(), "{{a, b}} matches both open branches");
    let overlap = json!({"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 0}]});
    let e = Grammar::from_schema(&overlap, Mode::Strict, &Json).unwrap_err().to_string();
    assert!(e.contains("oneOf"), "{e}");
    assert!(Grammar::from_schema(&overlap, Mode::Lenient, &Json).unwrap().matches(b"-1"));
    // `patternProperties`: extra names that match, with their schema.
    check(
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "patternProperties": {"^x-[a-z]+$": {"type": "string"}}}),
        &["{\"id\":1,\"x-tag\":\"v\"}", "{\"x-a\":\"v\",\"x-b\":\"w\"}"],
        &["{\"x-tag\":1}", "{\"other\":\"v\"}"],
    );
    // Patterns mean ECMA-262 on the decoded string: ASCII `\d`, quotes spelled escaped.
    check(json!({"type": "string", "pattern": "^\\d+$"}), &["\"123\""], &["\"١٢٣\"", "\"12a\""]);
    check(json!({"type": "string", "pattern": "^a\"b$"}), &["\"a\\\"b\""], &["\"ab\""]);
    // `allOf` cannot add names to a side closed by `additionalProperties: false`.
    let closed = json!({"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false},
        {"properties": {"b": {"type": "integer"}}}]});
    assert!(Grammar::from_schema(&closed, Mode::Strict, &Json).is_err());
}

fn smollm2_vocab() -> (Tokenizer, Arc<TokenVocab>) {
    let gguf = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let vocab = Arc::new(tok.token_vocab());
    (tok, vocab)
}

#[test]
fn masks_never_allow_special_tokens_and_end_only_when_complete() {
    let (tok, vocab) = smollm2_vocab();
    let g = Arc::new(grammar(json!({"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]})));
    let mut m = g.matcher(vocab.clone());
    let mut mask = TokenMask::new(vocab.len());
    let specials: Vec<u32> =
        (0..tok.vocab_size() as u32).filter(|&i| tok.token_kind(i).unwrap() == TokenKind::Control).collect();
    assert!(!specials.is_empty());
    let text = "{\"s\": \"a <|im_end|> b";
    for id in tok.encode(text, toolgate::tokenizer::EncodeOptions::TEXT).unwrap() {
        m.fill_mask(&mut mask).unwrap();
        assert!(mask.is_allowed(id), "token {id} should be allowed");
        assert!(specials.iter().all(|&s| !mask.is_allowed(s)), "a special token is allowed inside JSON");
        m.commit(id).unwrap();
    }
    assert!(!m.is_accepting());
    m.commit(tok.encode("\"}", toolgate::tokenizer::EncodeOptions::TEXT).unwrap()[0]).unwrap();
    let rest = tok.encode("}", toolgate::tokenizer::EncodeOptions::TEXT).unwrap();
    if !m.is_accepting() {
        m.commit(rest[0]).unwrap();
    }
    assert!(m.is_accepting());
    m.fill_mask(&mut mask).unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    assert!(mask.is_allowed(im_end), "end of turn is allowed once complete");
    // Rollback restores the earlier state exactly.
    let before = m.bytes().len();
    m.rollback(1);
    assert!(m.bytes().len() < before);
    assert!(m.cached_states() > 0);
}

#[test]
fn a_finished_matcher_leaves_its_masks_warm_for_the_next_one() {
    let (tok, vocab) = smollm2_vocab();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["city", "n"]});
    let g = Arc::new(grammar(schema.clone()));
    let ids = tok.encode("{\"city\": \"Paris\", \"n\": 3}", toolgate::tokenizer::EncodeOptions::TEXT).unwrap();
    let run = |m: &mut toolgate::grammar::Matcher| -> Vec<Vec<bool>> {
        let mut mask = TokenMask::new(vocab.len());
        let mut seen = Vec::new();
        for &id in &ids {
            m.fill_mask(&mut mask).unwrap();
            seen.push((0..vocab.len() as u32).map(|t| mask.is_allowed(t)).collect());
            m.commit(id).unwrap();
        }
        seen
    };
    let mut first = g.matcher(vocab.clone());
    assert_eq!(first.cached_states(), 0);
    let cold = run(&mut first);
    let states = first.cached_states();
    drop(first);
    // Same grammar, same vocabulary: starts with every mask the first one computed…
    let mut second = g.matcher(vocab.clone());
    assert_eq!(second.cached_states(), states);
    // …and they are the right masks.
    assert_eq!(run(&mut second), cold);
    // Another vocabulary object never inherits them.
    drop(second);
    let other = Arc::new(tok.token_vocab());
    assert_eq!(g.matcher(other).cached_states(), 0);
    // A fresh grammar of the same schema gives the same masks from cold.
    assert_eq!(run(&mut Arc::new(grammar(schema)).matcher(vocab.clone())), cold);
}

#[test]
fn multibyte_characters_split_across_tokens() {
    let (tok, vocab) = smollm2_vocab();
    let g = Arc::new(grammar(json!({"enum": ["日本語", "ümlaut"]})));
    let target = "\"日本語\"";
    let ids = tok.encode(target, toolgate::tokenizer::EncodeOptions::TEXT).unwrap();
    // gpt2 byte-level tokens split these characters mid-sequence.
    assert!(ids.iter().any(|&i| std::str::from_utf8(vocab.token_bytes(i)).is_err()));
    let mut m = g.matcher(vocab.clone());
    let mut mask = TokenMask::new(vocab.len());
    for id in ids {
        m.fill_mask(&mut mask).unwrap();
        assert!(mask.is_allowed(id));
        m.commit(id).unwrap();
    }
    assert!(m.is_accepting());
    assert!(m.commit(tok.encode("x", toolgate::tokenizer::EncodeOptions::TEXT).unwrap()[0]).is_err());
}

/// The budget never completes an instance with values the model did not write: what
/// the model finishes within `max_tokens` is complete (`stop`); what it does not is
/// reported cut (`length`, [`toolgate::engine::Generation::unfinished`] holding its
/// text), a valid prefix that no budget closed.
#[test]
fn a_constrained_instance_the_budget_cuts_is_reported_not_completed() {
    // Unbounded strings and arrays: left alone, a sampled model runs past any budget.
    let schema = json!({"type": "object", "properties": {
        "notes": {"type": "array", "items": {"type": "string"}},
        "summary": {"type": "string"}
    }, "required": ["notes", "summary"]});
    let g = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &Json).unwrap());
    let mut cut = 0;
    for model in [common::SMOLLM2, common::GEMMA3] {
        let mut engine = Engine::load(common::model(model), DeviceChoice::Cpu).unwrap();
        let ids = engine.tokenizer().encode_prompt("Write very long notes about Paris in JSON:", true).unwrap();
        let vocab = engine.token_vocab();
        for (budget, seed) in [(14, 0), (20, 1), (32, 2), (48, 3)] {
            let mut m = g.matcher(vocab.clone());
            let params = GenerateParams {
                max_tokens: budget,
                sampling: SamplingParams { temperature: 1.3, seed, ..SamplingParams::greedy() },
                ..GenerateParams::default()
            };
            let gen = engine.generate_constrained(&ids, &params, &mut m, |_| {}).unwrap();
            assert!(gen.completion_tokens <= budget);
            if g.matches(gen.text.as_bytes()) {
                assert_eq!((gen.finish_reason, gen.unfinished.as_deref()), (FinishReason::Stop, None), "{model}");
                let v: Value = serde_json::from_str(&gen.text).unwrap();
                assert!(v["notes"].is_array() && v["summary"].is_string(), "{}", gen.text);
            } else {
                assert!(g.is_prefix(gen.text.as_bytes()), "{model}, budget {budget}: {:?}", gen.text);
                assert_eq!(gen.finish_reason, FinishReason::Length, "{model}, budget {budget}");
                assert_eq!(gen.unfinished.as_deref(), Some(gen.text.as_str()), "{model}, budget {budget}");
                cut += 1;
            }
        }
    }
    // Long notes at 14 tokens: some were cut, and none was closed for the model.
    assert!(cut > 0);
}

/// One constrained generation with `g`. The engine's vocabulary trie and `g`'s mask
/// cache are shared across calls, as the server shares them across requests.
fn constrained(engine: &mut Engine, prompt: &str, g: &Arc<Grammar>, seed: u64, temperature: f32) -> String {
    let ids = engine.tokenizer().encode_prompt(prompt, true).unwrap();
    let mut m = g.matcher(engine.token_vocab());
    let params = GenerateParams {
        max_tokens: 200,
        sampling: SamplingParams { temperature, seed, top_p: 0.95, ..SamplingParams::greedy() },
        stop: vec![],
        stop_on_eog: true,
        ..GenerateParams::default()
    };
    let gen = engine.generate_constrained(&ids, &params, &mut m, |_| {}).unwrap();
    assert!(g.matches(gen.text.as_bytes()), "output does not match the grammar: {:?}", gen.text);
    gen.text
}

#[test]
fn constrained_generation_always_validates_on_real_models() {
    let schemas = [
        json!({"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 24},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}
        }, "required": ["city", "unit"]}),
        json!({"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
            "ok": {"type": "boolean"},
            "score": {"type": "number"}
        }, "required": ["tags", "ok", "score"]}),
    ];
    for model in [common::SMOLLM2, common::GEMMA3] {
        let mut engine = Engine::load(common::model(model), DeviceChoice::Cpu).unwrap();
        for schema in &schemas {
            let g = Arc::new(Grammar::from_schema(schema, Mode::Strict, &Json).unwrap());
            for (seed, temp) in [(0, 0.0), (1, 1.0), (2, 1.3)] {
                let text = constrained(&mut engine, "Answer in JSON. The weather in Paris:", &g, seed, temp);
                let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{model}: {text:?}: {e}"));
                let obj = v.as_object().unwrap();
                for req in schema["required"].as_array().unwrap() {
                    assert!(obj.contains_key(req.as_str().unwrap()), "{model}: {text} lacks {req}");
                }
                if let Some(d) = obj.get("days") {
                    assert!((1..=14).contains(&d.as_i64().unwrap()), "{text}");
                }
                if let Some(u) = obj.get("unit") {
                    assert!(u == "celsius" || u == "fahrenheit", "{text}");
                }
                if let Some(t) = obj.get("tags") {
                    let n = t.as_array().unwrap().len();
                    assert!((1..=3).contains(&n), "{text}");
                }
            }
        }
    }
}

#[test]
fn grammar_check_cli_accepts_valid_and_rejects_invalid_instances_token_by_token() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        json!({"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}}, "required": ["city"]})
        .to_string(),
    )
    .unwrap();
    let write = |name: &str, v: Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    let good = [
        write("good1.json", json!({"city": "Paris"})),
        write("good2.json", json!({"city": "東京 \"quoted\"", "unit": "celsius", "days": 14})),
    ];
    let bad = [
        write("bad_enum.json", json!({"city": "Paris", "unit": "kelvin"})),
        write("bad_range.json", json!({"city": "Paris", "days": 15})),
        write("bad_missing.json", json!({"unit": "celsius"})),
        write("bad_order.json", json!({"unit": "celsius", "city": "Paris"})),
    ];
    for model in [common::SMOLLM2, common::GEMMA3] {
        let run_with = |objects: &str, files: &[std::path::PathBuf]| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .args(["grammar", "check", "--objects", objects, "--model"])
                .arg(common::model(model))
                .arg("--schema")
                .arg(&schema)
                .args(files)
                .output()
                .unwrap();
            (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let run = |files: &[std::path::PathBuf]| run_with("closed", files);
        let (code, out) = run(&good);
        assert_eq!(code, Some(0), "{model}: {out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("accepted")).count(), 2, "{model}: {out}");
        let (code, out) = run(&bad);
        assert_eq!(code, Some(1), "{model}: {out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("rejected")).count(), 4, "{model}: {out}");
        // As JSON Schema reads it (`--objects open`): an undeclared property and the
        // declared ones in another order are valid; broken keywords still are not.
        let extra = write("extra.json", json!({"city": "Paris", "note": [1, {"x": null}]}));
        let (code, out) = run(std::slice::from_ref(&extra));
        assert_eq!(code, Some(1), "{model}: closed objects refuse the extra property: {out}");
        let (code, out) = run_with("open", &[extra, bad[3].clone(), good[1].clone()]);
        assert_eq!(code, Some(0), "{model}: {out}");
        let (code, out) = run_with("open", &bad[..3]);
        assert_eq!((code, out.lines().filter(|l| l.starts_with("rejected")).count()), (Some(1), 3), "{model}: {out}");
    }
}

/// A keyword constrains every value it applies to, literals included, and a part of
/// the schema that admits no value can never be started (issue 29 items 2 and 3).
#[test]
fn contradictory_keywords_are_intersected_and_empty_parts_removed() {
    // `enum`/`const` values are filtered by the keywords beside them.
    check(json!({"enum": ["x", "yy", "z"], "maxLength": 1, "pattern": "^[xz]$"}), &[r#""x""#, r#""z""#], &[r#""yy""#]);
    check(json!({"type": "integer", "enum": [1, 5, 100], "maximum": 10}), &["1", "5"], &["100"]);
    check(json!({"enum": [{"a": 1}, {"b": 2}], "required": ["b"]}), &[r#"{"b":2}"#], &[r#"{"a":1}"#]);
    check(json!({"enum": [1, 2, 3], "const": 2}), &["2"], &["1", "3"]);
    check(
        json!({"$defs": {"small": {"maximum": 2}}, "enum": [1, 3], "allOf": [{"$ref": "#/$defs/small"}]}),
        &["1"],
        &["3"],
    );
    // Parts with no value: an optional property, an `anyOf` branch, array items.
    let g = grammar(json!({"type": "object", "properties": {"a": {"type": "integer"},
        "b": {"type": "string", "minLength": 3, "maxLength": 1}}}));
    assert!(g.matches(br#"{"a":1}"#) && !g.is_prefix(br#"{"b""#) && !g.is_prefix(br#"{"a":1,"b""#));
    // In an object open to extras, such a property is neither written nor an extra.
    let open = json!({"type": "object", "properties": {"a": {"type": "integer"},
        "b": {"type": "string", "minLength": 3, "maxLength": 1}}});
    let open = Grammar::from_schema_with(&open, Mode::Strict, Objects::Open, &Json).unwrap();
    assert!(open.matches(br#"{"a":1,"c":2}"#) && open.matches(br#"{"bb":1}"#));
    assert!(!open.is_prefix(br#"{"b""#) && !open.is_prefix(br#"{"a":1,"b""#));
    let g = grammar(json!({"anyOf": [{"type": "integer", "minimum": 5, "maximum": 1}, {"type": "boolean"}]}));
    assert!(g.matches(b"true") && !g.is_prefix(b"1"));
    let g =
        grammar(json!({"type": "array", "prefixItems": [{"type": "integer"}, false], "items": {"type": "integer"}}));
    assert!(g.matches(b"[]") && g.matches(b"[1]") && !g.is_prefix(b"[1,"));
    // A recursive schema keeps its recursion where it can end.
    let tree = json!({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["kids"]});
    assert!(grammar(tree).matches(br#"{"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]}"#));
    // The whole schema empty: an error naming every reason, in both modes.
    for mode in [Mode::Strict, Mode::Lenient] {
        let e = Grammar::from_schema(
            &json!({"anyOf": [{"type": "integer", "enum": [7], "multipleOf": 2},
            {"type": "array", "minItems": 2, "items": false}]}),
            mode,
            &Json,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no value satisfies") && e.contains("`multipleOf`") && e.contains("`minItems` 2"), "{e}");
    }
}

/// Rules an emitter builds as `Hir` (open objects' key tries, automata for patterns
/// with lengths and key patterns) skip the regex parser: on every schema of the tool
/// schema corpus, with open and closed objects, each such rule's `Hir` is exactly
/// what parsing its text gives, so the grammar compiled is the one the text names.
/// (Key tries: their text is written once beside parts built without it.)
#[test]
fn rules_built_without_parsing_equal_their_text() {
    use toolgate::grammar::part::Built;
    use toolgate::grammar::regex::to_rules;
    use toolgate::grammar::schema::compile_shared;
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_corpus.jsonl");
    let text = std::fs::read_to_string(corpus).unwrap();
    let (mut built, mut schemas) = (0, 0);
    // Beside the corpus (whose objects mostly close with `additionalProperties:
    // false`), objects whose extra keys avoid declared names: key tries of ASCII and
    // non-ASCII names.
    let tries = [
        json!({"name": "ascii names", "schema": {"type": "object", "properties": {"id": {}, "idx": {}, "name": {}}}}),
        json!({"name": "non-ASCII names", "schema": {"type": "object", "properties": {"é": {}, "aé": {}, "日本": {}, "a": {}},
            "additionalProperties": {"type": "integer"}}}),
    ];
    let lines = text.lines().map(|line| serde_json::from_str::<Value>(line).unwrap());
    for entry in lines.chain(tries) {
        for objects in [Objects::Open, Objects::Closed] {
            let Ok(node) = compile_shared(&entry["schema"], Mode::Strict, objects) else { continue };
            schemas += 1;
            let mut rules = Rules::new().any_order(objects == Objects::Open);
            to_rules(&node, &Json, &mut rules);
            for (i, hir) in rules.built().iter().enumerate() {
                if let Some(hir) = hir {
                    built += 1;
                    let text = &rules.bodies()[i];
                    assert_eq!(
                        Built::parse(text).unwrap().hir().as_ref(),
                        Some(hir),
                        "{}: rule {i}: {text}",
                        entry["name"]
                    );
                }
            }
        }
    }
    assert!(schemas > 300 && built > 100, "{schemas} schemas, {built} built rules");
}

/// Long property names beside `additionalProperties`: the extra keys' trie nests one
/// level per character. Built as `Hir`, names up to `MAX_BUILT_KEY_CHARS` compile
/// (the regex parser's nesting limit refused them past ~120) on a thread with a
/// server worker's 2 MiB stack; longer ones are refused with an error, not a crash.
#[test]
fn long_property_names_beside_extra_properties() {
    use toolgate::grammar::regex::MAX_BUILT_KEY_CHARS;
    let run = |len: usize| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let long: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
                let schema = json!({"type": "object", "properties": {long.clone(): {"type": "integer"}, "b": {"type": "integer"}},
                    "additionalProperties": {"type": "string"}});
                let g = Grammar::from_schema(&schema, Mode::Strict, &Json).map_err(|e| e.to_string())?;
                let ok = [format!(r#"{{"{long}":1,"b":2}}"#), format!(r#"{{"{}":"x"}}"#, &long[..len - 1])];
                let bad = [format!(r#"{{"{long}":"x"}}"#), r#"{"b":"x"}"#.to_string()];
                Ok::<_, String>(
                    ok.iter().all(|t| g.matches(t.as_bytes())) && bad.iter().all(|t| !g.matches(t.as_bytes())),
                )
            })
            .unwrap()
            .join()
            .unwrap()
    };
    assert_eq!(run(200), Ok(true));
    assert_eq!(run(MAX_BUILT_KEY_CHARS), Ok(true));
    let past = run(4 * MAX_BUILT_KEY_CHARS);
    assert!(past.as_ref().is_err_and(|e| e.contains("does not compile")), "{past:?}");
}
