//! Which `.gguf` file of a repository to download.
//!
//! `--file` wins. Otherwise the first quantization of [`PREFERENCE`] that a file name
//! carries (case-insensitive, as a whole word: `q4_0` does not match `q4_0_4x4`), a
//! lone model file is taken as is, and anything else is an error that lists the
//! candidates. Vision projectors (`mmproj*`) are never picked automatically. Split
//! models (`NAME-00001-of-00003.gguf`) are recognised and reported with all their
//! shards so the caller can refuse them clearly.

use super::HubError;

/// Quantizations in the order they are preferred when no `--file` is given.
pub const PREFERENCE: &[&str] = &["q4_k_m", "q5_k_m", "q4_0", "q8_0", "q6_k", "q3_k_m", "q2_k"];

/// The file chosen for download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// Repository path of the file (the first shard for a split model).
    pub file: String,
    /// Every shard, in order, when the file is part of a split model; empty otherwise.
    pub shards: Vec<String>,
    /// Why this file: `--file`, the matched quantization, or the only model file.
    pub reason: String,
}

/// `(base, index, count)` for a shard name such as `m-00002-of-00003.gguf`.
///
/// ```
/// use toolgate::hub::quant::split_part;
/// assert_eq!(split_part("m-00002-of-00003.gguf"), Some(("m".to_string(), 2, 3)));
/// assert_eq!(split_part("m.Q4_K_M.gguf"), None);
/// ```
pub fn split_part(file: &str) -> Option<(String, u32, u32)> {
    let stem = file.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (base, index) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(index) || !digits(count) {
        return None;
    }
    Some((base.to_string(), index.parse().ok()?, count.parse().ok()?))
}

/// Whether `name` (lower-cased) carries `quant` as a whole word.
fn has_quant(name: &str, quant: &str) -> bool {
    let word = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    let bytes = name.as_bytes();
    name.match_indices(quant).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + quant.len()).copied();
        !word(before) && !word(after)
    })
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Choose the file to download among a repository's files (any names; only `.gguf`
/// ones are considered).
///
/// Cost: linear in the number of files.
///
/// # Errors
/// [`HubError::NoGguf`] when the repository has no `.gguf` file;
/// [`HubError::FileNotFound`] when `wanted` is not one of them;
/// [`HubError::AmbiguousFile`] when no preferred quantization matches and there is more
/// than one model file.
///
/// ```
/// use toolgate::hub::quant::pick;
/// let files = ["README.md", "m.Q8_0.gguf", "m.Q4_K_M.gguf", "mmproj-m.gguf"].map(String::from);
/// assert_eq!(pick("org/m", &files, None)?.file, "m.Q4_K_M.gguf");
/// assert_eq!(pick("org/m", &files, Some("m.Q8_0.gguf"))?.file, "m.Q8_0.gguf");
/// # Ok::<(), toolgate::hub::HubError>(())
/// ```
pub fn pick(repo: &str, files: &[String], wanted: Option<&str>) -> Result<Choice, HubError> {
    let ggufs: Vec<&String> = files.iter().filter(|f| f.to_ascii_lowercase().ends_with(".gguf")).collect();
    if ggufs.is_empty() {
        return Err(HubError::NoGguf { repo: repo.to_string() });
    }
    let listing = || ggufs.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    let with_shards = |file: &str, reason: String| {
        let shards = match split_part(file) {
            Some((base, _, count)) => {
                let mut shards: Vec<String> = ggufs
                    .iter()
                    .filter(|g| split_part(g).is_some_and(|(b, _, c)| b == base && c == count))
                    .map(|g| g.to_string())
                    .collect();
                shards.sort();
                shards
            }
            None => Vec::new(),
        };
        let first = shards.first().cloned().unwrap_or_else(|| file.to_string());
        Choice { file: first, shards, reason }
    };
    if let Some(w) = wanted {
        return match ggufs.iter().find(|g| g.as_str() == w) {
            Some(g) => Ok(with_shards(g, "--file".into())),
            None => Err(HubError::FileNotFound { repo: repo.to_string(), file: w.to_string(), available: listing() }),
        };
    }
    let models: Vec<&String> =
        ggufs.iter().copied().filter(|g| !base_name(g).to_ascii_lowercase().starts_with("mmproj")).collect();
    for quant in PREFERENCE {
        let mut hits: Vec<&String> =
            models.iter().copied().filter(|g| has_quant(&base_name(g).to_ascii_lowercase(), quant)).collect();
        // A single file before a split set, then the shortest path (the main copy
        // rather than one in a sub-folder).
        hits.sort_by_key(|g| (split_part(g).is_some(), g.len(), g.to_string()));
        if let Some(g) = hits.first() {
            return Ok(with_shards(g, format!("preferred quantization {}", quant.to_uppercase())));
        }
    }
    let mut groups: Vec<String> =
        models.iter().map(|g| split_part(g).map(|(b, _, c)| format!("{b}-of-{c}")).unwrap_or(g.to_string())).collect();
    groups.sort();
    groups.dedup();
    if groups.len() == 1 {
        return Ok(with_shards(models[0], "the only model file".into()));
    }
    Err(HubError::AmbiguousFile { repo: repo.to_string(), available: listing() })
}
