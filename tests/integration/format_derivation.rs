//! Tool-call layouts derived from the templates themselves (`tools::derive`): every
//! tool-capable template of `../shared/templates` gets a layout that round-trips the
//! calls it renders (one call, and two where it renders parallel calls), through the
//! same setup `serve` builds; templates that render no calls are named, with the
//! override they get.

use std::path::PathBuf;

use toolgate::template::source::GgufTemplates;
use toolgate::template::{inspect, ChatTemplate};
use toolgate::tools::derive::{conformance, derive, Origin};

fn templates_dir() -> PathBuf {
    std::env::var("TOOLGATE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
        .join("templates")
}

fn corpus() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(templates_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    out.sort();
    out
}

/// Tool-capable templates whose own text shows no call: `(template, why)`.
const SHOWS_NO_CALLS: &[&str] = &[];

#[test]
fn every_tool_capable_template_gets_a_layout_that_round_trips() {
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (name, source) in corpus() {
        let templates = GgufTemplates { default: Some(source), tool_use: None };
        let setup = inspect(&templates, None, None).unwrap();
        if !setup.report.caps.tool_capable() {
            table.push(format!("{name:60} not tool-capable"));
            continue;
        }
        let l = &setup.layout;
        table.push(format!("{name:60} {:18} {:9?} parallel={} {}", l.family, l.origin, l.parallel, l.round_trip));
        if std::env::var_os("TOOLGATE_SHOW_SAMPLES").is_some() {
            table.push(format!("    sample: {:?}", l.sample));
        }
        let ok = match l.origin {
            Origin::Derived | Origin::Override => l.round_trip == "passed" || SHOWS_NO_CALLS.contains(&name.as_str()),
            _ => false,
        };
        if !ok {
            failures.push(format!("{name}: {} {:?}: {}", l.family, l.origin, l.round_trip));
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{} templates without a checked layout:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn derivation_reads_layouts_no_override_describes() {
    // GLM writes <tool_call>NAME then <arg_key>/<arg_value> pairs, which the hermes
    // override (its `<tool_call>` marker) does not read: the derived layout is used.
    for name in ["GLM-4.6.jinja", "GLM-4.7-Flash.jinja"] {
        let source = std::fs::read_to_string(templates_dir().join(name)).unwrap();
        let t = ChatTemplate::new(name, source).unwrap();
        let d = derive(&t, true);
        eprintln!("{name}: {d:?}");
    }
}

#[test]
fn derived_layouts_agree_with_the_overrides_on_their_templates() {
    // Each override that reads a template's calls reads what the derived layout reads.
    for (name, source) in corpus() {
        let t = ChatTemplate::new(&name, source).unwrap();
        let Ok(d) = derive(&t, true) else { continue };
        conformance(&d.format, &d.sample, d.parallel).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
