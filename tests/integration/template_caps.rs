//! The prober's flags against llama.cpp's on 39 real templates
//! (`tests/fixtures/templates/expected-caps.jsonl`).

use toolgate::template::caps::probe;
use toolgate::template::ChatTemplate;

const FLAGS: &[&str] = &[
    "supports_tools",
    "supports_tool_calls",
    "supports_system_role",
    "supports_parallel_tool_calls",
    "supports_object_arguments",
    "supports_preserve_reasoning",
    "supports_string_content",
    "supports_typed_content",
    "supports_reasoning_effort",
];

/// Where toolgate's prober answers otherwise than llama.cpp's, each argued in
/// docs/templates.md:
/// - Firefunction v2 concatenates the undefined variable `datetime` (`'Today is ' +
///   datetime`), which Jinja2 and minijinja refuse — transformers cannot render this
///   template at all — while llama.cpp's engine treats it as "": every render fails
///   here. Both provers agree it does not support `tools` (it reads `functions`), so
///   the gate refuses it either way.
/// - Ministral 3 loops over typed content parts (`{% for block in content %}`) and
///   renders their text: that is reading them. llama.cpp's prober counts only indexing
///   and `selectattr` on the content as reading parts.
const KNOWN: &[(&str, &str)] = &[
    ("fireworks-ai-llama-3-firefunction-v2.jinja", "supports_tool_calls"),
    ("fireworks-ai-llama-3-firefunction-v2.jinja", "supports_system_role"),
    ("fireworks-ai-llama-3-firefunction-v2.jinja", "supports_parallel_tool_calls"),
    ("fireworks-ai-llama-3-firefunction-v2.jinja", "supports_object_arguments"),
    ("fireworks-ai-llama-3-firefunction-v2.jinja", "supports_string_content"),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "supports_typed_content"),
];

/// Every flag — the gate's two and the seven others — as llama.cpp's own prober reports
/// it in `/props` (the llama-server of the pinned sources), but for [`KNOWN`].
#[test]
fn flags_match_llama_cpp_on_every_template() {
    let dir = crate::common::templates_dir();
    let expected = crate::common::fixture_text("templates/expected-caps.jsonl");
    let mut failures = Vec::new();
    let mut n = 0;
    for line in expected.lines() {
        let want: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = want["template"].as_str().unwrap();
        let t = ChatTemplate::new(name, std::fs::read_to_string(dir.join(name)).unwrap()).unwrap();
        let report = probe(&t);
        let got = serde_json::to_value(report.caps).unwrap();
        n += 1;
        for flag in FLAGS {
            assert!(want[flag].is_boolean(), "{name}: no {flag} in the fixture");
            if KNOWN.contains(&(name, *flag)) {
                assert_ne!(got[flag], want[flag], "{name}/{flag} is listed as a known difference but now matches");
            } else if got[flag] != want[flag] {
                failures.push(format!(
                    "{name}: {flag} = {} (llama.cpp {}) — {}",
                    got[flag], want[flag], report.reasons[flag]
                ));
            }
        }
    }
    assert_eq!(n, 39);
    assert!(failures.is_empty(), "{} flags differ from llama.cpp's:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn reasoning_effort_is_reported_for_templates_that_read_it() {
    // llama.cpp's reference file predates this flag: the expectations are read off the
    // templates (gpt-oss prints `Reasoning: {{ reasoning_effort }}`; the others never
    // mention the variable).
    let flag = |file: &str| {
        let src = std::fs::read_to_string(crate::common::template(file)).unwrap();
        let report = probe(&ChatTemplate::new(file, src.clone()).unwrap());
        assert_eq!(report.caps.supports_reasoning_effort, src.contains("reasoning_effort"), "{file}: {report:?}");
        report.caps.supports_reasoning_effort
    };
    assert!(flag("openai-gpt-oss-120b.jinja"));
    assert!(!flag("Qwen-Qwen3-0.6B.jinja"));
    assert!(!flag("meta-llama-Llama-3.1-8B-Instruct.jinja"));
}
