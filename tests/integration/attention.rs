//! The fused CPU attention kernel against a plain f64 reference.
//!
//! Random q/k/v in strided views shaped like a KV cache (capacity larger than the
//! cached keys, keys starting past position 0 for sliding windows), grouped-query head
//! ratios 1, 3 and 4, one query (decode) and many (prefill, large enough to run on the
//! thread pool), with and without a window. Tolerance: `1e-5 · (1 + |ref|)` per output,
//! float rounding only (a wrong head mapping, mask edge or softmax errs by ~0.1–1).

use toolgate::kernels::attention::{attention, AttentionShape, Strided};

/// A small deterministic generator (xorshift), values in [-1, 1).
struct Rand(u64);

impl Rand {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }
}

/// `(heads, rows, width)` stored with `cap` rows per head, the view starting at row `skip`.
struct Cache {
    data: Vec<f32>,
    cap: usize,
    width: usize,
    skip: usize,
}

impl Cache {
    fn new(r: &mut Rand, heads: usize, cap: usize, width: usize, skip: usize) -> Self {
        Self { data: r.vec(heads * cap * width), cap, width, skip }
    }
    fn view(&self) -> Strided<'_> {
        Strided {
            data: &self.data[self.skip * self.width..],
            head_stride: self.cap * self.width,
            row_stride: self.width,
        }
    }
    fn at(&self, h: usize, row: usize) -> &[f32] {
        let a = h * self.cap * self.width + (self.skip + row) * self.width;
        &self.data[a..a + self.width]
    }
}

fn reference(s: &AttentionShape, q: &Cache, k: &Cache, v: &Cache) -> Vec<f64> {
    let n_rep = s.n_head / s.n_kv_head;
    let mut out = vec![0f64; s.queries * s.n_head * s.v_head_dim];
    for i in 0..s.queries {
        let qp = s.pos + i;
        for h in 0..s.n_head {
            let kvh = h / n_rep;
            let visible: Vec<usize> = (0..s.keys)
                .filter(|&j| {
                    let kp = s.first_key + j;
                    kp <= qp && s.window.is_none_or(|w| qp - kp < w)
                })
                .collect();
            let scores: Vec<f64> = visible
                .iter()
                .map(|&j| {
                    let d: f64 = q.at(h, i).iter().zip(k.at(kvh, j)).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let d = d * s.scale as f64;
                    match s.softcap {
                        Some(c) => c as f64 * (d / c as f64).tanh(),
                        None => d,
                    }
                })
                .collect();
            let sink = s.sinks.map(|z| z[h] as f64);
            let max = scores.iter().cloned().fold(sink.unwrap_or(f64::NEG_INFINITY), f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum::<f64>() + sink.map_or(0.0, |z| (z - max).exp());
            let o = &mut out[(i * s.n_head + h) * s.v_head_dim..][..s.v_head_dim];
            for (p, &j) in e.iter().zip(&visible) {
                for (oc, vc) in o.iter_mut().zip(v.at(kvh, j)) {
                    *oc += p / sum * *vc as f64;
                }
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn check(n_head: usize, n_kv_head: usize, d: usize, dv: usize, t: usize, pos: usize, window: Option<usize>) {
    check_capped(n_head, n_kv_head, d, dv, t, pos, window, None, false)
}

#[allow(clippy::too_many_arguments)]
fn check_capped(
    n_head: usize,
    n_kv_head: usize,
    d: usize,
    dv: usize,
    t: usize,
    pos: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    with_sinks: bool,
) {
    let mut r = Rand(0x9E37_79B9_7F4A_7C15 ^ (n_head * 1000 + t * 10 + pos) as u64);
    let total = pos + t;
    // Keys before every query's window are dropped, as the decoder does.
    let first_key = match window {
        Some(w) if pos + 1 > w => pos + 1 - w,
        _ => 0,
    };
    let cap = total + 7;
    // Sink logits around the scores' size (some above, some below).
    let sinks = with_sinks.then(|| r.vec(n_head).iter().map(|z| z * 2.0).collect::<Vec<f32>>());
    let s = AttentionShape {
        n_head,
        n_kv_head,
        head_dim: d,
        v_head_dim: dv,
        queries: t,
        pos,
        first_key,
        keys: total - first_key,
        window,
        scale: 1.0 / (d as f32).sqrt(),
        softcap,
        sinks: sinks.as_deref(),
    };
    let q = Cache::new(&mut r, n_head, t, d, 0);
    let k = Cache::new(&mut r, n_kv_head, cap, d, first_key);
    let v = Cache::new(&mut r, n_kv_head, cap, dv, first_key);
    let mut out = vec![f32::NAN; t * n_head * dv];
    attention(&s, q.view(), k.view(), v.view(), &mut out).unwrap();
    let want = reference(&s, &q, &k, &v);
    for (idx, (got, want)) in out.iter().zip(&want).enumerate() {
        let err = (*got as f64 - want).abs();
        assert!(err <= 1e-5 * (1.0 + want.abs()), "{s:?}: output {idx}: {got} vs {want} (error {err:e})");
    }
    // The same keys and values stored as f16 (an f16 KV cache) give the bits of f32
    // keys and values holding the f16-rounded numbers: the widening is exact.
    let halves = |c: &Cache| c.data.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>();
    let (kh, vh) = (halves(&k), halves(&v));
    let rounded = |c: &Cache, h: &[half::f16]| Cache { data: h.iter().map(|x| x.to_f32()).collect(), ..*c };
    let (kr, vr) = (rounded(&k, &kh), rounded(&v, &vh));
    fn half_view<'a>(c: &Cache, h: &'a [half::f16]) -> Strided<'a, half::f16> {
        Strided { data: &h[c.skip * c.width..], head_stride: c.cap * c.width, row_stride: c.width }
    }
    let (mut from_f16, mut from_f32) = (vec![f32::NAN; out.len()], vec![f32::NAN; out.len()]);
    attention(&s, q.view(), half_view(&k, &kh), half_view(&v, &vh), &mut from_f16).unwrap();
    attention(&s, q.view(), kr.view(), vr.view(), &mut from_f32).unwrap();
    assert!(
        from_f16.iter().zip(&from_f32).all(|(a, b)| a.to_bits() == b.to_bits()),
        "{s:?}: f16 keys and values differ from their f32 widening"
    );
}

#[test]
fn decode_matches_reference() {
    for (h, kv) in [(1, 1), (9, 3), (4, 1), (8, 2)] {
        for pos in [0, 1, 5, 130] {
            check(h, kv, 64, 64, 1, pos, None);
        }
    }
}

#[test]
fn prefill_matches_reference() {
    // Large enough (t · heads · keys · width) to run on the thread pool.
    check(9, 3, 64, 64, 70, 0, None);
    check(8, 2, 32, 48, 33, 40, None);
    check(4, 1, 256, 256, 17, 3, None);
    // Seven query heads per key head (Qwen2.5's 14 over 2), scored up to three at a
    // time, and a width past the last 16-lane step.
    check(14, 2, 40, 24, 9, 5, None);
}

#[test]
fn sliding_window_matches_reference() {
    for (t, pos) in [(1, 0), (1, 9), (1, 40), (12, 0), (12, 30), (64, 100)] {
        check(4, 1, 32, 32, t, pos, Some(10));
    }
}

/// Gemma 2's soft-capped scores (a cap small enough to bend them), decode and prefill.
#[test]
fn soft_capped_scores_match_reference() {
    check_capped(4, 2, 32, 32, 1, 9, None, Some(0.7), false);
    check_capped(8, 2, 64, 64, 40, 0, Some(16), Some(0.7), false);
}

/// gpt-oss's attention sinks (a per-head logit in the denominator), decode and
/// prefill, with a window as gpt-oss's windowed layers have.
#[test]
fn attention_sinks_match_reference() {
    check_capped(4, 2, 32, 32, 1, 9, None, None, true);
    check_capped(8, 2, 64, 64, 40, 0, Some(16), None, true);
    check_capped(8, 8, 64, 64, 1, 0, None, None, true);
}

#[test]
fn bad_shapes_are_errors() {
    let s = AttentionShape {
        n_head: 3,
        n_kv_head: 2,
        head_dim: 4,
        v_head_dim: 4,
        queries: 1,
        pos: 0,
        first_key: 0,
        keys: 1,
        window: None,
        scale: 1.0,
        softcap: None,
        sinks: None,
    };
    let z = [0f32; 64];
    let view = |n: usize| Strided { data: &z[..n], head_stride: 4, row_stride: 4 };
    let mut out = [0f32; 12];
    // Heads that do not divide.
    assert!(attention(&s, view(12), view(8), view(8), &mut out).is_err());
    let s = AttentionShape { n_head: 2, n_kv_head: 1, ..s };
    let mut out = [0f32; 8];
    assert!(attention(&s, view(8), view(4), view(4), &mut out).is_ok());
    // A view shorter than its shape.
    assert!(attention(&s, view(7), view(4), view(4), &mut out).is_err());
    // Output of the wrong length.
    assert!(attention(&s, view(8), view(4), view(4), &mut out[..7]).is_err());
    // A query whose own position is not among the keys.
    let late = AttentionShape { pos: 3, ..s };
    assert!(attention(&late, view(8), view(4), view(4), &mut out).is_err());
    // Sinks not one per query head.
    let one_sink = AttentionShape { sinks: Some(&[0.5]), ..s };
    assert!(attention(&one_sink, view(8), view(4), view(4), &mut out).is_err());
}

/// A query's output is bit-for-bit the same computed alone (decode), inside a prefill
/// chunk of any length, or from a later first position: the kernel cuts a call into
/// blocks of rows, and no row's arithmetic may depend on the cut. Covers a head
/// ratio that does not divide the block size (7, Qwen2.5's), a window, odd widths
/// (a masked or scalar last step), and soft-capping.
#[test]
fn a_query_gets_the_same_bits_in_any_call() {
    for (n_head, n_kv, d, window, softcap) in
        [(14, 2, 64, None, None), (4, 1, 72, Some(20), None), (9, 3, 40, None, Some(0.7)), (8, 8, 256, None, None)]
    {
        let (pos, t) = (45, 60);
        let total = pos + t;
        let mut r = Rand(0x5EED ^ (n_head * 31 + d) as u64);
        let q = Cache::new(&mut r, n_head, total, d, 0);
        let k = Cache::new(&mut r, n_kv, total, d, 0);
        let v = Cache::new(&mut r, n_kv, total, d, 0);
        let shape = |first: usize, queries: usize| AttentionShape {
            n_head,
            n_kv_head: n_kv,
            head_dim: d,
            v_head_dim: d,
            queries,
            pos: first,
            first_key: 0,
            keys: first + queries,
            window,
            scale: 1.0 / (d as f32).sqrt(),
            softcap,
            sinks: None,
        };
        // Queries `first..first + n` of q (their rows start at row `first` of each head).
        let run = |first: usize, n: usize| {
            let qv = Strided { data: &q.data[first * d..], head_stride: total * d, row_stride: d };
            let mut out = vec![0f32; n * n_head * d];
            attention(&shape(first, n), qv, k.view(), v.view(), &mut out).unwrap();
            out
        };
        let whole = run(pos, t);
        let row = n_head * d;
        for (first, n) in [(pos, 1), (pos + 7, 1), (pos + t - 1, 1), (pos + 3, 5), (pos + 10, 33)] {
            let part = run(first, n);
            let at = (first - pos) * row;
            assert!(part == whole[at..at + n * row], "{n_head}/{n_kv} heads, d {d}: queries {first}..+{n} differ");
        }
    }
}

/// The KV cache's direct-write path (what the CUDA decode step uses): `reserve` makes
/// room without appending and keeps what was cached, `set_len` counts a position
/// written into `buffers`, and a later `append` continues after it.
#[test]
fn kv_cache_reserve_then_append_keeps_positions() {
    use candle_core::{DType, Device, Tensor};
    use toolgate::model::kv_cache::KvCache;
    let dev = Device::Cpu;
    let row = |x: f32, w: usize| Tensor::full(x, (1, 2, 1, w), &dev).unwrap();
    let mut cache = KvCache::new(DType::F32);
    assert!(cache.buffers().is_none());
    cache.append(&row(1.0, 4), &row(10.0, 3)).unwrap();
    cache.reserve(300, (2, 4, 3), &dev).unwrap(); // regrows past the first 256
    let (k, v) = cache.buffers().unwrap();
    assert_eq!((k.dims(), v.dims()), (&[1, 2, 512, 4][..], &[1, 2, 512, 3][..]));
    assert_eq!(cache.len(), 1, "reserve appends nothing");
    // Position 1 written in place, as the CUDA kernel does.
    k.slice_set(&row(2.0, 4), 2, 1).unwrap();
    v.slice_set(&row(20.0, 3), 2, 1).unwrap();
    cache.set_len(2);
    let (k, v) = cache.append(&row(3.0, 4), &row(30.0, 3)).unwrap();
    let firsts = |t: &Tensor| {
        t.narrow(1, 0, 1).unwrap().narrow(3, 0, 1).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    assert_eq!(firsts(&k), [1.0, 2.0, 3.0]);
    assert_eq!(firsts(&v), [10.0, 20.0, 30.0]);
    cache.set_len(10_000);
    assert_eq!(cache.len(), 512, "set_len stops at the capacity");
}
