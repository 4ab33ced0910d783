//! Replicas behind a router users already run: three `toolgate serve` on loopback
//! behind nginx (Debian's `nginx-light`; `least_conn`, passive health checks, a retry
//! on connection errors), under a bounded load of forced tool calls, while one replica
//! is drained with SIGTERM and another killed with SIGKILL mid-run.
//!
//! The nginx test needs nginx: `scripts/test` installs `nginx-light` where it is
//! missing (and, where it cannot, says loudly that it skipped this test); elsewhere set
//! `TOOLGATE_NGINX` to the binary. Without one it fails saying so.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::common::server::{agent, free_port, start, Server};

const REQUESTS: usize = 300;
const CLIENTS: usize = 16;
/// The drained replica's `--drain-seconds`.
const DRAIN: Duration = Duration::from_secs(2);

/// nginx's binary: `TOOLGATE_NGINX`, else Debian's. `None` only where `scripts/test`
/// could not install one and says so (`TOOLGATE_NGINX=skip`, listed among the skipped
/// checks at its end); anywhere else a missing nginx fails the test.
fn nginx_binary() -> Option<PathBuf> {
    match std::env::var_os("TOOLGATE_NGINX") {
        Some(p) if p == "skip" => return None,
        Some(p) => return Some(p.into()),
        None => {}
    }
    let found = ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists());
    Some(found.unwrap_or_else(|| {
        panic!(
            "the fleet test needs nginx: `apt-get install nginx-light` (scripts/test installs it where it can), \
             or TOOLGATE_NGINX=/path/to/nginx"
        )
    }))
}

/// `deploy/nginx/toolgate.conf` as a user installs it, with these replicas' `server`
/// lines and this `port` in place of its examples.
fn site(servers: &[String], port: u16) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx/toolgate.conf");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = Vec::new();
    let mut replaced = false;
    for line in text.lines() {
        match line.trim_start() {
            l if l.starts_with("server 10.0.0.") => {
                if !replaced {
                    out.extend(servers.iter().cloned());
                    replaced = true;
                }
            }
            "listen 8080;" => out.push(format!("    listen 127.0.0.1:{port};")),
            _ => out.push(line.to_string()),
        }
    }
    assert!(
        replaced && out.iter().any(|l| l.contains("listen 127.0.0.1")),
        "{}: no server or listen line",
        path.display()
    );
    out.join("\n")
}

/// nginx in the foreground, its files in a directory of its own; stopped on drop.
struct Nginx {
    child: Child,
    dir: PathBuf,
    base: String,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Nginx {
    /// nginx proxying to `upstreams` (`host:port`), as docs/deploy.md tells a user to
    /// put it in front of replicas: the least busy one gets the next request; a replica
    /// that fails a connection is out for 30 s (`max_fails=1`), and the request goes to
    /// the next one — also a POST already sent (`non_idempotent`: a turn changes nothing
    /// on the server, so one cut before its answer began is safe to run again), and a
    /// 503 (a replica shutting down), as long as nothing reached the client yet.
    fn start(binary: &std::path::Path, upstreams: &[String]) -> Nginx {
        let dir = std::env::temp_dir().join(format!("toolgate-fleet-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        // The workers may run as another user (`nobody` when started as root).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let servers: Vec<String> =
            upstreams.iter().map(|u| format!("    server {u} max_fails=1 fail_timeout=30s;")).collect();
        for attempt in 0..5 {
            let port = free_port();
            let d = dir.display();
            let site = site(&servers, port);
            let conf = format!(
                "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
                 events {{ worker_connections 512; }}\n\
                 http {{\n    client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
                 \x20   fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
                 \x20   log_format fleet '$msec $request_time $status $request_uri \"$upstream_addr\"';\n\
                 \x20   access_log {d}/access.log fleet;\n\
                 \x20   add_header X-Toolgate-Replica $upstream_addr always;\n{site}\n}}\n"
            );
            let path = dir.join("nginx.conf");
            std::fs::write(&path, conf).unwrap();
            let mut child = Command::new(binary)
                .args(["-p", &dir.display().to_string(), "-c", &path.display().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starting nginx");
            let base = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Some(status) = child.try_wait().unwrap() {
                    let mut err = String::new();
                    let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
                    let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                    assert!(attempt < 4, "nginx exited ({status}): {err}{log}");
                    break; // the port was taken: another one
                }
                if agent().get(format!("{base}/health")).call().is_ok_and(|r| r.status() == 200) {
                    return Nginx { child, dir, base };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("nginx did not come up in {}", dir.display());
    }

    /// The access log's chat requests: (end time, seconds taken, status, the upstreams
    /// tried).
    fn log(&self) -> Vec<(f64, f64, u16, Vec<String>)> {
        let text = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let mut f = l.splitn(5, ' ');
                let (end, took, status) = (f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?);
                if f.next()? != "/v1/chat/completions" {
                    return None; // the start-up probe
                }
                let tried = f.next()?.trim_matches('"').split(", ").map(String::from).collect();
                Some((end, took, status, tried))
            })
            .collect()
    }
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "enum": ["Paris", "Oslo", "Rome", "Lima"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["city", "days"], "additionalProperties": false}}}])
}

/// The call's arguments are valid for the tool's schema.
fn valid(arguments: &str) -> Result<(), String> {
    let v: Value = serde_json::from_str(arguments).map_err(|e| format!("arguments {arguments:?}: {e}"))?;
    let city = v["city"].as_str().filter(|c| ["Paris", "Oslo", "Rome", "Lima"].contains(c));
    let days = v["days"].as_i64().filter(|d| (1..=9).contains(d));
    let keys = v.as_object().map_or(0, |o| o.len());
    match (city, days, keys) {
        (Some(_), Some(_), 2) => Ok(()),
        _ => Err(format!("arguments not valid for the schema: {arguments}")),
    }
}

/// One request through the router: forced call, streamed or not; the call checked.
/// Returns the replica that answered (nginx's `X-Toolgate-Replica`, the last upstream
/// it tried).
fn one(base: &str, i: usize) -> Result<String, String> {
    let stream = i.is_multiple_of(2);
    let city = ["Paris", "Oslo", "Rome", "Lima"][i % 4];
    let req = json!({"messages": [{"role": "user", "content": format!("Weather in {city} for {} days?", i % 9 + 1)}],
        "tools": tools(), "tool_choice": "required", "max_tokens": 96, "temperature": 0, "stream": stream});
    let mut r =
        agent().post(format!("{base}/v1/chat/completions")).send_json(&req).map_err(|e| format!("request {i}: {e}"))?;
    let status = r.status().as_u16();
    let replica = r
        .headers()
        .get("x-toolgate-replica")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(", ").next())
        .unwrap_or_default()
        .to_string();
    if !stream || status != 200 {
        let text = r.body_mut().read_to_string().map_err(|e| format!("request {i}: {e}"))?;
        if status != 200 {
            return Err(format!("request {i}: {status} {text}"));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("request {i}: {e}: {text}"))?;
        let calls = v["choices"][0]["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
        let first = calls.first().ok_or_else(|| format!("request {i}: no call: {text}"))?;
        return valid(first["function"]["arguments"].as_str().unwrap_or_default()).map(|()| replica);
    }
    let mut arguments = String::new();
    let mut done = false;
    for line in BufReader::new(r.body_mut().as_reader()).lines() {
        let line = line.map_err(|e| format!("request {i}: stream cut: {e}"))?;
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("request {i}: {e}: {data}"))?;
        for call in v["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            if call["index"] == 0 {
                arguments.push_str(call["function"]["arguments"].as_str().unwrap_or_default());
            }
        }
    }
    if !done {
        return Err(format!("request {i}: the stream ended without [DONE]"));
    }
    valid(&arguments).map(|()| replica)
}

/// Three replicas of SmolLM2 (`--parallel 2`, `--drain-seconds 2`); the first is the
/// one drained, the second the one killed.
struct Fleet {
    replicas: Vec<Server>,
}

/// What happened to one request: when it started and ended (epoch seconds), the replica
/// that answered it (`host:port`, where the router says), and its error.
struct Outcome {
    start: f64,
    end: f64,
    answered_by: Option<String>,
    result: Result<(), String>,
}

/// When the fleet was disrupted, and what the killed replica held just before.
struct Disruption {
    /// Just before the kill.
    at: f64,
    /// Just after the drained replica got SIGTERM: its drain ends [`DRAIN`] later.
    drain_from: f64,
    held: usize,
}

/// One fleet at a time: two (six replicas) on a 2-core machine slow each other 4×.
static ONE_FLEET: Mutex<()> = Mutex::new(());

impl Fleet {
    fn start() -> Fleet {
        let flags = ["--tool-fallback", "generic", "--parallel", "2", "--drain-seconds", "2"];
        Fleet { replicas: (0..3).map(|_| start(&flags)).collect() }
    }

    /// The replicas' `host:port`.
    fn addrs(&self) -> Vec<String> {
        self.replicas.iter().map(|s| s.base.trim_start_matches("http://").to_string()).collect()
    }

    /// Drain the first replica (SIGTERM) and kill the second (SIGKILL).
    fn disrupt(&mut self) -> Disruption {
        let metrics =
            agent().get(format!("{}/metrics", self.replicas[1].base)).call().unwrap().body_mut().read_to_string();
        let held = metrics
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("toolgate_queue_depth ")?.parse::<f64>().ok());
        let at = now();
        self.replicas[1].kill();
        self.replicas[0].send_term();
        Disruption { at, drain_from: now(), held: held.expect("the killed replica's queue depth") as usize }
    }

    /// The checks both routers must pass, after the load: every request came back; what
    /// failed was in flight on the killed replica (started before the kill, no more than
    /// it held: a request or two may have reached it after the scrape); the drained
    /// replica finished what it held and exited; once its drain was over, the router
    /// answered nothing from either; the replica left running took its share.
    fn check(&mut self, router: &str, outcomes: &[Outcome], d: &Disruption, retried: Option<usize>) {
        let addrs = self.addrs();
        let (drained, killed) = (&addrs[0], &addrs[1]);
        let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.result.is_err()).collect();
        let mut share: BTreeMap<String, usize> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| o.result.is_ok()) {
            *share.entry(o.answered_by.clone().unwrap_or_default()).or_default() += 1;
        }
        let name = |a: &str| match a {
            a if a == drained => "drained",
            a if a == killed => "killed",
            _ => "kept",
        };
        let line = format!(
            "fleet behind {router}: {} requests from {CLIENTS} clients: {} ok, {} failed{}; the killed replica held {} \
             when killed; answered by {}",
            outcomes.len(),
            outcomes.len() - failed.len(),
            failed.len(),
            retried.map(|n| format!(", {n} retried on another replica")).unwrap_or_default(),
            d.held,
            share.iter().map(|(a, n)| format!("{} {a}: {n}", name(a))).collect::<Vec<_>>().join(", ")
        );
        eprintln!("{line}");
        // scripts/test prints this file after the suite (a passing test's output is not shown).
        let report = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fleet-report.txt");
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(report) {
            let _ = std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes());
        }
        assert_eq!(outcomes.len(), REQUESTS);
        for o in &failed {
            assert!(o.start < d.at, "a request started after the kill failed: {:?}", o.result);
        }
        let errors: Vec<_> = failed.iter().map(|o| &o.result).collect();
        assert!(failed.len() <= d.held + 2, "{} failed, the killed replica held {}: {errors:?}", failed.len(), d.held);
        let exited = self.replicas[0].wait_exit(Duration::from_secs(60));
        assert!(exited.is_some(), "the drained replica did not exit");
        let after = d.drain_from + DRAIN.as_secs_f64() + 1.0;
        let late: Vec<&Outcome> = outcomes.iter().filter(|o| o.start > after).collect();
        assert!(!late.is_empty(), "no request came after the drain: the test did not check the rotation");
        for o in &late {
            let by = o.answered_by.as_deref().unwrap_or_default();
            assert!(by != drained && by != killed, "{by} answered at {} after it was gone", o.end);
        }
        assert!(share.iter().any(|(a, n)| name(a) == "kept" && *n > REQUESTS / 3), "{share:?}");
    }
}

#[test]
fn a_fleet_behind_nginx_loses_only_what_the_killed_replica_held() {
    let Some(binary) = nginx_binary() else {
        eprintln!("TOOLGATE_NGINX=skip: scripts/test found no nginx and reports this test skipped");
        return;
    };
    let _one = ONE_FLEET.lock().unwrap_or_else(|p| p.into_inner());
    let mut fleet = Fleet::start();
    let nginx = Nginx::start(&binary, &fleet.addrs());
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (next, finished, outcomes, base) =
                (next.clone(), finished.clone(), outcomes.clone(), nginx.base.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= REQUESTS {
                    return;
                }
                let start = now();
                let (answered_by, result) = match one(&base, i) {
                    Ok(replica) => (Some(replica), Ok(())),
                    Err(e) => (None, Err(e)),
                };
                outcomes.lock().unwrap().push(Outcome { start, end: now(), answered_by, result });
                finished.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    // A third of the way in: drain one replica, kill another.
    let deadline = Instant::now() + Duration::from_secs(600);
    while finished.load(Ordering::SeqCst) < REQUESTS / 3 {
        assert!(Instant::now() < deadline, "the load did not get a third of the way in 10 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = fleet.disrupt();
    for c in clients {
        c.join().unwrap();
    }
    let log = nginx.log();
    let retried = log.iter().filter(|l| l.3.len() > 1).count();
    let outcomes = outcomes.lock().unwrap();
    fleet.check("nginx", &outcomes, &d, Some(retried));
    // nginx tried each gone replica at most once after the drain (the failure that
    // took it out of the rotation), and once more per `fail_timeout` (30 s) after that.
    let addrs = fleet.addrs();
    let after = d.drain_from + DRAIN.as_secs_f64() + 1.0;
    let last = log.iter().map(|l| l.0 - l.1).fold(after, f64::max);
    let allowed = 1 + ((last - after) / 30.0) as usize;
    for a in &addrs[..2] {
        let tried: Vec<String> = log
            .iter()
            .filter(|l| l.0 - l.1 > after && l.3.contains(a))
            .map(|l| format!("{:.2}+{:.2}s {} {:?}", l.0 - l.1 - d.at, l.1, l.2, l.3))
            .collect();
        assert!(tried.len() <= allowed, "nginx tried {a} {} times after it was gone: {tried:?}", tried.len());
    }
}

/// The same fleet, load and disruption behind LiteLLM's router (`litellm.Router`,
/// least-busy, a deployment out for 30 s after a failure, retries on another), driven
/// by `tests/fleet/litellm_router.py` in the test virtualenv.
#[test]
fn a_fleet_behind_litellm_loses_only_what_the_killed_replica_held() {
    let _one = ONE_FLEET.lock().unwrap_or_else(|p| p.into_inner());
    let mut fleet = Fleet::start();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fleet/litellm_router.py");
    let mut child = Command::new(crate::sdk::python())
        .arg(&script)
        .args([REQUESTS.to_string(), CLIENTS.to_string()])
        .args(fleet.replicas.iter().map(|s| s.base.clone()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut disruption = None;
    let mut report = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line == "third" {
            disruption = Some(fleet.disrupt());
        } else if line.starts_with('[') {
            report = Some(line);
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{} failed: {status}", script.display());
    let d = disruption.expect("the script never reached a third of its requests");
    let rows: Vec<Value> = serde_json::from_str(&report.expect("the script printed no report")).unwrap();
    let outcomes: Vec<Outcome> = rows
        .iter()
        .map(|r| Outcome {
            start: r["start"].as_f64().unwrap_or_default(),
            end: r["end"].as_f64().unwrap_or_default(),
            // `http://127.0.0.1:PORT/v1` → `127.0.0.1:PORT`
            answered_by: r["base"]
                .as_str()
                .map(|b| b.trim_start_matches("http://").trim_end_matches("/v1").to_string()),
            result: match r["error"].as_str() {
                None => Ok(()),
                Some(e) => Err(e.to_string()),
            },
        })
        .collect();
    fleet.check("LiteLLM", &outcomes, &d, None);
}

/// `deploy/kubernetes/`: the core manifests validate against Kubernetes' own schemas
/// (`kubernetes-validate --strict`, pinned in tests/sdk/requirements.txt), and the files
/// agree with each other and with the server: the Service, the InferencePool and the
/// autoscaler reach the Deployment's pods on the port it serves, and its probes ask the
/// routes `toolgate serve` answers.
#[test]
fn kubernetes_manifests_validate_and_agree() {
    let python = crate::sdk::python();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let out = Command::new(python.with_file_name("kubernetes-validate")).arg("--strict").args(&files).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    for kind in ["deployment/toolgate", "service/toolgate", "horizontalpodautoscaler/toolgate"] {
        assert!(said.contains(&format!("passed for resource {kind}")), "{kind} was not validated: {said}");
    }
    // The InferencePool is a custom resource (no schema above): its fields are checked
    // against the Deployment here.
    let check = r#"
import sys, yaml
docs = {}
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        docs[d["kind"]] = d
dep = docs["Deployment"]
pod = dep["spec"]["template"]
labels = pod["metadata"]["labels"]
c = pod["spec"]["containers"][0]
port = c["ports"][0]["containerPort"]
assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items(), "deployment selector"
assert docs["Service"]["spec"]["selector"].items() <= labels.items(), "service selector"
pool = docs["InferencePool"]
assert pool["apiVersion"] == "inference.networking.k8s.io/v1", pool["apiVersion"]
assert pool["spec"]["selector"]["matchLabels"].items() <= labels.items(), "pool selector"
assert [p["number"] for p in pool["spec"]["targetPorts"]] == [port], "pool port"
assert pool["spec"]["endpointPickerRef"]["name"], "endpoint picker"
hpa = docs["HorizontalPodAutoscaler"]["spec"]
assert hpa["scaleTargetRef"]["name"] == dep["metadata"]["name"], "hpa target"
assert hpa["metrics"][0]["pods"]["metric"]["name"] == "toolgate_requests_waiting", "hpa metric"
paths = {p: c[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
assert paths == {"startupProbe": "/health", "livenessProbe": "/health", "readinessProbe": "/ready"}, paths
env = {e["name"]: e["value"] for e in c.get("env", [])}
grace = pod["spec"]["terminationGracePeriodSeconds"]
assert float(env["TOOLGATE_DRAIN_SECONDS"]) < grace, "the drain must end before SIGKILL"
print("ok")
"#;
    let out = Command::new(&python).arg("-c").arg(check).args(&files).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
