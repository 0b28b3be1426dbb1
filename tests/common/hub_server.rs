//! A Hub stand-in on 127.0.0.1 for tests/hub.rs and tests/hub_hostile.rs: the part of the Hub API
//! the lab uses (repo info, `resolve` with etag / x-repo-commit headers, weights answered with a
//! redirect as the Hub answers LFS files) serving the fixture model in a real repo's layout (two
//! shards and their index), with a per-file `Attack` knob for a malicious server.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The same repo after a new commit upstream.
pub const COMMIT2: &str = "89abcdef0123456789abcdef0123456789abcdef";
pub const SHARDS: [&str; 2] = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
pub const INDEX: &str = "model.safetensors.index.json";

/// `generate` of four prompt ids and two new tokens as JSON: what each run against the Hub asks.
pub const GENERATE: [&str; 8] =
    ["generate", "--precision", "f32", "--prompt-ids", "9,8,7,6", "--max-new-tokens", "2", "--json"];

/// The lab's binary (VRAM_LAB_BIN, else this build's) pointed at `endpoint` on the CPU, with
/// nothing from the caller's environment that would send it elsewhere (a proxy, a token, a home
/// cache) and a download abandoned after 2 s without a byte (60 s by default).
pub fn lab_at(endpoint: &str, home: &Path) -> std::process::Command {
    let bin = std::env::var_os("VRAM_LAB_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_vram-lab").into());
    let mut cmd = std::process::Command::new(bin);
    for k in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HF_TOKEN",
        "VRAM_LAB_CACHE_DIR",
        "HF_HUB_CACHE",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("HF_ENDPOINT", endpoint).env("HF_HOME", home).env("VRAM_LAB_HUB_STALL_S", "2");
    cmd
}

pub fn fixture() -> PathBuf {
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
pub fn repo_files() -> BTreeMap<String, Vec<u8>> {
    let dir = fixture();
    let mut files = BTreeMap::new();
    for f in ["config.json", "generation_config.json", "tokenizer.json"] {
        files.insert(f.to_string(), std::fs::read(dir.join(f)).unwrap());
    }
    files.insert(
        "tokenizer_config.json".into(),
        br#"{"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 32768}"#.to_vec(),
    );
    let (shards, index) = shard(&dir.join("model.safetensors"));
    files.extend(shards);
    files.insert(INDEX.into(), index);
    files
}

/// What a malicious server does with one file's download.
#[derive(Clone, Debug)]
pub enum Attack {
    /// This `ETag` (raw, quotes included) on the answer.
    ETag(String),
    /// This `X-Repo-Commit` on the answer.
    Commit(String),
    /// The file answered with a redirect carrying this `X-Linked-Etag`.
    LinkedEtag(String),
    /// A redirect to this `Location` (raw), with the real commit and etag.
    Redirect(String),
    /// A redirect to itself, forever.
    RedirectLoop,
    /// This Content-Length announced, then nothing sent (the connection held open).
    Announce(u64),
    /// The real Content-Length, the body sent one byte a second.
    Trickle,
    /// The status line and then one header byte a second.
    HeaderTrickle,
    /// A Content-Length of half the body, the whole body sent.
    Longer,
    /// A small Content-Length beside `Transfer-Encoding: chunked`, the whole body in one chunk.
    LongerChunked,
    /// The real Content-Length, half the body sent, the connection closed.
    Shorter,
    /// Half the body sent, then silence with the connection open.
    Stall,
    /// A Range request answered 200 with the whole file, as a server without ranges does.
    IgnoreRange,
    /// The whole length sent, the last bytes changed (the ETag still names the real content).
    Corrupt,
    /// An HTML error page answered 200 with `Content-Type: text/html`, as a proxy's login page.
    Html,
    /// `Transfer-Encoding: chunked`, half the body in one chunk, then the connection closed
    /// without the last chunk.
    ChunkedCut,
    /// The redirect announces this `X-Linked-Size` (the Hub's size of the LFS file).
    LinkedSize(u64),
}

/// One served repo: its files, files it lists but answers 404 for (a broken mirror), whether
/// the repo API answers for it (a mirror may serve files alone), and the attacks per file.
#[derive(Clone)]
pub struct Repo {
    pub files: BTreeMap<String, Vec<u8>>,
    pub withheld: Vec<String>,
    pub api: bool,
    pub commit: String,
    /// Names the sibling list gives beside the files.
    pub listed_extra: Vec<String>,
    /// The repo info's `sha`, when not the commit.
    pub sha: Option<String>,
    pub attacks: BTreeMap<String, Attack>,
    /// Files served as their first bytes then zeros up to a length (a model's header with its
    /// tensors left out: sizing reads only the header).
    pub sparse: BTreeMap<String, (Vec<u8>, u64)>,
}

impl Repo {
    pub fn new(files: BTreeMap<String, Vec<u8>>) -> Self {
        Self {
            files,
            withheld: vec![],
            api: true,
            commit: COMMIT.into(),
            listed_extra: vec![],
            sha: None,
            attacks: BTreeMap::new(),
            sparse: BTreeMap::new(),
        }
    }

    pub fn sparse(mut self, file: &str, head: Vec<u8>, len: u64) -> Self {
        self.sparse.insert(file.to_string(), (head, len));
        self
    }

    pub fn attack(mut self, file: &str, attack: Attack) -> Self {
        self.attacks.insert(file.to_string(), attack);
        self
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub range: Option<String>,
}

/// A Hub stand-in on 127.0.0.1: answers each request on its own connection (`Connection: close`)
/// and thread, logs the paths asked, and stops (accept loop joined) when dropped.
pub struct Hub {
    pub addr: String,
    log: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Hub {
    pub fn start(repos: BTreeMap<String, Repo>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (log, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (log2, stop2, base) = (log.clone(), stop.clone(), addr.clone());
        let repos = Arc::new(repos);
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(mut s) = conn {
                    let (repos, base, log) = (repos.clone(), base.clone(), log2.clone());
                    std::thread::spawn(move || {
                        let _ = serve(&mut s, &repos, &base, &log);
                    });
                }
            }
        });
        Self { addr, log, stop, thread: Some(thread) }
    }

    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|s| s.path.clone()).collect()
    }

    pub fn seen(&self) -> Vec<Seen> {
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
pub fn etag(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3));
    format!("{h:016x}{:08x}", bytes.len())
}

/// The Hub's ETag of an LFS file (the weights): the sha256 of its content, in hex.
pub fn lfs_etag(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Sends `bytes` one a second until the client goes or `max` seconds pass.
fn trickle(s: &mut TcpStream, bytes: &[u8], max: usize) {
    for b in bytes.iter().cycle().take(max) {
        if s.write_all(&[*b]).and_then(|_| s.flush()).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn serve(s: &mut TcpStream, repos: &BTreeMap<String, Repo>, base: &str, log: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
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
    let header = |name: &str| {
        req.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    // bytes=a- or bytes=a-b (inclusive).
    let range: Option<(u64, Option<u64>)> = header("range").and_then(|r| {
        let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()))
    });
    log.lock().unwrap().push(Seen {
        path: path.clone(),
        authorization: header("authorization"),
        range: header("range"),
    });

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
                let siblings: Vec<_> = r
                    .files
                    .keys()
                    .chain(&r.withheld)
                    .chain(&r.listed_extra)
                    .map(|f| serde_json::json!({"rfilename": f}))
                    .collect();
                let sha = r.sha.clone().unwrap_or_else(|| r.commit.clone());
                let info = serde_json::json!({"id": repo, "sha": sha, "siblings": siblings});
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
    if let Some((head, len)) = repos.get(&repo).and_then(|r| r.sparse.get(&file)) {
        let r = &repos[&repo];
        return serve_sparse(
            s,
            r,
            &file,
            head,
            *len,
            range.filter(|_| !matches!(r.attacks.get(&file), Some(Attack::IgnoreRange))),
        );
    }
    let Some((r, body)) =
        repos.get(&repo).filter(|r| !r.withheld.contains(&file)).and_then(|r| Some((r, r.files.get(&file)?)))
    else {
        return reply("404 Not Found", &[("X-Error-Code", "EntryNotFound".into())], b"Entry not found");
    };
    let attack = r.attacks.get(&file).cloned();
    let tag = format!("\"{}\"", etag(body));
    let commit = r.commit.clone();
    if !cdn {
        let size = match &attack {
            Some(Attack::LinkedSize(n)) => *n,
            _ => body.len() as u64,
        };
        let redirect = |location: String, linked: String| {
            vec![
                ("Location", location),
                ("X-Repo-Commit", commit.clone()),
                ("X-Linked-Etag", linked),
                ("X-Linked-Size", size.to_string()),
                ("ETag", "\"pointer\"".into()),
            ]
        };
        let cdn_url = format!("{base}/cdn/{repo}/{file}");
        match &attack {
            Some(Attack::LinkedEtag(e)) => return reply("302 Found", &redirect(cdn_url, e.clone()), b""),
            Some(Attack::Redirect(to)) => return reply("302 Found", &redirect(to.clone(), tag), b""),
            Some(Attack::RedirectLoop) => return reply("302 Found", &redirect(path.clone(), tag), b""),
            _ if file.ends_with(".safetensors") => {
                return reply("302 Found", &redirect(cdn_url, format!("\"{}\"", lfs_etag(body))), b"")
            }
            _ => {}
        }
    }
    let raw = |s: &mut TcpStream, head: String, bytes: &[u8]| -> std::io::Result<()> {
        s.write_all(head.as_bytes())?;
        s.write_all(bytes)
    };
    let ok_head =
        |len: String| format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nETag: {tag}\r\nX-Repo-Commit: {commit}\r\n");
    match &attack {
        Some(Attack::Announce(n)) => {
            raw(s, ok_head(n.to_string()) + "\r\n", b"{")?;
            std::thread::sleep(Duration::from_secs(10));
            return Ok(());
        }
        Some(Attack::Trickle) => {
            raw(s, ok_head(body.len().to_string()) + "\r\n", b"")?;
            trickle(s, body, 30);
            return Ok(());
        }
        Some(Attack::HeaderTrickle) => {
            raw(s, "HTTP/1.1 200 OK\r\nX-Pad: ".into(), b"")?;
            trickle(s, b"a", 30);
            return Ok(());
        }
        Some(Attack::Longer) => {
            return raw(s, ok_head((body.len() / 2).to_string()) + "Connection: close\r\n\r\n", body)
        }
        Some(Attack::LongerChunked) => {
            let head = ok_head("10".into()) + "Transfer-Encoding: chunked\r\n\r\n";
            let mut chunked = format!("{:x}\r\n", body.len()).into_bytes();
            chunked.extend_from_slice(body);
            chunked.extend_from_slice(b"\r\n0\r\n\r\n");
            return raw(s, head, &chunked);
        }
        Some(Attack::Shorter) => {
            return raw(s, ok_head(body.len().to_string()) + "Connection: close\r\n\r\n", &body[..body.len() / 2])
        }
        Some(Attack::Corrupt) => {
            let mut bad = body.clone();
            if let Some(last) = bad.last_mut() {
                *last ^= 0xff;
            }
            return raw(s, ok_head(body.len().to_string()) + "Connection: close\r\n\r\n", &bad);
        }
        Some(Attack::Html) => {
            let page = b"<!DOCTYPE html><html><body>429 Too Many Requests</body></html>";
            let head = ok_head(page.len().to_string()) + "Content-Type: text/html\r\nConnection: close\r\n\r\n";
            return raw(s, head, page);
        }
        Some(Attack::ChunkedCut) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nETag: {tag}\r\nX-Repo-Commit: {commit}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            let half = &body[..body.len() / 2];
            let mut chunked = format!("{:x}\r\n", half.len()).into_bytes();
            chunked.extend_from_slice(half);
            chunked.extend_from_slice(b"\r\n");
            return raw(s, head, &chunked);
        }
        Some(Attack::Stall) => {
            raw(s, ok_head(body.len().to_string()) + "\r\n", &body[..body.len() / 2])?;
            std::thread::sleep(Duration::from_secs(10));
            return Ok(());
        }
        _ => {}
    }
    let mut headers = vec![("ETag", tag), ("X-Repo-Commit", r.commit.to_string()), ("Accept-Ranges", "bytes".into())];
    match &attack {
        Some(Attack::ETag(e)) => headers[0].1 = e.clone(),
        Some(Attack::Commit(c)) => headers[1].1 = c.clone(),
        _ => {}
    }
    match range.filter(|_| !matches!(attack, Some(Attack::IgnoreRange))) {
        Some((a, b)) if (a as usize) < body.len() => {
            let end = b.map_or(body.len() - 1, |b| (b as usize).min(body.len() - 1));
            headers.push(("Content-Range", format!("bytes {a}-{end}/{}", body.len())));
            reply("206 Partial Content", &headers, &body[a as usize..=end])
        }
        _ => reply("200 OK", &headers, body),
    }
}

/// A sparse file: `head`, then zeros up to `len` bytes; a range of it, or the whole file sent in
/// pieces until the client stops reading.
fn serve_sparse(
    s: &mut TcpStream,
    r: &Repo,
    file: &str,
    head: &[u8],
    len: u64,
    range: Option<(u64, Option<u64>)>,
) -> std::io::Result<()> {
    let piece = |a: u64, b: u64| -> Vec<u8> { (a..=b).map(|i| head.get(i as usize).copied().unwrap_or(0)).collect() };
    let common = format!(
        "ETag: \"{}\"\r\nX-Repo-Commit: {}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n",
        etag(file.as_bytes()),
        r.commit
    );
    match range {
        Some((a, b)) if a < len => {
            let end = b.map_or(len - 1, |b| b.min(len - 1));
            let body = piece(a, end);
            let head = format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {a}-{end}/{len}\r\n{common}\r\n",
                body.len()
            );
            s.write_all(head.as_bytes())?;
            s.write_all(&body)
        }
        _ => {
            s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n{common}\r\n").as_bytes())?;
            let mut at = 0u64;
            while at < len {
                let end = (at + (1 << 20)).min(len) - 1;
                s.write_all(&piece(at, end))?;
                at = end + 1;
            }
            Ok(())
        }
    }
}
