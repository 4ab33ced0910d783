//! Embed every tool-call format file in `grammars/*.json`, so adding a family is adding
//! a file.
use std::fmt::Write;

fn main() {
    println!("cargo:rerun-if-changed=grammars");
    let mut files: Vec<_> = std::fs::read_dir("grammars")
        .expect("grammars/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = String::from(
        "/// `(file name, contents)` of every `grammars/*.json`.\npub const FORMAT_FILES: &[(&str, &str)] = &[\n",
    );
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let abs = std::fs::canonicalize(&f).unwrap();
        writeln!(out, "    ({name:?}, include_str!({:?})),", abs.display().to_string()).unwrap();
    }
    out.push_str("];\n");
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("formats.rs");
    std::fs::write(dest, out).unwrap();
}
