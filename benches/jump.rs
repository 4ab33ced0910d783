//! Jump-forward decoding (`cargo bench --bench jump`): a named call of five required
//! properties (strings, an integer, an enum, a boolean) and one of nine (four enums, a
//! nested object), greedy, on each test model `scripts/fetch-models` caches (or the
//! folder in `TOOLGATE_MODELS`), with `GenerateParams::jump_forward` off and on,
//! interleaved. One JSON line per tool and model: the median time of the generation
//! phase (`timings.decode`: every token after the first; the prompt is the same either
//! way) of each, their ratio, the same for the whole turn (prompt included), the tokens
//! generated and those jump-forward fed in chunks, and whether the arguments came out
//! the same. `BENCH_ROUNDS` (default 7). Under `cargo test` it runs one round as a
//! smoke test.

mod common;
use common::models_dir;

use std::time::Duration;

use serde_json::{json, Value};
use toolgate::engine::chat::{tool_turn, ChatTurn, ToolMode};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;
use toolgate::template::source::GgufTemplates;
use toolgate::template::{gate, ToolFallback};
use toolgate::tools::{Tool, ToolChoice};

const MODELS: [(&str, &str); 3] = [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "llama"),
    ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2"),
    ("gemma-3-270m-q4_k_m.gguf", "gemma3"),
];

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let rounds: usize =
        if smoke { 1 } else { std::env::var("BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(7) };
    // The test's tool (tests/integration/tools.rs): five required properties; and an
    // argument-heavy one: nine, four enums, a nested object of three.
    let cases = [
        ("book_flight", "Book two business seats from Oslo to Rome, refundable."),
        (
            "create_ticket",
            "Ticket: checkout fails for Ana Lima (ana@example.com, enterprise plan); about 300 users in \
             eu-west affected. Escalate it, tell the customer, fix within 4 hours.",
        ),
    ];
    for (tool, request) in cases {
        let fixture =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{tool}_tools.json"));
        let tools: Vec<Tool> = serde_json::from_str(&std::fs::read_to_string(fixture).expect("the tool fixture"))
            .expect("the bench's tool");
        let messages = vec![json!({"role": "user", "content": request})];
        let choice = ToolChoice::Named(tool.into());
        bench_tool(tool, &tools, &messages, &choice, rounds);
    }
}

/// One line per model for a named call of `tool`.
fn bench_tool(tool: &str, tools: &[Tool], messages: &[Value], choice: &ToolChoice, rounds: usize) {
    for (file, arch) in MODELS {
        let path = models_dir().join(file);
        assert!(path.is_file(), "{} is missing: run scripts/fetch-models first", path.display());
        let mut engine = Engine::load(&path, DeviceChoice::Cpu).expect("the model loads");
        let templates = GgufTemplates::from_gguf(engine.gguf()).expect("its templates");
        let setup = gate(file, &templates, Some(arch), None, ToolFallback::Generic).expect("the gate");
        let mut turn = |jump: bool| -> ChatTurn {
            let params = GenerateParams {
                max_tokens: 256,
                sampling: SamplingParams::greedy(),
                jump_forward: jump,
                ..GenerateParams::default()
            };
            tool_turn(&mut engine, &setup, messages.to_vec(), tools, choice, false, ToolMode::Constrained, &params)
                .expect("the turn")
        };
        // One of each first: the prompt's cache, the grammar's masks.
        let (mut off, mut on) = (turn(false), turn(true));
        let (mut off_times, mut on_times, mut off_turns, mut on_turns) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            off = turn(false);
            off_times.push(off.timings.decode);
            off_turns.push(off.timings.prompt + off.timings.decode);
            on = turn(true);
            on_times.push(on.timings.decode);
            on_turns.push(on.timings.prompt + on.timings.decode);
        }
        let args = |t: &ChatTurn| t.tool_calls.first().map(|c| c.function.arguments.clone()).unwrap_or_default();
        let (off_ms, on_ms) = (median(off_times), median(on_times));
        let line: Value = json!({
            "tool": tool, "model": file, "rounds": rounds,
            "generation_ms_off": (off_ms * 10.0).round() / 10.0, "generation_ms_on": (on_ms * 10.0).round() / 10.0,
            "ratio": (on_ms / off_ms * 1000.0).round() / 1000.0,
            "turn_ratio": (median(on_turns) / median(off_turns) * 1000.0).round() / 1000.0,
            "tokens_off": off.completion_tokens, "tokens_on": on.completion_tokens,
            "forced_tokens": on.timings.forced_tokens,
            "same_arguments": args(&off) == args(&on), "arguments_on": args(&on),
        });
        println!("{line}");
    }
}
