//! Call-layout derivation speed (`cargo bench --bench derive`): per template of
//! the corpus `scripts/fetch-templates` caches (or the folder in `TOOLGATE_TEMPLATES`), the time of
//! `tools::derive::derive` and of the whole choice `serve` makes at load
//! (`template::inspect`: the capability probe, derivation and the override check),
//! median and maximum over the runs, one JSON line each, then the slowest. The
//! issue's bound is 50 ms per template at load. Under `cargo test` it runs once as a
//! smoke test.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use toolgate::template::source::GgufTemplates;
use toolgate::template::{inspect, ChatTemplate};
use toolgate::tools::derive::derive;

fn templates_dir() -> PathBuf {
    let dir = common::cache_dir("TOOLGATE_TEMPLATES", "templates/llama-cpp-python-0.3.36");
    assert!(dir.is_dir(), "{} is missing: run scripts/fetch-templates first", dir.display());
    dir
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let runs = if smoke { 1 } else { 21 };
    let mut files: Vec<PathBuf> = std::fs::read_dir(templates_dir())
        .expect("the templates folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .collect();
    files.sort();
    let mut slowest = (String::new(), Duration::ZERO);
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        let Ok(template) = ChatTemplate::new(&name, source.clone()) else { continue };
        let (mut d, mut l) = (Vec::new(), Vec::new());
        let mut derived = false;
        for _ in 0..runs {
            let t0 = Instant::now();
            derived = derive(&template, true).is_ok();
            d.push(t0.elapsed());
            let t0 = Instant::now();
            let templates = GgufTemplates { default: Some(source.clone()), tool_use: None };
            let _ = inspect(&templates, None, None);
            l.push(t0.elapsed());
        }
        let worst = *l.iter().max().unwrap();
        if worst > slowest.1 {
            slowest = (name.clone(), worst);
        }
        println!(
            "{}",
            serde_json::json!({"template": name, "derived": derived,
                "derive_ms_p50": ms(median(d.clone())), "derive_ms_max": ms(*d.iter().max().unwrap()),
                "load_ms_p50": ms(median(l)), "load_ms_max": ms(worst)})
        );
    }
    println!("{}", serde_json::json!({"slowest_load": slowest.0, "load_ms_max": ms(slowest.1)}));
}
