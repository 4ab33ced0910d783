//! The GGUF header: magic, version, metadata and the tensor directory, parsed by
//! toolgate itself.
//!
//! Why not candle's `gguf_file` parser: it refuses the whole file at the first tensor
//! of a type candle has no enum value for (IQ4_NL, IQ4_XS, MXFP4, …), so a sound file
//! of a type toolgate's own kernels read could not even be opened. This reader knows
//! every type ggml defines ([`GgmlType`]: its name and block layout), so every extent
//! is checked and every tensor is named; which types a model can *run* is a separate
//! question ([`GgmlType::readable`]).
//!
//! Layout (GGUF v2/v3, little-endian): `"GGUF"`, `version: u32`, `n_tensors: u64`,
//! `n_kv: u64`, then `n_kv` × (key string, value type `u32`, value), then `n_tensors`
//! × (name string, `n_dims: u32`, `n_dims` × `u64` (innermost first), type `u32`,
//! offset `u64`), then padding to `general.alignment` (default 32) where tensor data
//! begins. A string is a `u64` length and that many UTF-8 bytes.
//!
//! Hostile input: lengths and counts are never trusted for an allocation — strings
//! and arrays grow only as their bytes are actually read, so a header claiming a
//! 2⁶⁰-byte string fails at the end of the file, not in the allocator.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

pub use candle_core::quantized::gguf_file::Value;

use crate::kernels::formats;
use crate::{Error, Result};

/// One tensor type of ggml (`enum ggml_type` in ggml.h): its id, name and block
/// layout — what is needed to find, size and name any tensor of a GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// ggml's id (the `u32` in the tensor directory).
    pub id: u32,
    /// ggml's name (`"Q4_K"`, `"IQ4_XS"`, …).
    pub name: &'static str,
    /// Elements per block (1 for plain types).
    pub block_len: usize,
    /// Bytes per block.
    pub block_bytes: usize,
}

/// Every type ggml defines, in id order (ids 4, 5 and 31–33, 36–38 were removed).
pub const GGML_TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 36),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
    t(40, "NVFP4", 64, 36),
    t(41, "Q1_0", 128, 18),
    t(42, "Q2_0", 64, 18),
];

const fn t(id: u32, name: &'static str, block_len: usize, block_bytes: usize) -> GgmlType {
    GgmlType { id, name, block_len, block_bytes }
}

/// The tensor types a model loaded by toolgate can hold, as ggml names them: those
/// with a kernel here ([`crate::kernels::WeightType`]) and those candle reads.
pub const READABLE_TYPES: &str =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4";

impl GgmlType {
    /// The type with ggml id `id`, if ggml defines one.
    ///
    /// ```
    /// use toolgate::gguf::GgmlType;
    /// assert_eq!(GgmlType::from_id(23).unwrap().name, "IQ4_XS");
    /// assert!(GgmlType::from_id(4).is_none()); // Q4_2, removed from ggml
    /// ```
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().copied().find(|g| g.id == id)
    }

    /// Whether a model can hold tensors of this type (see [`READABLE_TYPES`]).
    pub fn readable(self) -> bool {
        self.candle().is_some() || crate::kernels::WeightType::from_ggml_id(self.id).is_some()
    }

    /// candle's enum value for this type, for the types candle reads
    /// (`crate::kernels::formats::candle_dtype`).
    pub fn candle(self) -> Option<candle_core::quantized::GgmlDType> {
        formats::candle_dtype(self.id)
    }

    /// Bytes of `elems` elements, `None` if they are not whole blocks or overflow.
    pub fn bytes_of(self, elems: u64) -> Option<u64> {
        if !elems.is_multiple_of(self.block_len as u64) {
            return None;
        }
        (elems / self.block_len as u64).checked_mul(self.block_bytes as u64)
    }
}

/// The name of ggml tensor type `id` (`"type 99"` for one ggml does not define).
pub fn ggml_type_name(id: u32) -> String {
    GgmlType::from_id(id).map_or_else(|| format!("type {id}"), |g| g.name.to_string())
}

/// One entry of the tensor directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Shape in row-major order (GGUF stores it innermost first; this is reversed,
    /// as candle reports shapes: a weight is `(out_features, in_features)`).
    pub dims: Vec<usize>,
    /// The stored type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn elem_count(&self) -> u64 {
        self.dims.iter().map(|&d| d as u64).product()
    }

    /// Bytes of the data in its stored type (checked when the header was read).
    pub fn byte_len(&self) -> u64 {
        self.ty.bytes_of(self.elem_count()).unwrap_or(0)
    }
}

/// A parsed GGUF header.
#[derive(Debug, Clone)]
pub struct Header {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// All metadata, keyed by name.
    pub metadata: HashMap<String, Value>,
    /// The tensor directory, keyed by tensor name.
    pub tensors: HashMap<String, TensorInfo>,
    /// Absolute file offset where tensor data begins.
    pub data_offset: u64,
}

impl Header {
    /// The tensor (the first by name) whose type a model cannot hold, as the error
    /// loading it would give.
    pub fn unreadable_tensor(&self, path: &Path) -> Option<Error> {
        let (name, info) = self.tensors.iter().filter(|(_, i)| !i.ty.readable()).min_by_key(|(name, _)| *name)?;
        Some(Error::UnsupportedTensorType {
            path: path.to_path_buf(),
            tensor: name.clone(),
            ggml_type: info.ty.id,
            name: info.ty.name.to_string(),
        })
    }
}

/// Largest tensor rank ggml has.
const MAX_DIMS: u32 = 4;
/// Nesting limit of array values (GGUF arrays of arrays).
const MAX_DEPTH: usize = 4;

struct Parser<'r, R> {
    r: &'r mut R,
    pos: u64,
}

impl<R: Read> Parser<'_, R> {
    fn bytes<const N: usize>(&mut self) -> std::io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        self.pos += N as u64;
        Ok(b)
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> std::io::Result<u64> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }

    /// A string of at most `len` bytes read so far: the buffer grows with the data.
    fn string(&mut self) -> std::result::Result<String, String> {
        let len = self.u64().map_err(eof)?;
        let mut buf = Vec::with_capacity(len.min(1 << 16) as usize);
        let got = (&mut *self.r).take(len).read_to_end(&mut buf).map_err(|e| e.to_string())?;
        self.pos += got as u64;
        if (got as u64) < len {
            return Err(format!("a string of {len} bytes runs past the end of the data"));
        }
        String::from_utf8(buf).map_err(|_| "a string is not valid UTF-8".to_string())
    }

    fn value(&mut self, ty: u32, depth: usize) -> std::result::Result<Value, String> {
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>().map_err(eof)?[0]),
            1 => Value::I8(self.bytes::<1>().map_err(eof)?[0] as i8),
            2 => Value::U16(self.bytes::<2>().map(u16::from_le_bytes).map_err(eof)?),
            3 => Value::I16(self.bytes::<2>().map(i16::from_le_bytes).map_err(eof)?),
            4 => Value::U32(self.u32().map_err(eof)?),
            5 => Value::I32(self.bytes::<4>().map(i32::from_le_bytes).map_err(eof)?),
            6 => Value::F32(self.bytes::<4>().map(f32::from_le_bytes).map_err(eof)?),
            7 => match self.bytes::<1>().map_err(eof)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("a bool holds {b}")),
            },
            8 => Value::String(self.string()?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(format!("arrays nested deeper than {MAX_DEPTH}"));
                }
                let elem = self.u32().map_err(eof)?;
                let n = self.u64().map_err(eof)?;
                let mut items = Vec::with_capacity(n.min(1 << 16) as usize);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64().map_err(eof)?),
            11 => Value::I64(self.bytes::<8>().map(i64::from_le_bytes).map_err(eof)?),
            12 => Value::F64(self.bytes::<8>().map(f64::from_le_bytes).map_err(eof)?),
            t => return Err(format!("unknown metadata value type {t}")),
        })
    }
}

fn eof(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        "header is truncated (the data ends inside it)".into()
    } else {
        e.to_string()
    }
}

/// Parse a GGUF header from any reader positioned at the file's start (a file, or
/// bytes fetched by range requests). `name` is used in error messages.
///
/// Cost: reads the header once, front to back (for a 262k vocabulary about 6 MB).
///
/// # Errors
/// [`Error::InvalidGguf`] when the magic, version or header structure is invalid,
/// a tensor's type is not one ggml defines, its shape is not whole blocks, or the data
/// ends early; [`Error::UnsupportedTensorType`] when the header is sound but a tensor
/// is of a type toolgate cannot run ([`Header::unreadable_tensor`]).
///
/// ```no_run
/// let mut f = std::fs::File::open("model.gguf")?;
/// let header = toolgate::gguf::read_header(&mut f, "model.gguf".as_ref())?;
/// println!("{} tensors, data at byte {}", header.tensors.len(), header.data_offset);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_header<R: Read>(reader: &mut R, name: &Path) -> Result<Header> {
    let header = parse(reader).map_err(|reason| Error::InvalidGguf { path: name.to_path_buf(), reason })?;
    match header.unreadable_tensor(name) {
        Some(e) => Err(e),
        None => Ok(header),
    }
}

fn parse<R: Read>(r: &mut R) -> std::result::Result<Header, String> {
    let mut p = Parser { r, pos: 0 };
    let magic = p.bytes::<4>().map_err(|_| "file is shorter than the 4-byte magic".to_string())?;
    if &magic != b"GGUF" {
        return Err(format!("bad magic {magic:02x?}, expected \"GGUF\""));
    }
    let version = p.u32().map_err(eof)?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} (toolgate reads versions 2 and 3)"));
    }
    let n_tensors = p.u64().map_err(eof)?;
    let n_kv = p.u64().map_err(eof)?;
    let mut metadata = HashMap::new();
    for _ in 0..n_kv {
        let key = p.string()?;
        let ty = p.u32().map_err(eof)?;
        let value = p.value(ty, 0).map_err(|e| format!("metadata `{key}`: {e}"))?;
        metadata.insert(key, value);
    }
    let mut tensors = HashMap::new();
    for _ in 0..n_tensors {
        let name = p.string()?;
        let bad = |reason: String| format!("tensor `{name}`: {reason}");
        let n_dims = p.u32().map_err(eof)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(bad(format!("{n_dims} dimensions (ggml has 1 to {MAX_DIMS})")));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = p.u64().map_err(eof)?;
            dims.push(
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d <= i64::MAX as usize)
                    .ok_or_else(|| bad(format!("dimension {d}")))?,
            );
        }
        dims.reverse();
        let id = p.u32().map_err(eof)?;
        let ty = GgmlType::from_id(id).ok_or_else(|| bad(format!("type id {id}, which ggml does not define")))?;
        let offset = p.u64().map_err(eof)?;
        let info = TensorInfo { dims, ty, offset };
        let elems = info.dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        match elems.and_then(|e| ty.bytes_of(e)) {
            Some(_) => {}
            None => {
                return Err(bad(format!("shape {:?} is not whole {} blocks of {}", info.dims, ty.name, ty.block_len)))
            }
        }
        if tensors.insert(name.clone(), info).is_some() {
            return Err(format!("tensor `{name}` appears twice"));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => 32,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(v) => return Err(format!("general.alignment is {v:?}, not a power of two")),
    };
    let data_offset = p.pos.div_ceil(alignment) * alignment;
    Ok(Header { version, metadata, tensors, data_offset })
}
