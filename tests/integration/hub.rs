//! The Hub client against a fake hub on 127.0.0.1 serving the real SmolLM2 GGUF:
//! quant pick, header pre-check by range, gated/private/license errors, CDN
//! redirect, resume after a cut, sha256 mismatch, gate refusal and quarantine,
//! split files, offline cache, and the token never leaving the Hub's host, the logs
//! or the cache.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use crate::common::fake_hub::{sha256_hex, FakeFile, FakeHub, FakeRepo, GOOD_TOKEN};
use toolgate::hub::{GateOptions, Hub, HubConfig, HubError, PrecheckSource, PullOptions, Token};
use toolgate::template::ToolFallback;

/// The real SmolLM2 file (its template is plain ChatML: refused without a fallback).
fn smollm2() -> Arc<Vec<u8>> {
    static BYTES: OnceLock<Arc<Vec<u8>>> = OnceLock::new();
    BYTES.get_or_init(|| Arc::new(std::fs::read(common::model(common::SMOLLM2)).unwrap())).clone()
}

/// SmolLM2's weights with Qwen 2.5's tool-calling template in the metadata: a model
/// that passes the gate on its own template.
fn smollm2_with_tools() -> Arc<Vec<u8>> {
    static BYTES: OnceLock<Arc<Vec<u8>>> = OnceLock::new();
    BYTES
        .get_or_init(|| {
            use candle_core::quantized::gguf_file::{self, Value};
            let template_path = crate::common::template("Qwen-Qwen2.5-7B-Instruct.jinja");
            let template = std::fs::read_to_string(&template_path).unwrap();
            let bytes = smollm2();
            let mut src = std::io::Cursor::new(&bytes[..]);
            let content = gguf_file::Content::read(&mut src).unwrap();
            let mut meta: Vec<(String, Value)> = content
                .metadata
                .iter()
                .filter(|(k, _)| k.as_str() != "tokenizer.chat_template")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            meta.push(("tokenizer.chat_template".into(), Value::String(template)));
            let tensors: Vec<(String, candle_core::quantized::QTensor)> = content
                .tensor_infos
                .keys()
                .map(|n| (n.clone(), content.tensor(&mut src, n, &candle_core::Device::Cpu).unwrap()))
                .collect();
            let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
            let tensor_refs: Vec<(&str, &candle_core::quantized::QTensor)> =
                tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
            let mut out = std::io::Cursor::new(Vec::new());
            gguf_file::write(&mut out, &meta_refs, &tensor_refs).unwrap();
            Arc::new(out.into_inner())
        })
        .clone()
}

const Q4KM: &str = "smollm2-135m-instruct-q4_k_m.gguf";

/// A public repository with several quantizations (only Q4_K_M is served).
fn public_repo(content: Arc<Vec<u8>>) -> FakeRepo {
    FakeRepo {
        files: vec![
            FakeFile::listed("README.md"),
            FakeFile::listed("smollm2-135m-instruct-q8_0.gguf"),
            FakeFile::served(Q4KM, content),
            FakeFile::listed("smollm2-135m-instruct-q2_k.gguf"),
        ],
        ..FakeRepo::default()
    }
}

fn hub(fake: &FakeHub, cache: &Path, token: Option<&str>) -> Hub {
    Hub::new(HubConfig {
        endpoint: fake.endpoint.clone(),
        token: token.and_then(Token::new),
        cache: toolgate::hub::Cache::new(cache),
        offline: false,
        attempts: 5,
    })
}

fn generic() -> PullOptions {
    PullOptions { gate: GateOptions { fallback: ToolFallback::Generic, chat_template: None }, ..PullOptions::default() }
}

fn start(repos: &[(&str, FakeRepo)]) -> FakeHub {
    FakeHub::start(repos.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<HashMap<_, _>>())
}

fn file_downloads(fake: &FakeHub) -> usize {
    fake.seen().iter().filter(|s| s.method == "GET" && s.path.contains("/resolve/") && s.range.is_none()).count()
}

/// Every regular file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_symlink() {
                continue;
            } else if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn public_repo_pick_precheck_download_and_cache() {
    let fake = start(&[("test/tools", public_repo(smollm2_with_tools()))]);
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(&fake, tmp.path(), None);
    let pulled = hub.pull("test/tools", &PullOptions::default(), &mut ()).unwrap();
    assert_eq!(pulled.file, Q4KM, "Q4_K_M is preferred over Q8_0 and Q2_K");
    assert!(!pulled.from_cache);
    let pre = pulled.precheck.as_ref().unwrap();
    assert!(pre.verdict.refusal.is_none(), "{pre:?}");
    assert_eq!(pre.verdict.family.as_deref(), Some("hermes"));
    let PrecheckSource::Header { bytes, requests } = pre.source else { panic!("{pre:?}") };
    let size = smollm2_with_tools().len() as u64;
    assert!(bytes < size / 10 && requests >= 1, "the pre-check read {bytes} of {size} bytes");
    // The pre-check used range requests only; then exactly one full download.
    assert_eq!(file_downloads(&fake), 1);

    // In the huggingface_hub layout: snapshot symlink → verified blob, refs/main.
    let sha = sha256_hex(&smollm2_with_tools());
    let repo_dir = tmp.path().join("models--test--tools");
    assert!(std::fs::symlink_metadata(&pulled.path).unwrap().file_type().is_symlink());
    assert_eq!(
        std::fs::canonicalize(&pulled.path).unwrap(),
        std::fs::canonicalize(repo_dir.join("blobs").join(&sha)).unwrap()
    );
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(), pulled.commit);
    assert_eq!(toolgate::hub::sha256_file(&pulled.path).unwrap(), sha);
    assert!(files_under(&repo_dir).iter().all(|p| !p.to_string_lossy().ends_with(".incomplete")));

    // The file loads and passes the gate as a model.
    let engine = toolgate::engine::Engine::load(&pulled.path, toolgate::model::DeviceChoice::Cpu).unwrap();
    assert_eq!(engine.tokenizer().vocab_size(), 49152);

    // Pulling again finds it in the cache and downloads nothing.
    fake.clear_log();
    let again = hub.pull("test/tools", &PullOptions::default(), &mut ()).unwrap();
    assert!(again.from_cache);
    assert_eq!(again.path, pulled.path);
    assert_eq!(file_downloads(&fake), 0);

    // Offline: the cache alone answers; an unknown repository is a clear error.
    let offline = Hub::new(HubConfig { offline: true, ..hub.config().clone() });
    assert_eq!(offline.pull("test/tools", &PullOptions::default(), &mut ()).unwrap().path, pulled.path);
    let err = offline.pull("test/other", &PullOptions::default(), &mut ()).unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");

    // `--file` wins over the preference, and a missing one lists what there is.
    let err =
        hub.pull("test/tools", &PullOptions { file: Some("nope.gguf".into()), ..PullOptions::default() }, &mut ());
    let msg = err.unwrap_err().to_string();
    assert!(msg.contains("nope.gguf") && msg.contains(Q4KM), "{msg}");
}

#[test]
fn gated_private_and_license_errors_come_before_any_download() {
    let gated = FakeRepo { gated: Some("manual"), ..public_repo(smollm2()) };
    let private = FakeRepo { private: true, ..public_repo(smollm2()) };
    let fake = start(&[("test/gated", gated), ("test/private", private)]);
    let tmp = tempfile::tempdir().unwrap();

    let err = hub(&fake, tmp.path(), None).pull("test/gated", &generic(), &mut ()).unwrap_err();
    assert!(matches!(err, HubError::NeedsToken { kind: "gated", .. }), "{err}");
    assert!(
        err.to_string().contains("model test/gated is gated, set HF_TOKEN (and accept its license on the Hub)"),
        "{err}"
    );
    assert!(fake.seen().iter().all(|s| !s.path.contains("/resolve/")), "nothing was requested from the file");

    let err = hub(&fake, tmp.path(), None).pull("test/private", &generic(), &mut ()).unwrap_err();
    assert!(matches!(err, HubError::Unauthorized { token_sent: false, .. }), "{err}");
    assert!(err.to_string().contains("authentication required"), "{err}");

    let err = hub(&fake, tmp.path(), Some("hf_not_accepted")).pull("test/gated", &generic(), &mut ()).unwrap_err();
    assert!(matches!(err, HubError::Forbidden { .. }), "{err}");
    assert!(err.to_string().contains("accept the model's license on the Hub"), "{err}");
    let err = hub(&fake, tmp.path(), Some("hf_wrong")).pull("test/private", &generic(), &mut ()).unwrap_err();
    assert!(matches!(err, HubError::Unauthorized { token_sent: true, .. }), "{err}");
    assert_eq!(file_downloads(&fake), 0);
    assert!(files_under(tmp.path()).is_empty(), "nothing written to the cache");

    let pulled = hub(&fake, tmp.path(), Some(GOOD_TOKEN)).pull("test/gated", &generic(), &mut ()).unwrap();
    assert_eq!(toolgate::hub::sha256_file(&pulled.path).unwrap(), sha256_hex(&smollm2()));
    for f in files_under(tmp.path()) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(!bytes.windows(GOOD_TOKEN.len()).any(|w| w == GOOD_TOKEN.as_bytes()), "token in {}", f.display());
    }
}

#[test]
fn cdn_redirect_keeps_the_token_on_the_hub() {
    let mut repo = FakeRepo { gated: Some("auto"), ..public_repo(smollm2()) };
    repo.files[2].cdn = true;
    let fake = start(&[("test/cdn", repo)]);
    let tmp = tempfile::tempdir().unwrap();
    let pulled = hub(&fake, tmp.path(), Some(GOOD_TOKEN)).pull("test/cdn", &generic(), &mut ()).unwrap();
    assert_eq!(toolgate::hub::sha256_file(&pulled.path).unwrap(), sha256_hex(&smollm2()));
    let seen = fake.seen();
    let cdn: Vec<_> = seen.iter().filter(|s| s.path.starts_with("/cdn/")).collect();
    assert!(cdn.iter().any(|s| s.method == "GET" && s.range.is_none()), "the bytes came from the CDN: {seen:?}");
    assert!(cdn.iter().any(|s| s.range.is_some()), "the header pre-check followed the redirect with Range");
    assert!(cdn.iter().all(|s| s.authorization.is_none()), "the token went to the CDN: {cdn:?}");
    assert!(seen.iter().filter(|s| s.path.contains("/resolve/")).all(|s| s.authorization.is_some()));
}

#[test]
fn a_cut_connection_resumes_with_range() {
    let mut repo = public_repo(smollm2());
    repo.files[2].cut_after = Some(10 << 20);
    let fake = start(&[("test/flaky", repo)]);
    let tmp = tempfile::tempdir().unwrap();
    let pulled = hub(&fake, tmp.path(), None).pull("test/flaky", &generic(), &mut ()).unwrap();
    assert_eq!(toolgate::hub::sha256_file(&pulled.path).unwrap(), sha256_hex(&smollm2()));
    let resumed: Vec<_> =
        fake.seen().into_iter().filter(|s| s.range.as_deref().is_some_and(|r| r.ends_with('-'))).collect();
    assert_eq!(resumed.len(), 1, "one resume: {resumed:?}");
    let from: u64 =
        resumed[0].range.as_deref().unwrap().trim_start_matches("bytes=").trim_end_matches('-').parse().unwrap();
    assert!((1 << 20..=10 << 20).contains(&from), "resumed from byte {from}");
}

#[test]
fn a_wrong_sha256_leaves_nothing_behind() {
    let mut repo = public_repo(smollm2());
    repo.files[2].advertised_sha = Some("ab".repeat(32));
    let fake = start(&[("test/badsha", repo)]);
    let tmp = tempfile::tempdir().unwrap();
    let err = hub(&fake, tmp.path(), None).pull("test/badsha", &generic(), &mut ()).unwrap_err();
    let HubError::ChecksumMismatch { expected, actual, .. } = &err else { panic!("{err}") };
    assert_eq!((expected.as_str(), actual.as_str()), ("ab".repeat(32).as_str(), sha256_hex(&smollm2()).as_str()));
    let left = files_under(tmp.path());
    assert!(left.iter().all(|p| !p.to_string_lossy().contains("blobs")), "left behind: {left:?}");
    assert!(!tmp.path().join("models--test--badsha/snapshots").exists());
}

#[test]
fn the_gate_refuses_before_download_and_quarantines_after_force() {
    let fake = start(&[("test/chatml", public_repo(smollm2()))]);
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(&fake, tmp.path(), None);
    let err = hub.pull("test/chatml", &PullOptions::default(), &mut ()).unwrap_err();
    let HubError::Refused { reason, .. } = &err else { panic!("{err}") };
    assert!(reason.contains("does not support tool calling") && reason.contains("--tool-fallback generic"), "{reason}");
    assert_eq!(file_downloads(&fake), 0, "refused on the header alone");
    assert!(files_under(tmp.path()).is_empty());

    let forced = PullOptions { force: true, ..PullOptions::default() };
    let err = hub.pull("test/chatml", &forced, &mut ()).unwrap_err();
    let HubError::VerifyFailed { quarantined, reason, .. } = &err else { panic!("{err}") };
    assert!(quarantined.starts_with(tmp.path().join("toolgate-quarantine")));
    assert_eq!(toolgate::hub::sha256_file(quarantined).unwrap(), sha256_hex(&smollm2()));
    let note = std::fs::read_to_string(format!("{}.reason", quarantined.display())).unwrap();
    assert!(note.contains(reason.as_str()));
    assert!(hub.cache().list().is_empty(), "nothing left where a model is expected");

    // With the fallback the same file passes (the serve command's `--tool-fallback generic`).
    let pulled = hub.pull("test/chatml", &generic(), &mut ()).unwrap();
    assert_eq!(
        pulled.precheck.unwrap().verdict.template_source.unwrap(),
        "toolgate generic tool template (--tool-fallback generic)"
    );
}

/// A sound GGUF of a weight type toolgate does not read (IQ2_XXS here) is refused on
/// its header, naming the type and the tensor, before anything is downloaded.
#[test]
fn an_unreadable_weight_type_is_refused_before_download() {
    let mut bytes = smollm2().as_ref().clone();
    let name = b"blk.1.ffn_down.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    bytes[at + 4 + 8 * dims..at + 8 + 8 * dims].copy_from_slice(&16u32.to_le_bytes());
    let fake = start(&[("test/iq2", public_repo(Arc::new(bytes)))]);
    let tmp = tempfile::tempdir().unwrap();
    let err = hub(&fake, tmp.path(), None).pull("test/iq2", &generic(), &mut ()).unwrap_err();
    let HubError::Refused { reason, .. } = &err else { panic!("{err}") };
    assert!(reason.contains("IQ2_XXS") && reason.contains("blk.1.ffn_down.weight"), "{reason}");
    assert_eq!(file_downloads(&fake), 0, "refused on the header alone");
    assert!(files_under(tmp.path()).is_empty());
}

#[test]
fn split_models_are_refused_clearly() {
    let repo = FakeRepo {
        files: vec![
            FakeFile::listed("big-Q4_K_M-00002-of-00002.gguf"),
            FakeFile::listed("big-Q4_K_M-00001-of-00002.gguf"),
        ],
        ..FakeRepo::default()
    };
    let fake = start(&[("test/split", repo)]);
    let tmp = tempfile::tempdir().unwrap();
    let err = hub(&fake, tmp.path(), None).pull("test/split", &generic(), &mut ()).unwrap_err();
    let HubError::SplitUnsupported { shards, .. } = &err else { panic!("{err}") };
    assert_eq!(shards.len(), 2);
    assert!(err.to_string().contains("llama-gguf-split --merge"), "{err}");
    assert!(fake.seen().iter().all(|s| !s.path.contains("/resolve/")));
}

#[test]
fn no_range_support_falls_back_to_the_hub_hint_and_no_etag_to_paths_info() {
    let mut repo = public_repo(smollm2());
    repo.files[2].no_range = true;
    repo.files[2].no_etag = true;
    repo.template_hint = Some(toolgate::template::source::CHATML.to_string());
    let fake = start(&[("test/plain", repo)]);
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(&fake, tmp.path(), None);
    let err = hub.pull("test/plain", &PullOptions::default(), &mut ()).unwrap_err();
    assert!(matches!(err, HubError::Refused { .. }), "the hint's ChatML template is refused: {err}");
    let pulled = hub.pull("test/plain", &generic(), &mut ()).unwrap();
    let pre = pulled.precheck.unwrap();
    assert!(matches!(pre.source, PrecheckSource::HubHint { .. }), "{pre:?}");
    assert!(fake.seen().iter().any(|s| s.path.contains("paths-info")), "sha256 from paths-info");
    assert_eq!(toolgate::hub::sha256_file(&pulled.path).unwrap(), sha256_hex(&smollm2()));
}

#[test]
fn cli_pull_list_serve_rm_and_the_token_stays_secret() {
    let mut repo = public_repo(smollm2());
    repo.gated = Some("manual");
    let fake = start(&[("test/cli", repo)]);
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    let toolgate = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .env("HF_ENDPOINT", &fake.endpoint)
            .env("HF_HUB_CACHE", &cache)
            .env("HF_HOME", tmp.path())
            .env("HF_TOKEN", GOOD_TOKEN)
            // Every request's headers are logged at debug (ureq redacts Authorization);
            // trace adds ~900 MB of body hex dumps and was checked once by hand.
            .env("TOOLGATE_LOG", "debug,toolgate=trace")
            .env_remove("HF_HUB_OFFLINE")
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (ok, stdout, stderr) = toolgate(&["pull", "test/cli", "--tool-fallback", "generic"]);
    let notes: Vec<&str> = stderr.lines().filter(|l| !l.contains("TRACE") && !l.contains("DEBUG")).collect();
    eprintln!("toolgate pull ({} bytes of debug-level log):\n{}", stderr.len(), notes.join("\n"));
    assert!(ok, "{stderr}");
    assert!(stdout.contains(Q4KM) && stderr.contains("pre-check passed"), "{stdout}\n{stderr}");
    assert!(!stderr.contains(GOOD_TOKEN) && !stdout.contains(GOOD_TOKEN), "the token was logged");
    for f in files_under(tmp.path()) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(!bytes.windows(GOOD_TOKEN.len()).any(|w| w == GOOD_TOKEN.as_bytes()), "token in {}", f.display());
    }

    let (ok, stdout, stderr) = toolgate(&["list"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("test/cli") && stdout.contains(Q4KM) && stdout.contains("Q4_1"), "{stdout}");

    // `serve --model REPO_ID` loads the cached pull (offline: no Hub needed).
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["serve", "--model", "test/cli", "--tool-fallback", "generic"])
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1");
    let server = common::server::spawn_on_any_port(cmd).expect("serve --model REPO_ID came up");
    let mut r = common::server::agent().get(format!("{}/v1/models", server.base)).call().unwrap();
    let models = r.body_mut().read_to_string().unwrap();
    drop(server);
    assert!(models.contains("test/cli"), "{models}");

    let (ok, stdout, stderr) = toolgate(&["rm", "test/cli"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("removed"), "{stdout}");
    let (_, stdout, _) = toolgate(&["list"]);
    assert!(!stdout.contains("test/cli"), "{stdout}");
}

// ---- The Hub client's pieces on their own (no server) ----

#[test]
fn repo_ids_and_file_paths_are_checked() {
    use toolgate::hub::cache::{check_repo_file, check_repo_id};
    for ok in ["gpt2", "org/name", "Org-1/Name_2.5-GGUF"] {
        check_repo_id(ok).unwrap();
    }
    for bad in ["", "a/b/c", "../x", "org/..", "org/.hidden", "a b/c", "org/"] {
        assert!(check_repo_id(bad).is_err(), "{bad}");
    }
    for ok in ["m.gguf", "Q4_K_M/m.gguf"] {
        check_repo_file(ok).unwrap();
    }
    for bad in ["", "../m.gguf", "/etc/passwd", "a/../../b", "a//b", "a\\b", "./m"] {
        assert!(check_repo_file(bad).is_err(), "{bad}");
    }
    assert!(toolgate::hub::looks_like_repo_id("bartowski/SmolLM2-135M-Instruct-GGUF"));
    for path in ["models/x.gguf", "gpt2", "/abs/path"] {
        assert!(!toolgate::hub::looks_like_repo_id(path), "{path}");
    }
}

#[test]
fn cache_links_lists_removes_and_quarantines() {
    use toolgate::hub::cache::{BlobId, CommitId};
    use toolgate::hub::Cache;
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path());
    let repo = "org/m";
    let sha = BlobId::parse(&"ab".repeat(32)).unwrap();
    let blob = cache.blob_path(repo, &sha);
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    std::fs::write(&blob, b"GGUF....").unwrap();
    let commit = CommitId::parse(&"c".repeat(40)).unwrap();
    let p = cache.link(repo, &commit, "sub/m.gguf", &sha).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"GGUF....");
    cache.write_ref(repo, "main", &commit).unwrap();
    assert_eq!(cache.resolve_revision(repo, "main"), Some(commit.clone()));
    assert_eq!(cache.resolve_revision(repo, commit.as_str()), Some(commit.clone()));
    let listed = cache.list();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].repo.as_str(), listed[0].file.as_str(), listed[0].size), (repo, "sub/m.gguf", 8));

    let q = cache.quarantine(repo, "sub/m.gguf", &p, "gate refused").unwrap();
    assert!(q.exists() && !blob.exists() && cache.list().is_empty());
    let reason = std::fs::read_to_string(q.with_file_name("sub--m.gguf.reason")).unwrap();
    assert!(reason.contains("gate refused"));

    std::fs::write(&blob, b"GGUF").unwrap();
    cache.link(repo, &commit, "m.gguf", &sha).unwrap();
    let removed = cache.remove(repo, Some("m.gguf")).unwrap();
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(!blob.exists());
    assert!(matches!(cache.remove(repo, Some("m.gguf")), Err(HubError::NotCached { .. })));
    cache.remove(repo, None).unwrap();
    assert!(!cache.repo_dir(repo).exists());
}

// ---- A hostile hub: nothing it answers may name a path outside the cache ----

/// Pull from a hub that answers with `repo`, and check the attack failed: the pull
/// is an error, the victim file outside the cache is unchanged, and nothing was
/// written outside the cache directory.
fn pull_from_hostile_hub(repo: FakeRepo, tmp: &Path, victim: &Path) -> HubError {
    let before = files_under(tmp);
    let victim_bytes = std::fs::read(victim).unwrap();
    let fake = start(&[("evil/m", repo)]);
    let cache = tmp.join("hub");
    let err = hub(&fake, &cache, None).pull("evil/m", &generic(), &mut ()).unwrap_err();
    assert_eq!(std::fs::read(victim).unwrap(), victim_bytes, "the victim file changed ({err})");
    let outside: Vec<PathBuf> =
        files_under(tmp).into_iter().filter(|p| !p.starts_with(&cache) && !before.contains(p)).collect();
    assert!(outside.is_empty(), "written outside the cache: {outside:?} ({err})");
    let quarantined = files_under(&cache.join("toolgate-quarantine"));
    assert!(quarantined.is_empty(), "moved into the quarantine: {quarantined:?} ({err})");
    err
}

#[test]
fn a_hostile_hub_cannot_name_paths_outside_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let victim_dir = tmp.path().join("victim");
    std::fs::create_dir_all(victim_dir.join("x")).unwrap();
    let victim = victim_dir.join("precious.txt");
    std::fs::write(&victim, b"not the hub's").unwrap();
    let depth = "../".repeat(8);

    // 1. The paths-info oid (no x-linked-etag, so the client asks paths-info).
    for oid in [victim.display().to_string(), format!("{depth}{}/x/planted", victim_dir.display()), "sha256:".into()] {
        let mut repo = public_repo(smollm2());
        repo.files[2].no_etag = true;
        repo.files[2].advertised_sha = Some(oid.clone());
        let err = pull_from_hostile_hub(repo, tmp.path(), &victim);
        assert!(matches!(err, HubError::Protocol(_)) && err.to_string().contains("lfs.oid"), "oid {oid}: {err}");
        assert!(!victim_dir.join("x/planted.incomplete").exists() && !victim_dir.join("x/planted").exists());
    }

    // 2. The commit, from the listing's `sha` (and the same as x-repo-commit).
    for commit in [format!("{depth}{}", victim.display()), victim_dir.display().to_string(), "main".into()] {
        let repo = FakeRepo { commit: Some(commit.clone()), ..public_repo(smollm2()) };
        let err = pull_from_hostile_hub(repo, tmp.path(), &victim);
        assert!(
            matches!(err, HubError::Protocol(_)) && err.to_string().contains("commit id"),
            "commit {commit}: {err}"
        );
    }

    // 3. File names in the listing.
    for name in ["../../evil.gguf".to_string(), format!("{}/evil.gguf", victim_dir.display()), "a/./b.gguf".into()] {
        let mut repo = public_repo(smollm2());
        repo.files.push(FakeFile::served(&name, smollm2()));
        let err = pull_from_hostile_hub(repo, tmp.path(), &victim);
        assert!(err.to_string().contains("unsafe file path"), "file {name}: {err}");
    }

    // 4. A revision asked for by the user never names a path either.
    let fake = start(&[("evil/m", public_repo(smollm2()))]);
    let opts = PullOptions { revision: "../../../x".into(), ..generic() };
    let err = hub(&fake, &tmp.path().join("hub"), None).pull("evil/m", &opts, &mut ()).unwrap_err();
    assert!(err.to_string().contains("unsafe revision"), "{err}");
    assert!(fake.seen().is_empty(), "refused before asking the hub");

    // And the same hub, honest, still works from the same cache.
    let pulled = hub(&fake, &tmp.path().join("hub"), None).pull("evil/m", &generic(), &mut ()).unwrap();
    assert!(pulled.path.starts_with(tmp.path().join("hub")), "{}", pulled.path.display());
    assert_eq!(std::fs::read(&victim).unwrap(), b"not the hub's");
}

#[test]
fn the_cache_reads_only_commit_ids_and_moves_only_its_own_files() {
    use toolgate::hub::Cache;
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path().join("hub"));
    let repo = "org/m";
    let refs = cache.repo_dir(repo).join("refs");
    std::fs::create_dir_all(&refs).unwrap();
    // A ref file that was tampered with (or written by a hostile hub through an older
    // client) names no snapshot.
    std::fs::write(refs.join("main"), "../../../../etc").unwrap();
    assert_eq!(cache.resolve_revision(repo, "main"), None);
    assert_eq!(cache.resolve_revision(repo, "../refs/main"), None);
    // The quarantine refuses a file outside the repository's cache.
    let outside = tmp.path().join("outside.gguf");
    std::fs::write(&outside, b"GGUF").unwrap();
    let err = cache.quarantine(repo, "m.gguf", &outside, "bad").unwrap_err();
    assert!(err.to_string().contains("outside the cache"), "{err}");
    assert!(outside.exists());
    assert!(cache.quarantine(repo, "../m.gguf", &outside, "bad").is_err());
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn quant_pick_prefers_q5_k_m_then_falls_back_in_order() {
    use toolgate::hub::quant::pick;
    let f = names(&["x-Q8_0.gguf", "x-q6_k.gguf", "x-Q5_K_M.gguf", "x-Q4_K_S.gguf"]);
    assert_eq!(pick("r", &f, None).unwrap().file, "x-Q5_K_M.gguf");
    let f = names(&["x-Q8_0.gguf", "x-Q2_K.gguf", "x-Q4_0_4_4.gguf"]);
    assert_eq!(pick("r", &f, None).unwrap().file, "x-Q8_0.gguf", "q4_0 must not match q4_0_4_4");
    let f = names(&["x-Q2_K.gguf", "x-Q3_K_M.gguf"]);
    assert_eq!(pick("r", &f, None).unwrap().file, "x-Q3_K_M.gguf");
}

#[test]
fn quant_pick_single_ambiguous_splits_and_projectors() {
    use toolgate::hub::quant::pick;
    let f = names(&["README.md", "model-f16.GGUF"]);
    assert_eq!(pick("r", &f, None).unwrap().reason, "the only model file");
    let f = names(&["a-f16.gguf", "a-bf16.gguf"]);
    assert!(matches!(pick("r", &f, None), Err(HubError::AmbiguousFile { .. })));
    assert!(matches!(pick("r", &names(&["a.bin"]), None), Err(HubError::NoGguf { .. })));
    assert!(matches!(pick("r", &f, Some("zzz.gguf")), Err(HubError::FileNotFound { .. })));

    let f = names(&["m-Q4_K_M-00002-of-00002.gguf", "m-Q4_K_M-00001-of-00002.gguf", "m-Q8_0.gguf"]);
    let c = pick("r", &f, None).unwrap();
    assert_eq!(c.file, "m-Q4_K_M-00001-of-00002.gguf");
    assert_eq!(c.shards.len(), 2);
    let f = names(&["big-00001-of-00003.gguf", "big-00002-of-00003.gguf", "big-00003-of-00003.gguf"]);
    let c = pick("r", &f, None).unwrap();
    assert_eq!((c.file.as_str(), c.shards.len()), ("big-00001-of-00003.gguf", 3));
    let c = pick("r", &f, Some("big-00002-of-00003.gguf")).unwrap();
    assert_eq!(c.shards.len(), 3);

    let f = names(&["mmproj-model-f16.gguf", "model-f16.gguf"]);
    assert_eq!(pick("r", &f, None).unwrap().file, "model-f16.gguf");
}

#[test]
fn token_is_trimmed_and_redacted_urls_are_encoded() {
    let t = Token::new(" hf_secret \n").unwrap();
    assert_eq!(Some(t.clone()), Token::new("hf_secret"), "surrounding whitespace is not part of the token");
    assert!(!format!("{t:?}").contains("secret"));
    let cfg = HubConfig { token: Some(t), ..HubConfig::default() };
    assert!(!format!("{:?}", Hub::new(cfg)).contains("hf_secret"));
    assert!(Token::new("  ").is_none());

    assert_eq!(Hub::resolve_url("org/m", "refs/pr/1", "dir/a b.gguf"), "/org/m/resolve/refs%2Fpr%2F1/dir/a%20b.gguf");
    assert_eq!(Hub::api_url("org/m", "main"), "/api/models/org/m");
    assert_eq!(Hub::api_url("org/m", "v1"), "/api/models/org/m/revision/v1");

    use toolgate::hub::redirect_target;
    assert_eq!(redirect_target("https://hf.co/a/b?x", "/cdn/x"), "https://hf.co/cdn/x");
    assert_eq!(redirect_target("https://hf.co", "/cdn/x"), "https://hf.co/cdn/x");
    assert_eq!(redirect_target("https://hf.co/a/b", "c"), "https://hf.co/a/c");
    assert_eq!(redirect_target("https://hf.co/a/b", "http://cdn.example/x"), "http://cdn.example/x");
}
