//! Concurrent sequences on one model (`Engine::into_batched`): each generates what it
//! would alone, their decode steps really are batched, and a sequence that ends (or
//! prefills) never stalls the others.

use crate::common;

use toolgate::engine::chat::prepare_text_turn;
use toolgate::engine::{Engine, GenerateParams};
use toolgate::grammar::schema::Mode;
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;
use toolgate::template::ToolFallback;

const PROMPTS: [&str; 3] = ["The capital of France is", "Once upon a time", "def fibonacci(n):"];

fn params(max_tokens: usize) -> GenerateParams {
    GenerateParams { max_tokens, stop_on_eog: false, sampling: SamplingParams::greedy(), ..GenerateParams::default() }
}

fn alone(engine: &mut Engine, max_tokens: usize) -> Vec<Vec<u32>> {
    PROMPTS.iter().map(|p| engine.generate_text(p, &params(max_tokens), |_| {}).unwrap().tokens).collect()
}

#[test]
fn batched_sequences_generate_what_they_would_alone() {
    for file in [common::SMOLLM2, common::GEMMA3] {
        let mut engine = Engine::load(common::model(file), DeviceChoice::Cpu).unwrap();
        let want = alone(&mut engine, 24);
        let (engines, stats) = engine.into_batched(3).unwrap();
        // Different lengths: the sequences leave the batch at different steps.
        let lengths = [24, 12, 18];
        let got: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = engines
                .into_iter()
                .zip(PROMPTS.iter().zip(lengths))
                .map(|(mut e, (p, n))| s.spawn(move || e.generate_text(p, &params(n), |_| {}).unwrap().tokens))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((g, w), n) in got.iter().zip(&want).zip(lengths) {
            assert_eq!(g[..], w[..n], "{file}: a batched sequence diverged from its solo run");
        }
        // Each token after a sequence's first is one decode row; rows were shared.
        let rows: u64 = got.iter().map(|g| g.len() as u64 - 1).sum();
        assert_eq!(stats.rows(), rows, "{file}: {stats:?}");
        assert!(stats.widest() >= 2 && stats.steps() < rows, "{file}: no step was batched: {stats:?}");
    }
}

#[test]
fn a_constrained_turn_and_a_free_one_share_the_model() {
    let engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let setup = engine.chat_setup(ToolFallback::Generic).unwrap();
    let (engines, stats) = engine.into_batched(2).unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
        "population": {"type": "integer"}}, "required": ["city", "population"], "additionalProperties": false});
    let turns: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = engines
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                let (setup, schema) = (&setup, &schema);
                s.spawn(move || {
                    let msgs = vec![serde_json::json!({"role": "user", "content": "Describe Paris."})];
                    let mut outs = Vec::new();
                    // Two turns each: the second reuses the slot's cached prefix.
                    for _ in 0..2 {
                        let turn = if i == 0 {
                            prepare_text_turn(&mut e, setup, msgs.clone(), Some((schema, Mode::Strict))).unwrap()
                        } else {
                            prepare_text_turn(&mut e, setup, msgs.clone(), None).unwrap()
                        };
                        outs.push(turn.run(&mut e, &params(48), |_| {}).unwrap());
                    }
                    assert_eq!(outs[0].content, outs[1].content, "greedy turns repeat");
                    outs.remove(0).content
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let v: serde_json::Value = serde_json::from_str(&turns[0]).unwrap();
    assert!(v["city"].is_string() && v["population"].is_i64(), "{v}");
    assert!(!turns[1].is_empty());
    assert!(stats.widest() == 2, "{stats:?}");
}
