//! Server overhead (`cargo bench --bench server`): the same chat turn through the
//! engine called directly and through the HTTP server, same process, same run.
//!
//! Two engines are loaded from the same GGUF file (SmolLM2-135M by default): one is
//! driven directly with [`prepare_text_turn`] + [`PreparedTurn::run`] (the exact calls
//! the server makes), the other serves `/v1/chat/completions` on 127.0.0.1 and is
//! driven by a streaming HTTP client (`ureq`, reading the server-sent events as they
//! arrive). Both clocks start before the request exists in the engine's terms — before
//! the render on the direct side, before the request is written on the HTTP side — and
//! time to first token (TTFT) ends at the first content delta on both. Decode speed is
//! `(completion tokens − 1) / (last event − first content)` on both sides.
//!
//! Runs alternate direct / HTTP. Every run's user message starts with its own number,
//! so neither side reuses more cached prefix than the other (both reuse the template's
//! system header, the same tokens). One unmeasured warm-up request on each side first.
//! Prints a table of medians and the overheads: the median over runs of (HTTP − direct)
//! TTFT in ms and of HTTP ÷ direct decode speed, each run paired with its twin.
//!
//! [`PreparedTurn::run`]: toolgate::engine::chat::PreparedTurn::run
//!
//! Environment: `TOOLGATE_MODELS` (model cache). Arguments: `--runs N` (default 7),
//! `--max-tokens N` (default 64), `--model FILE` (a file name in the cache).

mod common;
use common::models_dir;

use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use toolgate::engine::chat::{prepare_text_turn, ToolMode};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;
use toolgate::server::{router, AppState};
use toolgate::template::ToolFallback;
use toolgate::tools::stream::StreamEvent;

const MESSAGE: &str = "Write a short paragraph about the history of Paris.";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// One measured turn.
#[derive(Clone, Copy, Debug)]
struct Sample {
    ttft: Duration,
    decode_tps: f64,
    tokens: usize,
}

fn message(run: usize) -> Vec<Value> {
    vec![json!({"role": "user", "content": format!("Request {run}. {MESSAGE}")})]
}

fn direct(engine: &mut Engine, setup: &toolgate::template::ChatSetup, run: usize, max_tokens: usize) -> Sample {
    let params = GenerateParams { max_tokens, sampling: SamplingParams::greedy(), ..GenerateParams::default() };
    let t0 = Instant::now();
    let mut first = None;
    let turn = prepare_text_turn(engine, setup, message(run), None)
        .expect("prepare")
        .run(engine, &params, |e| {
            if matches!(e, StreamEvent::Content(ref c) if !c.is_empty()) && first.is_none() {
                first = Some(Instant::now());
            }
        })
        .expect("run");
    let end = Instant::now();
    let first = first.expect("no content");
    Sample {
        ttft: first - t0,
        decode_tps: turn.completion_tokens.saturating_sub(1) as f64 / (end - first).as_secs_f64(),
        tokens: turn.completion_tokens,
    }
}

fn over_http(base: &str, run: usize, max_tokens: usize) -> Sample {
    let body = json!({"messages": message(run), "max_tokens": max_tokens, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true}})
    .to_string();
    let t0 = Instant::now();
    let resp = ureq::post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .send(body.as_str())
        .expect("request");
    let reader = std::io::BufReader::new(resp.into_body().into_reader());
    let (mut first, mut last, mut tokens) = (None, None, 0);
    for line in reader.lines() {
        let line = line.expect("read");
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            break;
        }
        let now = Instant::now();
        let ev: Value = serde_json::from_str(data).expect("event");
        if let Some(n) = ev.pointer("/usage/completion_tokens").and_then(Value::as_u64) {
            tokens = n as usize;
            continue;
        }
        if ev.pointer("/choices/0/delta/content").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
            && first.is_none()
        {
            first = Some(now);
        }
        last = Some(now);
    }
    let (first, last) = (first.expect("no content"), last.expect("no events"));
    Sample { ttft: first - t0, decode_tps: tokens.saturating_sub(1) as f64 / (last - first).as_secs_f64(), tokens }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --benches` this runs once, short.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let runs = if smoke { 1 } else { arg("--runs").and_then(|v| v.parse().ok()).unwrap_or(7) };
    let max_tokens = if smoke { 4 } else { arg("--max-tokens").and_then(|v| v.parse().ok()).unwrap_or(64) };
    let file = arg("--model").unwrap_or_else(|| "SmolLM2-135M-Instruct.Q4_1.gguf".into());
    let path = models_dir().join(&file);
    assert!(path.exists(), "{} not found: run scripts/fetch-models", path.display());

    let mut engine = Engine::load(&path, DeviceChoice::Cpu).expect("load");
    let setup = engine.chat_setup(ToolFallback::Generic).expect("setup");
    let served = Engine::load(&path, DeviceChoice::Cpu).expect("load");
    let state = Arc::new(AppState::new(served, setup.clone(), file.clone(), ToolMode::Constrained));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            axum::serve(listener, router(state)).await.expect("serve");
        });
    });

    // Warm-up: first-use costs (page faults, allocator growth) on each side.
    direct(&mut engine, &setup, usize::MAX, max_tokens);
    over_http(&base, usize::MAX, max_tokens);
    let (mut d, mut h) = (Vec::new(), Vec::new());
    for run in 0..runs {
        d.push(direct(&mut engine, &setup, run, max_tokens));
        h.push(over_http(&base, run, max_tokens));
    }
    let ttft = |s: &[Sample]| median(s.iter().map(|x| x.ttft.as_secs_f64() * 1e3).collect());
    let tps = |s: &[Sample]| median(s.iter().map(|x| x.decode_tps).collect());
    let (dt, ht, dd, hd) = (ttft(&d), ttft(&h), tps(&d), tps(&h));
    // The overhead is the median of the paired differences (run i direct vs run i over
    // HTTP, same prompt): drift of the machine between pairs cancels out.
    let added = median(d.iter().zip(&h).map(|(a, b)| (b.ttft.as_secs_f64() - a.ttft.as_secs_f64()) * 1e3).collect());
    let ratio = median(d.iter().zip(&h).map(|(a, b)| b.decode_tps / a.decode_tps).collect());
    println!("{file}: {runs} runs, {max_tokens} tokens max, medians");
    println!("| | engine direct | through HTTP | overhead |");
    println!("|---|---|---|---|");
    println!("| time to first token | {dt:.1} ms | {ht:.1} ms | {added:+.1} ms |");
    println!("| decode | {dd:.1} tok/s | {hd:.1} tok/s | {ratio:.3}× |");
    println!(
        "{}",
        json!({"model": file, "runs": runs, "ttft_direct_ms": dt, "ttft_http_ms": ht, "ttft_added_ms": added,
            "decode_direct_tps": dd, "decode_http_tps": hd, "decode_ratio": ratio,
            "tokens": d.iter().map(|x| x.tokens).collect::<Vec<_>>(),
            "tokens_http": h.iter().map(|x| x.tokens).collect::<Vec<_>>()})
    );
    for (a, b) in d.iter().zip(&h) {
        assert_eq!(a.tokens, b.tokens, "greedy turns differ between the two sides");
    }
}
