//! Coverage and exactness of the schema compiler on MaskBench (JSONSchemaBench's
//! ~11k real-world schemas with ~14k valid and ~23k invalid instances, the benchmark
//! llguidance reports on).
//!
//! ```text
//! cargo run --release --example maskbench -- DIR [--lenient] [--open-objects] [--failures N] [--dump FILE] [--verdicts FILE] [--verbose]
//! ```
//!
//! `DIR` holds the benchmark's `maskbench/data/*.json` files (`{"schema", "tests":
//! [{"data", "valid"}]}`; from github.com/guidance-ai/jsonschemabench, not shipped
//! with toolgate). Each schema is compiled (strict mode unless `--lenient`); each
//! test instance, written as compact JSON in its own key order (the benchmark keeps
//! schema order), must be accepted when valid and rejected when invalid. Prints the
//! totals, the most frequent compile errors, and `N` example failures.

use std::collections::HashMap;
use std::time::Instant;

use toolgate::grammar::regex::Json;
use toolgate::grammar::schema::{Mode, Objects};
use toolgate::grammar::Grammar;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().ok_or_else(|| {
        anyhow::anyhow!(
            "usage: maskbench DIR [--lenient] [--open-objects] [--failures N] [--dump FILE] [--verdicts FILE]"
        )
    })?;
    let verbose = args.iter().any(|a| a == "--verbose");
    let mode = if args.iter().any(|a| a == "--lenient") { Mode::Lenient } else { Mode::Strict };
    // `--open-objects`: JSON Schema's reading of objects without `additionalProperties`.
    let objects = if args.iter().any(|a| a == "--open-objects") { Objects::Open } else { Objects::Closed };
    let show: usize =
        args.iter().position(|a| a == "--failures").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(10);
    // `--dump FILE`: every wrong verdict as a JSON line (file, instance, expected, and
    // where it leaves the grammar: `accepted_prefix` bytes, `context` around them), to
    // sort the failures by cause.
    let mut dump = match args.iter().position(|a| a == "--dump").and_then(|i| args.get(i + 1)) {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    // `--verdicts FILE`: one JSON line per schema (file, compiled, passed, error, and
    // compile_ms when compiled), the format `scripts/maskbench-llguidance.py` writes, to
    // compare engines per schema.
    let mut verdicts = match args.iter().position(|a| a == "--verdicts").and_then(|i| args.get(i + 1)) {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    let mut verdict = |file: &std::path::Path, compiled: Option<f64>, passed: bool, error: Option<String>| {
        use std::io::Write;
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let line = serde_json::json!({"file": name, "compiled": compiled.is_some(), "passed": passed,
            "error": error, "compile_ms": compiled});
        verdicts.as_mut().map_or(Ok(()), |out| writeln!(out, "{line}"))
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    files.sort();
    let (mut schemas, mut compiled, mut passed, mut with_tests) = (0, 0, 0, 0);
    let (mut valid, mut invalid, mut valid_rejected, mut invalid_accepted) = (0, 0, 0, 0);
    let mut reasons: HashMap<String, usize> = HashMap::new();
    let mut failures = Vec::new();
    let mut compile_ms = Vec::new();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
        schemas += 1;
        let tests = doc["tests"].as_array().cloned().unwrap_or_default();
        if !tests.is_empty() {
            with_tests += 1;
        }
        if verbose {
            eprintln!("{}", f.display());
        }
        let t = Instant::now();
        let g = match Grammar::from_schema_with(&doc["schema"], mode, objects, &Json) {
            Ok(g) => g,
            Err(e) => {
                // Group by the message without the pointer.
                let msg = e.to_string();
                let key = msg.split_once(": ").map(|(_, r)| r).unwrap_or(&msg);
                let key: String = key.chars().take(70).collect();
                *reasons.entry(key).or_default() += 1;
                verdict(f, None, false, Some(msg))?;
                continue;
            }
        };
        let ms = t.elapsed().as_secs_f64() * 1e3;
        compile_ms.push(ms);
        compiled += 1;
        let mut ok = true;
        for test in &tests {
            let instance = serde_json::to_string(&test["data"])?;
            let expect = test["valid"].as_bool().unwrap_or(false);
            let got = g.matches(instance.as_bytes());
            if expect {
                valid += 1;
            } else {
                invalid += 1;
            }
            if got != expect {
                ok = false;
                if expect {
                    valid_rejected += 1;
                } else {
                    invalid_accepted += 1;
                }
                let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if let Some(out) = dump.as_mut() {
                    use std::io::Write;
                    // Where the instance leaves the grammar: its longest accepted prefix
                    // (the whole text when only the end is refused).
                    let bytes = instance.as_bytes();
                    let (mut lo, mut hi) = (0, bytes.len());
                    while lo < hi {
                        let mid = (lo + hi).div_ceil(2);
                        if g.is_prefix(&bytes[..mid]) {
                            lo = mid;
                        } else {
                            hi = mid - 1;
                        }
                    }
                    let context = String::from_utf8_lossy(&bytes[lo.saturating_sub(60)..(lo + 20).min(bytes.len())]);
                    let line = serde_json::json!({"file": name, "instance": test["data"], "valid": expect,
                        "accepted_prefix": lo, "context": context});
                    writeln!(out, "{line}")?;
                }
                if failures.len() < show {
                    let what = if expect { "valid rejected" } else { "invalid accepted" };
                    failures.push(format!("{name}: {what}: {}", instance.chars().take(200).collect::<String>()));
                }
            }
        }
        if ok {
            passed += 1;
        }
        verdict(f, Some(ms), ok, None)?;
    }
    compile_ms.sort_by(f64::total_cmp);
    let pct = |p: f64| compile_ms.get(((compile_ms.len().max(1) - 1) as f64 * p) as usize).copied().unwrap_or(0.0);
    println!("mode: {mode:?}, objects: {objects:?}");
    println!("schemas: {schemas} ({with_tests} with tests)");
    println!(
        "compiled: {compiled} ({:.1}%); compiled and every test passed: {passed} ({:.1}%)",
        100.0 * compiled as f64 / schemas as f64,
        100.0 * passed as f64 / schemas as f64
    );
    println!("valid instances: {valid}, wrongly rejected: {valid_rejected}");
    println!("invalid instances: {invalid}, wrongly accepted: {invalid_accepted}");
    println!("compile ms: p50 {:.2}, p99 {:.2}, max {:.2}", pct(0.5), pct(0.99), pct(1.0));
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!("most frequent compile errors:");
    for (r, n) in reasons.iter().take(25) {
        println!("  {n:5}  {r}");
    }
    println!("example failures:");
    for f in failures {
        println!("  {f}");
    }
    Ok(())
}
