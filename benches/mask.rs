//! Token-mask speed on the real vocabularies (`cargo bench --bench mask`); the peer is
//! llguidance, measured by `scripts/bench-llguidance.py` on the same schemas, the same
//! vocabulary bytes and the same token ids, which this bench writes to
//! `target/mask-bench/` (`scripts/bench-mask` runs both in one go). Under `cargo test`
//! it runs once as a smoke test.
//!
//! Per model and schema it prints one JSON line: compile time (best of the runs),
//! and the per-token mask time over every step of every run, p50 and p99, for a
//! cold grammar (each run compiles afresh, so every DFA state is met for the first
//! time, as by the first request that uses these tools) and warm (the same walk again
//! on a grammar whose masks are cached, as from the second request on); and the
//! median over runs of compile + every cold mask of the walk (`first_request_ms`).

mod common;
use common::models_dir;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use toolgate::gguf::GgufFile;
use toolgate::grammar::regex::Json;
use toolgate::grammar::schema::Mode;
use toolgate::grammar::TokenMask;
use toolgate::grammar::{Grammar, TokenVocab};
use toolgate::tokenizer::{EncodeOptions, TokenKind, Tokenizer};

/// Tool-call argument schemas and one instance of each: two plain ones, and `refs`,
/// whose strings are patterns with length bounds (automata: `grammar::machine`), the
/// shape of the slowest real-world schemas to compile (MaskBench's gdbots/triniti
/// message references).
const CASES: [(&str, &str, &str); 3] = [
    (
        "refs",
        r#"{"type":"object","properties":{"curie":{"type":"string","pattern":"^([a-z0-9-]+):([a-z0-9\\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$","maxLength":146},"id":{"type":"string","pattern":"^[A-Za-z0-9:_\\-]+$","maxLength":255},"tag":{"type":"string","pattern":"^([\\w\\/-]|[\\w-][\\w\\/-]*[\\w-])$","maxLength":255}},"required":["curie","id"]}"#,
        r#"{"curie": "acme:blog:node:article", "id": "60c71df0-fda8-11e5-bfb9-30342d363854", "tag": "news-2026"}"#,
    ),
    (
        "get_weather",
        r#"{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},"notes":{"type":"string"}},"required":["city","unit"]}"#,
        r#"{"city": "San Francisco, California", "unit": "celsius", "days": 7, "notes": "Bring an umbrella; it's 日本語 day."}"#,
    ),
    (
        "create_event",
        r#"{"type":"object","properties":{"title":{"type":"string"},"start":{"type":"string","format":"date-time"},"attendees":{"type":"array","items":{"type":"object","properties":{"email":{"type":"string"},"optional":{"type":"boolean"}},"required":["email"]},"maxItems":8},"location":{"type":"object","properties":{"name":{"type":"string"},"lat":{"type":"number"},"lon":{"type":"number"}},"required":["name"]},"reminder_minutes":{"type":"integer","minimum":0,"maximum":1440},"visibility":{"enum":["public","private","confidential"]}},"required":["title","start","attendees"]}"#,
        r#"{"title": "Quarterly planning review with the platform team", "start": "2026-03-14T09:30:00+01:00", "attendees": [{"email": "ana.lopez@example.com"}, {"email": "k.tanaka@example.org", "optional": true}], "location": {"name": "Salle Émile Zola, 3rd floor", "lat": 48.8566, "lon": 2.3522}, "reminder_minutes": 15, "visibility": "private"}"#,
    ),
];

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The vocabulary and walks llguidance is given: token bytes (special tokens without
/// toolgate's 0xFF marker, listed apart), end tokens, and each case's token ids.
fn dump_for_peer(file: &str, tok: &Tokenizer, vocab: &TokenVocab, walks: &[(String, String, Vec<u32>)]) {
    let dir = PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())).join("mask-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let special: Vec<u32> =
        (0..vocab.len() as u32).filter(|&i| tok.token_kind(i).is_some_and(|k| k == TokenKind::Control)).collect();
    let tokens: Vec<Vec<u8>> = (0..vocab.len() as u32)
        .map(|i| {
            let b = vocab.token_bytes(i);
            b.strip_prefix(&[0xFF]).unwrap_or(b).to_vec()
        })
        .collect();
    let cases: Vec<serde_json::Value> = walks
        .iter()
        .map(|(name, schema, ids)| serde_json::json!({"name": name, "schema": schema, "ids": ids}))
        .collect();
    let out =
        serde_json::json!({"model": file, "tokens": tokens, "special": special, "eog": vocab.eog(), "cases": cases});
    std::fs::write(dir.join(format!("{file}.json")), out.to_string()).unwrap();
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let runs = if smoke { 1 } else { 20 };
    // `cargo bench --bench mask -- smol` measures only the models whose file names
    // contain one of the given words.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    for file in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"] {
        if !only.is_empty() && !only.iter().any(|w| file.to_lowercase().contains(&w.to_lowercase())) {
            continue;
        }
        let path = models_dir().join(file);
        assert!(path.exists(), "{file} not found: run scripts/fetch-models");
        let gguf = GgufFile::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(&gguf).unwrap();
        let t = Instant::now();
        let vocab = Arc::new(tok.token_vocab());
        let vocab_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut walks = Vec::new();
        for (name, schema_text, instance) in CASES {
            let schema: serde_json::Value = serde_json::from_str(schema_text).unwrap();
            let ids = tok.encode(instance, EncodeOptions::TEXT).unwrap();
            let (mut compile, mut cold, mut warm) = (f64::MAX, Vec::new(), Vec::new());
            // Compile plus every cold mask of the walk: what the first request pays.
            let mut first_request = Vec::new();
            let mut mask = TokenMask::new(vocab.len());
            for _ in 0..runs {
                let t = Instant::now();
                let g = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &Json).unwrap());
                let compile_ms = t.elapsed().as_secs_f64() * 1e3;
                compile = compile.min(compile_ms);
                let cold_before = cold.len();
                for times in [&mut cold, &mut warm] {
                    let mut m = g.matcher(vocab.clone());
                    for &id in &ids {
                        let t = Instant::now();
                        m.fill_mask(&mut mask).unwrap();
                        times.push(t.elapsed().as_secs_f64() * 1e6);
                        assert!(mask.is_allowed(id), "{name}: instance token {id} rejected");
                        m.commit(id).unwrap();
                    }
                    assert!(m.is_accepting());
                }
                first_request.push(compile_ms + cold[cold_before..].iter().sum::<f64>() / 1e3);
            }
            first_request.sort_by(f64::total_cmp);
            cold.sort_by(f64::total_cmp);
            warm.sort_by(f64::total_cmp);
            println!(
                "{}",
                serde_json::json!({
                    "engine": "toolgate", "model": file, "schema": name, "vocab": vocab.len(), "tokens": ids.len(),
                    "vocab_build_ms": (vocab_ms * 10.0).round() / 10.0, "compile_ms": (compile * 100.0).round() / 100.0,
                    "cold_p50_us": (percentile(&cold, 0.5) * 10.0).round() / 10.0,
                    "cold_p99_us": (percentile(&cold, 0.99) * 10.0).round() / 10.0,
                    "warm_p50_us": (percentile(&warm, 0.5) * 100.0).round() / 100.0,
                    "warm_p99_us": (percentile(&warm, 0.99) * 100.0).round() / 100.0,
                    "first_request_ms": (percentile(&first_request, 0.5) * 1000.0).round() / 1000.0,
                })
            );
            walks.push((name.to_string(), schema_text.to_string(), ids));
        }
        dump_for_peer(file, &tok, &vocab, &walks);
    }
}
