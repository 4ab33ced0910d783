//! Embed every tool-call format file in `grammars/*.json`, so adding a family is adding
//! a file; with the `cuda` feature, compile the CUDA kernels in `kernels/*.cu` to PTX.
use std::fmt::Write;
use std::path::Path;

fn main() {
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        cuda_kernels();
    }
    println!("cargo:rerun-if-changed=grammars");
    let files = files_in("grammars", "json");
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

/// Each `kernels/NAME.cu` → `$OUT_DIR/NAME.ptx` with nvcc (`$CUDA_HOME/bin/nvcc`, else the
/// one on `PATH`), for compute capability 7.5: the oldest CUDA 13 supports, so the
/// driver compiles the PTX for any GPU it runs on (src/model/cuda/kernels.rs loads it).
fn cuda_kernels() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    let nvcc = match std::env::var_os("CUDA_HOME") {
        Some(home) if Path::new(&home).join("bin/nvcc").exists() => Path::new(&home).join("bin/nvcc"),
        _ => "nvcc".into(),
    };
    let out = std::env::var("OUT_DIR").unwrap();
    for path in files_in("kernels", "cu") {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let src = path.display().to_string();
        let ptx = Path::new(&out).join(format!("{name}.ptx"));
        let status = std::process::Command::new(&nvcc)
            .args(["--ptx", "-arch=compute_75", "-O3", "-std=c++17", "-o"])
            .arg(&ptx)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {} for {src}: {e} (scripts/cuda-env sets CUDA_HOME)", nvcc.display()));
        assert!(status.success(), "nvcc failed on {src}");
    }
}

/// The files of `dir` ending in `.ext`, sorted.
fn files_in(dir: &str, ext: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}/: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files
}
