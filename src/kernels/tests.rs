// The CPU kernels against candle's reference on random blocks of every weight type.
//
// For each type a random `(n, k)` matrix is quantized by candle (`QTensor::quantize`),
// and for several activation row counts (covering the 4-row groups, the 16-row tiles
// and their tails, and the f32 GEMM path of `kernels::f32_path`) toolgate's matmul is
// compared, with every instruction set the CPU runs (`Isa::available`: portable,
// AVX2, AVX-512), to:
//
// 1. **exact reference** — candle's dequantized weights times the very activations
//    the kernels use (8-bit `d·q`, or the f32 ones on the GEMM path), summed in f64. Only float rounding separates
//    the two: tolerance `1e-4 · ‖w_j‖ · rms(x_r)`, i.e. 10⁻⁴ of a typical output.
// 2. **f32 reference** — candle's dequantize-then-matmul on the unquantized
//    activations. The 8-bit activation rounding adds an error of about
//    `0.006 · ‖w_j‖ · rms(x_r)` (rms; the largest of the ~2,500 outputs per type seen
//    here is 0.026); tolerance `0.06 · ‖w_j‖ · rms(x_r)`. (A wrong nibble order or
//    scale errs by the size of the output itself, ~1.)
//
// The types candle cannot quantize (IQ4_NL, IQ4_XS, MXFP4) take their reference from
// llama.cpp itself: `tests/fixtures/kernels.ggml.json` holds rows quantized by ggml's
// `ggml_quantize_chunk` and ggml's own dequantization of them
// (`scripts/make-kernel-fixtures.py`); toolgate's decoding must equal it bit for bit.

use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};

use crate::kernels::activation::{quantize_256, quantize_32, Q8x256, Q8x32};
use crate::kernels::formats::ActKind;
use crate::kernels::formats::{bf16_bits, dequantize_row, to_q8_0};
use crate::kernels::tiles::tiled;
use crate::kernels::{bf16_path, f32_path, float_tiles_path, Isa, QWeight, WeightType};

/// A JSON fixture of `tests/fixtures` (`TOOLGATE_FIXTURES`: a copy elsewhere).
fn fixture(name: &str) -> serde_json::Value {
    let dir = std::env::var("TOOLGATE_FIXTURES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"));
    let p = dir.join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()));
    serde_json::from_str(&text).expect("fixture json")
}

/// `x` after the kernels' 8-bit round trip.
fn requantized(ty: WeightType, x: &[f32]) -> Vec<f32> {
    match ty.act_kind() {
        ActKind::Floats => x.to_vec(),
        ActKind::Blocks32 => {
            let mut b = vec![Q8x32::ZERO; x.len() / 32];
            quantize_32(x, &mut b);
            b.iter().flat_map(|b| b.qs.iter().map(move |&q| b.d * q as f32)).collect()
        }
        ActKind::Blocks256 => {
            let mut b = vec![Q8x256::ZERO; x.len() / 256];
            quantize_256(x, &mut b);
            b.iter().flat_map(|b| b.qs.iter().map(move |&q| b.d * q as f32)).collect()
        }
    }
}

// 337 weight rows: several GEMM tiles and pool tasks, with a ragged last tile.
const N: usize = 337;
const K: usize = 512;

/// A random `(N, K)` weight quantized by candle, and candle's dequantization of it.
fn check_type(ty: WeightType) {
    let dev = Device::Cpu;
    let w = (Tensor::randn(0f32, 1.0, (N, K), &dev).unwrap() * 0.1).unwrap();
    let qt = QTensor::quantize(&w, ty.to_candle().expect("candle quantizes this type")).unwrap();
    let deq: Vec<f32> = qt.dequantize(&dev).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let qw = QWeight::from_qtensor(&qt).unwrap().expect("type has a kernel");
    assert_eq!(qw.weight_type(), ty);

    // dequantize_row agrees with candle's dequantize.
    let mut row = vec![0f32; K];
    for j in [0, N / 2, N - 1] {
        qw.dequantize_row(j, &mut row).unwrap();
        for (a, b) in row.iter().zip(&deq[j * K..(j + 1) * K]) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{}: dequantized {a} vs candle {b}", ty.name());
        }
    }
    check_matmul(&qw, &deq, &block_mins(ty, &qt.data().unwrap()));
}

/// The minimum `m` (`w = q·d + m`) of every block of Q4_1 or Q5_1 weights `bytes`, in
/// order; empty for other types. The kernels multiply it by the activations' `s_min`
/// (ggml's `block_q8_1::s`, rounded to f16), not by their exact sum.
fn block_mins(ty: WeightType, bytes: &[u8]) -> Vec<f32> {
    if !matches!(ty, WeightType::Q4_1 | WeightType::Q5_1) {
        return Vec::new();
    }
    let m = |b: &[u8]| half::f16::from_le_bytes([b[2], b[3]]).to_f32();
    bytes.chunks_exact(ty.block_bytes()).map(m).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Rows quantized by llama.cpp (ggml) and ggml's dequantization of them, repeated to
/// `N` rows: toolgate's decoding equals ggml's exactly, and the matmul is checked as
/// for the other types.
fn check_ggml_fixture(ty: WeightType) {
    let fx = fixture("kernels.ggml.json");
    let (rows, k) = (fx["rows"].as_u64().unwrap() as usize, fx["k"].as_u64().unwrap() as usize);
    assert_eq!(k, K);
    let t = &fx["types"][ty.name().to_uppercase()];
    assert_eq!(t["ggml_type"].as_u64(), Some(u64::from(ty.ggml_id())));
    let bytes = unhex(t["bytes"].as_str().unwrap());
    let ggml: Vec<f32> = unhex(t["dequantized"].as_str().unwrap())
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let row_bytes = bytes.len() / rows;
    let qw = QWeight::new(ty, bytes.clone(), rows, k).unwrap();
    let mut row = vec![0f32; k];
    for j in 0..rows {
        qw.dequantize_row(j, &mut row).unwrap();
        for (i, (a, b)) in row.iter().zip(&ggml[j * k..(j + 1) * k]).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{} row {j} weight {i}: {a} vs ggml {b}", ty.name());
        }
    }
    let big: Vec<u8> = (0..N).flat_map(|j| bytes[(j % rows) * row_bytes..][..row_bytes].iter().copied()).collect();
    let deq: Vec<f32> = (0..N).flat_map(|j| ggml[(j % rows) * k..][..k].iter().copied()).collect();
    check_matmul(&QWeight::new(ty, big, N, K).unwrap(), &deq, &[]);
}

/// The kernels' matmul of `qw` (`N × K`, dequantized: `deq`; Q4_1 and Q5_1 with the
/// blocks' minimums `mins`, [`block_mins`]) against the exact and the f32 references,
/// for several activation row counts and both kernel sets.
fn check_matmul(qw: &QWeight, deq: &[f32], mins: &[f32]) {
    let (dev, ty, n, k) = (Device::Cpu, qw.weight_type(), N, K);

    for m in [1, 2, 3, 4, 5, 17, 33] {
        let x: Vec<f32> = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let mut worst_exact = 0f64;
        let mut worst_f32 = 0f64;
        for isa in Isa::available() {
            let mut y = vec![0f32; m * n];
            qw.matmul_with(isa, &x, &mut y).unwrap();
            for r in 0..m {
                let xr = &x[r * k..(r + 1) * k];
                // The f32 path multiplies the activations as they are, the BF16 path
                // rounded to BF16.
                let xq = if bf16_path(isa, ty, m) {
                    xr.iter().map(|&v| f32::from_bits(u32::from(bf16_bits(v)) << 16)).collect()
                } else if f32_path(isa, ty, m) {
                    xr.to_vec()
                } else {
                    requantized(ty, xr)
                };
                // Each block's minimum meets the 8-bit activations' rounded sum (`s_min`).
                let eight_bit = !bf16_path(isa, ty, m) && !f32_path(isa, ty, m);
                let mut blocks = vec![Q8x32::ZERO; if eight_bit && !mins.is_empty() { k / 32 } else { 0 }];
                quantize_32(xr, &mut blocks);
                let rms = (xr.iter().map(|v| (v * v) as f64).sum::<f64>() / k as f64).sqrt();
                for j in 0..n {
                    let wr = &deq[j * k..(j + 1) * k];
                    let norm = wr.iter().map(|v| (v * v) as f64).sum::<f64>().sqrt();
                    let min_rounding: f64 = blocks
                        .iter()
                        .zip(mins.get(j * k / 32..).unwrap_or(&[]))
                        .map(|(a, &m)| m as f64 * (a.s_min as f64 - a.s as f64))
                        .sum();
                    let exact: f64 = wr.iter().zip(&xq).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() + min_rounding;
                    let full: f64 = wr.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let got = y[r * n + j] as f64;
                    let scale = norm * rms;
                    let (e1, e2) = ((got - exact).abs() / scale, (got - full).abs() / scale);
                    assert!(
                        e1 <= 1e-4,
                        "{} {isa:?} m={m} row {r} col {j}: {got} vs exact {exact} (error {e1:.2e} of a typical output)",
                        ty.name()
                    );
                    assert!(
                        e2 <= 0.06,
                        "{} {isa:?} m={m} row {r} col {j}: {got} vs f32 {full} (error {e2:.2e} of a typical output)",
                        ty.name()
                    );
                    worst_exact = worst_exact.max(e1);
                    worst_f32 = worst_f32.max(e2);
                }
            }
        }
        eprintln!("{:5} m={m:2}: worst error vs exact {worst_exact:.1e}, vs f32 {worst_f32:.1e}", ty.name());
    }
}

#[test]
fn f16() {
    check_type(WeightType::F16);
}

#[test]
fn bf16() {
    check_type(WeightType::BF16);
}

/// F16 and BF16 weights at prefill size (the AVX2 and AVX-512 float kernels where the
/// CPU has them, else the portable f32 GEMM), with rows whose length is no multiple of 16 or 32 (the
/// kernels' steps: the last step loads masked), longer than a widened panel's slice
/// (1000 > 512), row counts that leave partial register tiles, and more weight rows
/// than one panel holds (1100 > 512): each output equals the sum of the products, in
/// f64, of the weights and the activations as the path takes them (the BF16 dot
/// products round them to BF16). On the float kernels the first 32 rows come out bit
/// for bit the same when they are multiplied alone.
#[test]
fn float_prefill_rows_of_any_length() {
    for (k, m, n) in
        [(1usize, 32usize, 5usize), (15, 33, 4), (31, 33, 7), (33, 37, 9), (70, 40, 6), (100, 45, 11), (1000, 45, 1100)]
    {
        // Multiples of 1/64 below 1: exact in F16 and BF16.
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0).collect();
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 53 % 97) as f32 - 48.0) / 7.0).collect();
        let f16: Vec<u8> = w.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        let bf16: Vec<u8> = w.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
        for (ty, bytes) in [(WeightType::F16, f16), (WeightType::BF16, bf16)] {
            let qw = QWeight::new(ty, bytes, n, k).unwrap();
            for isa in Isa::available() {
                let mut y = vec![0f32; m * n];
                qw.matmul_with(isa, &x, &mut y).unwrap();
                if float_tiles_path(isa, ty, 32) {
                    let mut first = vec![0f32; 32 * n];
                    qw.matmul_with(isa, &x[..32 * k], &mut first).unwrap();
                    let same = first.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{} {isa:?} k={k}: 32 rows alone differ from the same rows among {m}", ty.name());
                }
                let rounded = bf16_path(isa, ty, m);
                for r in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k)
                            .map(|i| {
                                let xv = x[r * k + i];
                                let xv = if rounded { f32::from_bits(u32::from(bf16_bits(xv)) << 16) } else { xv };
                                f64::from(w[j * k + i]) * f64::from(xv)
                            })
                            .sum();
                        let got = f64::from(y[r * n + j]);
                        assert!(
                            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "{} {isa:?} k={k} m={m} ({r}, {j}): {got} vs {want} (tiles: {})",
                            ty.name(),
                            float_tiles_path(isa, ty, m)
                        );
                    }
                }
            }
        }
    }
}

/// Decode (one activation row) of F16/BF16 weights walks several runs of weight rows
/// at once on AVX2 and AVX-512 (`kernels::matmul`'s lanes); each output is still the
/// value the row kernel gives it in a batch of two rows, bit for bit, and the exact
/// sum: row counts that leave rows over after the runs (and runs of one row), row
/// lengths with SIMD tails, on every instruction set here.
#[test]
fn float_decode_lanes_give_the_row_kernel_bits() {
    for (n, k) in [(3usize, 64usize), (4, 16), (45, 70), (200, 33), (1030, 160)] {
        // Multiples of 1/64 below 1: exact in F16 and BF16; sums exact in f32.
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0).collect();
        let x: Vec<f32> = (0..2 * k).map(|i| ((i * 53 % 97) as f32 - 48.0) / 8.0).collect();
        let f16: Vec<u8> = w.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        let bf16: Vec<u8> = w.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
        for (ty, bytes) in [(WeightType::F16, f16), (WeightType::BF16, bf16)] {
            let qw = QWeight::new(ty, bytes, n, k).unwrap();
            for isa in Isa::available() {
                let (mut one, mut two) = (vec![0f32; n], vec![0f32; 2 * n]);
                qw.matmul_with(isa, &x[..k], &mut one).unwrap();
                qw.matmul_with(isa, &x, &mut two).unwrap();
                for j in 0..n {
                    let want: f64 = (0..k).map(|i| f64::from(w[j * k + i]) * f64::from(x[i])).sum();
                    assert_eq!(f64::from(one[j]), want, "{} {isa:?} n={n} k={k} row {j}", ty.name());
                    assert_eq!(one[j].to_bits(), two[j].to_bits(), "{} {isa:?} n={n} k={k} row {j}", ty.name());
                }
            }
        }
    }
}

/// An F16 row whose length is not a multiple of 8 or 16 (the SIMD steps of AVX2 and
/// AVX-512) nor of their unrolled loops (32, 64): the tail is summed too, and F16/BF16
/// values are widened exactly (BF16 is the top half of an f32).
#[test]
fn float_rows_of_any_length() {
    for k in [1usize, 7, 9, 16, 33, 70, 80, 200] {
        let w: Vec<f32> = (0..k).map(|i| (i as f32 - 3.0) * 0.25).collect();
        let x: Vec<f32> = (0..k).map(|i| 1.0 + i as f32 * 0.5).collect();
        let want: f32 = w.iter().zip(&x).map(|(a, b)| a * b).sum();
        let f16: Vec<u8> = w.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect();
        let bf16: Vec<u8> = w.iter().flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes()).collect();
        for (ty, bytes) in [(WeightType::F16, f16), (WeightType::BF16, bf16)] {
            let qw = QWeight::new(ty, bytes, 1, k).unwrap();
            for isa in Isa::available() {
                let mut y = [0f32];
                qw.matmul_with(isa, &x, &mut y).unwrap();
                assert!(
                    (y[0] - want).abs() <= 1e-4 * want.abs().max(1.0),
                    "{} {isa:?} k={k}: {} vs {want}",
                    ty.name(),
                    y[0]
                );
            }
        }
    }
}

#[test]
fn q4_0() {
    check_type(WeightType::Q4_0);
}

#[test]
fn q4_1() {
    check_type(WeightType::Q4_1);
}

#[test]
fn q5_0() {
    check_type(WeightType::Q5_0);
}

#[test]
fn q5_1() {
    check_type(WeightType::Q5_1);
}

#[test]
fn q8_0() {
    check_type(WeightType::Q8_0);
}

#[test]
fn q2_k() {
    check_type(WeightType::Q2K);
}

#[test]
fn q3_k() {
    check_type(WeightType::Q3K);
}

#[test]
fn q4_k() {
    check_type(WeightType::Q4K);
}

#[test]
fn q5_k() {
    check_type(WeightType::Q5K);
}

#[test]
fn q6_k() {
    check_type(WeightType::Q6K);
}

#[test]
fn iq4_nl_against_ggml() {
    check_ggml_fixture(WeightType::IQ4NL);
}

#[test]
fn iq4_xs_against_ggml() {
    check_ggml_fixture(WeightType::IQ4XS);
}

#[test]
fn mxfp4_against_ggml() {
    check_ggml_fixture(WeightType::MXFP4);
}

/// The table types candle does not read (IQ4_NL, IQ4_XS, MXFP4) rewritten as Q8_0 for
/// CUDA and Metal (`formats::to_q8_0`): ggml's blocks come back as the same weights —
/// bit for bit for IQ4_NL and MXFP4, within 2^-11 of each 32 weights' largest for
/// IQ4_XS, whose scale products are rounded to f16 — and other types are refused.
#[test]
fn table_types_as_q8_0_keep_their_weights() {
    let fx = fixture("kernels.ggml.json");
    for (ty, tol) in [(WeightType::IQ4NL, 0.0), (WeightType::MXFP4, 0.0), (WeightType::IQ4XS, 1.0 / 2048.0)] {
        let t = &fx["types"][ty.name().to_uppercase()];
        let bytes = unhex(t["bytes"].as_str().unwrap());
        let q8 = to_q8_0(ty, &bytes).unwrap();
        let n = bytes.len() / ty.block_bytes() * ty.block_len();
        assert_eq!(q8.len(), n / 32 * 34, "{}", ty.name());
        let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
        dequantize_row(ty, &bytes, &mut want);
        dequantize_row(WeightType::Q8_0, &q8, &mut got);
        let mut changed = 0;
        for (g, (w, q)) in want.chunks(32).zip(got.chunks(32)).enumerate() {
            let amax = w.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in w.iter().zip(q) {
                assert!((a - b).abs() <= tol * amax, "{} group {g}: {a} became {b}", ty.name());
                changed += usize::from(a != b);
            }
        }
        eprintln!("{}: {n} weights as Q8_0, {changed} changed", ty.name());
    }
    for ty in [WeightType::Q4_0, WeightType::Q8_0, WeightType::Q4K, WeightType::F16] {
        assert!(to_q8_0(ty, &vec![0; ty.block_bytes()]).is_none(), "{}", ty.name());
    }
    assert!(to_q8_0(WeightType::IQ4NL, &[0; 17]).is_none(), "not whole blocks");
    // An MXFP4 unit past f16 even with the codes shifted: refused, not wrapped.
    let mut huge = vec![250u8];
    huge.extend([0x77; 16]);
    assert!(to_q8_0(WeightType::MXFP4, &huge).is_none());
}

#[test]
fn every_type_is_tested() {
    // A new WeightType must get a test above: this list is the reminder.
    assert_eq!(WeightType::ALL.len(), 15);
}

/// Each kernel type's block layout is the one ggml's table (the GGUF reader's) and,
/// where candle reads the type, candle's give.
#[test]
fn kernel_block_layouts_match_ggml_and_candle() {
    use crate::gguf::GgmlType;
    for t in WeightType::ALL {
        let g = GgmlType::from_id(t.ggml_id()).unwrap();
        assert_eq!((g.block_len, g.block_bytes), (t.block_len(), t.block_bytes()), "{}", t.name());
        assert!(g.readable() && g.name.eq_ignore_ascii_case(t.name()), "{}", t.name());
        if let Some(c) = t.to_candle() {
            assert_eq!((c.block_size(), c.type_size()), (t.block_len(), t.block_bytes()), "{}", t.name());
        }
    }
    for g in crate::gguf::GGML_TYPES {
        if let Some(c) = g.candle() {
            assert_eq!((c.block_size(), c.type_size()), (g.block_len, g.block_bytes), "{}", g.name);
        }
    }
}

/// Several products in one batched call (a MoE layer's experts) give exactly what
/// separate calls give: mixed weight types (32- and 256-weight blocks, F16), mixed row
/// counts (decode, small batches, the f32 GEMM path), widths that split into tasks
/// unevenly.
#[test]
fn batched_products_equal_separate_calls_bit_for_bit() {
    let dev = Device::Cpu;
    let weight = |ty: WeightType, n: usize| {
        let w = (Tensor::randn(0f32, 1.0, (n, K), &dev).unwrap() * 0.1).unwrap();
        QWeight::from_qtensor(&QTensor::quantize(&w, ty.to_candle().unwrap()).unwrap()).unwrap().unwrap()
    };
    let ws = [
        weight(WeightType::Q8_0, 97),
        weight(WeightType::Q4K, 256),
        weight(WeightType::F16, 33),
        weight(WeightType::Q4_0, 300),
        weight(WeightType::Q3K, 17),
    ];
    let ms = [1usize, 3, 1, 40, 5];
    let xs: Vec<Vec<f32>> = ms
        .iter()
        .map(|&m| Tensor::randn(0f32, 1.0, (m, K), &dev).unwrap().flatten_all().unwrap().to_vec1().unwrap())
        .collect();
    let want: Vec<Vec<f32>> = ws
        .iter()
        .zip(&xs)
        .map(|(w, x)| {
            let mut y = vec![0f32; x.len() / K * w.out_features()];
            w.matmul(x, &mut y).unwrap();
            y
        })
        .collect();
    let mut got: Vec<Vec<f32>> = want.iter().map(|y| vec![f32::NAN; y.len()]).collect();
    let mut products: Vec<_> =
        ws.iter().zip(&xs).zip(got.iter_mut()).map(|((w, x), y)| (w, x.as_slice(), y.as_mut_slice())).collect();
    crate::kernels::matmul_batch(&mut products).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()), "product {i} differs");
    }
    // A product with a mis-sized output is an error, and nothing is written.
    let mut short = vec![0f32; 3];
    let mut fine = vec![7f32; 97];
    let err = crate::kernels::matmul_batch(&mut [(&ws[0], &xs[0], &mut fine), (&ws[1], &xs[1], &mut short)]);
    assert!(err.is_err() && fine.iter().all(|&v| v == 7.0));
}

/// `kernels::prepare` (what a loader calls: every weight's tiles made up front, one
/// weight per pool task, each packed inline inside its task) gives the same products,
/// bit for bit, as tiles made at a weight's first matmul (packed in parallel groups
/// of rows); weights of more than one group (1024 rows) and several types at once.
#[test]
fn prepared_weights_multiply_as_at_first_use() {
    let dev = Device::Cpu;
    let shapes = [(WeightType::Q4K, 1500), (WeightType::Q8_0, 2100), (WeightType::Q6K, 40), (WeightType::F16, 9)];
    let pairs: Vec<(QWeight, QWeight)> = shapes
        .iter()
        .map(|&(ty, n)| {
            let w = (Tensor::randn(0f32, 1.0, (n, K), &dev).unwrap() * 0.1).unwrap();
            let qt = QTensor::quantize(&w, ty.to_candle().unwrap()).unwrap();
            let make = || QWeight::from_qtensor(&qt).unwrap().unwrap();
            (make(), make())
        })
        .collect();
    let prepared: Vec<&QWeight> = pairs.iter().map(|p| &p.1).collect();
    crate::kernels::prepare(&prepared);
    crate::kernels::prepare(&prepared); // again: nothing to do
    for m in [1usize, 7] {
        let x: Vec<f32> = Tensor::randn(0f32, 1.0, (m, K), &dev).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for (lazy, eager) in &pairs {
            let (mut a, mut b) = (vec![0f32; m * lazy.out_features()], vec![1f32; m * eager.out_features()]);
            lazy.matmul(&x, &mut a).unwrap();
            eager.matmul(&x, &mut b).unwrap();
            let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{} with {m} rows: prepared weight differs", lazy.weight_type().name());
        }
    }
}

/// A random `(n, K)` weight of `ty`: quantized by candle, or for the types candle
/// cannot quantize (IQ4_NL, IQ4_XS, MXFP4) bytes that are all valid codes (and IQ4_XS's
/// sub-block scales) and 0.01 as f16 in each block's first two bytes (its scale;
/// MXFP4 reads the first as an E8M0 power of two).
fn random_qweight(ty: WeightType, n: usize) -> QWeight {
    match ty.to_candle() {
        Some(dt) => {
            let w = (Tensor::randn(0f32, 1.0, (n, K), &Device::Cpu).unwrap() * 0.1).unwrap();
            QWeight::from_qtensor(&QTensor::quantize(&w, dt).unwrap()).unwrap().unwrap()
        }
        None => {
            let len = n * K / ty.block_len() * ty.block_bytes();
            let mut bytes: Vec<u8> = (0..len).map(|i| (i * 97 % 251) as u8).collect();
            for b in bytes.chunks_exact_mut(ty.block_bytes()) {
                b[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
            }
            QWeight::new(ty, bytes, n, K).unwrap()
        }
    }
}

/// `x · qwᵀ` on instruction sets `a` and `b` must agree bit for bit.
fn assert_same_bits(qw: &QWeight, x: &[f32], a: Isa, b: Isa) {
    let rows = x.len() / K;
    let (mut ya, mut yb) = (vec![0f32; rows * qw.out_features()], vec![1f32; rows * qw.out_features()]);
    qw.matmul_with(a, x, &mut ya).unwrap();
    qw.matmul_with(b, x, &mut yb).unwrap();
    let same = ya.iter().zip(&yb).all(|(p, q)| p.to_bits() == q.to_bits());
    assert!(same, "{} with {rows} rows: {a:?} and {b:?} differ", qw.weight_type().name());
}

/// On aarch64 with `dotprod`, the NEON dot products give the portable kernels' bits
/// for every 32- and 256-weight type at every row count below the GEMM path: the same
/// exact integer sums per block, the same float step. Under qemu in `scripts/test`
/// (`TOOLGATE_EXPECT_ISA=neon` makes a missing `Isa::Neon` a failure there); elsewhere
/// it says so and checks nothing.
#[test]
fn neon_gives_the_portable_bits() {
    let expected = std::env::var("TOOLGATE_EXPECT_ISA").is_ok_and(|v| v == "neon");
    if !Isa::available().contains(&Isa::Neon) {
        assert!(!expected, "TOOLGATE_EXPECT_ISA=neon but this CPU has no NEON dotprod");
        eprintln!("no NEON dotprod here: nothing to compare");
        return;
    }
    let (n, m) = (37, 31);
    let x: Vec<f32> = Tensor::randn(0f32, 1.0, (m, K), &Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let mut compared = Vec::new();
    for ty in WeightType::ALL {
        if ty.act_kind() == ActKind::Floats {
            continue;
        }
        let qw = random_qweight(ty, n);
        for rows in [1, 2, 3, 4, 5, 17, m] {
            assert!(!f32_path(Isa::Neon, ty, rows), "{rows} rows take the GEMM path");
            assert_same_bits(&qw, &x[..rows * K], Isa::Portable, Isa::Neon);
        }
        compared.push(ty.name());
    }
    for ty in
        ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl", "mxfp4", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs"]
    {
        assert!(compared.contains(&ty), "{ty} not compared (compared: {compared:?})");
    }
}

/// A type tiled on both AVX2 and AVX-512 gives the same bits on either: the AVX2
/// kernels (8 weight rows per register, `maddubs`; both 8-row halves of a tile in one
/// pass at 1–2 rows, each in turn at more) reach the same exact integer sums per block
/// and take the same float step. Needs a CPU with AVX-512: without one it
/// says so and checks nothing, and fails if `TOOLGATE_EXPECT_ISA=avx512` (what
/// `scripts/test` sets where `/proc/cpuinfo` lists the AVX-512 flags; elsewhere it
/// reports the comparison skipped).
#[test]
fn tiles_give_the_same_bits_on_avx2_and_avx512() {
    if !Isa::available().contains(&Isa::Avx512) {
        let expected = std::env::var("TOOLGATE_EXPECT_ISA").is_ok_and(|v| v == "avx512");
        assert!(!expected, "TOOLGATE_EXPECT_ISA=avx512 but the kernels found no AVX-512 (F, BW, VL, VNNI)");
        eprintln!("no AVX-512 here: nothing to compare the AVX2 tiles with");
        return;
    }
    let dev = Device::Cpu;
    let (n, m) = (45, 11);
    let x: Vec<f32> = Tensor::randn(0f32, 1.0, (m, K), &dev).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let mut compared = Vec::new();
    for ty in WeightType::ALL {
        if !(tiled(Isa::Avx2, ty) && tiled(Isa::Avx512, ty)) {
            continue;
        }
        let qw = random_qweight(ty, n);
        // 1 and 2 rows (and 6: a group of 4, then 2) take AVX2's both-halves pass.
        for rows in [1, 2, 6, m] {
            assert_same_bits(&qw, &x[..rows * K], Isa::Avx2, Isa::Avx512);
        }
        compared.push(ty.name());
    }
    for ty in ["q4_0", "q8_0", "iq4_nl", "iq4_xs", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"] {
        assert!(compared.contains(&ty), "{ty} is not tiled on both (compared: {compared:?})");
    }
}

#[test]
fn bad_shapes_are_errors() {
    // 40 weights are not whole Q8_0 blocks; 33 bytes are not one block.
    assert!(QWeight::new(WeightType::Q8_0, vec![0; 34], 1, 40).is_err());
    assert!(QWeight::new(WeightType::Q8_0, vec![0; 33], 1, 32).is_err());
    let w = QWeight::new(WeightType::Q8_0, vec![0; 68], 2, 32).unwrap();
    let mut y = vec![0f32; 2];
    assert!(w.matmul(&[0.0; 31], &mut y).is_err());
    assert!(w.matmul(&[0.0; 32], &mut [0f32; 3]).is_err());
    assert!(w.dequantize_row(2, &mut [0f32; 32]).is_err());
    // All-zero activations give exact zeros (no NaN from a zero scale).
    w.matmul(&[0.0; 32], &mut y).unwrap();
    assert_eq!(y, [0.0, 0.0]);
}

/// The activation quantizers (vectorized with AVX2 where the CPU has it) give exactly
/// ggml's codes and scales, so products equal llama.cpp's: `q = x · (127 / max|x|)`
/// rounded half to even (as ggml's SIMD quantizers and its `nearest_int`), scale
/// `max|x| / 127` rounded to f16 for 32-blocks (`block_q8_0`), `1 / (127 / max|x|)`
/// for 256-blocks (`block_q8_K`).
#[test]
fn activation_quantization_is_ggml_s_with_ties_to_even() {
    // Block 0: max 127 (scale 1), so x/d is x itself and the halves are exact ties.
    let mut x: Vec<f32> = vec![0.0; 512];
    x[..8].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 126.49, -3.5]);
    let mut seed = 0x9e37_79b9u32;
    for v in &mut x[32..] {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        *v = (seed as f32 / u32::MAX as f32 - 0.5) * 7.0;
    }
    let codes = |xs: &[f32]| -> (f32, Vec<i8>) {
        let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
        (amax, xs.iter().map(|v| (v * id).round_ties_even() as i8).collect())
    };
    let mut b32 = vec![Q8x32::ZERO; x.len() / 32];
    quantize_32(&x, &mut b32);
    for (i, (b, xs)) in b32.iter().zip(x.chunks_exact(32)).enumerate() {
        let (amax, qs) = codes(xs);
        let d = half::f16::from_f32(amax / 127.0).to_f32();
        assert_eq!((b.d, b.qs.to_vec()), (d, qs), "32-block {i}");
        let sum = b.qs.iter().map(|&q| q as i32).sum::<i32>() as f32;
        assert_eq!((b.s, b.s_min), (d * sum, half::f16::from_f32(amax / 127.0 * sum).to_f32()));
    }
    assert_eq!(&b32[0].qs[..8], &[127, 0, 2, 2, 0, -2, 126, -4]);
    let mut b256 = vec![Q8x256::ZERO; x.len() / 256];
    quantize_256(&x, &mut b256);
    for (i, (b, xs)) in b256.iter().zip(x.chunks_exact(256)).enumerate() {
        let (amax, qs) = codes(xs);
        let d = if amax > 0.0 { 1.0 / (127.0 / amax) } else { 0.0 };
        assert_eq!((b.d, b.qs.to_vec()), (d, qs), "256-block {i}");
        for (s, q) in b.bsums.iter().zip(b.qs.chunks_exact(16)) {
            assert_eq!(*s, q.iter().map(|&q| q as i16).sum::<i16>());
        }
        for (s, q) in b.sums32.iter().zip(b.qs.chunks_exact(32)) {
            assert_eq!(*s, q.iter().map(|&q| q as i16).sum::<i16>());
        }
    }
}

/// The vectorized gated activations against the scalar reference, over gate values
/// from -100 to 100 (saturated, tiny and ordinary) and rows whose width is not a
/// multiple of the SIMD step.
#[test]
fn gated_activations_match_the_scalar_reference() {
    use crate::kernels::glu::{glu, glu_rows, Activation};
    for ff in [1usize, 7, 64, 203] {
        let rows = 5;
        let mut gu = Vec::with_capacity(rows * 2 * ff);
        for r in 0..rows {
            // Gates sweep -100..100 across the rows, ups stay ordinary.
            gu.extend((0..ff).map(|i| -100.0 + 200.0 * ((r * ff + i) as f32 / (rows * ff) as f32).powi(3)));
            gu.extend((0..ff).map(|i| 1.5 - (i % 5) as f32));
        }
        for act in [Activation::Silu, Activation::GeluTanh, Activation::SwigluOai] {
            let mut out = vec![f32::NAN; rows * ff];
            glu_rows(act, &gu, ff, &mut out).unwrap();
            for r in 0..rows {
                for i in 0..ff {
                    let (g, u) = (gu[r * 2 * ff + i], gu[r * 2 * ff + ff + i]);
                    let (got, want) = (out[r * ff + i], glu(act, g, u));
                    assert!(
                        (got - want).abs() <= 1e-5 * want.abs() + 1e-6 * (g * u).abs().max(1e-30),
                        "{act:?} g={g} u={u}: {got} vs {want}"
                    );
                }
            }
        }
    }
    let mut out = [0f32; 3];
    assert!(glu_rows(Activation::Silu, &[1.0; 5], 2, &mut out).is_err());
}

/// A row's outputs do not depend on how many rows share the matmul: 37 rows at once
/// equal each row alone, bit for bit, for every type and instruction set whose
/// prefill does not take the f32 GEMM (`f32_path`) or the F16/BF16 register tiles
/// (`float_tiles_path`), i.e. integer tiles and per-row kernels.
#[test]
fn rows_are_computed_the_same_whatever_the_row_count() {
    let (n, k, m) = (45usize, 512usize, 37usize);
    let dev = Device::Cpu;
    let x: Vec<f32> = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let mut checked = 0;
    for ty in WeightType::ALL {
        let qw = match ty.to_candle() {
            Some(dt) => {
                let w = (Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap() * 0.1).unwrap();
                QWeight::from_qtensor(&QTensor::quantize(&w, dt).unwrap()).unwrap().unwrap()
            }
            None => {
                // Types candle cannot quantize: any bytes are valid codes; scales 0.01.
                let mut bytes: Vec<u8> =
                    (0..n * k / ty.block_len() * ty.block_bytes()).map(|i| (i * 97 % 251) as u8).collect();
                for b in bytes.chunks_exact_mut(ty.block_bytes()) {
                    match ty {
                        WeightType::MXFP4 => b[0] = 120,
                        _ => b[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes()),
                    }
                }
                QWeight::new(ty, bytes, n, k).unwrap()
            }
        };
        for isa in Isa::available() {
            if f32_path(isa, ty, m) || float_tiles_path(isa, ty, m) {
                continue;
            }
            let mut all = vec![0f32; m * n];
            qw.matmul_with(isa, &x, &mut all).unwrap();
            for r in 0..m {
                let mut one = vec![0f32; n];
                qw.matmul_with(isa, &x[r * k..(r + 1) * k], &mut one).unwrap();
                let same = one.iter().zip(&all[r * n..(r + 1) * n]).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{} {isa:?}: row {r} alone differs from the same row among {m}", ty.name());
            }
            checked += 1;
        }
    }
    // At least the six 256-weight types on every instruction set (the portable kernels
    // prefill the others through the f32 GEMM); AVX2 and AVX-512 add their tiled types.
    let floor = 6 * Isa::available().len();
    assert!(checked >= floor, "only {checked} type/ISA pairs are row-count invariant (at least {floor} expected)");
}

/// `kernels::rows` (RMS norm and RoPE on the kernels' pool) gives candle-nn's bits:
/// rows of odd widths, a prefill's worth of rows (candle-nn then runs on rayon) and a
/// single one, RoPE in both pair styles.
#[test]
fn row_steps_equal_candle_nn_bit_for_bit() {
    let dev = Device::Cpu;
    let same = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    for (rows, n) in [(1usize, 576usize), (121, 576), (300, 80), (7, 33)] {
        let x = Tensor::randn(0f32, 1.0, (rows, n), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, n, &dev).unwrap();
        let want: Vec<f32> = candle_nn::ops::rms_norm(&x, &w, 1e-6).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let mut got = vec![0f32; rows * n];
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        crate::kernels::rows::rms_norm(&xs, &w.to_vec1::<f32>().unwrap(), 1e-6, &mut got).unwrap();
        assert!(same(&got, &want), "rms_norm of {rows} rows of {n} differs from candle-nn's");
    }
    for (heads, t, d) in [(9usize, 121usize, 64usize), (2, 1, 128), (14, 37, 64), (3, 5, 6)] {
        let x = Tensor::randn(0f32, 1.0, (1, heads, t, d), &dev).unwrap();
        let cos = Tensor::randn(0f32, 1.0, (t, d / 2), &dev).unwrap();
        let sin = Tensor::randn(0f32, 1.0, (t, d / 2), &dev).unwrap();
        let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let (c, s): (Vec<f32>, Vec<f32>) =
            (cos.flatten_all().unwrap().to_vec1().unwrap(), sin.flatten_all().unwrap().to_vec1().unwrap());
        for interleaved in [false, true] {
            let want = match interleaved {
                false => candle_nn::rotary_emb::rope(&x, &cos, &sin).unwrap(),
                true => candle_nn::rotary_emb::rope_i(&x, &cos, &sin).unwrap(),
            };
            let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
            let mut got = vec![0f32; xs.len()];
            crate::kernels::rows::rope(&xs, &c, &s, t, d, interleaved, &mut got).unwrap();
            assert!(same(&got, &want), "rope ({heads}, {t}, {d}), interleaved {interleaved}, differs from candle-nn's");
        }
    }
    let mut out = [0f32; 3];
    assert!(crate::kernels::rows::rms_norm(&[1.0; 3], &[1.0, 1.0], 0.0, &mut out).is_err());
    assert!(crate::kernels::rows::rope(&[1.0; 3], &[1.0], &[1.0], 1, 3, false, &mut out).is_err());
}
