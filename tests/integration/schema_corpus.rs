//! The constraint engine against a corpus of 220 tool-parameter schemas
//! (`tests/fixtures/schema_corpus.jsonl`, written by `scripts/make-schema-corpus.py`:
//! objects, nesting, arrays, enums, unions, formats, patterns, refs, recursion), on the
//! real SmolLM2 (49k) and Gemma 3 (262k) vocabularies:
//! - exactness: every valid instance is accepted, every invalid one rejected, and the
//!   `jsonschema` crate agrees with each label;
//! - the tokenization of every valid instance is allowed by the masks step by step;
//! - random walks under the masks always end, once completed, in instances that
//!   validate, and the fast masks (slices + trie walk) equal the reference mask
//!   (every token walked alone) at sampled steps.

use crate::common;

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use toolgate::gguf::GgufFile;
use toolgate::grammar::regex::Json;
use toolgate::grammar::schema::Mode;
use toolgate::grammar::TokenMask;
use toolgate::grammar::{Grammar, TokenVocab};
use toolgate::tokenizer::{EncodeOptions, Tokenizer};

#[derive(Clone)]
struct Entry {
    name: String,
    schema: Value,
    valid: Vec<String>,
    invalid: Vec<String>,
}

fn corpus() -> Vec<Entry> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema_corpus.jsonl");
    std::fs::read_to_string(p)
        .expect("schema corpus")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("corpus line");
            let texts = |k: &str| v[k].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            Entry {
                name: v["name"].as_str().unwrap().into(),
                schema: v["schema"].clone(),
                valid: texts("valid"),
                invalid: texts("invalid"),
            }
        })
        .collect()
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options().should_validate_formats(true).build(schema).expect("corpus schema")
}

fn vocab(file: &str) -> (Tokenizer, Arc<TokenVocab>) {
    let tok = Tokenizer::from_gguf(&GgufFile::open(common::model(file)).unwrap()).unwrap();
    let vocab = Arc::new(tok.token_vocab());
    (tok, vocab)
}

#[test]
fn every_valid_instance_is_accepted_and_every_invalid_one_rejected() {
    let corpus = corpus();
    assert!(corpus.len() >= 200, "{} schemas", corpus.len());
    let (mut valid, mut invalid) = (0, 0);
    for e in &corpus {
        let g = Grammar::from_schema(&e.schema, Mode::Strict, &Json).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        let oracle = validator(&e.schema);
        for text in &e.valid {
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(oracle.is_valid(&v), "{}: the corpus says valid, jsonschema disagrees: {text}", e.name);
            assert!(g.matches(text.as_bytes()), "{}: valid instance rejected: {text}", e.name);
            valid += 1;
        }
        for text in &e.invalid {
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(!oracle.is_valid(&v), "{}: the corpus says invalid, jsonschema disagrees: {text}", e.name);
            assert!(!g.matches(text.as_bytes()), "{}: invalid instance accepted: {text}", e.name);
            invalid += 1;
        }
    }
    assert!(valid >= 500 && invalid >= 1000, "{valid} valid, {invalid} invalid");
}

#[test]
fn valid_instances_tokenize_through_the_masks_on_both_vocabularies() {
    let corpus = corpus();
    for file in [common::SMOLLM2, common::GEMMA3] {
        let (tok, vocab) = vocab(file);
        for e in &corpus {
            let g = Arc::new(Grammar::from_schema(&e.schema, Mode::Strict, &Json).unwrap());
            for text in &e.valid {
                let ids = tok.encode(text, EncodeOptions::TEXT).unwrap();
                if let Err((step, why)) = g.check_tokens(vocab.clone(), &ids) {
                    panic!("{file} {}: {text} refused at token {step}: {why}", e.name);
                }
            }
        }
    }
}

/// Walk `steps` random allowed tokens, then finish on the shortest completion;
/// at `reference_steps` compare the mask with the reference. Returns the text.
fn random_walk(
    g: &Arc<Grammar>,
    vocab: &Arc<TokenVocab>,
    rng: &mut StdRng,
    steps: usize,
    reference_steps: &[usize],
) -> String {
    let mut m = g.matcher(vocab.clone());
    let mut mask = TokenMask::new(vocab.len());
    for step in 0..steps {
        m.fill_mask(&mut mask).unwrap();
        for &e in vocab.eog() {
            mask.forbid(e);
        }
        if reference_steps.contains(&step) {
            let reference = g.reference_mask(vocab, m.bytes()).unwrap();
            assert_eq!(
                mask,
                reference,
                "fast mask differs from the reference after {:?}",
                String::from_utf8_lossy(m.bytes())
            );
        }
        let allowed: Vec<u32> = (0..vocab.len() as u32).filter(|&t| mask.is_allowed(t)).collect();
        if allowed.is_empty() || (m.is_accepting() && rng.random_bool(0.3)) {
            break;
        }
        m.commit(allowed[rng.random_range(0..allowed.len())]).unwrap();
    }
    let plan = m
        .completion_plan(4096)
        .unwrap_or_else(|| panic!("no completion after {:?}", String::from_utf8_lossy(m.bytes())));
    for t in plan {
        m.commit(t).unwrap();
    }
    assert!(m.is_accepting());
    String::from_utf8(m.bytes().to_vec()).expect("complete instances are UTF-8")
}

#[test]
fn random_walks_under_the_masks_validate_and_fast_masks_equal_the_reference() {
    let corpus = corpus();
    let mut rng = StdRng::seed_from_u64(11);
    for file in [common::SMOLLM2, common::GEMMA3] {
        let (_, vocab) = vocab(file);
        for (i, e) in corpus.iter().enumerate() {
            let g = Arc::new(Grammar::from_schema(&e.schema, Mode::Strict, &Json).unwrap());
            let oracle = validator(&e.schema);
            // The reference costs a pass over the whole vocabulary: two steps per
            // schema on SmolLM2, one on every fourth schema on Gemma 3.
            let reference: &[usize] = match (file == common::SMOLLM2, i % 4) {
                (true, _) => &[1, 9],
                (false, 0) => &[6],
                (false, _) => &[],
            };
            for walk in 0..2 {
                let text = random_walk(&g, &vocab, &mut rng, 40, if walk == 0 { reference } else { &[] });
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|err| panic!("{file} {}: not JSON ({err}): {text}", e.name));
                assert!(oracle.is_valid(&v), "{file} {}: walk ended in an invalid instance: {text}", e.name);
            }
        }
    }
}

/// Compile in both modes; any outcome but a panic is fine, and an error must say
/// where. Returns the strict result.
fn compile_both(schema: &Value) -> Result<Grammar, toolgate::Error> {
    let lenient = Grammar::from_schema(schema, Mode::Lenient, &Json);
    if let Err(e) = &lenient {
        assert!(!e.to_string().is_empty());
    }
    let strict = Grammar::from_schema(schema, Mode::Strict, &Json);
    if let Err(toolgate::Error::Schema { pointer, .. }) = &strict {
        assert!(pointer.starts_with('#'), "{pointer}");
    }
    strict
}

#[test]
fn hostile_schemas_get_bounded_grammars_or_clear_errors() {
    // Deep nesting: an error naming the depth, not a stack overflow.
    // (Built by moving values in: `json!` would serialize the inner value recursively.)
    let obj = |pairs: Vec<(&str, Value)>| Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let mut deep = serde_json::json!({"type": "string"});
    for _ in 0..2000 {
        deep = obj(vec![
            ("type", "object".into()),
            ("properties", obj(vec![("a", deep)])),
            ("required", serde_json::json!(["a"])),
        ]);
    }
    let e = compile_both(&deep).unwrap_err().to_string();
    assert!(e.contains("nested deeper"), "{e}");
    let mut any_of = serde_json::json!({"type": "integer"});
    for _ in 0..2000 {
        any_of = obj(vec![("anyOf", Value::Array(vec![any_of, serde_json::json!({"type": "null"})]))]);
    }
    assert!(compile_both(&any_of).unwrap_err().to_string().contains("nested deeper"));
    std::mem::forget((deep, any_of)); // dropping 2000 levels recurses as deep as building

    // A 10k-value enum compiles and means exactly its values.
    let values: Vec<String> = (0..10_000).map(|i| format!("value_{i}")).collect();
    let g = compile_both(&serde_json::json!({"enum": values})).unwrap();
    assert!(g.matches(br#""value_0""#) && g.matches(br#""value_9999""#) && !g.matches(br#""value_10000""#));

    // Huge maxLength: capped (shorter strings only, all valid); huge minLength: refused.
    let g = compile_both(&serde_json::json!({"type": "string", "maxLength": 1_000_000_000u64})).unwrap();
    assert!(g.matches(br#""short""#) && g.matches(format!("\"{}\"", "x".repeat(1024)).as_bytes()));
    assert!(!g.matches(format!("\"{}\"", "x".repeat(1025)).as_bytes()));
    let e = compile_both(&serde_json::json!({"type": "string", "minLength": 1_000_000_000u64})).unwrap_err();
    assert!(e.to_string().contains("does not compile"), "{e}");
    let e = compile_both(&serde_json::json!({"type": "array", "minItems": 4_000_000_000u64})).unwrap_err();
    assert!(e.to_string().contains("does not compile"), "{e}");

    // A reference that is all there is to itself has no finite value: refused.
    let e = compile_both(&serde_json::json!({"$ref": "#"})).unwrap_err();
    assert!(e.to_string().contains("no value satisfies this schema"), "{e}");
    // Mutual references: expanded to the documented depth.
    let mutual = serde_json::json!({"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/b"}},
        "b": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"});
    let g = compile_both(&mutual).unwrap();
    assert!(g.matches(b"[1,[2,[]]]"));
    assert!(compile_both(&serde_json::json!({"$ref": "#/$defs/missing"})).is_err());

    // Hostile patterns: unsupported constructs and size blow-ups are errors.
    for p in ["(?=x)y", "[", "a^b", r"(a{1000}){1000}"] {
        let e = compile_both(&serde_json::json!({"type": "string", "pattern": p})).unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    // Contradictions are refused, in either mode, saying no value satisfies them.
    for s in [
        serde_json::json!({"type": "integer", "minimum": 5, "maximum": 1}),
        serde_json::json!({"enum": []}),
        serde_json::json!({"type": "array", "minItems": 3, "maxItems": 1}),
        serde_json::json!(false),
    ] {
        for mode in [Mode::Lenient, Mode::Strict] {
            let e = Grammar::from_schema(&s, mode, &Json).err().unwrap_or_else(|| panic!("{s} {mode:?} compiled"));
            assert!(e.to_string().contains("no value satisfies this schema"), "{s} {mode:?}: {e}");
        }
    }
    // Wrong-typed keyword values are errors with a pointer.
    for s in [
        serde_json::json!({"type": 5}),
        serde_json::json!({"type": "string", "maxLength": -1}),
        serde_json::json!({"type": "object", "properties": []}),
        serde_json::json!({"anyOf": {}}),
        serde_json::json!([]),
        serde_json::json!({"type": "array", "prefixItems": 3}),
    ] {
        assert!(compile_both(&s).is_err(), "{s} should be refused");
    }
}

/// A random JSON value built from schema keywords and wrong-typed values.
fn random_schema(rng: &mut StdRng, depth: usize) -> Value {
    const KEYS: [&str; 24] = [
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "minItems",
        "maxItems",
        "not",
        "description",
    ];
    let leaf = |rng: &mut StdRng| -> Value {
        match rng.random_range(0..9) {
            0 => Value::Null,
            1 => Value::Bool(rng.random_bool(0.5)),
            2 => serde_json::json!(rng.random_range(-5i64..2000)),
            3 => serde_json::json!(rng.random_range(-1e3..1e3)),
            4 => serde_json::json!(
                ["string", "integer", "number", "object", "array", "boolean", "null", "nope"][rng.random_range(0..8)]
            ),
            5 => {
                serde_json::json!(["#", "#/$defs/a", "#/properties/x", "http://x", "#/$defs/b"][rng.random_range(0..5)])
            }
            6 => serde_json::json!(["date", "uuid", "email", "ipv4", "hostname", "uri"][rng.random_range(0..6)]),
            7 => serde_json::json!(["^[a-z]+$", "(", "\\d{2,4}", ".*", "a|b|", "[^\"]"][rng.random_range(0..6)]),
            _ => serde_json::json!("x"),
        }
    };
    if depth >= 4 || rng.random_bool(0.3) {
        return leaf(rng);
    }
    match rng.random_range(0..3) {
        0 => Value::Array((0..rng.random_range(0..4)).map(|_| random_schema(rng, depth + 1)).collect()),
        _ => {
            let mut o = serde_json::Map::new();
            for _ in 0..rng.random_range(0..5) {
                let k =
                    if rng.random_bool(0.8) { KEYS[rng.random_range(0..KEYS.len())].to_string() } else { "x".into() };
                o.insert(k, random_schema(rng, depth + 1));
            }
            Value::Object(o)
        }
    }
}

#[test]
fn random_hostile_schemas_never_panic_and_compiled_ones_stay_consistent() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut compiled = 0;
    for _ in 0..3000 {
        let schema = random_schema(&mut rng, 0);
        if let Ok(g) = compile_both(&schema) {
            compiled += 1;
            // Whatever compiled answers both questions without panicking, and a
            // complete instance is also a prefix.
            for t in ["null", "1", "\"x\"", "[]", "{}", "{\"x\":1}", "true"] {
                if g.matches(t.as_bytes()) {
                    assert!(g.is_prefix(t.as_bytes()));
                }
            }
        }
    }
    assert!(compiled > 100, "{compiled} of 3000 compiled");
}
