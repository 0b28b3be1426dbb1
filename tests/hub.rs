//! `--model org/name` end to end against a Hub stand-in on 127.0.0.1: the part of the Hub API
//! hf-hub 0.4.3 uses (repo info, `resolve` with its Range probe, etag / x-repo-commit headers,
//! weights answered with a redirect as the Hub answers LFS files) serving the fixture model in a
//! real repo's layout (two shards and their index). The download lands in `--cache-dir` and
//! generates what the fixture directory generates; a second run without the server loads from the
//! cache; a missing repo, server or shard is one line and a non-zero exit within seconds.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The same repo after a new commit upstream.
const COMMIT2: &str = "89abcdef0123456789abcdef0123456789abcdef";
const SHARDS: [&str; 2] = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-tiny-qwen2")
}

/// Splits a safetensors file into two valid ones (tensors in name order, half each) and the
/// index that maps each tensor to its shard, as transformers' `save_pretrained` shards.
fn shard(file: &Path) -> (Vec<(String, Vec<u8>)>, Vec<u8>) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let names: Vec<&String> = header.keys().filter(|k| *k != "__metadata__").collect();
    let half = names.len() / 2;
    let mut files = Vec::new();
    let mut weight_map = serde_json::Map::new();
    for (i, part) in [&names[..half], &names[half..]].into_iter().enumerate() {
        let (mut head, mut body) = (serde_json::Map::new(), Vec::new());
        for name in part {
            let mut t = header[name.as_str()].clone();
            let off = t["data_offsets"].as_array().unwrap();
            let (a, b) = (off[0].as_u64().unwrap() as usize, off[1].as_u64().unwrap() as usize);
            t["data_offsets"] = serde_json::json!([body.len(), body.len() + (b - a)]);
            body.extend_from_slice(&data[a..b]);
            head.insert(name.to_string(), t);
            weight_map.insert(name.to_string(), SHARDS[i].into());
        }
        let mut h = serde_json::to_vec(&head).unwrap();
        h.resize(h.len().div_ceil(8) * 8, b' ');
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out.extend(body);
        files.push((SHARDS[i].to_string(), out));
    }
    let index = serde_json::json!({"metadata": {"total_size": data.len()}, "weight_map": weight_map});
    (files, serde_json::to_vec_pretty(&index).unwrap())
}

/// The repo a Hub would hold for the fixture model.
fn repo_files() -> BTreeMap<String, Vec<u8>> {
    let dir = fixture();
    let mut files = BTreeMap::new();
    for f in ["config.json", "generation_config.json", "tokenizer.json"] {
        files.insert(f.to_string(), std::fs::read(dir.join(f)).unwrap());
    }
    files.insert("tokenizer_config.json".into(), br#"{"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 32768}"#.to_vec());
    let (shards, index) = shard(&dir.join("model.safetensors"));
    files.extend(shards);
    files.insert("model.safetensors.index.json".into(), index);
    files
}

/// One served repo: its files, files it lists but answers 404 for (a broken mirror), and whether
/// the repo API answers for it (a mirror may serve files alone).
struct Repo {
    files: BTreeMap<String, Vec<u8>>,
    withheld: Vec<String>,
    api: bool,
    commit: &'static str,
    /// A file whose download sends half its bytes and then nothing (a stalled mirror).
    stall: Option<&'static str>,
}

impl Repo {
    fn new(files: BTreeMap<String, Vec<u8>>) -> Self {
        Self { files, withheld: vec![], api: true, commit: COMMIT, stall: None }
    }
}

/// A Hub stand-in on 127.0.0.1: answers each request on its own connection (`Connection: close`),
/// logs the paths asked, and stops (thread joined) when dropped.
struct Hub {
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Hub {
    fn start(repos: BTreeMap<String, Repo>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (log, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (log2, stop2, base) = (log.clone(), stop.clone(), addr.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(mut s) = conn {
                    let _ = serve(&mut s, &repos, &base, &log2);
                }
            }
        });
        Self { addr, log, stop, thread: Some(thread) }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag; the listener closes with the thread.
        let _ = TcpStream::connect(self.addr.trim_start_matches("http://"));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A stand-in for the Hub's etag (a content hash): FNV-1a, enough to name distinct blobs.
fn etag(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3));
    format!("{h:016x}{:08x}", bytes.len())
}

fn serve(s: &mut TcpStream, repos: &BTreeMap<String, Repo>, base: &str, log: &Mutex<Vec<String>>) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 64 * 1024 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&buf[..n]);
    }
    let req = String::from_utf8_lossy(&req).to_string();
    let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
    let range_start: Option<usize> = req
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("range: bytes=").map(str::to_string))
        .and_then(|r| r.split('-').next().and_then(|a| a.trim().parse().ok()));
    log.lock().unwrap().push(path.clone());

    let mut reply = |status: &str, headers: &[(&str, String)], body: &[u8]| {
        let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())?;
        s.write_all(body)
    };
    let not_found = br#"{"error":"Repository not found"}"#;

    // GET /api/models/{org}/{name}/revision/main
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let repo = rest.strip_suffix("/revision/main").unwrap_or(rest);
        return match repos.get(repo) {
            Some(r) if r.api => {
                let siblings: Vec<_> = r.files.keys().chain(&r.withheld).map(|f| serde_json::json!({"rfilename": f})).collect();
                let info = serde_json::json!({"id": repo, "sha": r.commit, "siblings": siblings});
                reply("200 OK", &[("Content-Type", "application/json".into())], info.to_string().as_bytes())
            }
            _ => reply("404 Not Found", &[], not_found),
        };
    }
    // GET /{org}/{name}/resolve/main/{file}: weights redirect to /cdn/ as the Hub's LFS files do,
    // the commit and linked etag on the redirect; everything else is answered in place.
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    let (cdn, repo, file) = match parts.as_slice() {
        ["cdn", org, name, file] => (true, format!("{org}/{name}"), file.to_string()),
        [org, name, "resolve", "main", file] => (false, format!("{org}/{name}"), file.to_string()),
        _ => return reply("404 Not Found", &[], b"no such route"),
    };
    let Some((r, body)) = repos.get(&repo).filter(|r| !r.withheld.contains(&file)).and_then(|r| Some((r, r.files.get(&file)?)))
    else {
        return reply("404 Not Found", &[("X-Error-Code", "EntryNotFound".into())], b"Entry not found");
    };
    let tag = format!("\"{}\"", etag(body));
    if !cdn && file.ends_with(".safetensors") {
        let location = format!("{base}/cdn/{repo}/{file}");
        return reply(
            "302 Found",
            &[("Location", location), ("X-Repo-Commit", r.commit.into()), ("X-Linked-Etag", tag), ("ETag", "\"pointer\"".into())],
            b"",
        );
    }
    // hf-hub probes with bytes=0-0 and downloads with bytes=N-.
    let probe = req.to_ascii_lowercase().contains("range: bytes=0-0\r\n");
    if !probe && r.stall == Some(file.as_str()) {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
        s.write_all(head.as_bytes())?;
        s.write_all(&body[..body.len() / 2])?;
        // The connection stays open, silent, on a thread of its own; the server goes on.
        let held = s.try_clone()?;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            drop(held);
        });
        return Ok(());
    }
    let mut headers = vec![("ETag", tag), ("X-Repo-Commit", r.commit.to_string()), ("Accept-Ranges", "bytes".into())];
    match range_start {
        Some(a) if a < body.len() => {
            let b = if probe { 0 } else { body.len() - 1 };
            headers.push(("Content-Range", format!("bytes {a}-{b}/{}", body.len())));
            reply("206 Partial Content", &headers, &body[a..=b])
        }
        _ => reply("200 OK", &headers, body),
    }
}

/// Runs the lab with the endpoint and cache given, on CPU, and nothing else from the caller's
/// environment that would send it elsewhere (a proxy, a token, a home cache). A download that
/// receives nothing for 2 s is abandoned (60 s by default).
fn lab(endpoint: &str, cache: &Path, args: &[&str]) -> (Output, Duration) {
    let t0 = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vram-lab"));
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "HF_TOKEN", "VRAM_LAB_CACHE_DIR"] {
        cmd.env_remove(k);
    }
    let o = cmd
        .current_dir(cache)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", cache.join("hf-home"))
        .env("VRAM_LAB_HUB_STALL_S", "2")
        .args(args)
        .args(["--cache-dir", cache.join("hf").to_str().unwrap(), "--device", "cpu", "--quiet"])
        .output()
        .unwrap();
    (o, t0.elapsed())
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const GENERATE: [&str; 8] = ["generate", "--precision", "f32", "--prompt-ids", "9,8,7,6", "--max-new-tokens", "2", "--json"];

fn generate(endpoint: &str, cache: &Path, model: &str) -> (serde_json::Value, String, Duration) {
    let (o, took) = lab(endpoint, cache, &[&GENERATE[..], &["--model", model]].concat());
    assert!(o.status.success(), "{model}:\n{}", text(&o));
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}:\n{}", text(&o)));
    (v, String::from_utf8_lossy(&o.stderr).to_string(), took)
}

/// Fails with one line naming what it should, in bounded time, without a panic.
fn fails_fast(endpoint: &str, cache: &Path, model: &str, needles: &[&str]) -> Duration {
    let (o, took) = lab(endpoint, cache, &[&GENERATE[..], &["--model", model]].concat());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{model} should fail as bad input:\n{t}");
    assert!(!t.contains("panicked"), "{model} panicked:\n{t}");
    assert_eq!(t.trim().lines().count(), 1, "{model}: expected one line:\n{t}");
    for n in needles {
        assert!(t.contains(n), "{model}: expected `{n}` in:\n{t}");
    }
    assert!(took < Duration::from_secs(5), "{model} took {took:?}:\n{t}");
    took
}

#[test]
fn hub_download_cache_and_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let files = repo_files();
    let mut repos = BTreeMap::new();
    repos.insert("org/tiny".to_string(), Repo::new(files.clone()));
    repos.insert("org/files-only".to_string(), Repo { api: false, ..Repo::new(files.clone()) });
    repos.insert("org/stall".to_string(), Repo { stall: Some(SHARDS[1]), ..Repo::new(files.clone()) });
    let mut broken = files.clone();
    broken.remove(SHARDS[1]);
    repos.insert("org/broken".to_string(), Repo { withheld: vec![SHARDS[1].to_string()], ..Repo::new(broken) });
    let hub = Hub::start(repos);
    let endpoint = hub.addr.clone();

    // The same model from the fixture directory: what the download must generate.
    let (want, _, _) = generate(&endpoint, tmp.path(), fixture().to_str().unwrap());

    let (got, _, took) = generate(&endpoint, tmp.path(), "org/tiny");
    eprintln!("first run (download + load + generate): {took:?}");
    for k in ["prompt_ids", "generated_ids", "text"] {
        assert_eq!(got[k], want[k], "{k} differs between the hub download and the fixture directory");
    }
    assert!(want["text"].is_string(), "the tokenizer should have come with the model");
    assert_eq!(got["model"], "hub:org/tiny");

    // hf-hub's cache layout: one snapshot holding every file of the repo, refs/main naming it.
    let repo_cache = tmp.path().join("hf/models--org--tiny");
    assert_eq!(std::fs::read_to_string(repo_cache.join("refs/main")).unwrap(), COMMIT);
    let snapshot = repo_cache.join("snapshots").join(COMMIT);
    for (name, bytes) in &files {
        assert_eq!(&std::fs::read(snapshot.join(name)).unwrap(), bytes, "{name} in the cache differs from the server's");
    }
    let fetched = |log: &[String]| log.iter().filter(|p| p.contains("/resolve/")).count();
    let first = hub.requests();
    assert_eq!(fetched(&first), 2 * files.len(), "a Range probe and a download per file: {first:?}");

    // Again with the server up: only the repo probe goes out, every file comes from the cache.
    let (again, _, _) = generate(&endpoint, tmp.path(), "org/tiny");
    assert_eq!(again["generated_ids"], want["generated_ids"]);
    let second = hub.requests()[first.len()..].to_vec();
    assert_eq!(second, ["/api/models/org/tiny/revision/main"]);

    // A mirror without the repo API: config.json says the repo is there, the index its shards.
    let (files_only, _, _) = generate(&endpoint, tmp.path(), "org/files-only");
    assert_eq!(files_only["generated_ids"], want["generated_ids"]);
    assert!(tmp.path().join("hf/models--org--files-only/snapshots").join(COMMIT).join(SHARDS[1]).is_file());

    // A shard the index names that the server does not serve.
    let t = fails_fast(&endpoint, tmp.path(), "org/broken", &["hub: cannot fetch", SHARDS[1], "org/broken", &endpoint, "404"]);
    eprintln!("shard missing on the server: {t:?}");
    // A shard whose download stops halfway: abandoned after 2 s without a byte.
    let t = fails_fast(&endpoint, tmp.path(), "org/stall", &["hub: cannot fetch", SHARDS[1], "org/stall", "nothing received for 2 s"]);
    eprintln!("download stalled halfway (2 s limit): {t:?}");
    // A repo the server does not have.
    let t = fails_fast(&endpoint, tmp.path(), "org/absent", &["hub: no model repo org/absent at", &endpoint, "404"]);
    eprintln!("missing repo (404): {t:?}");

    drop(hub);
    // No server: the cached copy loads, and stderr says where it came from.
    let (offline, stderr, took) = generate(&endpoint, tmp.path(), "org/tiny");
    eprintln!("offline run from the cache: {took:?}");
    assert_eq!(offline["generated_ids"], want["generated_ids"]);
    assert_eq!(offline["text"], want["text"]);
    assert!(stderr.contains(&format!("hub: {endpoint} unreachable; loading org/tiny from the cache")), "{stderr}");
    // No server and half a download (org/broken stopped at its second shard): not loaded.
    fails_fast(&endpoint, tmp.path(), "org/broken", &["hub: cannot reach", &endpoint, "org/broken", "no complete copy"]);
    // No server and nothing cached: connection refused is one line naming endpoint and repo.
    let t = fails_fast(&endpoint, tmp.path(), "org/other", &["hub: cannot reach", &endpoint, "org/other", "no complete copy"]);
    eprintln!("no server, nothing cached: {t:?}");

    // The repo moved on upstream: the new commit is fetched whole into its own snapshot, and
    // refs/main follows it, so no run mixes files of two commits.
    let mut repos = BTreeMap::new();
    repos.insert("org/tiny".to_string(), Repo { commit: COMMIT2, ..Repo::new(files.clone()) });
    let hub = Hub::start(repos);
    let (moved, _, _) = generate(&hub.addr, tmp.path(), "org/tiny");
    assert_eq!(moved["generated_ids"], want["generated_ids"]);
    assert_eq!(std::fs::read_to_string(repo_cache.join("refs/main")).unwrap(), COMMIT2);
    for name in files.keys() {
        assert!(repo_cache.join("snapshots").join(COMMIT2).join(name).is_file(), "{name} missing from the new snapshot");
    }
}

/// One GGUF file of a Hub repo, `--model org/name:file.gguf`: fetched into the cache and loaded
/// with the tokenizer the file carries (the same ids as the local file), `estimate` prices it from
/// the cache, a second run with the server gone uses the cached file, and a file the repo lacks is
/// one line within seconds.
#[test]
fn hub_gguf_file() {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("tiny-q8_0.gguf");
    let (o, _) = lab("http://127.0.0.1:9", tmp.path(), &["quantize", "--model", fixture().to_str().unwrap(), "--type", "q8_0", "--to", local.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let mut files = BTreeMap::new();
    files.insert("tiny-q8_0.gguf".to_string(), std::fs::read(&local).unwrap());
    let mut repos = BTreeMap::new();
    repos.insert("org/tiny-gguf".to_string(), Repo::new(files));
    let hub = Hub::start(repos);
    let endpoint = hub.addr.clone();

    let (want, _, _) = generate(&endpoint, tmp.path(), local.to_str().unwrap());
    let (got, _, _) = generate(&endpoint, tmp.path(), "org/tiny-gguf:tiny-q8_0.gguf");
    assert_eq!(got["model"], "hub:org/tiny-gguf:tiny-q8_0.gguf");
    assert_eq!(got["generated_ids"], want["generated_ids"]);
    // No tokenizer.json anywhere near: the text is decoded by the file's own tokenizer.
    assert!(got["text"].is_string() && got["text"] == want["text"], "{got}");
    let cached = tmp.path().join("hf/models--org--tiny-gguf/snapshots").join(COMMIT).join("tiny-q8_0.gguf");
    assert_eq!(std::fs::read(&cached).unwrap(), std::fs::read(&local).unwrap());
    let t = fails_fast(&endpoint, tmp.path(), "org/tiny-gguf:absent.gguf", &["hub: cannot fetch absent.gguf of org/tiny-gguf at", &endpoint, "404"]);
    eprintln!("file missing on the server: {t:?}");

    drop(hub);
    let (offline, _, _) = generate(&endpoint, tmp.path(), "org/tiny-gguf:tiny-q8_0.gguf");
    assert_eq!(offline["generated_ids"], want["generated_ids"]);
    let (o, _) = lab(&endpoint, tmp.path(), &["estimate", "--model", "org/tiny-gguf:tiny-q8_0.gguf", "--precisions", "q4", "--out", tmp.path().join("est").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(tmp.path().join("est/estimate/estimate_ledger.csv").is_file());
}
