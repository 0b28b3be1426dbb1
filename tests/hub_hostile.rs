//! A malicious Hub on 127.0.0.1 (tests/common/hub_server.rs with its `Attack` knob) against
//! `vram-lab generate --model org/x`: names that climb out of the cache (etags, commits, index
//! entries, the user's `org/name:file`), redirects to other schemes and hosts, lying lengths and
//! trickled bodies, hostile endpoints and a symlink planted in the cache. Each run must end with
//! one `error:` line naming what was refused, exit code 2, no panic, within the limits (2 s stall,
//! 4 s per file here), and nothing created or changed in the temp folder outside `--cache-dir`
//! (the victims the attacks aim at included).

#[path = "common/hub_server.rs"]
mod hub_server;
#[path = "common/snapshot.rs"]
mod snapshot;

use hub_server::{repo_files, Attack, Hub, Repo, GENERATE, INDEX, SHARDS};
use snapshot::snapshot;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// A temp folder with victims beside the cache: `victim.txt`, `victim.safetensors`, and
/// `outside/` holding `keep.txt`.
struct Lab {
    tmp: tempfile::TempDir,
}

impl Lab {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("victim.txt"), "precious").unwrap();
        std::fs::write(tmp.path().join("victim.safetensors"), "precious weights").unwrap();
        std::fs::create_dir(tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside/keep.txt"), "keep").unwrap();
        std::fs::create_dir(tmp.path().join("work")).unwrap();
        std::fs::create_dir(tmp.path().join("cache")).unwrap();
        Self { tmp }
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    fn cache(&self) -> PathBuf {
        self.tmp.path().join("cache")
    }

    fn path(&self, rel: &str) -> String {
        self.tmp.path().join(rel).to_str().unwrap().to_string()
    }

    /// `generate --model model` with the endpoint, the limits (2 s stall, 4 s a file) and `env`.
    fn run(&self, endpoint: &str, model: &str, env: &[(&str, &str)]) -> (Output, Duration) {
        let t0 = Instant::now();
        let mut cmd = hub_server::lab_at(endpoint, &self.root().join("hf-home"));
        cmd.current_dir(self.root().join("work")).env("VRAM_LAB_HUB_FILE_S", "4");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd
            .args(GENERATE)
            .args(["--model", model, "--cache-dir", self.cache().to_str().unwrap(), "--device", "cpu", "--quiet"])
            .output()
            .unwrap();
        (o, t0.elapsed())
    }

    /// The run fails as bad input with one `error:` line holding `needles`, in time, and leaves
    /// everything outside the cache as it was. Returns the line.
    fn refused(&self, endpoint: &str, model: &str, env: &[(&str, &str)], needles: &[&str]) -> String {
        let before = snapshot(self.root(), Some(&self.cache()));
        let (o, took) = self.run(endpoint, model, env);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        let all = format!("{out}{err}");
        assert!(!all.contains("panicked"), "{model:?} panicked:\n{all}");
        assert_eq!(o.status.code(), Some(2), "{model:?} should fail as bad input:\n{all}");
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("error: ") && out.is_empty(),
            "{model:?}: one error line:\n{all}"
        );
        for n in needles {
            assert!(lines[0].contains(n), "{model:?}: expected `{n}` in:\n{all}");
        }
        assert!(!lines[0].chars().any(|c| c.is_control()), "{model:?}: raw control characters:\n{all:?}");
        assert!(took < Duration::from_secs(8), "{model:?} took {took:?}:\n{all}");
        assert_eq!(
            snapshot(self.root(), Some(&self.cache())),
            before,
            "{model:?} changed something outside the cache:\n{all}"
        );
        assert_eq!(std::fs::read_to_string(self.root().join("victim.txt")).unwrap(), "precious");
        eprintln!("[{took:.1?}] {model}: {}", lines[0]);
        lines[0].to_string()
    }
}

fn index_with(map: serde_json::Value) -> Vec<u8> {
    serde_json::json!({"metadata": {}, "weight_map": map}).to_string().into_bytes()
}

/// Hostile headers and index entries: etags, commits and shard names that would climb out.
#[test]
fn hostile_names_from_the_server() {
    let lab = Lab::new();
    let files = repo_files();
    let mut repos = BTreeMap::new();
    let mut add = |name: &str, repo: Repo| {
        repos.insert(format!("org/{name}"), repo);
    };
    let on_config = |a: Attack| Repo::new(files.clone()).attack("config.json", a);
    let victim = lab.path("victim.txt");
    add("etag-abs", on_config(Attack::ETag(format!("\"{victim}\""))));
    add("etag-climb", on_config(Attack::ETag("\"../../../victim.txt\"".into())));
    add("etag-nul", on_config(Attack::ETag("\"a\0b\"".into())));
    add("etag-newline", on_config(Attack::ETag("\"a\nb\"".into())));
    add("etag-weak-climb", on_config(Attack::ETag("W/\"../x\"".into())));
    add("commit-climb", on_config(Attack::Commit("../../x".into())));
    add("commit-climb-out", on_config(Attack::Commit("../../../outside".into())));
    add("commit-abs", on_config(Attack::Commit(lab.path("outside"))));
    add("commit-short", on_config(Attack::Commit("0123abc".into())));
    add("commit-upper", on_config(Attack::Commit("0123456789ABCDEF0123456789ABCDEF01234567".into())));
    add("sha-climb", Repo { sha: Some("../../../outside".into()), ..Repo::new(files.clone()) });
    add(
        "linked-etag",
        Repo::new(files.clone()).attack(SHARDS[0], Attack::LinkedEtag("\"../../../../victim.txt\"".into())),
    );
    let with_index = |map: serde_json::Value| {
        let mut f = files.clone();
        f.insert(INDEX.into(), index_with(map));
        Repo::new(f)
    };
    add("index-climb", with_index(serde_json::json!({"a": "../../../x.safetensors"})));
    add("index-climb-out", with_index(serde_json::json!({"a": "../../../../victim.safetensors"})));
    add("index-abs", with_index(serde_json::json!({"a": lab.path("victim.safetensors")})));
    add("index-backslash", with_index(serde_json::json!({"a": "..\\..\\victim.safetensors"})));
    add("index-empty", with_index(serde_json::json!({"a": ""})));
    add("index-number", with_index(serde_json::json!({"a": 5})));
    let many: serde_json::Map<String, serde_json::Value> =
        (0..10_000).map(|i| (format!("t{i}"), format!("model-{i:05}.safetensors").into())).collect();
    add("index-many", with_index(serde_json::Value::Object(many)));
    let hub = Hub::start(repos);
    let e = hub.addr.as_str();

    lab.refused(e, "org/etag-abs", &[], &["ETag", "is not a blob name", "config.json", "org/etag-abs"]);
    lab.refused(e, "org/etag-climb", &[], &["ETag `\\\"../../../victim.txt\\\"` is not a blob name"]);
    lab.refused(e, "org/etag-nul", &[], &["config.json", "org/etag-nul"]);
    lab.refused(e, "org/etag-newline", &[], &["config.json", "org/etag-newline"]);
    lab.refused(e, "org/etag-weak-climb", &[], &["is not a blob name"]);
    lab.refused(
        e,
        "org/commit-climb",
        &[],
        &["hub: the server's X-Repo-Commit `../../x` is not a commit id", "config.json"],
    );
    lab.refused(e, "org/commit-climb-out", &[], &["X-Repo-Commit `../../../outside` is not a commit id"]);
    lab.refused(e, "org/commit-abs", &[], &["X-Repo-Commit", "is not a commit id"]);
    lab.refused(e, "org/commit-short", &[], &["X-Repo-Commit `0123abc` is not a commit id"]);
    lab.refused(e, "org/commit-upper", &[], &["is not a commit id"]);
    lab.refused(e, "org/sha-climb", &[], &["repo info's sha `../../../outside` is not a commit id"]);
    lab.refused(e, "org/linked-etag", &[], &["X-Linked-Etag", "is not a blob name", SHARDS[0]]);
    lab.refused(e, "org/index-climb", &[], &[INDEX, "`../../../x.safetensors` climbs out"]);
    lab.refused(e, "org/index-climb-out", &[], &[INDEX, "climbs out"]);
    lab.refused(e, "org/index-abs", &[], &[INDEX, "is not a relative name"]);
    lab.refused(e, "org/index-backslash", &[], &[INDEX, "is not a relative name"]);
    lab.refused(e, "org/index-empty", &[], &[INDEX, "is not a file name"]);
    lab.refused(e, "org/index-number", &[], &[INDEX, "maps `a` to 5, not a file name"]);
    lab.refused(e, "org/index-many", &[], &[INDEX, "names more than 1024 shard files"]);
    // Refused names are never asked for: no shard of the hostile indexes was requested.
    let asked = hub.requests();
    assert!(
        !asked
            .iter()
            .any(|p| p.contains("..") || p.contains("victim") || (p.ends_with(".safetensors") && !p.contains("-of-"))),
        "{asked:?}"
    );
}

/// Names the user gives and endpoints: refused before any request.
#[test]
fn hostile_names_from_the_user() {
    let lab = Lab::new();
    let hub = Hub::start(BTreeMap::new());
    let e = hub.addr.as_str();
    lab.refused(e, "org/name:../../x.gguf", &[], &["the file name `../../x.gguf` climbs out"]);
    lab.refused(e, &format!("org/name:{}", lab.path("victim.gguf")), &[], &["the file name"]);
    lab.refused(e, "org/../x", &[], &["no such model: org/../x"]);
    lab.refused(e, "org/..", &[], &["the repo id `org/..`"]);
    lab.refused(e, "../x", &[], &["no such model"]);
    lab.refused(e, "org/x y", &[], &["the repo id `org/x y`"]);
    lab.refused(e, "org/x\u{1b}[2J", &[], &["the repo id `org/x\\u{1b}[2J`"]);
    lab.refused(e, "org/-x", &[], &["the repo id `org/-x`"]);
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
    for bad in
        ["http://127.0.0.1:1/\u{7}\n", "javascript:alert(1)", "127.0.0.1:8080", "file:///etc", "http://user@host:1"]
    {
        lab.refused(bad, "org/x", &[], &["HF_ENDPOINT `"]);
    }
}

/// Redirects to other schemes, loops, and another host that must not see the token.
#[test]
fn hostile_redirects() {
    let lab = Lab::new();
    let files = repo_files();
    // The second server, on another port: the token must not reach it.
    let mut other_repos = BTreeMap::new();
    other_repos.insert("org/token".to_string(), Repo::new(files.clone()));
    let other = Hub::start(other_repos);
    let on_config = |a: Attack| Repo::new(files.clone()).attack("config.json", a);
    let mut repos = BTreeMap::new();
    repos.insert("org/file".into(), on_config(Attack::Redirect(format!("file://{}", lab.path("victim.txt")))));
    repos.insert("org/ftp".into(), on_config(Attack::Redirect("ftp://127.0.0.1/x".into())));
    repos.insert("org/js".into(), on_config(Attack::Redirect("javascript:alert(1)".into())));
    repos.insert("org/loop".into(), on_config(Attack::RedirectLoop));
    repos.insert("org/token".into(), on_config(Attack::Redirect(format!("{}/cdn/org/token/config.json", other.addr))));
    let hub = Hub::start(repos);
    let e = hub.addr.as_str();
    lab.refused(e, "org/file", &[], &["config.json", "a redirect to `file://", "is not an http:// or https:// URL"]);
    lab.refused(e, "org/ftp", &[], &["a redirect to `ftp://127.0.0.1/x` is not an http"]);
    lab.refused(e, "org/js", &[], &["a redirect to `javascript:alert(1)`"]);
    lab.refused(e, "org/loop", &[], &["config.json", "more than 5 redirects"]);
    assert_eq!(hub.requests().iter().filter(|p| p.ends_with("org/loop/resolve/main/config.json")).count(), 6);

    let (o, _) = lab.run(e, "org/token", &[("HF_TOKEN", "hf_secret")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bearer = Some("Bearer hf_secret".to_string());
    let own = hub.seen();
    assert!(own.iter().filter(|s| s.path.contains("org/token")).all(|s| s.authorization == bearer), "{own:?}");
    let seen = other.seen();
    assert!(seen.iter().any(|s| s.path == "/cdn/org/token/config.json"), "{seen:?}");
    assert!(seen.iter().all(|s| s.authorization.is_none()), "the token went to another host: {seen:?}");
}

/// Lengths that lie and bodies that trickle, stall or stop: bounded in bytes and time.
#[test]
fn hostile_bodies() {
    let lab = Lab::new();
    let files = repo_files();
    let on_config = |a: Attack| Repo::new(files.clone()).attack("config.json", a);
    let mut repos = BTreeMap::new();
    repos.insert("org/huge".to_string(), on_config(Attack::Announce(10 << 30)));
    repos.insert("org/trickle".into(), on_config(Attack::Trickle));
    repos.insert("org/header-trickle".into(), on_config(Attack::HeaderTrickle));
    repos.insert("org/longer".into(), on_config(Attack::Longer));
    repos.insert("org/longer-chunked".into(), on_config(Attack::LongerChunked));
    repos.insert("org/shorter".into(), on_config(Attack::Shorter));
    repos.insert("org/stall".into(), Repo::new(files.clone()).attack(SHARDS[1], Attack::Stall));
    repos.insert("org/huge-shard".into(), Repo::new(files.clone()).attack(SHARDS[0], Attack::Announce(u64::MAX / 2)));
    let hub = Hub::start(repos);
    let e = hub.addr.as_str();
    let t0 = Instant::now();
    lab.refused(
        e,
        "org/huge",
        &[],
        &[
            "config.json",
            "org/huge",
            e,
            "announces 10737418240 bytes, over the 67108864 bytes a metadata file may have",
        ],
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "refused before reading");
    lab.refused(e, "org/huge-shard", &[], &[SHARDS[0], "free in the cache's filesystem"]);
    let t0 = Instant::now();
    lab.refused(
        e,
        "org/trickle",
        &[],
        &["config.json", "org/trickle", "not finished within 4 s (VRAM_LAB_HUB_FILE_S)"],
    );
    assert!(t0.elapsed() >= Duration::from_secs(4), "stopped by the wall limit, not sooner");
    lab.refused(e, "org/header-trickle", &[], &["config.json", "not finished within 4 s"]);
    lab.refused(e, "org/longer", &[], &["config.json", "are not JSON"]);
    lab.refused(
        e,
        "org/longer-chunked",
        &[],
        &["config.json", "the body runs past 10 bytes (its Content-Length); cut and refused"],
    );
    lab.refused(e, "org/shorter", &[], &["config.json", "the body stopped after"]);
    lab.refused(e, "org/stall", &[], &[SHARDS[1], "org/stall", "nothing received for 2 s"]);
    // Nothing half-written became a blob or a snapshot entry.
    let cut = lab.cache().join("models--org--longer/snapshots");
    assert!(
        !cut.exists() || std::fs::read_dir(&cut).unwrap().flatten().all(|d| !d.path().join("config.json").exists())
    );
}

/// The sibling list is only compared: hostile names there are never fetched, and the repo loads.
#[test]
fn hostile_sibling_names_are_not_fetched() {
    let lab = Lab::new();
    let listed = ["../../../victim.txt", "/etc/passwd", "..\\x", "../model.safetensors.index.json", "a\nb", ""];
    let mut repos = BTreeMap::new();
    let repo = Repo { listed_extra: listed.iter().map(|s| s.to_string()).collect(), ..Repo::new(repo_files()) };
    repos.insert("org/siblings".to_string(), repo);
    let hub = Hub::start(repos);
    let before = snapshot(lab.root(), Some(&lab.cache()));
    let (o, _) = lab.run(&hub.addr, "org/siblings", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(snapshot(lab.root(), Some(&lab.cache())), before);
    let asked = hub.requests();
    assert!(!asked.iter().any(|p| p.contains("..") || p.contains("victim") || p.contains("passwd")), "{asked:?}");
}

/// A symlink planted in the cache (the repo folder, its blobs, a snapshot) is refused, not
/// followed: the folder it points at stays as it was.
#[test]
fn symlinks_planted_in_the_cache_are_refused() {
    let lab = Lab::new();
    let mut repos = BTreeMap::new();
    for name in ["planted", "planted-blobs", "planted-snapshot"] {
        repos.insert(format!("org/{name}"), Repo::new(repo_files()));
    }
    let hub = Hub::start(repos);
    let cache = lab.cache();
    let outside = lab.root().join("outside");
    std::os::unix::fs::symlink(&outside, cache.join("models--org--planted")).unwrap();
    std::fs::create_dir(cache.join("models--org--planted-blobs")).unwrap();
    std::os::unix::fs::symlink(&outside, cache.join("models--org--planted-blobs/blobs")).unwrap();
    std::fs::create_dir_all(cache.join("models--org--planted-snapshot/snapshots")).unwrap();
    let snap = cache.join("models--org--planted-snapshot/snapshots").join(hub_server::COMMIT);
    std::os::unix::fs::symlink(&outside, snap).unwrap();
    lab.refused(
        &hub.addr,
        "org/planted",
        &[],
        &["models--org--planted", "is not a folder (a link or a file)", "config.json"],
    );
    lab.refused(&hub.addr, "org/planted-blobs", &[], &["models--org--planted-blobs/blobs", "is not a folder"]);
    lab.refused(&hub.addr, "org/planted-snapshot", &[], &["is not a folder"]);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "only keep.txt in {}", outside.display());
}

/// A download that is not the file the Hub names is never kept: a shard whose bytes do not hash
/// to its sha256 ETag, an HTML page answered 200, a chunked body cut short, a body of another size
/// than the `X-Linked-Size` on the redirect. Nothing of it is linked into a snapshot, and no
/// partial file stays in blobs/.
#[test]
fn damaged_downloads_are_never_kept() {
    let lab = Lab::new();
    let files = repo_files();
    let cases = [
        ("org/corrupt", Attack::Corrupt, "not the"),
        ("org/html", Attack::Html, "an HTML page"),
        ("org/chunked-cut", Attack::ChunkedCut, SHARDS[1]),
        ("org/linked-size", Attack::LinkedSize(7), "X-Linked-Size"),
    ];
    let repos: BTreeMap<String, Repo> =
        cases.iter().map(|(r, a, _)| (r.to_string(), Repo::new(files.clone()).attack(SHARDS[1], a.clone()))).collect();
    let hub = Hub::start(repos);
    for (repo, _, needle) in &cases {
        lab.refused(&hub.addr, repo, &[], &[SHARDS[1], repo, needle]);
        let folder = lab.cache().join(format!("models--{}", repo.replace('/', "--")));
        let linked = folder.join("snapshots").join(hub_server::COMMIT).join(SHARDS[1]);
        assert!(std::fs::symlink_metadata(&linked).is_err(), "{repo}: the bad shard was linked");
        let partial = std::fs::read_dir(folder.join("blobs")).unwrap().flatten().any(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.ends_with(".incomplete")
        });
        assert!(!partial, "{repo}: a partial file stayed in blobs/");
    }
}

/// Ctrl-C or SIGTERM during a download stops it and removes its partial file; a second signal
/// ends the process at once (exit 130), the partial file removed as well. The second signal goes
/// as soon as the first one's message is printed; a download that stopped cleanly before it came
/// (the stop raced it) is tried again, and one of five tries must end at once.
#[test]
fn a_signal_mid_download_leaves_no_partial_file() {
    use std::io::BufRead;
    let lab = Lab::new();
    let files = repo_files();
    let hub =
        Hub::start(BTreeMap::from([("org/slow".to_string(), Repo::new(files).attack(SHARDS[1], Attack::Trickle))]));
    let partials = |dir: &Path| -> Vec<PathBuf> {
        let blobs = dir.join("models--org--slow/blobs");
        std::fs::read_dir(blobs)
            .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(".incomplete")).collect())
            .unwrap_or_default()
    };
    let cases = [vec![libc::SIGINT], vec![libc::SIGTERM], vec![libc::SIGINT, libc::SIGINT]];
    let mut quit_at_once = false;
    for (i, signals) in cases.iter().flat_map(|s| std::iter::repeat_n(s, if s.len() == 2 { 5 } else { 1 })).enumerate()
    {
        if signals.len() == 2 && quit_at_once {
            break;
        }
        let cache = lab.root().join(format!("signal-cache-{i}"));
        let mut child = hub_server::lab_at(&hub.addr, &lab.root().join("hf-home"))
            .current_dir(lab.root().join("work"))
            .env("VRAM_LAB_HUB_FILE_S", "60")
            .args(GENERATE)
            .args(["--model", "org/slow", "--cache-dir", cache.to_str().unwrap(), "--device", "cpu", "--quiet"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // stderr line by line, as it comes.
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                let _ = tx.send(line);
            }
        });
        let mut err = String::new();
        let t0 = Instant::now();
        while partials(&cache).is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(20), "no download started");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(unsafe { libc::kill(child.id() as i32, signals[0]) }, 0);
        if let Some(&again) = signals.get(1) {
            // The second once the first was handled (its message printed).
            while !err.contains("Ctrl-C again") {
                match rx.recv_timeout(Duration::from_secs(15)) {
                    Ok(line) => err += &(line + "\n"),
                    Err(_) => panic!("no message after the first signal: {err}"),
                }
            }
            unsafe { libc::kill(child.id() as i32, again) };
        }
        let t1 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t1.elapsed() > Duration::from_secs(15) {
                child.kill().unwrap();
                panic!("signals {signals:?}: the download went on");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        reader.join().unwrap();
        err.extend(rx.try_iter().map(|l| l + "\n"));
        assert!(!status.success(), "signals {signals:?}: {err}");
        if status.code() == Some(130) {
            assert_eq!(signals.len(), 2, "one signal ended the process at once: {err}");
            quit_at_once = true;
        } else {
            assert!(err.contains("stopped by Ctrl-C"), "signals {signals:?}: {err}");
        }
        assert!(partials(&cache).is_empty(), "signals {signals:?} left {:?}", partials(&cache));
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(quit_at_once, "no second signal ended the process at once in five tries");
}

/// A per-file limit of u64::MAX seconds is a limit, not an overflow: the download completes.
#[test]
fn the_largest_file_limit_does_not_overflow() {
    let lab = Lab::new();
    let hub = Hub::start(BTreeMap::from([("org/tiny".to_string(), Repo::new(repo_files()))]));
    let (o, _) = lab.run(&hub.addr, "org/tiny", &[("VRAM_LAB_HUB_FILE_S", "18446744073709551615")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("panicked"), "{err}");
}
