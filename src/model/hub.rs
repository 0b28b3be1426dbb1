//! A Hugging Face repo through hf-hub: the endpoint (HF_ENDPOINT) and cache (`--cache-dir`, HF_HOME)
//! honoured, a probe with a timeout, downloads watched for stalls, and the cache used when the Hub
//! cannot be reached.

use super::weights::Safetensors;
use crate::error::{LabError, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the hub client will fetch from and store to: the settings AutoDL users change.
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    pub endpoint: String,
    pub cache_dir: PathBuf,
}

impl HubSettings {
    pub fn from_env(cache_dir: Option<&Path>) -> Self {
        let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
        let cache_dir = cache_dir.map(Path::to_path_buf).unwrap_or_else(|| hf_hub::Cache::from_env().path().clone());
        Self { endpoint, cache_dir }
    }
}

/// How long the repo probe may take. hf-hub's own agent connects with a 30 s timeout and reads
/// with none; the probe is bounded so a dead or silent endpoint costs seconds, and it tells a
/// missing repo (an answer) from an unreachable endpoint (none, where the cache may serve).
const HUB_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A download that receives nothing for this long is abandoned (VRAM_LAB_HUB_STALL_S overrides):
/// hf-hub's agent reads without a timeout, so a mirror that stops sending would hang the lab.
const HUB_STALL_S: u64 = 60;

const HUB_INDEX: &str = "model.safetensors.index.json";

/// Files kept beside the weights when the repo has them; a repo without them still loads.
const HUB_OPTIONAL: [&str; 3] = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"];

/// hf-hub's client for `repo` at the endpoint and cache the settings name, the stall limit, and
/// the words that name the repo in errors ("org/name at https://…").
fn hub_client(repo: &str, cache_dir: Option<&Path>) -> Result<(hf_hub::api::sync::Api, HubSettings, std::time::Duration, String)> {
    let mut hub = HubSettings::from_env(cache_dir);
    hub.endpoint = hub.endpoint.trim_end_matches('/').to_string();
    let at = format!("{repo} at {}", hub.endpoint);
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_endpoint(hub.endpoint.clone())
        .with_cache_dir(hub.cache_dir.clone())
        .build()
        .map_err(|e| LabError::input(format!("hub: cannot start the client for {at}: {e}")))?;
    let stall = std::env::var("VRAM_LAB_HUB_STALL_S").ok().and_then(|v| v.parse().ok()).unwrap_or(HUB_STALL_S);
    Ok((api, hub, std::time::Duration::from_secs(stall), at))
}

/// One GGUF file of `repo` into the cache (`org/name:file.gguf`); a file already cached is used
/// as it is, with no request (GGUF repos do not change a published file).
pub fn fetch_file_from_hub(repo: &str, file: &str, cache_dir: Option<&Path>) -> Result<PathBuf> {
    let (api, hub, stall, at) = hub_client(repo, cache_dir)?;
    if let Some(path) = hf_hub::Cache::new(hub.cache_dir.clone()).model(repo.to_string()).get(file) {
        return Ok(path);
    }
    download_watched(&api, repo, file, stall)
        .map_err(|e| LabError::input(format!("hub: cannot fetch {file} of {at} into {} ({e})", hub.cache_dir.display())))
}

/// Fetches config.json, the optional tokenizer and generation files and the safetensors weights
/// (every shard the index names) of `repo` into the cache; returns the snapshot folder. Files
/// already in the cache are not fetched again. When the endpoint cannot be reached, a complete
/// copy in the cache is used, and stderr says so.
pub fn fetch_from_hub(repo: &str, cache_dir: Option<&Path>) -> Result<PathBuf> {
    let (api, hub, stall, at) = hub_client(repo, cache_dir)?;
    let endpoint = hub.endpoint.clone();
    let repo_api = api.model(repo.to_string());
    let fail = |file: &str, e: String| {
        LabError::input(format!("hub: cannot fetch {file} of {at} into {} ({e})", hub.cache_dir.display()))
    };
    let cached = hf_hub::Cache::new(hub.cache_dir.clone()).model(repo.to_string());
    // hf-hub's `get`, with the download watched for stalls.
    let get = |file: &str| match cached.get(file) {
        Some(path) => Ok(path),
        None => download_watched(&api, repo, file, stall),
    };
    let fetch = |file: &str| get(file).map_err(|e| fail(file, e));

    // The repo's commit and file list, where the endpoint gives them.
    let info: serde_json::Value = match repo_api.info_request().timeout(HUB_PROBE_TIMEOUT).call() {
        Ok(resp) => resp.into_string().ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default(),
        Err(e) => {
            let why = e.to_string();
            match e.into_response().map(|r| r.status()) {
                // The Hub answers 401 for a repo that does not exist when no token is sent. A
                // mirror may serve files without the API, so config.json has the last word.
                Some(code @ (401 | 404)) => match get("config.json") {
                    Ok(_) => serde_json::Value::Null,
                    Err(_) => {
                        return Err(LabError::input(format!(
                            "hub: no model repo {at} (HTTP {code}); check the id (a gated repo needs HF_TOKEN)"
                        )))
                    }
                },
                _ => return from_hub_cache(repo, &endpoint, &hub.cache_dir, &why),
            }
        }
    };
    let listed: Option<Vec<String>> = info["siblings"]
        .as_array()
        .map(|s| s.iter().filter_map(|f| f["rfilename"].as_str().map(String::from)).collect());
    let has = |f: &str| listed.as_ref().is_none_or(|l| l.iter().any(|x| x == f));

    // hf-hub looks in the snapshot its refs/main names before asking the network; when the repo
    // has moved on, config.json is downloaded afresh, which points refs/main at the new commit,
    // so every file below comes from one snapshot.
    let folder = hf_hub::Repo::model(repo.to_string()).folder_name();
    let cached_ref = std::fs::read_to_string(hub.cache_dir.join(folder).join("refs/main"));
    let moved = info["sha"].as_str().is_some_and(|sha| cached_ref.is_ok_and(|r| r.trim() != sha));
    let config = if moved { download_watched(&api, repo, "config.json", stall) } else { get("config.json") }
        .map_err(|e| fail("config.json", e))?;
    let dir = config.parent().unwrap_or(Path::new(".")).to_path_buf();
    for f in HUB_OPTIONAL.into_iter().filter(|f| has(f)) {
        let _ = get(f);
    }
    let sharded = match &listed {
        Some(_) => has(HUB_INDEX),
        None => get(HUB_INDEX).is_ok(),
    };
    if sharded {
        fetch(HUB_INDEX)?;
        // files_in reads the index's weight_map: each shard it names, once, as a path in the repo.
        for shard in Safetensors::files_in(&dir)? {
            let name = shard.strip_prefix(&dir).unwrap_or(&shard).to_string_lossy().to_string();
            fetch(&name)?;
        }
    } else if has("model.safetensors") {
        fetch("model.safetensors")?;
    } else {
        return Err(LabError::input(format!(
            "hub: {at} holds no safetensors weights (for a GGUF repo, name the file: {repo}:<file>.gguf)"
        )));
    }
    Ok(dir)
}

/// Marks each sign of life of a download (and drives its progress bar).
struct Heartbeat {
    last: std::sync::Arc<std::sync::Mutex<Instant>>,
    bar: indicatif::ProgressBar,
}

impl Heartbeat {
    fn beat(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

impl hf_hub::api::Progress for Heartbeat {
    fn init(&mut self, size: usize, filename: &str) {
        self.beat();
        hf_hub::api::Progress::init(&mut self.bar, size, filename);
    }
    fn update(&mut self, size: usize) {
        self.beat();
        hf_hub::api::Progress::update(&mut self.bar, size);
    }
    fn finish(&mut self) {
        self.beat();
        hf_hub::api::Progress::finish(&mut self.bar);
    }
}

/// Downloads `file` on a thread of its own and gives up when nothing arrives for `stall`; the
/// stuck thread is left behind (the lab exits on the error).
fn download_watched(api: &hf_hub::api::sync::Api, repo: &str, file: &str, stall: std::time::Duration) -> std::result::Result<PathBuf, String> {
    use std::sync::mpsc::RecvTimeoutError;
    let last = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
    let beat = Heartbeat { last: last.clone(), bar: indicatif::ProgressBar::new(0) };
    let (tx, rx) = std::sync::mpsc::channel();
    let (repo_api, name) = (api.model(repo.to_string()), file.to_string());
    std::thread::spawn(move || {
        let _ = tx.send(repo_api.download_with_progress(&name, beat).map_err(|e| e.to_string()));
    });
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(r) => return r,
            Err(RecvTimeoutError::Timeout) => {
                let idle = last.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                if idle >= stall {
                    return Err(format!("nothing received for {} s", idle.as_secs()));
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Err("the download thread stopped".into()),
        }
    }
}

/// The cached snapshot of `repo` when the endpoint cannot be reached: used only if it holds
/// config.json and every weight file, so a half-finished download is not loaded as a model.
fn from_hub_cache(repo: &str, endpoint: &str, cache_dir: &Path, why: &str) -> Result<PathBuf> {
    let cached = hf_hub::Cache::new(cache_dir.to_path_buf()).model(repo.to_string());
    let dir = cached.get("config.json").and_then(|c| c.parent().map(Path::to_path_buf));
    let complete = dir.filter(|d| Safetensors::files_in(d).is_ok_and(|f| !f.is_empty() && f.iter().all(|p| p.is_file())));
    match complete {
        Some(dir) => {
            eprintln!("hub: {endpoint} unreachable; loading {repo} from the cache {}", dir.display());
            Ok(dir)
        }
        None => Err(LabError::input(format!(
            "hub: cannot reach {endpoint} for {repo} ({why}) and the cache {} holds no complete copy; set HF_ENDPOINT to a mirror or pass a local directory",
            cache_dir.display()
        ))),
    }
}
