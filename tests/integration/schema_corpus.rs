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
use toolgate::grammar::{Grammar, TokenVocab};
use toolgate::sampling::TokenMask;
use toolgate::tokenizer::{EncodeOptions, Tokenizer};

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
    let vocab = Arc::new(TokenVocab::from_tokenizer(&tok));
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
