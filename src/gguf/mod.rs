//! Read-only view of a GGUF file: typed metadata access and tensor loading.
//!
//! The header (metadata and the tensor directory) is parsed by toolgate's own reader
//! ([`header`]), which knows every tensor type ggml defines. The file is
//! memory-mapped: a weight that toolgate's kernels run is a window of the mapping
//! ([`GgufFile::tensor_data`]), so loading copies nothing and the model's memory is
//! the file's pages (shared with the page cache, and with other processes serving the
//! same file). Every error names the file and what was wrong; truncated, non-GGUF or
//! corrupt files never panic.
//!
//! ```no_run
//! let gguf = toolgate::gguf::GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! assert_eq!(gguf.architecture()?, "llama");
//! let layers = gguf.u32("llama.block_count")?;
//! # Ok::<(), toolgate::Error>(())
//! ```

pub mod header;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::Device;

pub use header::{ggml_type_name, read_header, GgmlType, Header, TensorInfo, Value, GGML_TYPES, READABLE_TYPES};

use crate::kernels::{formats, WeightBytes};
use crate::{Error, Result};

/// An open GGUF file: its parsed header plus the memory-mapped file.
///
/// Cost: [`GgufFile::open`] maps the file and reads the header (for a 135M model a
/// few MB of vocabulary); tensor data is paged in from disk when first touched.
pub struct GgufFile {
    path: PathBuf,
    header: Header,
    map: Arc<memmap2::Mmap>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("metadata_keys", &self.header.metadata.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Open a GGUF file: map it and parse its header.
    ///
    /// The file must not be changed in place while it is open (toolgate's own
    /// downloads are written beside it and renamed, never rewritten).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened or mapped; [`Error::InvalidGguf`] if
    /// it is not GGUF, is truncated, or a tensor's data would lie past the end of the
    /// file; [`Error::UnsupportedTensorType`] if a tensor is of a type toolgate cannot
    /// run.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |e| Error::Io { path: path.clone(), source: e };
        let file = File::open(&path).map_err(io)?;
        // SAFETY: the mapping is read-only and private to this process; it is sound as
        // long as no one truncates or rewrites the file while it is mapped, which the
        // docs above require (as llama.cpp, candle and safetensors users do).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let header = read_header(&mut std::io::Cursor::new(&map[..]), &path)?;
        let this = Self { path, header, map: Arc::new(map) };
        this.check_tensor_extents()?;
        // The header now lives in `header`: its pages (the vocabulary, megabytes for a
        // 262k-token model) leave the process's resident memory.
        let header_len = (this.header.data_offset as usize).min(this.map.len());
        if let Ok(bytes) = WeightBytes::mapped(this.map.clone(), 0..header_len) {
            bytes.release_pages();
        }
        Ok(this)
    }

    /// Every tensor must lie inside the file: a truncated download is caught at open,
    /// not in the middle of loading.
    fn check_tensor_extents(&self) -> Result<()> {
        let file_size = self.map.len() as u64;
        for (name, info) in &self.header.tensors {
            let end = self.header.data_offset.saturating_add(info.offset).saturating_add(info.byte_len());
            if end > file_size {
                return Err(Error::InvalidGguf {
                    path: self.path.clone(),
                    reason: format!("truncated: tensor `{name}` ends at byte {end} but the file has {file_size} bytes"),
                });
            }
        }
        Ok(())
    }

    /// The quantization the file declares (`general.file_type`, as llama.cpp names
    /// it: `Q4_K_M`, `Q4_1`, `F16`…), else the most common tensor type.
    ///
    /// Cost: a metadata lookup, or one pass over the tensor directory.
    pub fn quantization(&self) -> String {
        const FTYPES: &[(u32, &str)] = &[
            (0, "F32"),
            (1, "F16"),
            (2, "Q4_0"),
            (3, "Q4_1"),
            (7, "Q8_0"),
            (8, "Q5_0"),
            (9, "Q5_1"),
            (10, "Q2_K"),
            (11, "Q3_K_S"),
            (12, "Q3_K_M"),
            (13, "Q3_K_L"),
            (14, "Q4_K_S"),
            (15, "Q4_K_M"),
            (16, "Q5_K_S"),
            (17, "Q5_K_M"),
            (18, "Q6_K"),
            (19, "IQ2_XXS"),
            (20, "IQ2_XS"),
            (21, "Q2_K_S"),
            (22, "IQ3_XS"),
            (23, "IQ3_XXS"),
            (24, "IQ1_S"),
            (25, "IQ4_NL"),
            (26, "IQ3_S"),
            (27, "IQ3_M"),
            (28, "IQ2_S"),
            (29, "IQ2_M"),
            (30, "IQ4_XS"),
            (31, "IQ1_M"),
            (32, "BF16"),
            (36, "TQ1_0"),
            (37, "TQ2_0"),
            (38, "MXFP4_MOE"),
        ];
        if let Ok(Some(t)) = self.opt_u32("general.file_type") {
            if let Some((_, name)) = FTYPES.iter().find(|(id, _)| *id == t) {
                return (*name).to_string();
            }
        }
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for info in self.header.tensors.values() {
            *counts.entry(info.ty.name).or_default() += 1;
        }
        counts.into_iter().max_by_key(|(k, n)| (*n, *k)).map(|(k, _)| k.to_string()).unwrap_or_else(|| "?".into())
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All metadata, keyed by name.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.header.metadata
    }

    /// The raw value of one metadata key, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.header.metadata.get(key)
    }

    fn meta_err(&self, key: &str, reason: impl Into<String>) -> Error {
        Error::Metadata { path: self.path.clone(), key: key.to_string(), reason: reason.into() }
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| self.meta_err(key, "missing"))
    }

    /// `general.architecture`, e.g. `"llama"`, `"gemma3"`.
    ///
    /// # Errors
    /// [`Error::Metadata`] if the key is missing or not a string.
    pub fn architecture(&self) -> Result<&str> {
        self.string("general.architecture")
    }

    /// A string value.
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing or of another type.
    pub fn string(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            v => Err(self.meta_err(key, format!("expected a string, found {:?}", v.value_type()))),
        }
    }

    /// An unsigned integer value of any integer width, as `u32`.
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing, not an integer, negative or too large.
    pub fn u32(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        value_to_u64(v)
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| self.meta_err(key, format!("expected an unsigned integer, found {v:?}")))
    }

    /// A float value (f32 or f64 stored), as `f32`.
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing or not a number.
    pub fn f32(&self, key: &str) -> Result<f32> {
        match self.require(key)? {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            v => value_to_u64(v)
                .map(|x| x as f32)
                .ok_or_else(|| self.meta_err(key, format!("expected a number, found {v:?}"))),
        }
    }

    /// A boolean value.
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing or not a boolean.
    pub fn bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(self.meta_err(key, format!("expected a bool, found {:?}", v.value_type()))),
        }
    }

    /// `Some(u32)` if the key is present, `None` if absent.
    ///
    /// # Errors
    /// [`Error::Metadata`] if present with the wrong type.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        if self.get(key).is_some() {
            self.u32(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `Some(f32)` if the key is present, `None` if absent.
    ///
    /// # Errors
    /// [`Error::Metadata`] if present with the wrong type.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        if self.get(key).is_some() {
            self.f32(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `Some(bool)` if the key is present, `None` if absent.
    ///
    /// # Errors
    /// [`Error::Metadata`] if present with the wrong type.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        if self.get(key).is_some() {
            self.bool(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `Some(&str)` if the key is present, `None` if absent.
    ///
    /// # Errors
    /// [`Error::Metadata`] if present with the wrong type.
    pub fn opt_string(&self, key: &str) -> Result<Option<&str>> {
        if self.get(key).is_some() {
            self.string(key).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Forget the vocabulary arrays (`tokenizer.ggml.tokens`, `.scores`, `.token_type`,
    /// `.merges`) once a [`crate::tokenizer::Tokenizer`] holds them: as GGUF metadata
    /// values they take about 25 MiB for a 262k vocabulary. [`crate::engine::Engine`]
    /// does this after building its tokenizer, so its [`crate::engine::Engine::gguf`]
    /// has every other key but not these.
    pub fn release_vocabulary(&mut self) {
        for key in ["tokens", "scores", "token_type", "merges"] {
            self.header.metadata.remove(&format!("tokenizer.ggml.{key}"));
        }
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing, not an array, or an element is not a string.
    pub fn string_array(&self, key: &str) -> Result<Vec<String>> {
        Ok(self.str_array(key)?.into_iter().map(str::to_string).collect())
    }

    /// An array of strings, borrowed (a vocabulary read without copying its texts).
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing, not an array, or an element is not a string.
    pub fn str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.as_str()),
                v => Err(self.meta_err(key, format!("element {i} is {:?}, not a string", v.value_type()))),
            })
            .collect()
    }

    /// An array of numbers as `f32` (e.g. `tokenizer.ggml.scores`).
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing, not an array, or an element is not a number.
    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::F32(x) => Ok(*x),
                Value::F64(x) => Ok(*x as f32),
                v => value_to_i64(v)
                    .map(|x| x as f32)
                    .ok_or_else(|| self.meta_err(key, format!("element {i} is not a number"))),
            })
            .collect()
    }

    /// An array of integers as `i64` (e.g. `tokenizer.ggml.token_type`).
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing, not an array, or an element is not an integer.
    pub fn int_array(&self, key: &str) -> Result<Vec<i64>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| value_to_i64(v).ok_or_else(|| self.meta_err(key, format!("element {i} is not an integer"))))
            .collect()
    }

    fn array(&self, key: &str) -> Result<&Vec<Value>> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(self.meta_err(key, format!("expected an array, found {:?}", v.value_type()))),
        }
    }

    /// Whether a tensor with this name exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.header.tensors.contains_key(name)
    }

    /// A tensor's directory entry (shape, type, offset), if it exists.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensors.get(name)
    }

    /// The shape (in GGUF's order reversed to row-major, as candle reports it) of a tensor.
    pub fn tensor_dims(&self, name: &str) -> Option<&[usize]> {
        self.header.tensors.get(name).map(|i| i.dims.as_slice())
    }

    /// The stored (ggml) type of a tensor.
    pub fn tensor_type(&self, name: &str) -> Option<GgmlType> {
        self.header.tensors.get(name).map(|i| i.ty)
    }

    /// Total number of weights (elements over all tensors), from the header only.
    pub fn n_params(&self) -> u64 {
        self.header.tensors.values().map(TensorInfo::elem_count).sum()
    }

    /// Bytes of all tensor data in their stored types, from the header only (for a
    /// model with tied embeddings, about what one decode step reads from memory).
    pub fn tensor_bytes(&self) -> u64 {
        self.header.tensors.values().map(TensorInfo::byte_len).sum()
    }

    /// Names of all tensors, unordered.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.header.tensors.keys().map(|s| s.as_str())
    }

    /// The stored bytes of one tensor (type: [`Self::tensor_type`], shape:
    /// [`Self::tensor_dims`]) as a window of the mapped file: what a consumer that
    /// keeps the encoding as it is on disk (toolgate's kernels) needs. Nothing is
    /// copied; pages are read from disk when first touched.
    ///
    /// Cost: O(1).
    ///
    /// # Errors
    /// [`Error::Tensor`] if the tensor is absent.
    pub fn tensor_data(&self, name: &str) -> Result<WeightBytes> {
        let info = self.header.tensors.get(name).ok_or_else(|| self.tensor_err(name, "missing"))?;
        // Extents were checked against the file size at open.
        let start = (self.header.data_offset + info.offset) as usize;
        WeightBytes::mapped(self.map.clone(), start..start + info.byte_len() as usize)
            .map_err(|e| self.tensor_err(name, e))
    }

    fn tensor_err(&self, name: &str, reason: impl std::fmt::Display) -> Error {
        Error::Tensor { path: self.path.clone(), name: name.into(), reason: reason.to_string() }
    }

    /// Read one tensor onto `device` as a candle [`QTensor`], keeping its quantized
    /// type where candle reads it ([`GgmlType::candle`]). IQ4_NL, IQ4_XS and MXFP4,
    /// which candle does not read, arrive as Q8_0
    /// (`crate::kernels::formats::to_q8_0`: twice their bytes, the same weights but
    /// for IQ4_XS's scales rounded to f16).
    ///
    /// Cost: one copy of the tensor's bytes (two onto a GPU; one more for the
    /// rewritten types).
    ///
    /// # Errors
    /// [`Error::Tensor`] if the tensor is absent, candle rejects it, or a rewritten
    /// type's scale is out of Q8_0's range.
    pub fn tensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        let info = self.header.tensors.get(name).ok_or_else(|| self.tensor_err(name, "missing"))?;
        self.qtensor_of(name, info.ty, &self.tensor_data(name)?, info.dims.clone(), device)
    }

    /// `bytes` (all or part of tensor `name`, of type `ty`) as a candle [`QTensor`] of
    /// shape `dims` on `device`: [`Self::tensor`], and one expert of a stacked MoE
    /// tensor.
    ///
    /// # Errors
    /// [`Error::Tensor`] if candle rejects the bytes, or a table type's scale is out of
    /// Q8_0's range.
    pub(crate) fn qtensor_of(
        &self,
        name: &str,
        ty: GgmlType,
        bytes: &WeightBytes,
        dims: Vec<usize>,
        device: &Device,
    ) -> Result<QTensor> {
        let load = |dtype, data: &[u8]| {
            candle_core::quantized::ggml_file::qtensor_from_ggml(dtype, data, dims, device)
                .map_err(|e| self.tensor_err(name, e))
        };
        if let Some(dtype) = ty.candle() {
            return load(dtype, bytes.as_slice());
        }
        // A table type candle does not read (IQ4_NL, IQ4_XS, MXFP4): as Q8_0, which
        // holds each of their 32-weight blocks exactly or nearly (`to_q8_0`).
        let kernel_type = crate::kernels::WeightType::from_ggml_id(ty.id);
        match kernel_type.and_then(|kt| formats::to_q8_0(kt, bytes.as_slice())) {
            Some(q8) => load(candle_core::quantized::GgmlDType::Q8_0, &q8),
            None => Err(self.tensor_err(name, format!("{} weights cannot be read as Q8_0 for {device:?}", ty.name))),
        }
    }
}

fn value_to_u64(v: &Value) -> Option<u64> {
    match *v {
        Value::U8(x) => Some(x as u64),
        Value::U16(x) => Some(x as u64),
        Value::U32(x) => Some(x as u64),
        Value::U64(x) => Some(x),
        Value::I8(x) => u64::try_from(x).ok(),
        Value::I16(x) => u64::try_from(x).ok(),
        Value::I32(x) => u64::try_from(x).ok(),
        Value::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

fn value_to_i64(v: &Value) -> Option<i64> {
    match *v {
        Value::U8(x) => Some(x as i64),
        Value::U16(x) => Some(x as i64),
        Value::U32(x) => Some(x as i64),
        Value::U64(x) => i64::try_from(x).ok(),
        Value::I8(x) => Some(x as i64),
        Value::I16(x) => Some(x as i64),
        Value::I32(x) => Some(x as i64),
        Value::I64(x) => Some(x),
        _ => None,
    }
}
