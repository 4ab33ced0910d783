//! Pre-tokenizer regexes for byte-level BPE vocabularies, chosen by
//! `tokenizer.ggml.pre`. The regexes are the ones llama.cpp applies for each
//! pre-tokenizer type; they are applied in sequence, each splitting the pieces the
//! previous one produced (matched and unmatched spans both become pieces).
//!
//! Adding a pre-tokenizer is one match arm here plus a fixture test.

/// The split rules of one byte-level BPE pre-tokenizer.
#[derive(Debug, Clone, Copy)]
pub struct PreTokenizerRule {
    /// Regexes applied in order.
    pub regexes: &'static [&'static str],
    /// If a whole pre-token is already in the vocabulary, take it without merging
    /// (llama3-style BPE).
    pub ignore_merges: bool,
}

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The rule for a `tokenizer.ggml.pre` value, or `None` if toolgate does not know it.
///
/// ```
/// use toolgate::tokenizer::pretokenize::rule_for;
/// assert!(rule_for("smollm").is_some());
/// assert!(rule_for("llama-bpe").unwrap().ignore_merges);
/// assert!(rule_for("no-such-pre").is_none());
/// ```
pub fn rule_for(pre: &str) -> Option<PreTokenizerRule> {
    let rule = |regexes, ignore_merges| Some(PreTokenizerRule { regexes, ignore_merges });
    match pre {
        "default" => rule(&[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"], false),
        "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "olmo" | "jais" | "trillion" => rule(&[GPT2], false),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            rule(&[r"\p{N}", GPT2], false)
        }
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" | "lfm2" => rule(&[LLAMA3], true),
        "qwen2" | "deepseek-r1-qwen" | "megrez" => rule(&[QWEN2], false),
        "gpt-4o" | "llama4" | "minimax-m2" => rule(&[GPT4O], false),
        _ => None,
    }
}
