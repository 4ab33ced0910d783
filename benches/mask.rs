//! Token-mask speed on the real vocabularies (`cargo bench --bench mask`); the peer is
//! llguidance, measured by `scripts/bench-llguidance.py` on the same schema, instance
//! and token ids. Under `cargo test` it runs once as a smoke test.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate::gguf::GgufFile;
use toolgate::grammar::regex::Json;
use toolgate::grammar::schema::Mode;
use toolgate::grammar::{Grammar, TokenVocab};
use toolgate::sampling::TokenMask;
use toolgate::tokenizer::{EncodeOptions, Tokenizer};

/// The schema and instance both benchmarks use.
const SCHEMA: &str = r#"{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},"notes":{"type":"string"}},"required":["city","unit"]}"#;
const INSTANCE: &str = r#"{"city": "San Francisco, California", "unit": "celsius", "days": 7, "notes": "Bring an umbrella; it's 日本語 day."}"#;

fn models_dir() -> PathBuf {
    std::env::var("TOOLGATE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/toolgate/models"))
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let runs = if smoke { 1 } else { 5 };
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
    for file in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"] {
        let path = models_dir().join(file);
        assert!(path.exists(), "{file} not found: run scripts/fetch-models");
        let gguf = GgufFile::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(&gguf).unwrap();
        let t = Instant::now();
        let vocab = Arc::new(TokenVocab::from_tokenizer(&tok));
        let vocab_ms = t.elapsed().as_secs_f64() * 1e3;
        let ids = tok.encode(INSTANCE, EncodeOptions::TEXT).unwrap();
        let (mut best_compile, mut best_cold, mut best_warm) = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..runs {
            let t = Instant::now();
            let g = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &Json).unwrap());
            best_compile = best_compile.min(t.elapsed().as_secs_f64() * 1e3);
            let mut m = g.matcher(vocab.clone());
            let mut mask = TokenMask::new(vocab.len());
            let mut pass = |m: &mut toolgate::grammar::Matcher| {
                let mut total = Duration::ZERO;
                for &id in &ids {
                    let t = Instant::now();
                    m.fill_mask(&mut mask).unwrap();
                    total += t.elapsed();
                    assert!(mask.is_allowed(id), "instance token {id} rejected");
                    m.commit(id).unwrap();
                }
                assert!(m.is_accepting());
                total.as_secs_f64() * 1e6 / ids.len() as f64
            };
            best_cold = best_cold.min(pass(&mut m));
            m.rollback(ids.len());
            best_warm = best_warm.min(pass(&mut m));
        }
        println!(
            "{{\"engine\":\"toolgate\",\"model\":\"{file}\",\"vocab\":{},\"tokens\":{},\"vocab_build_ms\":{vocab_ms:.1},\"compile_ms\":{best_compile:.2},\"mask_us_per_token_cold\":{best_cold:.1},\"mask_us_per_token_warm\":{best_warm:.2}}}",
            vocab.len(),
            ids.len()
        );
    }
}
