//! The sampling pipeline: greedy, masks, seeds, truncation and penalties.

use toolgate::grammar::TokenMask;
use toolgate::sampling::{Sampler, SamplingParams};
use toolgate::Error;

fn params(temperature: f32) -> SamplingParams {
    SamplingParams { temperature, ..SamplingParams::greedy() }
}

#[test]
fn greedy_is_argmax_and_respects_the_mask() {
    let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
    assert_eq!(s.sample(&mut [0.0, 3.0, 1.0, 2.9], None).unwrap(), 1);
    let mut mask = TokenMask::new(4);
    mask.allow(0);
    mask.allow(3);
    assert_eq!(mask.count(), 2);
    assert_eq!(s.sample(&mut [0.0, 3.0, 1.0, 2.9], Some(&mask)).unwrap(), 3);
    let empty = TokenMask::new(4);
    assert!(matches!(s.sample(&mut [0.0; 4], Some(&empty)), Err(Error::InvalidParameter { name: "mask", .. })));
    let all = TokenMask::all(70);
    assert_eq!(all.count(), 70);
    assert!(!all.is_allowed(70));
}

#[test]
fn masked_tokens_are_never_sampled_at_any_temperature() {
    let mut s = Sampler::new(SamplingParams { seed: 7, ..params(2.0) }).unwrap();
    let mut mask = TokenMask::new(50);
    for id in (0..50).step_by(7) {
        mask.allow(id);
    }
    for _ in 0..2000 {
        let mut logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let t = s.sample(&mut logits, Some(&mask)).unwrap();
        assert!(mask.is_allowed(t));
    }
}

#[test]
fn same_seed_same_tokens_different_seed_different_tokens() {
    let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.1).cos()).collect();
    let draw = |seed| {
        let mut s = Sampler::new(SamplingParams { seed, ..params(1.0) }).unwrap();
        (0..200).map(|_| s.sample(&mut logits.clone(), None).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
}

#[test]
fn temperature_one_draws_follow_the_softmax() {
    let logits = vec![2.0f32, 1.0, 0.0, -1.0];
    let z: f32 = logits.iter().map(|l| l.exp()).sum();
    let expected: Vec<f32> = logits.iter().map(|l| l.exp() / z).collect();
    let mut s = Sampler::new(SamplingParams { seed: 3, ..params(1.0) }).unwrap();
    let n = 40_000;
    let mut counts = [0usize; 4];
    for _ in 0..n {
        counts[s.sample(&mut logits.clone(), None).unwrap() as usize] += 1;
    }
    for (c, e) in counts.iter().zip(&expected) {
        let f = *c as f32 / n as f32;
        assert!((f - e).abs() < 0.01, "frequency {f} vs probability {e}");
    }
}

#[test]
fn top_k_top_p_min_p_truncate() {
    let logits = vec![5.0f32, 4.9, 0.0, -1.0, -2.0];
    let check = |p: SamplingParams, allowed: &[u32]| {
        let mut s = Sampler::new(p).unwrap();
        for _ in 0..500 {
            let t = s.sample(&mut logits.clone(), None).unwrap();
            assert!(allowed.contains(&t), "{t} not in {allowed:?}");
        }
    };
    check(SamplingParams { top_k: 1, ..params(5.0) }, &[0]);
    check(SamplingParams { top_k: 2, ..params(5.0) }, &[0, 1]);
    check(SamplingParams { top_p: 0.1, ..params(1.0) }, &[0]);
    check(SamplingParams { min_p: 0.5, ..params(1.0) }, &[0, 1]);
    check(SamplingParams { min_p: 1.0, ..params(1.0) }, &[0]);
}

#[test]
fn penalties_push_down_seen_tokens() {
    let mut s = Sampler::new(SamplingParams { repeat_penalty: 2.0, ..SamplingParams::greedy() }).unwrap();
    s.accept(0);
    // 3.0 / 2 = 1.5 < 2.0
    assert_eq!(s.sample(&mut [3.0, 2.0], None).unwrap(), 1);
    let mut s = Sampler::new(SamplingParams { frequency_penalty: 0.5, ..SamplingParams::greedy() }).unwrap();
    s.accept(0);
    s.accept(0);
    assert_eq!(s.sample(&mut [2.5, 2.0], None).unwrap(), 1); // 2.5 - 2×0.5 = 1.5
    let mut s = Sampler::new(SamplingParams { presence_penalty: 0.4, ..SamplingParams::greedy() }).unwrap();
    s.accept(0);
    s.accept(0);
    assert_eq!(s.sample(&mut [2.3, 2.0], None).unwrap(), 1); // 2.3 - 0.4 = 1.9
}

#[test]
fn invalid_parameters_are_rejected_by_name() {
    for (p, name) in [
        (SamplingParams { temperature: -1.0, ..SamplingParams::greedy() }, "temperature"),
        (SamplingParams { temperature: f32::NAN, ..SamplingParams::greedy() }, "temperature"),
        (SamplingParams { top_p: 0.0, ..SamplingParams::greedy() }, "top_p"),
        (SamplingParams { min_p: 1.5, ..SamplingParams::greedy() }, "min_p"),
        (SamplingParams { repeat_penalty: 0.0, ..SamplingParams::greedy() }, "repeat_penalty"),
        (SamplingParams { presence_penalty: 3.0, ..SamplingParams::greedy() }, "presence_penalty"),
    ] {
        match Sampler::new(p) {
            Err(Error::InvalidParameter { name: n, .. }) => assert_eq!(n, name),
            other => panic!("expected {name} to be rejected, got {other:?}"),
        }
    }
}

/// The nucleus by a full sort: the most likely tokens (ties by lower id) until their
/// probability reaches `top_p`.
fn nucleus(logits: &[f32], temperature: f32, top_p: f32) -> Vec<u32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut w: Vec<(u32, f32)> =
        logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l - max) / temperature).exp())).collect();
    let total: f32 = w.iter().map(|x| x.1).sum();
    w.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut acc = 0.0;
    let k = w.iter().position(|x| {
        acc += x.1;
        acc >= top_p * total
    });
    w.truncate(k.map_or(w.len(), |k| k + 1));
    w.into_iter().map(|x| x.0).collect()
}

#[test]
fn top_p_over_a_large_vocabulary_keeps_exactly_the_nucleus() {
    // A peaked head over a long flat tail (the tail alone holds most of the mass, so the
    // ranking must reach below the first floor), a smooth spread, and a flat vocabulary.
    let mut tail = vec![-7.0f32; 10_000];
    tail[17] = 0.0;
    let spread: Vec<f32> = (0..50_000).map(|i| ((i * 7919) % 1000) as f32 / 100.0).collect();
    let flat = vec![1.0f32; 1000];
    for (name, logits, top_p) in [("tail", &tail, 0.5), ("spread", &spread, 0.9), ("flat", &flat, 0.5)] {
        let want: std::collections::HashSet<u32> = nucleus(logits, 1.0, top_p).into_iter().collect();
        let mut s = Sampler::new(SamplingParams { top_p, seed: 5, ..params(1.0) }).unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3000 {
            let t = s.sample(&mut logits.clone(), None).unwrap();
            assert!(want.contains(&t), "{name}: {t} is outside the nucleus of {} tokens", want.len());
            seen.insert(t);
        }
        // Draws spread over the nucleus, not stuck on its head.
        assert!(
            seen.len() * 4 >= want.len().min(3000),
            "{name}: {} of {} nucleus tokens drawn",
            seen.len(),
            want.len()
        );
    }
}
