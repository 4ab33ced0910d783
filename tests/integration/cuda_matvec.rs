//! The CUDA decode matvec's weight decoding (`kernels/matvec.cu`), checked without a
//! GPU: its chunk decoders are plain C++, so the host C++ compiler builds them into a
//! small program that multiplies a quantized weight by a vector the way a warp's
//! lanes do (every chunk once), and the products must equal candle's dequantization
//! of the same bytes times the same vector, for every weight type the kernel reads.
//! (On a GPU, `scripts/gpu-check` runs the whole kernel against llama.cpp's logits.)

use std::path::PathBuf;
use std::process::Command;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

/// The program: `harness TYPE N K WEIGHTS X Y` reads N rows of K inputs of ggml type
/// TYPE and K floats, writes N floats.
const HARNESS: &str = r#"
#include "matvec.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>
static std::vector<char> slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    std::vector<char> v;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
    fclose(f);
    return v;
}
int main(int argc, char** argv) {
    if (argc != 7) return 2;
    const int t = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]);
    std::vector<char> w = slurp(argv[4]), xs = slurp(argv[5]);
    const long rb = (long)(k / block_weights(t)) * block_bytes(t);
    if (block_bytes(t) == 0 || (long)w.size() != rb * n || (long)xs.size() != 4L * k) return 3;
    std::vector<float> y(n);
    for (int r = 0; r < n; r++) {
        Dot<1> dot;
        dot.x = (const float*)xs.data();
        dot.k = k;
        dot.acc[0] = 0.f;
        // As a warp's 32 lanes take the chunks: lane l takes l, l + 32, ...
        for (int lane = 0; lane < 32; lane++) row_dot<1, 2>(t, (const uint8_t*)w.data() + rb * r, k, lane, 32, dot);
        y[r] = dot.acc[0];
    }
    FILE* f = fopen(argv[6], "wb");
    fwrite(y.data(), 4, n, f);
    fclose(f);
    return 0;
}
"#;

fn kernels_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kernels")
}

#[test]
fn the_cuda_matvec_decodes_every_weight_type_as_candle_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("harness.cpp");
    let exe = dir.path().join("harness");
    std::fs::write(&src, HARNESS).expect("write harness");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args(["-O1", "-std=c++17", "-I"])
        .arg(kernels_dir())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("this test needs a C++ compiler ({cxx}, or set CXX): {e}"));
    assert!(out.status.success(), "{cxx} failed on kernels/matvec.cu:\n{}", String::from_utf8_lossy(&out.stderr));

    // (ggml id, type): every type the kernel reads (src/model/cuda/kernels.rs, matvec_type).
    let types = [
        (1, GgmlDType::F16),
        (2, GgmlDType::Q4_0),
        (3, GgmlDType::Q4_1),
        (6, GgmlDType::Q5_0),
        (7, GgmlDType::Q5_1),
        (8, GgmlDType::Q8_0),
        (12, GgmlDType::Q4K),
        (13, GgmlDType::Q5K),
        (14, GgmlDType::Q6K),
    ];
    let (n, k) = (37, 768);
    let dev = Device::Cpu;
    let w = (Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap() * 0.05).unwrap();
    let x = Tensor::randn(0f32, 1.0, k, &dev).unwrap();
    let xs: Vec<f32> = x.to_vec1().unwrap();
    let x_bytes: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("x"), x_bytes).unwrap();
    for (id, dtype) in types {
        let q = QTensor::quantize(&w, dtype).unwrap();
        std::fs::write(dir.path().join("w"), q.data().unwrap()).unwrap();
        let reference: Vec<Vec<f32>> = q.dequantize(&dev).unwrap().to_vec2().unwrap();
        let run = Command::new(&exe)
            .args([id.to_string(), n.to_string(), k.to_string()])
            .arg(dir.path().join("w"))
            .arg(dir.path().join("x"))
            .arg(dir.path().join("y"))
            .output()
            .unwrap();
        assert!(run.status.success(), "{dtype:?}: the harness exited with {:?}", run.status);
        let y: Vec<f32> = std::fs::read(dir.path().join("y"))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        for (r, row) in reference.iter().enumerate() {
            let exact: f64 = row.iter().zip(&xs).map(|(&a, &b)| a as f64 * b as f64).sum();
            let scale: f64 = row.iter().zip(&xs).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
            let err = (y[r] as f64 - exact).abs() / scale.max(1e-30);
            assert!(
                err < 1e-5,
                "{dtype:?} row {r}: matvec {} vs candle's dequantization {exact} (relative {err:.1e})",
                y[r]
            );
        }
    }
}
