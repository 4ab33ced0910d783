//! Generation on the real models: seeds, stop strings, end-of-turn, streaming, CLI.

use crate::common;

use toolgate::engine::{Engine, FinishReason, GenerateParams};
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;

fn sampled(seed: u64) -> GenerateParams {
    GenerateParams {
        max_tokens: 24,
        sampling: SamplingParams { temperature: 0.9, top_p: 0.95, seed, ..SamplingParams::greedy() },
        stop: vec![],
        stop_on_eog: false,
        ..GenerateParams::default()
    }
}

#[test]
fn same_seed_same_output_and_streaming_equals_final_text() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let mut streamed = String::new();
    let a = engine.generate_text("Once upon a time", &sampled(11), |p| streamed.push_str(p)).unwrap();
    let b = engine.generate_text("Once upon a time", &sampled(11), |_| {}).unwrap();
    let c = engine.generate_text("Once upon a time", &sampled(12), |_| {}).unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert_ne!(a.tokens, c.tokens, "a different seed should change a 24-token sample");
    assert_eq!(streamed, a.text);
    assert_eq!(a.text, engine.tokenizer().decode(&a.tokens, true));
}

#[test]
fn stop_strings_cut_the_text_and_are_never_streamed() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    // Greedy continuation of this prompt is " Paris.\n\n..." (see the fixtures).
    for (stops, want) in [(vec!["."], " Paris"), (vec![".", "is."], " Par"), (vec!["\n\n"], " Paris.")] {
        let stop = stops.iter().map(|s| s.to_string()).collect();
        let params = GenerateParams { max_tokens: 32, stop, ..GenerateParams::default() };
        let mut streamed = String::new();
        let g = engine.generate_text("The capital of France is", &params, |p| streamed.push_str(p)).unwrap();
        assert_eq!(g.finish_reason, FinishReason::Stop);
        assert_eq!(g.text, want, "stops {stops:?}");
        assert_eq!(streamed, want, "stops {stops:?}");
    }
}

#[test]
fn chat_turn_ends_on_the_end_of_turn_token() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let prompt = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                  <|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n";
    let ids = engine.tokenizer().encode_prompt(prompt, true).unwrap();
    let params = GenerateParams { max_tokens: 64, ..GenerateParams::default() };
    let g = engine.generate(&ids, &params, |_| {}).unwrap();
    assert_eq!(g.finish_reason, FinishReason::Stop, "{:?}", g.text);
    let im_end = engine.tokenizer().token_id("<|im_end|>").unwrap();
    assert_eq!(*g.tokens.last().unwrap(), im_end);
    assert!(!g.text.contains("<|im_end|>"));
    assert!(!g.text.trim().is_empty());
}

#[test]
fn cli_run_streams_text_and_reports_speed() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--model"])
        .arg(common::model(common::SMOLLM2))
        .args(["--prompt", "The capital of France is", "--max-tokens", "4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("Paris"), "{stdout}");
    assert!(stderr.contains("prompt 5 tokens") && stderr.contains("tok/s"), "{stderr}");
}

#[test]
fn cli_reports_a_bad_model_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("broken.gguf");
    std::fs::write(&p, b"GGUF\x03\x00\x00\x00garbage").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["run", "--prompt", "x", "--model"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.gguf") && !stderr.contains("panicked"), "{stderr}");
}

/// The logits at every generated position, `prompt` and `generated` teacher-forced in
/// one batched pass from an empty cache: row `i` predicts `generated[i]`.
fn teacher_forced(engine: &mut Engine, prompt: &[u32], generated: &[u32]) -> Vec<Vec<f32>> {
    let model = engine.model();
    model.truncate(0);
    let mut input = prompt.to_vec();
    input.extend_from_slice(&generated[..generated.len() - 1]);
    model.forward_tail(&input, generated.len()).unwrap()
}

/// With jump-forward, the tokens a forced run feeds as one chunk get the entries the
/// model gives them at their positions (the chunk's rows), every one, in order —
/// also when the budget ends the turn inside a run.
#[test]
fn jump_forward_tokens_carry_the_models_logprobs_from_their_chunk() {
    use std::sync::Arc;
    use toolgate::grammar::regex::Json;
    use toolgate::grammar::schema::Mode;
    use toolgate::grammar::Grammar;
    let schema = serde_json::json!({"type": "object", "properties": {
        "origin_city": {"type": "string"}, "destination_city": {"type": "string"},
        "cabin_class": {"enum": ["economy", "business"]}, "passenger_count": {"type": "integer"}},
        "required": ["origin_city", "destination_city", "cabin_class", "passenger_count"]});
    let g = Arc::new(Grammar::from_schema(&schema, Mode::Strict, &Json).unwrap());
    let mut engine = Engine::load(common::model(common::QWEN_CODER), DeviceChoice::Cpu).unwrap();
    let ids = engine.tokenizer().encode_prompt("Book a flight from Oslo to Rome for two, as JSON:", true).unwrap();
    let mut cut = false;
    for max_tokens in [64, 9] {
        let mut m = g.matcher(engine.token_vocab());
        let params = GenerateParams { max_tokens, logprobs: Some(3), jump_forward: true, ..GenerateParams::default() };
        let gen = engine.generate_constrained(&ids, &params, &mut m, |_| {}).unwrap();
        assert!(gen.forced_tokens >= 2, "{gen:?}");
        assert_eq!(gen.logprobs.len(), gen.tokens.len(), "{gen:?}");
        cut |= gen.finish_reason == FinishReason::Length;
        let rows = teacher_forced(&mut engine, &ids, &gen.tokens);
        let mut lp = Vec::new();
        for (i, ((l, row), &t)) in gen.logprobs.iter().zip(&rows).zip(&gen.tokens).enumerate() {
            assert_eq!(l.token, t, "step {i}");
            let top = toolgate::sampling::log_probs(row, 3, &mut lp);
            assert!((l.logprob - lp[t as usize]).abs() < 2e-2, "step {i}: {} vs {}", l.logprob, lp[t as usize]);
            for ((a, x), (b, y)) in l.top.iter().zip(&top) {
                assert!((x - y).abs() < 2e-2, "step {i}: top {a}:{x} vs teacher-forced {b}:{y}");
            }
        }
    }
    assert!(cut, "a budget of 9 tokens ends inside the object");
}

#[test]
fn logprobs_are_the_models_log_softmax_at_every_generated_token() {
    let mut engine = Engine::load(common::model(common::SMOLLM2), DeviceChoice::Cpu).unwrap();
    let ids = engine.tokenizer().encode_prompt("The capital of France is", false).unwrap();
    // Sampled at temperature 0.9, so chosen tokens are not always the most likely.
    let params = GenerateParams { logprobs: Some(5), ..sampled(3) };
    let g = engine.generate(&ids, &params, |_| {}).unwrap();
    assert_eq!(g.logprobs.len(), g.tokens.len());
    let rows = teacher_forced(&mut engine, &ids, &g.tokens);
    let mut lp = Vec::new();
    let mut not_top = 0;
    for (i, ((l, row), &t)) in g.logprobs.iter().zip(&rows).zip(&g.tokens).enumerate() {
        assert_eq!(l.token, t);
        let top = toolgate::sampling::log_probs(row, 5, &mut lp);
        assert!((l.logprob - lp[t as usize]).abs() < 1e-2, "step {i}: {} vs {}", l.logprob, lp[t as usize]);
        assert!(l.logprob <= 0.0);
        assert_eq!(l.top.len(), 5);
        assert!(l.top.windows(2).all(|w| w[0].1 >= w[1].1), "step {i}: not sorted {:?}", l.top);
        assert!(l.top[0].1 >= l.logprob);
        assert!(l.top.iter().map(|x| x.1.exp()).sum::<f32>() <= 1.0 + 1e-4);
        for ((a, x), (b, y)) in l.top.iter().zip(&top) {
            assert!((x - y).abs() < 1e-2, "step {i}: top {a}:{x} vs teacher-forced {b}:{y}");
        }
        not_top += usize::from(l.token != l.top[0].0);
    }
    assert!(not_top > 0, "24 tokens at temperature 0.9 should pick a runner-up at least once");

    // Greedy: the chosen token is the most likely one, every step.
    let greedy = GenerateParams { max_tokens: 12, logprobs: Some(1), ..GenerateParams::default() };
    let g = engine.generate(&ids, &greedy, |_| {}).unwrap();
    assert!(g.logprobs.iter().all(|l| l.top.len() == 1 && l.token == l.top[0].0 && l.logprob == l.top[0].1));
    // Off by default; more than 20 alternatives refused.
    assert!(engine
        .generate(&ids, &GenerateParams { max_tokens: 2, ..GenerateParams::default() }, |_| {})
        .unwrap()
        .logprobs
        .is_empty());
    let e = engine.generate(&ids, &GenerateParams { logprobs: Some(21), ..GenerateParams::default() }, |_| {});
    assert!(e.unwrap_err().to_string().contains("top_logprobs"));
}

/// `toolgate perplexity` from the command line: a text scored with `-f` and saved as a
/// base (llama.cpp's `--kl-divergence-base` format), then scored again against that base:
/// the same engine gives the same perplexity, and a KL divergence no larger than the
/// base file's 16-bit storage can hold, with the same top token everywhere.
#[test]
fn perplexity_cli_writes_a_base_and_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(&text, "The quick brown fox jumps over the lazy dog. ".repeat(40)).unwrap();
    let base = dir.path().join("base.kld");
    let run = |extra: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("perplexity")
            .arg("--model")
            .arg(common::model(common::SMOLLM2))
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let first = run(&[
        "-f".as_ref(),
        text.as_os_str(),
        "--chunk-size".as_ref(),
        "64".as_ref(),
        "--save-base".as_ref(),
        base.as_os_str(),
    ]);
    assert_eq!(
        (first["n_ctx"].as_u64(), first["scored"].as_u64()),
        (Some(64), Some(first["chunks"].as_u64().unwrap() * 31))
    );
    assert!(first["chunks"].as_u64().unwrap() >= 2 && first["ppl"].as_f64().unwrap() > 1.0, "{first}");
    let again = run(&["--kl-divergence-base".as_ref(), base.as_os_str()]);
    let kld = &again["kld"];
    assert!((again["ppl"].as_f64().unwrap() - first["ppl"].as_f64().unwrap()).abs() < 1e-9, "{again}");
    assert!(kld["mean"].as_f64().unwrap().abs() < 1e-4 && kld["same_top"].as_f64().unwrap() == 1.0, "{again}");
}
