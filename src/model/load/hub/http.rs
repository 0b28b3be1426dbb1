//! The lab's Hub client over ureq: redirects followed by hand (at most 5, http(s) only, the token
//! kept to the endpoint's own host), and each download on a worker thread bounded by a stall limit,
//! a wall-clock limit checked after every read, and a byte budget.

use crate::model::load::hub::cache::RepoCache;
use crate::model::load::hub::names;
use crate::model::load::hub::verify;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Redirects followed per request.
const MAX_REDIRECTS: usize = 5;
/// The pace a download must keep on average once its first 120 s are spent, counted on the bytes
/// received: a server announcing a large file and dripping it is stopped after about 120 s.
const MIN_RATE: u64 = 512 * 1024;
const BASE_FILE_S: u64 = 120;
/// The repo info the lab reads at most (a repo of many thousand files stays well below).
const MAX_INFO: u64 = 16 << 20;

/// Why a request gave nothing usable.
#[derive(Debug)]
pub enum Fail {
    /// The server answered with this status.
    Status(u16),
    /// No answer: the endpoint could not be reached.
    Net(String),
    /// An answer the lab does not take (a limit, a redirect, a body cut short), said in words.
    Why(String),
    /// A name the server sent that is refused; the message is complete.
    Refused(String),
}

/// How many bytes a file may have, and why that many.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub bytes: u64,
    pub what: &'static str,
}

/// One file fetched into the cache's blobs.
pub struct Got {
    pub commit: String,
    pub etag: String,
}

#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    pub endpoint: String,
    origin: String,
    token: Option<String>,
    pub stall: Duration,
    /// VRAM_LAB_HUB_FILE_S: a fixed wall-clock limit per file instead of the size-based one.
    pub file_s: Option<u64>,
}

/// The commit and etag headers as the first response carrying them gave them.
#[derive(Default)]
struct Meta {
    commit: Option<String>,
    etag: Option<(&'static str, String)>,
    /// `X-Linked-Size`: the Hub's size of an LFS file, given on the redirect to its content.
    size: Option<u64>,
}

impl Client {
    pub fn new(endpoint: String, token: Option<String>, stall: Duration, file_s: Option<u64>) -> Self {
        let agent = ureq::AgentBuilder::new()
            .redirects(0)
            .try_proxy_from_env(true)
            .timeout_connect(stall)
            .timeout_read(stall)
            .timeout_write(stall)
            .user_agent(concat!("vram-lab/", env!("CARGO_PKG_VERSION")))
            .build();
        let origin = names::origin(&endpoint).unwrap_or_default();
        Self { agent, endpoint, origin, token, stall, file_s }
    }

    /// GET `url`, following redirects by hand; `deadline` bounds the whole request when given.
    fn get(&self, url: &str, deadline: Option<Instant>) -> Result<(ureq::Response, Meta), Fail> {
        self.get_range(url, deadline, None)
    }

    /// GET `url` (bytes `first..=last` of it when `range` is given), redirects followed by hand.
    fn get_range(
        &self,
        url: &str,
        deadline: Option<Instant>,
        range: Option<(u64, u64)>,
    ) -> Result<(ureq::Response, Meta), Fail> {
        let mut url = url.to_string();
        let mut meta = Meta::default();
        for hop in 0..=MAX_REDIRECTS {
            let mut req = self.agent.get(&url).set("Accept-Encoding", "identity");
            if let Some((first, last)) = range {
                req = req.set("Range", &format!("bytes={first}-{last}"));
            }
            if let Some(d) = deadline {
                req = req.timeout(d.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)));
            }
            // The token goes to the endpoint's own host only, never after a redirect elsewhere.
            if let Some(t) =
                self.token.as_ref().filter(|_| names::origin(&url).as_deref() == Some(self.origin.as_str()))
            {
                req = req.set("Authorization", &format!("Bearer {t}"));
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(code, _)) => return Err(Fail::Status(code)),
                Err(ureq::Error::Transport(t)) => {
                    let text = t.to_string();
                    return Err(if text.contains("timed out") {
                        Fail::Why(format!("nothing received for {} s", self.stall.as_secs()))
                    } else {
                        Fail::Net(text.lines().next().unwrap_or_default().to_string())
                    });
                }
            };
            if meta.commit.is_none() {
                meta.commit = resp.header("X-Repo-Commit").map(str::to_string);
            }
            if meta.size.is_none() {
                meta.size = resp.header("X-Linked-Size").and_then(|v| v.trim().parse::<u64>().ok());
            }
            if meta.etag.is_none() {
                meta.etag = match (resp.header("X-Linked-Etag"), resp.header("ETag")) {
                    (Some(e), _) => Some(("X-Linked-Etag", e.to_string())),
                    (None, Some(e)) => Some(("ETag", e.to_string())),
                    _ => None,
                };
            }
            if !(300..400).contains(&resp.status()) {
                return Ok((resp, meta));
            }
            let Some(location) = resp.header("Location") else {
                return Err(Fail::Status(resp.status()));
            };
            if hop == MAX_REDIRECTS {
                return Err(Fail::Why(format!("more than {MAX_REDIRECTS} redirects")));
            }
            url = names::redirect(&url, location).map_err(Fail::Why)?;
        }
        Err(Fail::Why(format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// The repo's info (`sha`, `siblings`) within `timeout`; JSON the lab cannot read is Null.
    pub fn info(&self, repo: &str, timeout: Duration) -> Result<serde_json::Value, Fail> {
        let url = format!("{}/api/models/{repo}/revision/main", self.endpoint);
        let (resp, _) = self.get(&url, Some(Instant::now() + timeout))?;
        let mut body = Vec::new();
        resp.into_reader()
            .take(MAX_INFO + 1)
            .read_to_end(&mut body)
            .map_err(|e| Fail::Net(format!("the repo info was cut short: {e}")))?;
        if body.len() as u64 > MAX_INFO {
            return Err(Fail::Why(format!("the repo info is over {} MiB", MAX_INFO >> 20)));
        }
        Ok(serde_json::from_slice(&body).unwrap_or_default())
    }

    /// `len` bytes of `file` of `repo` from `start` (fewer at the file's end) within `timeout`, by a
    /// Range request: a 206 answer must start where asked; a server that ignores Range and sends
    /// the whole file (200) is read only up to `start + len` and then dropped. Returns the bytes
    /// and the file's size where the answer gives it.
    pub fn range(
        &self,
        repo: &str,
        file: &str,
        start: u64,
        len: u64,
        timeout: Duration,
    ) -> Result<(Vec<u8>, Option<u64>), Fail> {
        let url = format!("{}/{repo}/resolve/main/{file}", self.endpoint);
        let last = start.saturating_add(len.max(1)) - 1;
        let (resp, _) = self.get_range(&url, Some(Instant::now() + timeout), Some((start, last)))?;
        let (skip, total) = match resp.status() {
            206 => {
                let cr = resp.header("Content-Range").unwrap_or_default();
                let (span, total) =
                    cr.trim().strip_prefix("bytes ").and_then(|r| r.split_once('/')).unwrap_or(("", ""));
                let first = span.split('-').next().and_then(|a| a.trim().parse::<u64>().ok());
                if first != Some(start) {
                    return Err(Fail::Why(format!(
                        "asked for bytes from {start}, the answer's Content-Range is `{}`",
                        cr.escape_debug()
                    )));
                }
                (0, total.trim().parse::<u64>().ok())
            }
            200 => (start, resp.header("Content-Length").and_then(|v| v.trim().parse::<u64>().ok())),
            code => return Err(Fail::Status(code)),
        };
        let mut reader = resp.into_reader().take(skip + len);
        std::io::copy(&mut (&mut reader).take(skip), &mut std::io::sink())
            .map_err(|e| Fail::Net(format!("the answer was cut short: {e}")))?;
        let mut out = Vec::new();
        reader.read_to_end(&mut out).map_err(|e| Fail::Net(format!("the answer was cut short: {e}")))?;
        Ok((out, total))
    }

    /// The wall-clock limit of a download of which `got` bytes have come.
    fn wall(&self, got: u64) -> Duration {
        match self.file_s {
            Some(s) => Duration::from_secs(s),
            None => Duration::from_secs(BASE_FILE_S + got / MIN_RATE),
        }
    }

    fn wall_msg(&self, limit: Duration) -> String {
        match self.file_s {
            Some(_) => format!("not finished within {} s (VRAM_LAB_HUB_FILE_S)", limit.as_secs()),
            None => format!("not finished within {} s (120 s + what came at 512 KiB/s)", limit.as_secs()),
        }
    }

    /// `file` of `repo` into the cache's blobs, on a worker thread watched for the wall-clock
    /// limit (the worker stops itself at the stall limit, the budget and the wall limit too).
    pub fn download(&self, repo: &str, file: &str, cache: &RepoCache, budget: Budget, json: bool) -> Result<Got, Fail> {
        let url = format!("{}/{repo}/resolve/main/{file}", self.endpoint);
        let shared = Arc::new(Shared::default());
        let t0 = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let (me, cache2, s2, file2) = (self.clone(), cache.clone(), shared.clone(), file.to_string());
        std::thread::spawn(move || {
            let r = me.worker(&url, &cache2, budget, &file2, &s2, t0);
            if let Some(t) = s2.temp.lock().unwrap_or_else(|e| e.into_inner()).take() {
                if r.is_err() || s2.cancel.load(Ordering::SeqCst) {
                    let _ = std::fs::remove_file(&t);
                }
                crate::stop::untrack_partial(&t);
            }
            let _ = tx.send(r);
        });
        // Weights get a bar (drawn only on a terminal); metadata files are small.
        let bar = if json { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(0) };
        if !json {
            bar.set_message(file.to_string());
            if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} {bytes}/{total_bytes} {bytes_per_sec}") {
                bar.set_style(style);
            }
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(r) => {
                    bar.finish_and_clear();
                    return r;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Fail::Why("the download thread stopped".into()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let (announced, got) = (shared.announced.load(Ordering::SeqCst), shared.got.load(Ordering::SeqCst));
                    if !json {
                        bar.set_length(announced);
                        bar.set_position(got);
                    }
                    let limit = self.wall(got);
                    // A second of grace: the worker, which checks after every read, speaks first.
                    if t0.elapsed() > limit.saturating_add(Duration::from_secs(1)) {
                        shared.cancel.store(true, Ordering::SeqCst);
                        if let Some(t) = shared.temp.lock().unwrap_or_else(|e| e.into_inner()).take() {
                            let _ = std::fs::remove_file(&t);
                            crate::stop::untrack_partial(&t);
                        }
                        bar.finish_and_clear();
                        return Err(Fail::Why(self.wall_msg(limit)));
                    }
                }
            }
        }
    }

    fn worker(
        &self,
        url: &str,
        cache: &RepoCache,
        budget: Budget,
        file: &str,
        shared: &Shared,
        t0: Instant,
    ) -> Result<Got, Fail> {
        let (resp, meta) = self.get(url, None)?;
        let raw = meta.commit.ok_or_else(|| Fail::Why("the server sent no X-Repo-Commit".into()))?;
        let commit = names::commit("X-Repo-Commit", &raw).map_err(|e| Fail::Refused(e.to_string()))?;
        let (header, raw) = meta.etag.ok_or_else(|| Fail::Why("the server sent no ETag".into()))?;
        let etag = names::etag(header, &raw).map_err(|e| Fail::Refused(e.to_string()))?;
        let announced = resp.header("Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
        let encoded = resp.header("Content-Encoding").is_some_and(|e| !e.trim().eq_ignore_ascii_case("identity"));
        if let Some(n) = announced.or(meta.size).filter(|n| *n > budget.bytes) {
            return Err(Fail::Why(format!("it announces {n} bytes, over the {} bytes {}", budget.bytes, budget.what)));
        }
        // An error page answered 200 (a proxy's login or rate-limit page) is not the file.
        if resp.content_type().eq_ignore_ascii_case("text/html") {
            return Err(Fail::Why("the server answered an HTML page (Content-Type text/html), not the file".into()));
        }
        if let (Some(n), Some(size)) = (announced.filter(|_| !encoded), meta.size) {
            if n != size {
                return Err(Fail::Why(format!("its Content-Length {n} is not the {size} bytes of its X-Linked-Size")));
            }
        }
        // The Content-Length bounds the body too (a decoded body has no such bound but the budget).
        let (limit, limit_what) = match announced.filter(|_| !encoded) {
            Some(n) => (n, "its Content-Length"),
            None => (budget.bytes, budget.what),
        };
        shared.announced.store(announced.unwrap_or(0), Ordering::SeqCst);
        if let Some(blob) = cache.blob(&etag) {
            // A blob of another size than the Hub's is not this file: fetched again.
            match (meta.size, std::fs::metadata(&blob).map(|m| m.len())) {
                (Some(size), Ok(len)) if len != size => cache.forget_blob(&etag),
                _ => return Ok(Got { commit, etag }),
            }
        }
        let (mut out, temp) = cache.temp_blob(&etag).map_err(why)?;
        crate::stop::track_partial(&temp);
        *shared.temp.lock().unwrap_or_else(|e| e.into_inner()) = Some(temp.clone());
        let mut reader = resp.into_reader();
        let mut buf = vec![0u8; 256 * 1024];
        let mut got = 0u64;
        let mut sha = verify::Hasher::for_etag(&etag);
        loop {
            if shared.cancel.load(Ordering::SeqCst) {
                return Err(Fail::Why("cancelled".into()));
            }
            if crate::stop::stop_requested() {
                return Err(Fail::Why("stopped by Ctrl-C or SIGTERM; the partial file is removed".into()));
            }
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
                        || e.to_string().contains("timed out") =>
                {
                    return Err(Fail::Why(format!("nothing received for {} s", self.stall.as_secs())));
                }
                Err(e) => {
                    let why = format!(
                        "the body stopped after {got} of {} bytes: {e}",
                        announced.map_or("?".into(), |n| n.to_string())
                    );
                    return Err(Fail::Why(why));
                }
            };
            if n == 0 {
                break;
            }
            got += n as u64;
            if got > limit {
                return Err(Fail::Why(format!("the body runs past {limit} bytes ({limit_what}); cut and refused")));
            }
            let chunk = buf.get(..n).unwrap_or_default();
            out.write_all(chunk).map_err(|e| Fail::Why(format!("cannot write {}: {e}", temp.display())))?;
            sha.update(chunk);
            shared.got.store(got, Ordering::SeqCst);
            let wall = self.wall(got);
            if t0.elapsed() > wall {
                return Err(Fail::Why(self.wall_msg(wall)));
            }
        }
        if let Some(n) = announced.filter(|n| !encoded && got < *n) {
            return Err(Fail::Why(format!("the body stopped after {got} of {n} bytes")));
        }
        if let Some(size) = meta.size.filter(|s| *s != got) {
            return Err(Fail::Why(format!("the body has {got} bytes, not the {size} of its X-Linked-Size")));
        }
        if let Some(why) = sha.mismatch(&etag) {
            return Err(Fail::Why(why));
        }
        out.flush()
            .and_then(|_| out.sync_all())
            .map_err(|e| Fail::Why(format!("cannot write {}: {e}", temp.display())))?;
        drop(out);
        if let Some(why) = verify::damage(&temp, file, budget.bytes) {
            return Err(Fail::Why(why));
        }
        if shared.cancel.load(Ordering::SeqCst) {
            return Err(Fail::Why("cancelled".into()));
        }
        shared.temp.lock().unwrap_or_else(|e| e.into_inner()).take();
        let kept = cache.finish_blob(&temp, &etag).map_err(why);
        crate::stop::untrack_partial(&temp);
        kept?;
        Ok(Got { commit, etag })
    }
}

/// What the worker and the watchdog share.
#[derive(Default)]
struct Shared {
    announced: AtomicU64,
    got: AtomicU64,
    cancel: AtomicBool,
    temp: Mutex<Option<PathBuf>>,
}

/// A lab error (a cache folder refused, a file that cannot be written) as the words of a Fail.
pub fn why(e: crate::error::LabError) -> Fail {
    let text = e.to_string();
    Fail::Why(text.strip_prefix("hub: ").unwrap_or(&text).to_string())
}
