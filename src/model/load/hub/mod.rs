//! A Hugging Face repo through the lab's own Hub client: the endpoint (HF_ENDPOINT) and cache
//! (`--cache-dir`, HF_HUB_CACHE, HF_HOME) honoured, a probe with a timeout, downloads bounded in
//! time and bytes, every name the server sends checked before it becomes a path, and the cache
//! used when the Hub cannot be reached. The cache keeps hf-hub's layout (`cache`). Sizing needs
//! only the files' headers (`headers`: Range requests).

mod cache;
pub mod headers;
mod http;
pub mod names;
mod verify;

use self::cache::RepoCache;
use self::http::{Budget, Client, Fail};
use crate::error::{LabError, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the hub client will fetch from and store to: the settings AutoDL users change.
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    pub endpoint: String,
    pub cache_dir: PathBuf,
}

impl HubSettings {
    pub fn from_env(cache_dir: Option<&Path>) -> Self {
        let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
        let cache_dir = cache_dir.map(Path::to_path_buf).unwrap_or_else(default_cache_dir);
        Self { endpoint, cache_dir }
    }
}

/// huggingface_hub's rule: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
pub fn default_cache_dir() -> PathBuf {
    let set = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("HF_HUB_CACHE").unwrap_or_else(|| hf_home().join("hub"))
}

fn hf_home() -> PathBuf {
    let set = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("HF_HOME").unwrap_or_else(|| set("HOME").unwrap_or_else(|| PathBuf::from("/")).join(".cache/huggingface"))
}

/// How long the repo probe may take: a dead or silent endpoint costs seconds, and the probe tells
/// a missing repo (an answer) from an unreachable endpoint (none, where the cache may serve).
const HUB_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A download that receives nothing for this long is abandoned (VRAM_LAB_HUB_STALL_S overrides).
const HUB_STALL_S: u64 = 60;

/// A metadata file (config, index, tokenizer, generation config) has at most this many bytes.
const MAX_METADATA: u64 = 64 << 20;

/// Shards an index may name: the largest public checkpoints have a few hundred.
const MAX_SHARDS: usize = 1024;

const HUB_INDEX: &str = "model.safetensors.index.json";

/// Files kept beside the weights when the repo has them; a repo without them still loads.
const HUB_OPTIONAL: [&str; 3] = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"];

/// One repo at one endpoint and cache, with the commit the run's files come from.
struct Run {
    repo: String,
    /// "org/name at https://…", how errors name the repo.
    at: String,
    endpoint: String,
    cache: RepoCache,
    client: Client,
    commit: Option<String>,
}

fn env_secs(key: &str) -> Option<u64> {
    std::env::var(key).ok().and_then(|v| v.trim().parse::<u64>().ok()).filter(|s| *s > 0)
}

/// HF_TOKEN, else the token file huggingface-cli writes ($HF_HOME/token).
fn token() -> Result<Option<String>> {
    let t = match std::env::var("HF_TOKEN") {
        Ok(t) if !t.trim().is_empty() => t,
        _ => match crate::paths::read_regular_text(&hf_home().join("token"), 4096) {
            Ok(t) if !t.trim().is_empty() => t,
            _ => return Ok(None),
        },
    };
    let t = t.trim().to_string();
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(LabError::input("hub: HF_TOKEN holds characters an HTTP header cannot carry"));
    }
    Ok(Some(t))
}

impl Run {
    fn new(repo: &str, cache_dir: Option<&Path>) -> Result<Self> {
        names::repo_id(repo)?;
        let hub = HubSettings::from_env(cache_dir);
        let endpoint = names::endpoint(&hub.endpoint)?;
        let stall = Duration::from_secs(env_secs("VRAM_LAB_HUB_STALL_S").unwrap_or(HUB_STALL_S));
        let client = Client::new(endpoint.clone(), token()?, stall, env_secs("VRAM_LAB_HUB_FILE_S"));
        Ok(Self {
            repo: repo.to_string(),
            at: format!("{repo} at {endpoint}"),
            endpoint,
            cache: RepoCache::new(&hub.cache_dir, repo),
            client,
            commit: None,
        })
    }

    fn fail(&self, file: &str, f: Fail) -> LabError {
        let (at, cache) = (&self.at, self.cache.root.display());
        let file = file.escape_debug();
        match f {
            Fail::Status(code) => {
                LabError::input(format!("hub: cannot fetch {file} of {at} into {cache} (HTTP {code})"))
            }
            Fail::Net(why) | Fail::Why(why) => {
                LabError::input(format!("hub: cannot fetch {file} of {at} into {cache} ({why})"))
            }
            Fail::Refused(msg) => LabError::input(format!("{msg} (fetching {file} of {at})")),
        }
    }

    /// The bytes `file` may have: a metadata file 64 MiB, any file what the cache has free.
    fn budget(&self, file: &str) -> Budget {
        let free = cache::free_space(&self.cache.root).unwrap_or(u64::MAX);
        if is_metadata(file) && free >= MAX_METADATA {
            Budget { bytes: MAX_METADATA, what: "a metadata file may have" }
        } else {
            Budget { bytes: free, what: "free in the cache's filesystem" }
        }
    }

    /// `file` from the snapshot of the run's commit (else the commit refs/main names), or
    /// downloaded into it; the first download fixes the commit when the repo info did not.
    fn get(&mut self, file: &str) -> std::result::Result<PathBuf, Fail> {
        let rel = names::file("the file name", file).map_err(|e| Fail::Refused(e.to_string()))?;
        if let Some(c) = self.commit.clone().or_else(|| self.cache.main_ref()) {
            if let Some(path) = self.cache.cached(&c, &rel) {
                // A damaged copy (cut short, or an error page kept by an older client) is dropped
                // and fetched again: the cache heals on the next run that reaches an honest server.
                match verify::damage(&path, file, MAX_METADATA) {
                    None => {
                        self.commit.get_or_insert(c);
                        return Ok(path);
                    }
                    Some(why) => {
                        eprintln!("hub: the cached {} is damaged ({why}); fetching it again", file.escape_debug());
                        self.cache.forget(&c, &rel);
                    }
                }
            }
        }
        std::fs::create_dir_all(&self.cache.root)
            .map_err(|e| Fail::Why(format!("cannot create the cache {}: {e}", self.cache.root.display())))?;
        let got = self.client.download(&self.repo, file, &self.cache, self.budget(file), file.ends_with(".json"))?;
        if let Some(c) = self.commit.as_ref().filter(|c| **c != got.commit) {
            return Err(Fail::Why(format!(
                "the server's X-Repo-Commit {} is not the repo's commit {c}: the repo moved during the download; run again",
                got.commit
            )));
        }
        let link = self.cache.link(&got.commit, &rel, &got.etag).map_err(http::why)?;
        if self.cache.main_ref().as_deref() != Some(got.commit.as_str()) {
            self.cache.set_main(&got.commit).map_err(http::why)?;
        }
        self.commit = Some(got.commit);
        Ok(link)
    }

    fn fetch(&mut self, file: &str) -> Result<PathBuf> {
        self.get(file).map_err(|f| self.fail(file, f))
    }

    fn snapshot_dir(&self) -> PathBuf {
        let commit = self.commit.clone().unwrap_or_default();
        self.cache.repo_dir().join("snapshots").join(commit)
    }
}

fn is_metadata(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name.ends_with(".json") || name.starts_with("tokenizer")
}

/// The shard names an index's weight_map gives, each checked, at most MAX_SHARDS distinct.
fn shards_of(index: &Path, at: &str) -> Result<Vec<String>> {
    let text = crate::paths::read_regular_text(index, MAX_METADATA)?;
    let bad = |why: String| LabError::input(format!("hub: {HUB_INDEX} of {at} {why}"));
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("is not JSON ({e})")))?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("has no weight_map".into()))?;
    let mut shards = std::collections::BTreeSet::new();
    for (tensor, v) in map {
        let Some(name) = v.as_str() else {
            return Err(bad(format!(
                "maps `{}` to {}, not a file name",
                tensor.escape_debug(),
                v.to_string().escape_debug()
            )));
        };
        names::file("the shard", name).map_err(|e| LabError::input(format!("{e} (in {HUB_INDEX} of {at})")))?;
        if !name.ends_with(".safetensors") {
            return Err(bad(format!("names the shard `{}`, not a .safetensors file", name.escape_debug())));
        }
        shards.insert(name.to_string());
        if shards.len() > MAX_SHARDS {
            return Err(bad(format!("names more than {MAX_SHARDS} shard files")));
        }
    }
    Ok(shards.into_iter().collect())
}

/// One GGUF file of `repo` into the cache (`org/name:file.gguf`); a file already cached is used
/// as it is, with no request (GGUF repos do not change a published file).
pub fn fetch_file_from_hub(repo: &str, file: &str, cache_dir: Option<&Path>) -> Result<PathBuf> {
    let mut run = Run::new(repo, cache_dir)?;
    names::file("the file name", file)?;
    run.fetch(file)
}

/// Fetches config.json, the optional tokenizer and generation files and the safetensors weights
/// (every shard the index names) of `repo` into the cache; returns the snapshot folder. Files
/// already in the cache are not fetched again. When the endpoint cannot be reached, a complete
/// copy in the cache is used, and stderr says so.
pub fn fetch_from_hub(repo: &str, cache_dir: Option<&Path>) -> Result<PathBuf> {
    let mut run = Run::new(repo, cache_dir)?;

    // The repo's commit and file list, where the endpoint gives them.
    let info = match run.client.info(repo, HUB_PROBE_TIMEOUT) {
        Ok(info) => info,
        // The Hub answers 401 for a repo that does not exist when no token is sent. A mirror may
        // serve files without the API, so config.json has the last word.
        Err(Fail::Status(code @ (401 | 404))) => match run.get("config.json") {
            Ok(_) => serde_json::Value::Null,
            Err(f @ Fail::Refused(_)) => return Err(run.fail("config.json", f)),
            Err(_) => {
                return Err(LabError::input(format!(
                    "hub: no model repo {} (HTTP {code}); check the id (a gated repo needs HF_TOKEN)",
                    run.at
                )))
            }
        },
        Err(Fail::Refused(msg)) => return Err(LabError::input(msg)),
        Err(Fail::Status(code)) => return from_hub_cache(&run, &format!("HTTP {code}")),
        Err(Fail::Net(why) | Fail::Why(why)) => return from_hub_cache(&run, &why),
    };
    if let Some(sha) = info.get("sha").and_then(|s| s.as_str()) {
        let sha = names::commit("repo info's sha", sha).map_err(|e| LabError::input(format!("{e} ({})", run.at)))?;
        run.commit = Some(sha);
    }
    // Listed names are only compared, never made into paths.
    let listed: Option<Vec<String>> = info
        .get("siblings")
        .and_then(|s| s.as_array())
        .map(|s| s.iter().filter_map(|f| f.get("rfilename").and_then(|n| n.as_str()).map(String::from)).collect());
    let has = |f: &str| listed.as_ref().is_none_or(|l| l.iter().any(|x| x == f));

    run.fetch("config.json")?;
    for f in HUB_OPTIONAL.into_iter().filter(|f| has(f)) {
        // Optional: a missing or slow file is skipped, a refused name is not.
        if let Err(refused @ Fail::Refused(_)) = run.get(f) {
            return Err(run.fail(f, refused));
        }
    }
    let sharded = match &listed {
        Some(_) => has(HUB_INDEX),
        None => match run.get(HUB_INDEX) {
            Ok(_) => true,
            Err(refused @ Fail::Refused(_)) => return Err(run.fail(HUB_INDEX, refused)),
            Err(_) => false,
        },
    };
    if sharded {
        let index = run.fetch(HUB_INDEX)?;
        for shard in shards_of(&index, &run.at)? {
            run.fetch(&shard)?;
        }
    } else if has("model.safetensors") {
        run.fetch("model.safetensors")?;
    } else {
        return Err(LabError::input(format!(
            "hub: {} holds no safetensors weights (for a GGUF repo, name the file: {repo}:<file>.gguf)",
            run.at
        )));
    }
    Ok(run.snapshot_dir())
}

/// The cached snapshot of `repo` when the endpoint cannot be reached: used only if it holds
/// config.json and every weight file, so a half-finished download is not loaded as a model.
fn from_hub_cache(run: &Run, why: &str) -> Result<PathBuf> {
    let c = &run.cache;
    let dir = c
        .main_ref()
        .filter(|commit| c.cached(commit, Path::new("config.json")).is_some())
        .and_then(|commit| c.snapshot(&commit));
    let complete = dir.filter(|d| {
        super::weights::Safetensors::files_in(d).is_ok_and(|f| !f.is_empty() && f.iter().all(|p| p.is_file()))
    });
    match complete {
        Some(dir) => {
            eprintln!("hub: {} unreachable; loading {} from the cache {}", run.endpoint, run.repo, dir.display());
            Ok(dir)
        }
        None => Err(LabError::input(format!(
            "hub: cannot reach {} for {} ({why}) and the cache {} holds no complete copy; set HF_ENDPOINT to a mirror or pass a local directory",
            run.endpoint,
            run.repo,
            c.root.display()
        ))),
    }
}
