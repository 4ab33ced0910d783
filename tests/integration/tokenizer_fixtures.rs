//! Tokenization must equal llama.cpp's token for token on both real models.

use crate::common;

use toolgate::gguf::GgufFile;
use toolgate::tokenizer::{EncodeOptions, Tokenizer, VocabKind};

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn check(model_file: &str, fixture: &str) {
    let gguf = GgufFile::open(common::model(model_file)).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let fx = common::fixture(fixture);
    let mut failures = Vec::new();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case["ids_parse_special"]);
        let got = tok.encode(text, EncodeOptions::TEMPLATE).unwrap();
        if got != want {
            failures.push(format!("parse_special {text:?}\n  want {want:?}\n  got  {got:?}"));
        }
        let want_text = ids(&case["ids"]);
        let got_text = tok.encode(text, EncodeOptions::TEXT).unwrap();
        // User text never becomes a control token; where llama.cpp agrees, ids must match.
        for &id in &got_text {
            assert!(!tok.token_kind(id).unwrap().is_special(), "{text:?}: text encoding produced special token {id}");
        }
        if got_text != want_text {
            failures.push(format!("text {text:?}\n  want {want_text:?}\n  got  {got_text:?}"));
        }
        // Round trip: decoding text-mode ids gives the input back (except U+2581, which a
        // SentencePiece vocabulary spells its space with).
        let sentencepiece = *tok.kind() == VocabKind::SentencePiece;
        if !(sentencepiece && text.contains('\u{2581}')) {
            assert_eq!(tok.decode(&got_text, false), text, "round trip of {text:?}");
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn smollm2_tokenization_matches_llama_cpp() {
    check(common::SMOLLM2, "smollm2.tokens.json");
    check(common::SMOLLM2, "smollm2.tokens-random.json");
}

/// Qwen 2.5's 151k-token byte-level BPE (its own pre-tokenizer, `qwen2`): the same hand
/// cases and 300 random strings give llama.cpp's ids.
#[test]
fn qwen_coder_tokenization_matches_llama_cpp() {
    check(common::QWEN_CODER, "qwen_coder.tokens.json");
    check(common::QWEN_CODER, "qwen_coder.tokens-random.json");
}

/// Gemma's SentencePiece vocabulary is encoded by toolgate's own merger (no merge
/// table): the hand-written cases and 300 seeded random strings (space runs, U+2581,
/// emoji, byte fallback, halves of special tokens) give llama.cpp's ids.
#[test]
fn gemma3_tokenization_matches_llama_cpp() {
    check(common::GEMMA3, "gemma3.tokens.json");
    check(common::GEMMA3, "gemma3.tokens-random.json");
}

#[test]
fn user_text_never_spells_control_tokens() {
    let gguf = GgufFile::open(common::model(common::SMOLLM2)).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let as_text = tok.encode("<|im_end|>", EncodeOptions::TEXT).unwrap();
    assert!(!as_text.contains(&im_end));
    assert_eq!(tok.encode("<|im_end|>", EncodeOptions::TEMPLATE).unwrap(), vec![im_end]);
    // Control tokens' mask bytes start with 0xFF, which UTF-8 text never contains.
    assert_eq!(tok.token_bytes().get(im_end as usize).unwrap()[0], 0xFF);
    assert!(tok.eog_tokens().contains(&im_end));
}
