//! Tiny random-weight GGUF files, written by the test, cover the architectures with no
//! real model here (qwen2, qwen3, phi3) and the error paths of loading.
//!
//! Each checks shapes, that generation runs, and that the KV cache is exact: the
//! logits of a prompt processed in one pass equal those of the same prompt fed one
//! token at a time. Those checks and the comparison with llama.cpp's logits run on the
//! CPU, or the device `TOOLGATE_TEST_DEVICE` names (`scripts/gpu-check`).

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use toolgate::engine::{Engine, GenerateParams};
use toolgate::kernels::WeightType;
use toolgate::model::DeviceChoice;
use toolgate::sampling::SamplingParams;
use toolgate::Error;

use crate::common;

const VOCAB: usize = 300;
const EMBD: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 16;
const FF: usize = 128;
/// Projection weights are F32: quantizing activations on the fly (Q8) makes results
/// jump when a 1e-7 difference flips a rounding, which would hide what these tests
/// check (cache, masks, RoPE). Embeddings stay Q8_0 to cover quantized lookup; the
/// real-model tests cover the quantized matmuls.
const W: GgmlDType = GgmlDType::F32;

struct Spec {
    arch: &'static str,
    fused_qkv: bool,
    fused_gate_up: bool,
    qkv_bias: bool,
    qk_norm: bool,
    /// Q/K norms over the whole projection (OLMo 2) instead of per head.
    full_qk_norm: bool,
    /// `attn_norm` / `ffn_norm` before each block (all but OLMo 2).
    pre_norms: bool,
    /// No `output.weight`: the head is the embedding matrix (Gemma 2 always).
    tied_output: bool,
    /// A mixture-of-experts FFN: (experts, used per token, expert width).
    moe: Option<(usize, usize, usize)>,
    /// The experts' weight type.
    expert_type: GgmlDType,
    /// Biases on the router and on every expert's gate, up and down (gpt-oss).
    expert_bias: bool,
    /// A bias on the attention output projection.
    out_bias: bool,
    /// One attention-sink logit per head (gpt-oss).
    sinks: bool,
    /// The FFN input norm's tensor name.
    ffn_norm: &'static str,
    /// YaRN RoPE scaling: (factor, original context).
    yarn: Option<(f32, u32)>,
    /// With `moe`: the first this many layers are dense.
    dense_lead: usize,
    /// With `moe`: a shared expert of this width, and a selection-only bias.
    shared_expert: Option<usize>,
    /// `{arch}.KEY = VALUE` boolean metadata.
    bools: &'static [(&'static str, bool)],
    sandwich: bool,
    sliding_window: Option<u32>,
    layers: usize,
    ctx: u32,
    /// `{arch}.KEY = VALUE` written over what the shape above says (hostile metadata).
    overrides: &'static [(&'static str, u32)],
    /// `{arch}.KEY = VALUE` float metadata (multipliers).
    floats: &'static [(&'static str, f32)],
    /// Model width, head width, FFN width.
    embd: usize,
    head_dim: usize,
    ff: usize,
    /// The type of the projections (all but `attn_v`, embeddings, norms, routers).
    proj: GgmlDType,
    /// A table type candle cannot write (IQ4_NL, IQ4_XS, MXFP4): the projections are
    /// written as Q4_0 and rewritten as this type ([`write_table_type`]).
    table: Option<WeightType>,
}

fn spec(arch: &'static str) -> Spec {
    Spec {
        arch,
        fused_qkv: false,
        fused_gate_up: false,
        qkv_bias: false,
        qk_norm: false,
        full_qk_norm: false,
        pre_norms: true,
        tied_output: false,
        moe: None,
        expert_type: W,
        expert_bias: false,
        out_bias: false,
        sinks: false,
        ffn_norm: "ffn_norm",
        yarn: None,
        dense_lead: 0,
        shared_expert: None,
        bools: &[],
        sandwich: false,
        sliding_window: None,
        layers: 2,
        ctx: 256,
        overrides: &[],
        floats: &[],
        embd: EMBD,
        head_dim: HEAD_DIM,
        ff: FF,
        proj: W,
        table: None,
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }
    fn tensor(&mut self, dims: &[usize], scale: f32) -> Tensor {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.next() * scale).collect();
        Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
    }
}

fn q(t: &Tensor, dtype: GgmlDType) -> QTensor {
    QTensor::quantize(t, dtype).unwrap()
}

/// Byte-level gpt2 vocabulary: 256 byte tokens, a few merges, 3 control tokens.
fn gpt2_vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..=255u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut pairs: Vec<(u32, u32)> = bs.into_iter().zip(cs).collect();
    pairs.sort();
    let mut tokens: Vec<String> = pairs.iter().map(|&(_, c)| char::from_u32(c).unwrap().to_string()).collect();
    let merges = vec!["h e".to_string(), "l l".to_string(), "he ll".to_string(), "Ġ w".to_string()];
    tokens.extend(["he", "ll", "hell", "Ġw"].map(String::from));
    let mut types = vec![1; tokens.len()];
    for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] {
        tokens.push(special.to_string());
        types.push(3);
    }
    while tokens.len() < VOCAB {
        tokens.push(format!("<unused{}>", tokens.len()));
        types.push(5);
    }
    (tokens, merges, types)
}

fn write_model(dir: &Path, s: &Spec) -> PathBuf {
    let mut rng = Rng(0x5eed ^ s.arch.len() as u64);
    let (tokens, merges, types) = gpt2_vocab();
    let a = s.arch;
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        (format!("{a}.block_count"), Value::U32(s.layers as u32)),
        (format!("{a}.context_length"), Value::U32(s.ctx)),
        (format!("{a}.embedding_length"), Value::U32(s.embd as u32)),
        (format!("{a}.feed_forward_length"), Value::U32(s.ff as u32)),
        (format!("{a}.attention.head_count"), Value::U32(HEADS as u32)),
        (format!("{a}.attention.head_count_kv"), Value::U32(KV_HEADS as u32)),
        (format!("{a}.attention.key_length"), Value::U32(s.head_dim as u32)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (format!("{a}.rope.freq_base"), Value::F32(10000.0)),
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("qwen2".into())),
        ("tokenizer.ggml.tokens".into(), Value::Array(tokens.into_iter().map(Value::String).collect())),
        ("tokenizer.ggml.merges".into(), Value::Array(merges.into_iter().map(Value::String).collect())),
        ("tokenizer.ggml.token_type".into(), Value::Array(types.into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(258)),
    ];
    if let Some(w) = s.sliding_window {
        meta.push((format!("{a}.attention.sliding_window"), Value::U32(w)));
    }
    for (key, v) in s.overrides {
        let key = format!("{a}.{key}");
        meta.retain(|(k, _)| *k != key);
        meta.push((key, Value::U32(*v)));
    }
    if let Some((n, used, width)) = s.moe {
        meta.push((format!("{a}.expert_count"), Value::U32(n as u32)));
        meta.push((format!("{a}.expert_used_count"), Value::U32(used as u32)));
        meta.push((format!("{a}.expert_feed_forward_length"), Value::U32(width as u32)));
    }
    for (key, v) in s.floats {
        meta.push((format!("{a}.{key}"), Value::F32(*v)));
    }
    for (key, v) in s.bools {
        meta.push((format!("{a}.{key}"), Value::Bool(*v)));
    }
    if let Some((factor, original)) = s.yarn {
        meta.push((format!("{a}.rope.scaling.type"), Value::String("yarn".into())));
        meta.push((format!("{a}.rope.scaling.factor"), Value::F32(factor)));
        meta.push((format!("{a}.rope.scaling.original_context_length"), Value::U32(original)));
    }
    let mut tensors: Vec<(String, QTensor)> = vec![
        // A tied head is F32 like the other projections (llama.cpp multiplies a Q8_0
        // head with 8-bit activations, which would blur the comparison).
        (
            "token_embd.weight".into(),
            q(&rng.tensor(&[VOCAB, s.embd], 1.0), if s.tied_output { W } else { GgmlDType::Q8_0 }),
        ),
        ("output_norm.weight".into(), q(&(rng.tensor(&[s.embd], 0.2) + 1.0).unwrap(), GgmlDType::F32)),
    ];
    let output = q(&rng.tensor(&[VOCAB, s.embd], 0.5), s.proj);
    if !s.tied_output {
        tensors.push(("output.weight".into(), output));
    }
    let norm = |rng: &mut Rng, n: usize| q(&(rng.tensor(&[n], 0.2) + 1.0).unwrap(), GgmlDType::F32);
    let (qw, kvw) = (HEADS * s.head_dim, KV_HEADS * s.head_dim);
    for i in 0..s.layers {
        let p = |n: &str| format!("blk.{i}.{n}");
        if s.pre_norms {
            tensors.push((p("attn_norm.weight"), norm(&mut rng, s.embd)));
            tensors.push((p(&format!("{}.weight", s.ffn_norm)), norm(&mut rng, s.embd)));
        }
        if s.fused_qkv {
            tensors.push((p("attn_qkv.weight"), q(&rng.tensor(&[qw + 2 * kvw, s.embd], 0.3), s.proj)));
        } else {
            tensors.push((p("attn_q.weight"), q(&rng.tensor(&[qw, s.embd], 0.3), s.proj)));
            tensors.push((p("attn_k.weight"), q(&rng.tensor(&[kvw, s.embd], 0.3), s.proj)));
            tensors.push((p("attn_v.weight"), q(&rng.tensor(&[kvw, s.embd], 0.3), GgmlDType::F32)));
        }
        if s.qkv_bias {
            tensors.push((p("attn_q.bias"), q(&rng.tensor(&[qw], 0.1), GgmlDType::F32)));
            tensors.push((p("attn_k.bias"), q(&rng.tensor(&[kvw], 0.1), GgmlDType::F32)));
            tensors.push((p("attn_v.bias"), q(&rng.tensor(&[kvw], 0.1), GgmlDType::F32)));
        }
        if s.qk_norm {
            let (qn, kn) = if s.full_qk_norm { (qw, kvw) } else { (s.head_dim, s.head_dim) };
            tensors.push((p("attn_q_norm.weight"), norm(&mut rng, qn)));
            tensors.push((p("attn_k_norm.weight"), norm(&mut rng, kn)));
        }
        if s.sandwich {
            tensors.push((p("post_attention_norm.weight"), norm(&mut rng, s.embd)));
            tensors.push((p("post_ffw_norm.weight"), norm(&mut rng, s.embd)));
        }
        tensors.push((p("attn_output.weight"), q(&rng.tensor(&[s.embd, qw], 0.3), s.proj)));
        if s.out_bias {
            tensors.push((p("attn_output.bias"), q(&rng.tensor(&[s.embd], 0.1), GgmlDType::F32)));
        }
        if s.sinks {
            // Around the scores' size, so each head's sink takes a real share.
            tensors.push((p("attn_sinks.weight"), q(&rng.tensor(&[HEADS], 4.0), GgmlDType::F32)));
        }
        if let Some((n, _, width)) = s.moe.filter(|_| i >= s.dense_lead) {
            // A router with clear preferences: the top-k choice is no near-tie.
            tensors.push((p("ffn_gate_inp.weight"), q(&rng.tensor(&[n, s.embd], 3.0), GgmlDType::F32)));
            let et = s.expert_type;
            tensors.push((p("ffn_gate_exps.weight"), q(&rng.tensor(&[n, width, s.embd], 0.3), et)));
            tensors.push((p("ffn_up_exps.weight"), q(&rng.tensor(&[n, width, s.embd], 0.3), et)));
            tensors.push((p("ffn_down_exps.weight"), q(&rng.tensor(&[n, s.embd, width], 0.3), et)));
            if let Some(w) = s.shared_expert {
                tensors.push((p("exp_probs_b.bias"), q(&rng.tensor(&[n], 0.5), GgmlDType::F32)));
                tensors.push((p("ffn_gate_shexp.weight"), q(&rng.tensor(&[w, s.embd], 0.3), s.proj)));
                tensors.push((p("ffn_up_shexp.weight"), q(&rng.tensor(&[w, s.embd], 0.3), s.proj)));
                tensors.push((p("ffn_down_shexp.weight"), q(&rng.tensor(&[s.embd, w], 0.3), s.proj)));
            }
            if s.expert_bias {
                let f32 = GgmlDType::F32;
                tensors.push((p("ffn_gate_inp.bias"), q(&rng.tensor(&[n], 1.0), f32)));
                tensors.push((p("ffn_gate_exps.bias"), q(&rng.tensor(&[n, width], 0.5), f32)));
                tensors.push((p("ffn_up_exps.bias"), q(&rng.tensor(&[n, width], 0.5), f32)));
                tensors.push((p("ffn_down_exps.bias"), q(&rng.tensor(&[n, s.embd], 0.5), f32)));
            }
            continue;
        }
        if s.fused_gate_up {
            tensors.push((p("ffn_up.weight"), q(&rng.tensor(&[2 * s.ff, s.embd], 0.3), s.proj)));
        } else {
            tensors.push((p("ffn_gate.weight"), q(&rng.tensor(&[s.ff, s.embd], 0.3), s.proj)));
            tensors.push((p("ffn_up.weight"), q(&rng.tensor(&[s.ff, s.embd], 0.3), s.proj)));
        }
        tensors.push((p("ffn_down.weight"), q(&rng.tensor(&[s.embd, s.ff], 0.3), s.proj)));
    }
    let path = dir.join(format!("tiny-{a}.gguf"));
    let mut f = std::fs::File::create(&path).unwrap();
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
    drop(f);
    if let Some(ty) = s.table {
        write_table_type(&path, ty, &mut rng);
    }
    path
}

/// Rewrite every Q4_0 tensor of the GGUF file at `path` as `ty` (IQ4_NL, IQ4_XS or
/// MXFP4): its type id in the tensor directory, random blocks of `ty` as its data
/// (with scales that keep the weights about the size of the F32 projections', |w| <
/// 0.4), and every tensor's offset, as the data section is laid out again with the
/// new sizes (llama.cpp requires each tensor to follow the last, 32-byte aligned).
fn write_table_type(path: &Path, ty: WeightType, rng: &mut Rng) {
    let mut bytes = std::fs::read(path).unwrap();
    let content = gguf_file::Content::read(&mut std::io::Cursor::new(&bytes)).unwrap();
    let data_at = content.tensor_data_offset as usize;
    let mut byte = || ((rng.next() + 0.5) * 256.0) as u8;
    let mut infos: Vec<_> = content.tensor_infos.iter().collect();
    infos.sort_by_key(|(_, info)| info.offset);
    let mut data = Vec::new();
    for (name, info) in infos {
        // The directory entry: name, n_dims (u32), dims (u64 each), type (u32), offset (u64).
        let at = bytes[..data_at].windows(name.len()).position(|w| w == name.as_bytes()).unwrap() + name.len();
        let type_at = at + 4 + 8 * info.shape.rank();
        let start = data_at + info.offset as usize;
        let old_len = info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
        bytes[type_at + 4..type_at + 12].copy_from_slice(&(data.len() as u64).to_le_bytes());
        if info.ggml_dtype != GgmlDType::Q4_0 {
            data.extend_from_slice(&bytes[start..start + old_len]);
        } else {
            bytes[type_at..type_at + 4].copy_from_slice(&ty.ggml_id().to_le_bytes());
            for _ in 0..info.shape.elem_count() / ty.block_len() {
                let mut b: Vec<u8> = (0..ty.block_bytes()).map(|_| byte()).collect();
                match ty {
                    // 0.4 / 127 and 1e-4 (with a 6-bit scale up to ±32) as f16; 2^-5.
                    WeightType::IQ4NL => b[..2].copy_from_slice(&0x1A73u16.to_le_bytes()),
                    WeightType::IQ4XS => b[..2].copy_from_slice(&0x068Eu16.to_le_bytes()),
                    WeightType::MXFP4 => b[0] = 123,
                    other => panic!("no random blocks for {} here: add its scale", other.name()),
                }
                data.extend(b);
            }
        }
        data.resize(data.len().next_multiple_of(32), 0);
    }
    bytes.truncate(data_at);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn exercise(s: Spec, prompt_len: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), &s);
    let mut engine = common::load_f32_kv(&path);
    assert_eq!(engine.model().architecture(), s.arch);
    let prompt: Vec<u32> = (0..prompt_len as u32).map(|i| (i * 37 + 11) % 256).collect();

    let model = engine.model();
    model.truncate(0);
    let batched = model.forward(&prompt).unwrap();
    assert_eq!(batched.len(), VOCAB);
    assert!(batched.iter().all(|x| x.is_finite()));
    model.truncate(0);
    let every_step: Vec<Vec<f32>> = prompt.iter().map(|&t| model.forward(&[t]).unwrap()).collect();
    let stepped = every_step.last().unwrap();
    let d = max_abs_diff(&batched, stepped);
    assert!(d < 1e-4, "{}: one-pass vs token-by-token logits differ by {d}", s.arch);
    // Every position's logits from one batched pass (teacher forcing) equal the
    // token-by-token ones.
    model.truncate(0);
    let n = prompt.len().min(5);
    let tail = model.forward_tail(&prompt, n).unwrap();
    assert_eq!(tail.len(), n);
    for (i, row) in tail.iter().enumerate() {
        let d = max_abs_diff(row, &every_step[prompt.len() - n + i]);
        assert!(d < 1e-4, "{}: tail row {i} differs from step-by-step by {d}", s.arch);
    }
    assert!(model.forward_tail(&prompt, prompt.len() + 1).is_err());
    assert!(model.forward_tail(&prompt, 0).is_err());
    // Scoring a few ids per position (a jump-forward draft) gives those ids' entries of
    // the step-by-step rows, and the whole row after the last position.
    model.truncate(0);
    let candidates: Vec<Vec<u32>> =
        (0..prompt.len() - 1).map(|i| vec![(i * 7 % VOCAB) as u32, 3, (VOCAB - 1) as u32]).collect();
    assert!(model.forward_scored(&prompt, &candidates[1..]).is_err());
    assert!(model.forward_scored(&prompt[..2], &[vec![VOCAB as u32]]).is_err());
    assert_eq!(model.position(), 0, "{}: a refused draft fed nothing", s.arch);
    let (scored, last) = model.forward_scored(&prompt, &candidates).unwrap();
    let d = max_abs_diff(&last, stepped);
    assert!(d < 1e-4, "{}: scored last row differs from step-by-step by {d}", s.arch);
    for (i, (ids, got)) in candidates.iter().zip(&scored).enumerate() {
        let want: Vec<f32> = ids.iter().map(|&id| every_step[i][id as usize]).collect();
        let d = max_abs_diff(got, &want);
        assert!(d < 1e-3, "{}: scored position {i} differs from step-by-step by {d}", s.arch);
    }
    // Truncating the cache and re-feeding gives the same logits again.
    model.truncate(prompt.len() - 1);
    let again = model.forward(&prompt[prompt.len() - 1..]).unwrap();
    assert!(max_abs_diff(&again, stepped) < 1e-5);

    let params = GenerateParams {
        max_tokens: 12,
        sampling: SamplingParams::greedy(),
        stop_on_eog: false,
        ..GenerateParams::default()
    };
    let a = engine.generate(&prompt, &params, |_| {}).unwrap();
    assert_eq!(a.completion_tokens, 12);
    let b = engine.generate(&prompt, &params, |_| {}).unwrap();
    assert_eq!(a.tokens, b.tokens, "generation is deterministic");
}

#[test]
fn tiny_llama() {
    exercise(spec("llama"), 9);
}

fn qwen2_spec() -> Spec {
    Spec { qkv_bias: true, ..spec("qwen2") }
}

fn qwen3_spec() -> Spec {
    Spec { qk_norm: true, ..spec("qwen3") }
}

fn phi3_spec() -> Spec {
    Spec { fused_qkv: true, fused_gate_up: true, ..spec("phi3") }
}

/// 6 layers: five windowed (window 4) and one global; a 20-token prompt crosses the
/// window many times.
fn gemma3_spec() -> Spec {
    Spec { qk_norm: true, sandwich: true, sliding_window: Some(4), layers: 6, ..spec("gemma3") }
}

/// Granite's four multipliers, none of them 1.
fn granite_spec() -> Spec {
    Spec {
        floats: &[("embedding_scale", 3.0), ("residual_scale", 0.5), ("attention.scale", 0.09), ("logit_scale", 2.5)],
        ..spec("granite")
    }
}

/// 4 layers: the 4th has no RoPE.
fn smollm3_spec() -> Spec {
    Spec { layers: 4, ..spec("smollm3") }
}

/// Every other layer windowed (window 4), soft caps small enough to bend the scores
/// and the logits.
fn gemma2_spec() -> Spec {
    Spec {
        sandwich: true,
        tied_output: true,
        sliding_window: Some(4),
        layers: 4,
        floats: &[("attn_logit_softcapping", 0.8), ("final_logit_softcapping", 3.0)],
        ..spec("gemma2")
    }
}

/// Qwen3-MoE: 4 experts of width 32, 2 per token.
fn qwen3moe_spec() -> Spec {
    Spec { qk_norm: true, moe: Some((4, 2, 32)), ..spec("qwen3moe") }
}

/// The same with Q8_0 experts: they run on toolgate's kernels (plain-row path).
fn qwen3moe_q8_spec() -> Spec {
    Spec { expert_type: GgmlDType::Q8_0, ..qwen3moe_spec() }
}

#[test]
fn tiny_qwen3moe_experts() {
    exercise(qwen3moe_spec(), 9);
}

/// gpt-oss: 4 experts of width 32, 2 per token, biases everywhere, attention sinks,
/// layers 0 and 2 windowed (window 4), YaRN ×4 from a context of 32 on every layer.
fn gpt_oss_spec() -> Spec {
    Spec {
        qkv_bias: true,
        out_bias: true,
        sinks: true,
        moe: Some((4, 2, 32)),
        expert_bias: true,
        ffn_norm: "post_attention_norm",
        sliding_window: Some(4),
        yarn: Some((4.0, 32)),
        layers: 4,
        ..spec("gpt-oss")
    }
}

/// The same with Q8_0 experts: biases on the plain-row path.
fn gpt_oss_q8_spec() -> Spec {
    Spec { expert_type: GgmlDType::Q8_0, ..gpt_oss_spec() }
}

#[test]
fn tiny_gpt_oss_sinks_biases_and_yarn() {
    exercise(gpt_oss_spec(), 12);
}

/// GLM 4.5: layer 0 dense, layer 1 MoE (sigmoid router, selection bias, a shared
/// expert, weights renormalised and scaled ×2.5), QKV biases, half the head rotated,
/// and one NextN block counted in `block_count` whose tensors are absent (llama.cpp's
/// trunk-only files).
fn glm4moe_spec() -> Spec {
    Spec {
        qkv_bias: true,
        moe: Some((4, 2, 32)),
        dense_lead: 1,
        shared_expert: Some(32),
        ffn_norm: "post_attention_norm",
        overrides: &[
            ("block_count", 3),
            ("nextn_predict_layers", 1),
            ("leading_dense_block_count", 1),
            ("expert_shared_count", 1),
            ("expert_gating_func", 2),
            ("rope.dimension_count", 8),
        ],
        floats: &[("expert_weights_scale", 2.5)],
        bools: &[("expert_weights_norm", true)],
        ..spec("glm4moe")
    }
}

#[test]
fn tiny_glm4moe_dense_lead_shared_expert_and_sigmoid_router() {
    exercise(glm4moe_spec(), 9);
}

/// Ministral 3: YaRN ×4 from a context of 8 with its own betas and log multiplier,
/// queries scaled by `1 + 0.3·ln(⌊pos/8⌋ + 1)` (20 positions: three steps).
fn mistral3_spec() -> Spec {
    Spec {
        yarn: Some((4.0, 8)),
        floats: &[
            ("rope.scaling.yarn_log_multiplier", 0.5),
            ("rope.scaling.yarn_beta_fast", 16.0),
            ("rope.scaling.yarn_beta_slow", 0.25),
            ("attention.temperature_scale", 0.3),
        ],
        ..spec("mistral3")
    }
}

#[test]
fn tiny_mistral3_yarn_and_query_temperature() {
    exercise(mistral3_spec(), 20);
}

/// No pre-norms; post-norms; Q/K norms over the whole projection.
fn olmo2_spec() -> Spec {
    Spec { pre_norms: false, sandwich: true, qk_norm: true, full_qk_norm: true, ..spec("olmo2") }
}

#[test]
fn tiny_gemma2_soft_capped_and_windowed() {
    exercise(gemma2_spec(), 12);
}

#[test]
fn tiny_olmo2_post_norms_and_full_qk_norms() {
    exercise(olmo2_spec(), 9);
}

#[test]
fn tiny_granite_with_multipliers() {
    exercise(granite_spec(), 9);
}

#[test]
fn tiny_smollm3_with_a_nope_layer() {
    exercise(smollm3_spec(), 9);
}

#[test]
fn tiny_qwen2_with_qkv_bias() {
    exercise(qwen2_spec(), 9);
}

#[test]
fn tiny_qwen3_with_qk_norm() {
    exercise(qwen3_spec(), 9);
}

#[test]
fn tiny_phi3_with_fused_qkv_and_gate_up() {
    exercise(phi3_spec(), 9);
}

#[test]
fn tiny_gemma3_sliding_window_prefill_equals_decode() {
    exercise(gemma3_spec(), 20);
}

/// Llama with every projection of one weight type, wide enough (256) for the 256-weight
/// blocks: each type llama.cpp and toolgate read ([`WeightType::ALL`]), end to end
/// through a model; the types candle cannot write go through [`write_table_type`].
fn weight_type_specs() -> Vec<(&'static str, Spec)> {
    let typed = |proj, table| Spec { embd: 256, head_dim: 64, ff: 512, proj, table, ..spec("llama") };
    WeightType::ALL
        .into_iter()
        .map(|t| match t.to_candle() {
            Some(dtype) => (t.name(), typed(dtype, None)),
            None => (t.name(), typed(GgmlDType::Q4_0, Some(t))),
        })
        .collect()
}

fn prompt_of(len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| (i * 37 + 11) % 256).collect()
}

/// Every tiny architecture against llama.cpp, the reference: the logits of every
/// position of a prompt equal those llama.cpp computes for the very same file
/// (`tests/fixtures/tiny_models.llama_cpp.json`). The files are written by this test
/// (same seed, same bytes every run); with `TOOLGATE_TINY_OUT=DIR` it also keeps them
/// and their prompts in `DIR`, where `scripts/make-tiny-fixtures.py` (dev-time,
/// llama-cpp-python) records llama.cpp's logits for them.
///
/// Tolerance per position, as a share of `max(1, max |logit|)`:
/// - F32 weights: `1e-4` with the same top token (F32 projections both sides, the Q8_0
///   embedding dequantized exactly by both, llama.cpp's KV cache in f32: the two agree
///   to ~2e-6); `2e-3` for the GeGLU architectures (llama.cpp's GELU reads an f16
///   table: ~7e-4).
/// - F16 and BF16 projections: `2e-3` and `2e-2`. llama.cpp rounds the activations to
///   the weight's type (measured 8.6e-4 and 1.2e-2), toolgate multiplies them as f32.
/// - the 8-bit-activation types (all others, and the Q8_0 experts): both engines round
///   the activations to 8 bits the same way and agree to ~1e-6 — except where a value
///   lies within an ulp of a rounding boundary and the two round it apart: that
///   position, and those attending to it, move by up to ~1.5e-2 (measured: one
///   position of Q4_1's five, one of Q5_K's). So: every position within `2e-2` and at
///   least half within `1e-4`, no top-token check. On a GPU (candle's kernels sum in
///   their own order, and `TOOLGATE_CUDA_MATMUL=f32` does not round) the squared
///   error over all positions, normalized, within `1e-2` instead (an H200 gave at
///   most 3.4e-3; a wrong weight, scale or expert gives ~1).
#[test]
fn tiny_models_match_llama_cpp() {
    let fixture = common::fixture("tiny_models.llama_cpp.json");
    let keep = std::env::var_os("TOOLGATE_TINY_OUT").map(PathBuf::from);
    let cases = [
        ("llama", spec("llama"), 9),
        ("qwen2", qwen2_spec(), 9),
        ("qwen3", qwen3_spec(), 9),
        ("phi3", phi3_spec(), 9),
        ("gemma3", gemma3_spec(), 20),
        ("granite", granite_spec(), 9),
        ("smollm3", smollm3_spec(), 9),
        ("gemma2", gemma2_spec(), 12),
        ("olmo2", olmo2_spec(), 9),
        ("qwen3moe", qwen3moe_spec(), 9),
        ("qwen3moe-q8", qwen3moe_q8_spec(), 9),
        ("gpt-oss", gpt_oss_spec(), 12),
        ("gpt-oss-q8", gpt_oss_q8_spec(), 12),
        ("glm4moe", glm4moe_spec(), 9),
        ("mistral3", mistral3_spec(), 20),
    ];
    let mut cases: Vec<(String, Spec, usize)> = cases.into_iter().map(|(n, s, l)| (n.to_string(), s, l)).collect();
    cases.extend(weight_type_specs().into_iter().map(|(n, s)| (format!("llama-{n}"), s, 5)));
    for (name, s, len) in cases {
        let name = name.as_str();
        let eight_bit = s.expert_type != W || !matches!(s.proj, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
        let (every, top) = match s.proj {
            _ if eight_bit => (2e-2, false),
            GgmlDType::F16 => (2e-3, false),
            GgmlDType::BF16 => (2e-2, false),
            _ if s.arch.starts_with("gemma") => (2e-3, true),
            _ => (1e-4, true),
        };
        // Within 1e-4 at half the positions or more, for the 8-bit types on the CPU.
        let on_cpu = common::device() == DeviceChoice::Cpu;
        let close_half = eight_bit && on_cpu;
        // On a GPU, for weights llama.cpp multiplies with rounded activations, the
        // normalized squared error alone (see above).
        let nmse_only = (eight_bit || s.proj != W) && !on_cpu;
        let dir = tempfile::tempdir().unwrap();
        let path = write_model(dir.path(), &s);
        let prompt = prompt_of(len);
        if let Some(out) = &keep {
            std::fs::create_dir_all(out).unwrap();
            std::fs::copy(&path, out.join(format!("{name}.gguf"))).unwrap();
            std::fs::write(out.join(format!("{name}.prompt.json")), serde_json::to_string(&prompt).unwrap()).unwrap();
        }
        let Some(want) = fixture[name]["logits"].as_array() else {
            assert!(keep.is_some(), "{name}: no llama.cpp logits in the fixture (run scripts/make-tiny-fixtures.py)");
            continue;
        };
        assert_eq!(fixture[name]["prompt"], serde_json::json!(prompt), "{name}: the fixture is for another prompt");
        let mut engine = common::load_f32_kv(&path);
        let rows = engine.model().forward_tail(&prompt, len).unwrap();
        assert_eq!(rows.len(), want.len());
        let (mut worst, mut close, mut sq_err, mut sq) = (0f32, 0, 0f64, 0f64);
        for (i, (got, want)) in rows.iter().zip(want).enumerate() {
            let want: Vec<f32> = want.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            let scale = want.iter().fold(1f32, |a, v| a.max(v.abs()));
            let d = max_abs_diff(got, &want);
            sq_err += got.iter().zip(&want).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>();
            sq += want.iter().map(|b| f64::from(*b).powi(2)).sum::<f64>();
            worst = worst.max(d / scale);
            if nmse_only {
                continue;
            }
            assert!(d <= every * scale, "{name} position {i}: logits differ from llama.cpp's by {d} (scale {scale})");
            close += usize::from(d <= 1e-4 * scale);
            if top {
                let top_token = toolgate::sampling::argmax(got);
                assert_eq!(top_token, toolgate::sampling::argmax(&want), "{name} position {i}: top token");
            }
        }
        assert!(!close_half || 2 * close >= len, "{name}: only {close} of {len} positions within 1e-4 of llama.cpp's");
        let nmse = sq_err / sq;
        assert!(!nmse_only || nmse <= 1e-2, "{name}: normalized squared error {nmse:.1e} from llama.cpp's logits");
        eprintln!(
            "{name}: {len} positions, largest logit difference from llama.cpp {worst:.1e} of the logit scale, normalized squared error {nmse:.1e}"
        );
    }
}

#[test]
fn unsupported_architecture_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), &spec("bert"));
    let err = Engine::load(&path, DeviceChoice::Cpu).unwrap_err();
    assert!(matches!(err, Error::UnsupportedArchitecture { ref arch, .. } if arch == "bert"), "{err}");
    assert!(err.to_string().contains("supported: llama"), "{err}");
}

#[test]
fn context_overflow_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), &Spec { ctx: 16, ..spec("llama") });
    let mut engine = Engine::load(&path, DeviceChoice::Cpu).unwrap();
    let prompt: Vec<u32> = (0..20).collect();
    let err = engine.generate(&prompt, &GenerateParams::default(), |_| {}).unwrap_err();
    assert!(matches!(err, Error::ContextOverflow { prompt_tokens: 20, context_length: 16 }), "{err}");
    // A prompt that fits stops at the window with finish_reason "length".
    let params = GenerateParams { max_tokens: 100, stop_on_eog: false, ..GenerateParams::default() };
    let gen = engine.generate(&prompt[..10], &params, |_| {}).unwrap();
    assert_eq!(gen.finish_reason.as_str(), "length");
    assert!(gen.prompt_tokens + gen.completion_tokens <= 16);
}

#[test]
fn hostile_sizes_in_metadata_are_clear_errors_before_any_allocation() {
    // Each used to size an allocation before a tensor was looked at: 2^31 blocks
    // reserved 800 GB and aborted the process.
    let dir = tempfile::tempdir().unwrap();
    for (key, v, says) in [
        ("block_count", 1u32 << 31, "2147483648 blocks declared; the file holds blocks for 2"),
        ("block_count", 3, "3 blocks declared"),
        ("block_count", 0, "0 blocks declared"),
        ("embedding_length", 1 << 31, "does not fit the tensors"),
        ("attention.key_length", u32::MAX, "does not fit the tensors"),
        ("attention.head_count", 1 << 30, "does not fit the tensors"),
    ] {
        let leaked: &'static [(&'static str, u32)] = Box::leak(Box::new([(key, v)]));
        let path = write_model(dir.path(), &Spec { overrides: leaked, ..spec("llama") });
        let err = Engine::load(&path, DeviceChoice::Cpu).unwrap_err();
        assert!(matches!(err, Error::Metadata { .. }), "{key}={v}: {err}");
        assert!(err.to_string().contains(says) && err.to_string().contains(key), "{key}={v}: {err}");
    }
}

#[test]
fn bad_files_are_clear_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let not_gguf = dir.path().join("not.gguf");
    std::fs::write(&not_gguf, b"this is not a model at all").unwrap();
    let err = Engine::load(&not_gguf, DeviceChoice::Cpu).unwrap_err();
    assert!(err.to_string().contains("bad magic"), "{err}");
    assert!(err.to_string().contains("not.gguf"), "{err}");

    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(Engine::load(&empty, DeviceChoice::Cpu).unwrap_err(), Error::InvalidGguf { .. }));

    let missing = dir.path().join("missing.gguf");
    assert!(matches!(Engine::load(&missing, DeviceChoice::Cpu).unwrap_err(), Error::Io { .. }));

    let good = write_model(dir.path(), &spec("llama"));
    let bytes = std::fs::read(&good).unwrap();
    // Cut inside the header, and inside the tensor data: both are named errors.
    for cut in [10, 100, 2000, bytes.len() / 2, bytes.len() - 1] {
        let p = dir.path().join(format!("cut-{cut}.gguf"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let err = Engine::load(&p, DeviceChoice::Cpu).unwrap_err();
        assert!(matches!(err, Error::InvalidGguf { .. }), "cut at {cut}: {err}");
        assert!(err.to_string().contains(&format!("cut-{cut}.gguf")), "{err}");
    }
    // Random corruption of header bytes never panics.
    let mut state = 1u64;
    for i in 0..200 {
        let mut b = bytes.clone();
        for _ in 0..4 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            let pos = 4 + (state >> 33) as usize % 4000;
            b[pos] ^= (state >> 20) as u8 | 1;
        }
        let p = dir.path().join(format!("corrupt-{i}.gguf"));
        std::fs::write(&p, &b).unwrap();
        let _ = Engine::load(&p, DeviceChoice::Cpu); // Ok or Err, never a panic.
    }
}

/// A valid GGUF whose tensors are of a type toolgate does not read (the 1–3-bit
/// i-quants, ternary TQ1_0) is a clear error naming the type, the first such tensor
/// and the types toolgate reads — not "not a valid GGUF file"; a type id ggml does not
/// define is an invalid file naming the tensor.
#[test]
fn an_unreadable_tensor_type_is_named_with_its_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), &spec("llama"));
    let mut bytes = std::fs::read(&path).unwrap();
    // The tensor directory entry: name, n_dims (u32), dims (u64 each), type (u32).
    let name = b"blk.1.ffn_down.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let type_at = at + 4 + 8 * dims;
    for (ggml_type, type_name) in [(16u32, "IQ2_XXS"), (19, "IQ1_S"), (34, "TQ1_0")] {
        bytes[type_at..type_at + 4].copy_from_slice(&ggml_type.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = Engine::load(&path, DeviceChoice::Cpu).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::UnsupportedTensorType { .. }), "{text}");
        for says in [type_name, "blk.1.ffn_down.weight", "Q4_K", "IQ4_XS", "llama-quantize"] {
            assert!(text.contains(says), "{type_name}: {text}");
        }
        assert!(!text.contains('\n'), "one line, no backtrace: {text}");
    }
    bytes[type_at..type_at + 4].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = Engine::load(&path, DeviceChoice::Cpu).unwrap_err();
    assert!(matches!(err, Error::InvalidGguf { .. }), "{err}");
    assert!(err.to_string().contains("blk.1.ffn_down.weight") && err.to_string().contains("type id 99"), "{err}");
}
