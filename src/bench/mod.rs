//! The tool-calling reliability bench: the same model, tasks and seed in three modes,
//! judged by BFCL's rules.
//!
//! | mode | template | generation |
//! |---|---|---|
//! | [`Mode::Constrained`] | the model's (or the generic fallback) | calls forced valid by the constraint engine |
//! | [`Mode::Native`] | the same | free, then the family's parser |
//! | [`Mode::PromptOnly`] | toolgate's generic tool prompt | free, then the generic parser |
//! | [`Mode::Server`] | another server's ([`remote`]) | its own, over HTTP |
//!
//! For a model served with `--tool-fallback generic`, native and prompt-only use the
//! same template and parser, so prompt-only is only run when it differs.
//!
//! ```no_run
//! use toolgate::bench::{self, tasks, BenchOptions};
//! use toolgate::engine::Engine;
//! use toolgate::model::DeviceChoice;
//! use toolgate::template::{source::GgufTemplates, ToolFallback};
//!
//! let mut engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", DeviceChoice::Cpu)?;
//! let templates = GgufTemplates::from_gguf(engine.gguf())?;
//! let setup = toolgate::template::gate("smollm2", &templates, Some("llama"), None, ToolFallback::Generic)?;
//! let tasks = tasks::load_bfcl(&tasks::default_bfcl_dir(), "simple_python")?;
//! let results = bench::run(&mut engine, &setup, None, &tasks[..5], &BenchOptions::default(), |_| {});
//! for s in bench::summarize(&results) {
//!     println!("{} {} AST {:.0}%", s.mode, s.category, 100.0 * s.ast_accuracy);
//! }
//! # Ok::<(), toolgate::Error>(())
//! ```

pub mod check;
pub mod remote;
pub mod report;
pub mod tasks;

use std::collections::HashMap;

use serde::Serialize;

use crate::engine::chat::{tool_turn, ToolMode};
use crate::engine::{Engine, GenerateParams};
use crate::sampling::SamplingParams;
use crate::template::ChatSetup;
use crate::tools::ToolChoice;
use check::Judgement;
use tasks::Task;

/// How the model is asked for calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The constraint engine forces every call valid.
    Constrained,
    /// Free generation with the model's template, then the family's parser.
    Native,
    /// Free generation with toolgate's generic tool prompt, then the generic parser.
    PromptOnly,
    /// Another server, over HTTP ([`remote`]): what it does is its own.
    Server,
}

impl Mode {
    /// `constrained`, `native`, `prompt-only`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Constrained => "constrained",
            Self::Native => "native",
            Self::PromptOnly => "prompt-only",
            Self::Server => "server",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "constrained" => Ok(Self::Constrained),
            "native" => Ok(Self::Native),
            "prompt-only" => Ok(Self::PromptOnly),
            other => Err(crate::Error::InvalidParameter {
                name: "mode",
                reason: format!("`{other}`: expected constrained, native or prompt-only"),
            }),
        }
    }
}

/// Which `tool_choice` each task gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChoicePolicy {
    /// `required` where the task expects a call, `auto` where none fits (as BFCL runs).
    #[default]
    RequiredWhereExpected,
    /// `auto` everywhere: the model decides whether to call.
    Auto,
}

/// Bench settings; the same for every mode.
#[derive(Debug, Clone, Serialize)]
pub struct BenchOptions {
    /// Modes to run, in order.
    pub modes: Vec<Mode>,
    /// `tool_choice` per task.
    pub choice: ChoicePolicy,
    /// Token budget per answer.
    pub max_tokens: usize,
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
    /// Seed.
    pub seed: u64,
    /// Feed the text the grammar forces through the model in chunks
    /// ([`GenerateParams::jump_forward`]); constrained mode only.
    pub jump_forward: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            modes: vec![Mode::Constrained, Mode::Native],
            choice: ChoicePolicy::default(),
            max_tokens: 256,
            temperature: 0.0,
            seed: 0,
            jump_forward: false,
        }
    }
}

/// One task in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct TaskResult {
    /// Task id.
    pub id: String,
    /// Category.
    pub category: String,
    /// Mode.
    pub mode: Mode,
    /// The task expects at least one call.
    pub expects_call: bool,
    /// The output parsed cleanly: no malformed call block and no call cut by the
    /// token budget.
    pub parsed: bool,
    /// The checks.
    pub judgement: Judgement,
    /// The turn's finish reason, or `error`.
    pub finish_reason: String,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Of those, tokens fed as text the grammar forced (jump-forward), not sampled.
    pub forced_tokens: usize,
    /// Prefill time (time to first token), seconds.
    pub ttft_s: f64,
    /// Decode time, seconds.
    pub decode_s: f64,
    /// Mask computation, seconds.
    pub mask_s: f64,
    /// The calls, as `name(arguments)`, for reading.
    pub calls: Vec<String>,
    /// Text outside calls (first 200 characters).
    pub content: String,
}

impl TaskResult {
    /// A task that got no answer: `error` says why; nothing parsed, no call.
    pub fn failed(task: &Task, mode: Mode, error: String) -> Self {
        TaskResult {
            id: task.id.clone(),
            category: task.category.clone(),
            mode,
            expects_call: !task.expects_no_call(),
            parsed: false,
            judgement: Judgement { error: Some(error), ..Judgement::default() },
            finish_reason: "error".into(),
            prompt_tokens: 0,
            completion_tokens: 0,
            forced_tokens: 0,
            ttft_s: 0.0,
            decode_s: 0.0,
            mask_s: 0.0,
            calls: Vec::new(),
            content: String::new(),
        }
    }
}

/// The `tool_choice` a task gets under `policy`.
fn choice_for(task: &Task, policy: ChoicePolicy) -> ToolChoice {
    match (policy, task.expects_no_call()) {
        (ChoicePolicy::RequiredWhereExpected, false) => ToolChoice::Required,
        _ => ToolChoice::Auto,
    }
}

/// Whether a task's request allows several calls: where BFCL expects other than one.
fn parallel_for(task: &Task) -> bool {
    task.expected.len() != 1
}

fn validators(task: &Task) -> HashMap<String, jsonschema::Validator> {
    task.tools
        .iter()
        .map(|t| {
            let v = jsonschema::validator_for(&t.function.parameters)
                .or_else(|_| jsonschema::validator_for(&serde_json::json!({})))
                .expect("the empty schema compiles");
            (t.function.name.clone(), v)
        })
        .collect()
}

/// Run every task in every mode of `opts` (mode by mode), calling `on_result` after
/// each. `prompt_only` is the generic-template setup for [`Mode::PromptOnly`]; `None`
/// skips that mode.
///
/// Cost: one generation per task and mode (prefill of the prompt with its tool list,
/// then up to `max_tokens`). An engine error on a task (context overflow, a schema
/// the constraint engine refuses) is recorded as a failed, unparsed result; the run
/// goes on.
pub fn run(
    engine: &mut Engine,
    setup: &ChatSetup,
    prompt_only: Option<&ChatSetup>,
    tasks: &[Task],
    opts: &BenchOptions,
    mut on_result: impl FnMut(&TaskResult),
) -> Vec<TaskResult> {
    let mut out = Vec::new();
    // Schema validators, compiled once per task for every mode.
    let checks: Vec<HashMap<String, jsonschema::Validator>> = tasks.iter().map(validators).collect();
    for &mode in &opts.modes {
        let (setup, tool_mode) = match mode {
            Mode::Constrained => (setup, ToolMode::Constrained),
            Mode::Native => (setup, ToolMode::Native),
            Mode::PromptOnly => match prompt_only {
                Some(s) => (s, ToolMode::Native),
                None => continue,
            },
            Mode::Server => continue,
        };
        for (task, checks) in tasks.iter().zip(&checks) {
            let choice = choice_for(task, opts.choice);
            let params = GenerateParams {
                max_tokens: opts.max_tokens,
                sampling: SamplingParams {
                    temperature: opts.temperature,
                    seed: opts.seed,
                    ..SamplingParams::default()
                },
                jump_forward: opts.jump_forward,
                ..GenerateParams::default()
            };
            let parallel = parallel_for(task);
            let turn =
                tool_turn(engine, setup, task.messages.clone(), &task.tools, &choice, parallel, tool_mode, &params);
            let r = match turn {
                Ok(turn) => {
                    let judgement = check::judge(task, &turn.tool_calls, checks);
                    let cut_call = turn.finish_reason == "length" && !turn.tool_calls.is_empty();
                    TaskResult {
                        id: task.id.clone(),
                        category: task.category.clone(),
                        mode,
                        expects_call: !task.expects_no_call(),
                        parsed: turn.parse_failures == 0 && !cut_call,
                        judgement,
                        finish_reason: turn.finish_reason.to_string(),
                        prompt_tokens: turn.prompt_tokens,
                        completion_tokens: turn.completion_tokens,
                        forced_tokens: turn.timings.forced_tokens,
                        ttft_s: turn.timings.prompt.as_secs_f64(),
                        decode_s: turn.timings.decode.as_secs_f64(),
                        mask_s: turn.timings.mask.as_secs_f64(),
                        calls: turn
                            .tool_calls
                            .iter()
                            .map(|c| format!("{}({})", c.function.name, c.function.arguments))
                            .collect(),
                        content: turn.content.chars().take(200).collect(),
                    }
                }
                Err(e) => TaskResult::failed(task, mode, e.to_string()),
            };
            on_result(&r);
            out.push(r);
        }
    }
    out
}

/// Metrics of one mode on one category (or `all`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Mode.
    pub mode: Mode,
    /// Category, or `all`.
    pub category: String,
    /// Tasks run.
    pub tasks: usize,
    /// Share of answers that parsed cleanly.
    pub parse_rate: f64,
    /// Of the tasks that expect a call, the share answered with at least one (`None`
    /// when no task expects one, as in irrelevance): a mode whose model never calls
    /// parses trivially, and this shows it.
    pub call_rate: Option<f64>,
    /// Share of calls whose arguments are valid for their tool's schema (1 when no call).
    pub schema_valid_rate: f64,
    /// Share of calls naming a declared tool (1 when no call).
    pub declared_rate: f64,
    /// Share of tasks answered right by BFCL's AST rules (irrelevance: no call).
    pub ast_accuracy: f64,
    /// Calls made.
    pub calls: usize,
    /// Generated tokens per second of decode.
    pub tokens_per_s: f64,
    /// Mean time to first token, seconds.
    pub ttft_s: f64,
    /// Mask computation per generated token, milliseconds.
    pub mask_ms_per_token: f64,
    /// Share of the generated tokens that were forced text fed by jump-forward (0 with
    /// it off).
    pub forced_share: f64,
}

fn summary_of(mode: Mode, category: &str, rs: &[&TaskResult]) -> Summary {
    let n = rs.len().max(1) as f64;
    let expecting: Vec<&&TaskResult> = rs.iter().filter(|r| r.expects_call).collect();
    let call_rate = (!expecting.is_empty())
        .then(|| expecting.iter().filter(|r| r.judgement.calls > 0).count() as f64 / expecting.len() as f64);
    let calls: usize = rs.iter().map(|r| r.judgement.calls).sum();
    let rate = |k: usize| if calls == 0 { 1.0 } else { k as f64 / calls as f64 };
    let tokens: usize = rs.iter().map(|r| r.completion_tokens).sum();
    let decode: f64 = rs.iter().map(|r| r.decode_s).sum();
    let mask: f64 = rs.iter().map(|r| r.mask_s).sum();
    Summary {
        mode,
        category: category.to_string(),
        tasks: rs.len(),
        parse_rate: rs.iter().filter(|r| r.parsed).count() as f64 / n,
        call_rate,
        schema_valid_rate: rate(rs.iter().map(|r| r.judgement.schema_valid).sum()),
        declared_rate: rate(rs.iter().map(|r| r.judgement.declared).sum()),
        ast_accuracy: rs.iter().filter(|r| r.judgement.correct).count() as f64 / n,
        calls,
        // The first token comes with prefill; decode covers the rest.
        tokens_per_s: if decode > 0.0 { tokens.saturating_sub(rs.len()) as f64 / decode } else { 0.0 },
        ttft_s: rs.iter().map(|r| r.ttft_s).sum::<f64>() / n,
        mask_ms_per_token: if tokens > 0 { 1000.0 * mask / tokens as f64 } else { 0.0 },
        forced_share: if tokens > 0 {
            rs.iter().map(|r| r.forced_tokens).sum::<usize>() as f64 / tokens as f64
        } else {
            0.0
        },
    }
}

/// Per mode and category, then per mode over `all` tasks; in mode order, categories
/// in order of first appearance.
pub fn summarize(results: &[TaskResult]) -> Vec<Summary> {
    let mut modes: Vec<Mode> = Vec::new();
    let mut cats: Vec<String> = Vec::new();
    for r in results {
        if !modes.contains(&r.mode) {
            modes.push(r.mode);
        }
        if !cats.contains(&r.category) {
            cats.push(r.category.clone());
        }
    }
    let mut out = Vec::new();
    for &m in &modes {
        for c in &cats {
            let rs: Vec<&TaskResult> = results.iter().filter(|r| r.mode == m && &r.category == c).collect();
            if !rs.is_empty() {
                out.push(summary_of(m, c, &rs));
            }
        }
        let all: Vec<&TaskResult> = results.iter().filter(|r| r.mode == m).collect();
        out.push(summary_of(m, "all", &all));
    }
    out
}

/// The bench's task list: `per_category` tasks (0: all) spread evenly over each BFCL
/// category in `categories` (read from `dir`, as [`tasks::load_bfcl`]) and over each
/// task file in `files` (toolgate's format, [`tasks::load_file`]), in that order.
///
/// Cost: reading and converting the files (BFCL's five default categories: ~1,240
/// tasks, milliseconds).
///
/// # Errors
/// Those of [`tasks::load_bfcl`] and [`tasks::load_file`] (a missing or malformed
/// file, naming it).
pub fn load_tasks(
    dir: &std::path::Path,
    categories: &[String],
    files: &[std::path::PathBuf],
    per_category: usize,
) -> crate::Result<Vec<Task>> {
    let mut all = Vec::new();
    for cat in categories.iter().map(|c| c.trim()).filter(|c| !c.is_empty() && *c != "none") {
        all.extend(sample(tasks::load_bfcl(dir, cat)?, per_category));
    }
    for f in files {
        all.extend(sample(tasks::load_file(f)?, per_category));
    }
    Ok(all)
}

/// The setup [`Mode::PromptOnly`] runs with for a model named `name` of architecture
/// `arch` served with `setup`: toolgate's generic tool template, or `None` when
/// `setup` already is it (prompt-only would repeat native).
///
/// Cost: one template gate (a probe of the generic template), milliseconds.
///
/// # Errors
/// Those of [`crate::template::gate()`] on the generic template (none expected).
pub fn prompt_only_setup(name: &str, setup: &ChatSetup, arch: Option<&str>) -> crate::Result<Option<ChatSetup>> {
    use crate::template::ToolFallback;
    let generic = crate::template::gate(name, &Default::default(), arch, None, ToolFallback::Generic)?;
    Ok((generic.source != setup.source).then_some(generic))
}

/// A finished bench: what ran, the summaries and every result (the `--json` file of
/// `toolgate bench tools`).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRun {
    /// The model's name (its file name, or the name sent to a server).
    pub model: String,
    /// The template it ran with, or the server's URL.
    pub template_source: String,
    /// The call family, or `server`.
    pub family: String,
    /// The settings.
    pub options: BenchOptions,
    /// [`summarize`] of the results.
    pub summaries: Vec<Summary>,
    /// Every task in every mode.
    pub results: Vec<TaskResult>,
}

impl BenchRun {
    /// Summarize `results` and keep everything for the report.
    pub fn new(
        model: String,
        template_source: String,
        family: String,
        options: BenchOptions,
        results: Vec<TaskResult>,
    ) -> Self {
        let summaries = summarize(&results);
        Self { model, template_source, family, options, summaries, results }
    }
}

/// `n` tasks spread evenly over `tasks` (all of them when `n` is 0 or too large).
pub fn sample(tasks: Vec<Task>, n: usize) -> Vec<Task> {
    if n == 0 || n >= tasks.len() {
        return tasks;
    }
    let len = tasks.len();
    let picks: Vec<usize> = (0..n).map(|i| i * len / n).collect();
    tasks.into_iter().enumerate().filter(|(i, _)| picks.contains(i)).map(|(_, t)| t).collect()
}
