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

/// A request of a few hundred tokens (an agent's system prompt and tool list are
/// longer still): long enough that its prefill crosses every row-count threshold a
/// kernel path could depend on.
const LONG_PROMPT: &str = "You are a careful assistant. You can call these tools: get_weather(city, unit) \
returns the current weather; search_flights(origin, destination, date) lists flights; \
convert_currency(amount, from, to) converts money; get_time(timezone) tells the time. \
Answer briefly and call a tool only when it helps. The user asks: I fly from Paris to \
Tokyo next Tuesday and want to know the weather there, the flight options, and how many \
yen I get for 500 euros. Plan the steps first, then answer. Step one:";

/// One step's chosen token, its log-probability's bits and the top alternatives'.
type StepBits = (u32, u32, Vec<(u32, u32)>);

/// Each step's log-probabilities, bit for bit (a rounding difference anywhere in the
/// forward pass shows here before it flips a token).
fn logprob_bits(g: &toolgate::engine::Generation) -> Vec<StepBits> {
    g.logprobs
        .iter()
        .map(|l| (l.token, l.logprob.to_bits(), l.top.iter().map(|t| (t.0, t.1.to_bits())).collect()))
        .collect()
}

/// At temperature 0 a request gives the same tokens — and the same log-probabilities,
/// bit for bit — however it runs: prefilled whole, prefilled after its prefix came
/// from the cache (and streamed), or inside a batch of four concurrent sequences. Each
/// matmul computes a row the same way whatever the number of rows beside it (tiles or
/// per-row kernels, blocks summed in file order) and attention is per row, so nothing
/// depends on chunking or batching. (On CPUs without AVX2, and for F16/BF16/MXFP4/
/// IQ4_NL weights without AVX-512, prefill takes an f32 GEMM and this does not hold;
/// the test models are Q4_1 and Q4_K_M.)
#[test]
fn answers_do_not_depend_on_prefix_cache_or_batch() {
    assert_ne!(
        toolgate::kernels::Isa::detect(),
        toolgate::kernels::Isa::Portable,
        "needs the AVX2, AVX-512 or NEON dotprod kernels (this CPU has none of them, or TOOLGATE_ISA=portable): \
         the portable kernels prefill through an f32 GEMM, which is not batch-invariant"
    );
    for file in [common::SMOLLM2, common::GEMMA3] {
        let mut engine = Engine::load(common::model(file), DeviceChoice::Cpu).unwrap();
        let fresh = GenerateParams { reuse_prefix: false, logprobs: Some(2), ..params(24) };
        let want = engine.generate_text(LONG_PROMPT, &fresh, |_| {}).unwrap();
        assert!(want.prompt_tokens >= 100, "{file}: prompt of {} tokens", want.prompt_tokens);

        // A shorter turn first, then the whole request on top of its cached prefix,
        // streamed token by token.
        let head = &LONG_PROMPT[..LONG_PROMPT.len() / 2];
        engine.generate_text(head, &params(4), |_| {}).unwrap();
        let mut streamed = String::new();
        let reuse = GenerateParams { reuse_prefix: true, ..fresh.clone() };
        let cached = engine.generate_text(LONG_PROMPT, &reuse, |piece| streamed.push_str(piece)).unwrap();
        assert!(cached.cached_tokens >= 20, "{file}: only {} tokens came from the cache", cached.cached_tokens);
        assert_eq!(cached.tokens, want.tokens, "{file}: a cached prefix changed the answer");
        assert!(logprob_bits(&cached) == logprob_bits(&want), "{file}: a cached prefix changed the log-probabilities");
        assert_eq!(streamed, cached.text, "{file}: the stream differs from the answer");

        // The same request inside a batch of four (three other prompts beside it).
        let (engines, stats) = engine.into_batched(4).unwrap();
        let prompts = [LONG_PROMPT, PROMPTS[0], PROMPTS[1], PROMPTS[2]];
        let got: Vec<toolgate::engine::Generation> = std::thread::scope(|s| {
            let hs: Vec<_> = engines
                .into_iter()
                .zip(prompts)
                .map(|(mut e, p)| {
                    let fresh = fresh.clone();
                    s.spawn(move || e.generate_text(p, &fresh, |_| {}).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(got[0].tokens, want.tokens, "{file}: the batch changed the answer");
        assert!(logprob_bits(&got[0]) == logprob_bits(&want), "{file}: the batch changed the log-probabilities");
        assert!(stats.widest() >= 2, "{file}: nothing ran batched: {stats:?}");
    }
}
