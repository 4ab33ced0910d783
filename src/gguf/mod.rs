//! Read-only view of a GGUF file: typed metadata access and tensor loading.
//!
//! One reader for the whole crate, built on candle's [`gguf_file`] parser. Opening a
//! file reads only the header (metadata and the tensor directory); tensor data is read
//! on demand by [`GgufFile::tensor`]. Every error names the file and what was wrong;
//! truncated, non-GGUF or corrupt files never panic.
//!
//! ```no_run
//! let gguf = toolgate::gguf::GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! assert_eq!(gguf.architecture()?, "llama");
//! let layers = gguf.u32("llama.block_count")?;
//! # Ok::<(), toolgate::Error>(())
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;

pub use candle_core::quantized::gguf_file::Value;

use crate::{Error, Result};

/// An open GGUF file: its parsed header plus a handle to read tensors.
///
/// Cost: [`GgufFile::open`] reads the header only (for a 135M model a few MB of
/// vocabulary); tensors are read when asked for.
pub struct GgufFile {
    path: PathBuf,
    content: gguf_file::Content,
    reader: Mutex<BufReader<File>>,
    file_size: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("metadata_keys", &self.content.metadata.len())
            .field("tensors", &self.content.tensor_infos.len())
            .finish()
    }
}

/// Parse a GGUF header from any seekable reader (a file, or bytes fetched by range
/// requests). `name` is used in error messages.
///
/// # Errors
/// [`Error::InvalidGguf`] when the magic, version or header structure is invalid or
/// the data ends early.
pub fn read_header<R: Read + Seek>(reader: &mut R, name: &Path) -> Result<gguf_file::Content> {
    let mut magic = [0u8; 4];
    reader.read_exact(&mut magic).map_err(|_| Error::InvalidGguf {
        path: name.to_path_buf(),
        reason: "file is shorter than the 4-byte magic".into(),
    })?;
    if &magic != b"GGUF" {
        return Err(Error::InvalidGguf {
            path: name.to_path_buf(),
            reason: format!("bad magic {magic:02x?}, expected \"GGUF\""),
        });
    }
    reader.rewind().map_err(|e| Error::Io { path: name.to_path_buf(), source: e })?;
    gguf_file::Content::read(reader).map_err(|e| {
        // The message only: candle appends a backtrace when RUST_BACKTRACE is set.
        let message = e.to_string().lines().next().unwrap_or_default().to_string();
        match message.strip_prefix("unknown dtype for tensor ").and_then(|t| t.trim().parse::<u32>().ok()) {
            Some(ggml_type) => {
                let tensor = reader.rewind().ok().and_then(|()| first_tensor_of_type(reader, ggml_type));
                Error::UnsupportedTensorType {
                    path: name.to_path_buf(),
                    tensor: tensor.unwrap_or_else(|| "?".into()),
                    ggml_type,
                    name: ggml_type_name(ggml_type),
                }
            }
            None => Error::InvalidGguf { path: name.to_path_buf(), reason: header_reason(&message) },
        }
    })
}

fn header_reason(message: &str) -> String {
    if message.contains("failed to fill whole buffer") || message.contains("UnexpectedEof") {
        "header is truncated (file ends inside the metadata)".into()
    } else {
        message.to_string()
    }
}

/// ggml's tensor types by id (`enum ggml_type` in ggml.h), to name one toolgate does
/// not read.
const GGML_TYPES: &[(u32, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (6, "Q5_0"),
    (7, "Q5_1"),
    (8, "Q8_0"),
    (9, "Q8_1"),
    (10, "Q2_K"),
    (11, "Q3_K"),
    (12, "Q4_K"),
    (13, "Q5_K"),
    (14, "Q6_K"),
    (15, "Q8_K"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (30, "BF16"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (39, "MXFP4"),
];

/// The name of ggml tensor type `id` (`"type 99"` for one ggml does not define).
pub fn ggml_type_name(id: u32) -> String {
    GGML_TYPES.iter().find(|(i, _)| *i == id).map_or_else(|| format!("type {id}"), |(_, n)| (*n).to_string())
}

/// The tensor types toolgate reads, as ggml names them.
pub const READABLE_TYPES: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";

/// The name of the first tensor of ggml type `want` in a GGUF (v2/v3) header, read
/// past the metadata without keeping it; `None` when the header does not read.
fn first_tensor_of_type<R: Read>(r: &mut R, want: u32) -> Option<String> {
    fn u32_of<R: Read>(r: &mut R) -> Option<u32> {
        let mut b = [0u8; 4];
        r.read_exact(&mut b).ok().map(|()| u32::from_le_bytes(b))
    }
    fn u64_of<R: Read>(r: &mut R) -> Option<u64> {
        let mut b = [0u8; 8];
        r.read_exact(&mut b).ok().map(|()| u64::from_le_bytes(b))
    }
    fn skip<R: Read>(r: &mut R, n: u64) -> Option<()> {
        (std::io::copy(&mut r.take(n), &mut std::io::sink()).ok()? == n).then_some(())
    }
    fn string<R: Read>(r: &mut R) -> Option<String> {
        let n = u64_of(r).filter(|&n| n <= 1 << 20)?;
        let mut b = vec![0u8; n as usize];
        r.read_exact(&mut b).ok()?;
        Some(String::from_utf8_lossy(&b).into_owned())
    }
    fn skip_value<R: Read>(r: &mut R, t: u32) -> Option<()> {
        match t {
            0 | 1 | 7 => skip(r, 1),
            2 | 3 => skip(r, 2),
            4..=6 => skip(r, 4),
            10..=12 => skip(r, 8),
            8 => {
                let n = u64_of(r)?;
                skip(r, n)
            }
            9 => {
                let (item, count) = (u32_of(r)?, u64_of(r)?);
                let size = match item {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    10..=12 => 8,
                    _ => return (0..count).try_for_each(|_| skip_value(r, item)),
                };
                skip(r, count.checked_mul(size)?)
            }
            _ => None,
        }
    }
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic).ok()?;
    let version = u32_of(r)?;
    if version < 2 {
        return None;
    }
    let (tensors, kvs) = (u64_of(r)?, u64_of(r)?);
    for _ in 0..kvs {
        string(r)?;
        let t = u32_of(r)?;
        skip_value(r, t)?;
    }
    for _ in 0..tensors {
        let name = string(r)?;
        let dims = u32_of(r)?;
        skip(r, 8 * u64::from(dims))?;
        if u32_of(r)? == want {
            return Some(name);
        }
        skip(r, 8)?;
    }
    None
}

impl GgufFile {
    /// Open a GGUF file and parse its header.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened; [`Error::InvalidGguf`] if it is not
    /// GGUF, is truncated, or a tensor's data would lie past the end of the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| Error::Io { path: path.clone(), source: e })?;
        let file_size = file.metadata().map_err(|e| Error::Io { path: path.clone(), source: e })?.len();
        let mut reader = BufReader::new(file);
        let content = read_header(&mut reader, &path)?;
        let this = Self { path, content, reader: Mutex::new(reader), file_size };
        this.check_tensor_extents()?;
        Ok(this)
    }

    /// Every tensor must lie inside the file: a truncated download is caught at open,
    /// not in the middle of loading.
    fn check_tensor_extents(&self) -> Result<()> {
        for (name, info) in &self.content.tensor_infos {
            let elems = info.shape.elem_count();
            let bs = info.ggml_dtype.block_size();
            if elems % bs != 0 {
                return Err(Error::Tensor {
                    path: self.path.clone(),
                    name: name.clone(),
                    reason: format!("{elems} elements is not a multiple of the block size {bs}"),
                });
            }
            let bytes = (elems / bs) as u64 * info.ggml_dtype.type_size() as u64;
            let end = self.content.tensor_data_offset.saturating_add(info.offset).saturating_add(bytes);
            if end > self.file_size {
                return Err(Error::InvalidGguf {
                    path: self.path.clone(),
                    reason: format!(
                        "truncated: tensor `{name}` ends at byte {end} but the file has {} bytes",
                        self.file_size
                    ),
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
        ];
        if let Ok(Some(t)) = self.opt_u32("general.file_type") {
            if let Some((_, name)) = FTYPES.iter().find(|(id, _)| *id == t) {
                return (*name).to_string();
            }
        }
        let mut counts: HashMap<String, usize> = HashMap::new();
        for info in self.content.tensor_infos.values() {
            *counts.entry(format!("{:?}", info.ggml_dtype).to_uppercase()).or_default() += 1;
        }
        counts.into_iter().max_by_key(|(k, n)| (*n, k.clone())).map(|(k, _)| k).unwrap_or_else(|| "?".into())
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All metadata, keyed by name.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    /// The raw value of one metadata key, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
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
            self.content.metadata.remove(&format!("tokenizer.ggml.{key}"));
        }
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    ///
    /// # Errors
    /// [`Error::Metadata`] if missing, not an array, or an element is not a string.
    pub fn string_array(&self, key: &str) -> Result<Vec<String>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
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
        self.content.tensor_infos.contains_key(name)
    }

    /// The shape (in GGUF's order reversed to row-major, as candle reports it) of a tensor.
    pub fn tensor_dims(&self, name: &str) -> Option<&[usize]> {
        self.content.tensor_infos.get(name).map(|i| i.shape.dims())
    }

    /// The stored (GGML) type of a tensor.
    pub fn tensor_ggml_dtype(&self, name: &str) -> Option<GgmlDType> {
        self.content.tensor_infos.get(name).map(|i| i.ggml_dtype)
    }

    /// Total number of weights (elements over all tensors), from the header only.
    pub fn n_params(&self) -> u64 {
        self.content.tensor_infos.values().map(|i| i.shape.elem_count() as u64).sum()
    }

    /// Bytes of all tensor data in their stored types, from the header only (for a
    /// model with tied embeddings, about what one decode step reads from memory).
    pub fn tensor_bytes(&self) -> u64 {
        self.content.tensor_infos.values().map(|i| stored_size(i) as u64).sum()
    }

    /// Names of all tensors, unordered.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.content.tensor_infos.keys().map(|s| s.as_str())
    }

    /// The stored bytes of one tensor (type: [`Self::tensor_ggml_dtype`], shape:
    /// [`Self::tensor_dims`]): what a consumer that keeps the encoding as it is on disk
    /// (toolgate's kernels) needs, without candle's decoded copy in between — loading
    /// a weight this way peaks at its size once, not two or three times.
    ///
    /// Cost: one seek and one read of exactly the tensor's bytes.
    ///
    /// # Errors
    /// [`Error::Tensor`] if the tensor is absent, its extent runs past the end of the
    /// file, or the read fails.
    pub fn tensor_bytes_of(&self, name: &str) -> Result<Vec<u8>> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let bad = |reason: String| Error::Tensor { path: self.path.clone(), name: name.into(), reason };
        let info = self.content.tensor_infos.get(name).ok_or_else(|| bad("missing".into()))?;
        let (dt, elems) = (info.ggml_dtype, info.shape.elem_count());
        if elems % dt.block_size() != 0 {
            return Err(bad(format!("{elems} elements are not whole {dt:?} blocks")));
        }
        let size = stored_size(info);
        let start = self.content.tensor_data_offset.saturating_add(info.offset);
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let file_size = reader.seek(SeekFrom::End(0)).map_err(|e| bad(e.to_string()))?;
        if start.saturating_add(size as u64) > file_size {
            return Err(bad(format!(
                "{size} bytes at offset {start} run past the end of the file ({file_size} bytes)"
            )));
        }
        reader.seek(SeekFrom::Start(start)).map_err(|e| bad(e.to_string()))?;
        let mut bytes = vec![0u8; size];
        reader.read_exact(&mut bytes).map_err(|e| bad(e.to_string()))?;
        Ok(bytes)
    }

    /// Read one tensor onto `device`, keeping its quantized type.
    ///
    /// Cost: reads the tensor's bytes from disk (one seek + one read).
    ///
    /// # Errors
    /// [`Error::Tensor`] if the tensor is absent or its data cannot be read.
    pub fn tensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(Error::Tensor { path: self.path.clone(), name: name.into(), reason: "missing".into() });
        }
        let mut reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        self.content.tensor(&mut *reader, name, device).map_err(|e| Error::Tensor {
            path: self.path.clone(),
            name: name.into(),
            reason: e.to_string(),
        })
    }
}

/// Bytes of a tensor's data in its stored type.
fn stored_size(info: &gguf_file::TensorInfo) -> usize {
    let dt = info.ggml_dtype;
    info.shape.elem_count() / dt.block_size() * dt.type_size()
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
