//! The server driven by the official OpenAI and Anthropic Python SDKs (from PyPI, in
//! the virtualenv `scripts/python-env` makes), on the real SmolLM2.

use std::path::PathBuf;
use std::process::Command;

use crate::common::server::start;

/// The virtualenv's Python (`TOOLGATE_PYENV` overrides where it lives).
fn python() -> PathBuf {
    let env = std::env::var("TOOLGATE_PYENV").map(PathBuf::from).unwrap_or_else(|_| {
        std::env::var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache"))
            .join("toolgate/pyenv")
    });
    let py = env.join("bin/python");
    assert!(py.exists(), "{} is missing: run scripts/python-env first", py.display());
    py
}

fn run_script(script: &str) {
    let s = start(&["--tool-fallback", "generic"]);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk").join(script);
    let out = Command::new(python()).arg(&path).arg(&s.base).arg("SmolLM2-135M-Instruct.Q4_1").output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ok errors"), "{script} did not run to the end:\n{stdout}");
}

#[test]
fn openai_python_sdk() {
    run_script("openai_sdk.py");
}

#[test]
fn anthropic_python_sdk() {
    run_script("anthropic_sdk.py");
}
