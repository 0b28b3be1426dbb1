//! Model sources: `synthetic:<preset>`, a local directory (config.json + *.safetensors), a local
//! `.gguf` file, or a Hugging Face repo id fetched through hf-hub (HF_ENDPOINT, HF_HOME, or
//! `--cache-dir`). Each resolves to a config, a weight source and, when present, a tokenizer.

use super::chat::{self, ChatMl};
use super::config::Qwen2Config;
use super::precision::Precision;
use super::qwen2::Qwen2;
use super::gguf::Gguf;
use super::weights::{self, Safetensors, Synthetic, WeightSource};
use crate::error::{LabError, Result};
use crate::memory::MemoryProbe;
use candle_core::Device;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokenizers::Tokenizer;

#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    Synthetic(String),
    Dir(PathBuf),
    Gguf(PathBuf),
    Hub(String),
    /// One GGUF file of a Hub repo, `org/name:file.gguf` (GGUF repos hold several quantizations).
    HubFile { repo: String, file: String },
}

#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// tokenizer.json to use (else the one beside the model, or a GGUF's own).
    pub tokenizer: Option<PathBuf>,
    /// Where hf-hub keeps downloads (default: $HF_HOME/hub).
    pub cache_dir: Option<PathBuf>,
    pub seed: u64,
}

impl ModelSource {
    pub fn parse(s: &str) -> Result<Self> {
        if let Some(preset) = s.strip_prefix("synthetic:") {
            Qwen2Config::preset(preset)?;
            return Ok(Self::Synthetic(preset.to_string()));
        }
        let path = Path::new(s);
        if let Some((repo, file)) = s.split_once(':').filter(|_| !path.exists()) {
            let looks_like_repo = repo.split('/').count() == 2 && !repo.starts_with('.') && !repo.starts_with('/');
            if looks_like_repo && file.to_ascii_lowercase().ends_with(".gguf") {
                return Ok(Self::HubFile { repo: repo.to_string(), file: file.to_string() });
            }
        }
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            if !path.is_file() {
                return Err(LabError::input(format!("no such GGUF file: {s}")));
            }
            return Ok(Self::Gguf(path.to_path_buf()));
        }
        if path.is_dir() {
            return Ok(Self::Dir(path.to_path_buf()));
        }
        if path.exists() {
            return Err(LabError::input(format!("{s} is neither a model directory nor a .gguf file")));
        }
        let looks_like_repo = s.split('/').count() == 2 && !s.starts_with('.') && !s.starts_with('/');
        if looks_like_repo {
            return Ok(Self::Hub(s.to_string()));
        }
        Err(LabError::input(format!(
            "no such model: {s} (use synthetic:<preset>, a directory with config.json, a .gguf file, an org/name repo id or org/name:file.gguf)"
        )))
    }

    pub fn label(&self) -> String {
        match self {
            Self::Synthetic(p) => format!("synthetic:{p}"),
            Self::Dir(p) | Self::Gguf(p) => p.display().to_string(),
            Self::Hub(r) => format!("hub:{r}"),
            Self::HubFile { repo, file } => format!("hub:{repo}:{file}"),
        }
    }

    /// A Hub GGUF file as the local file it is fetched to (the cached copy when there is one);
    /// every other source as it is.
    pub fn fetched(&self, opts: &SourceOptions) -> Result<Self> {
        match self {
            Self::HubFile { repo, file } => Ok(Self::Gguf(fetch_file_from_hub(repo, file, opts)?)),
            other => Ok(other.clone()),
        }
    }
}

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
fn hub_client(repo: &str, opts: &SourceOptions) -> Result<(hf_hub::api::sync::Api, HubSettings, std::time::Duration, String)> {
    let mut hub = HubSettings::from_env(opts.cache_dir.as_deref());
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
pub fn fetch_file_from_hub(repo: &str, file: &str, opts: &SourceOptions) -> Result<PathBuf> {
    let (api, hub, stall, at) = hub_client(repo, opts)?;
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
pub fn fetch_from_hub(repo: &str, opts: &SourceOptions) -> Result<PathBuf> {
    let (api, hub, stall, at) = hub_client(repo, opts)?;
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

fn read_tokenizer(path: &Path) -> Result<Tokenizer> {
    Tokenizer::from_file(path).map_err(|e| LabError::input(format!("cannot read tokenizer {}: {e}", path.display())))
}

/// The tokenizer given explicitly, or a tokenizer.json found in `dir`.
fn find_tokenizer(explicit: Option<&Path>, dir: Option<&Path>) -> Result<Option<Tokenizer>> {
    if let Some(p) = explicit {
        return read_tokenizer(p).map(Some);
    }
    match dir.map(|d| d.join("tokenizer.json")).filter(|p| p.is_file()) {
        Some(p) => read_tokenizer(&p).map(Some),
        None => Ok(None),
    }
}

/// A source opened: its config, weights, tokenizer and chat template, nothing loaded yet.
pub struct OpenedSource {
    pub cfg: Qwen2Config,
    pub weights: Box<dyn WeightSource>,
    pub tokenizer: Option<Tokenizer>,
    /// The model's chat template, when it is ChatML (`model::chat`).
    pub chat: Option<ChatMl>,
}

pub fn open(source: &ModelSource, opts: &SourceOptions) -> Result<OpenedSource> {
    let open_dir = |dir: &Path| -> Result<OpenedSource> {
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(LabError::input(format!("{} has no config.json", dir.display())));
        }
        let cfg = Qwen2Config::from_file(&cfg_path)?;
        let weights = Safetensors::open(&Safetensors::files_in(dir)?, &cfg)?;
        let tokenizer = find_tokenizer(opts.tokenizer.as_deref(), Some(dir))?;
        let chat = chat::template_in(dir).and_then(|t| ChatMl::from_template(&t));
        Ok(OpenedSource { cfg, weights: Box::new(weights), tokenizer, chat })
    };
    match source {
        ModelSource::Synthetic(preset) => {
            let cfg = Qwen2Config::preset(preset)?;
            // Qwen2.5's tokenizer ships with the lab: a synthetic Qwen2.5 tokenizes as the real one.
            let tokenizer = match find_tokenizer(opts.tokenizer.as_deref(), None)? {
                Some(t) => Some(t),
                None => super::tokenizer::for_vocab(cfg.vocab_size)?,
            };
            Ok(OpenedSource { weights: Box::new(Synthetic::new(cfg.clone(), opts.seed)), cfg, tokenizer, chat: None })
        }
        ModelSource::Dir(dir) => open_dir(dir),
        ModelSource::Hub(repo) => open_dir(&fetch_from_hub(repo, opts)?),
        ModelSource::HubFile { .. } => open(&source.fetched(opts)?, opts),
        ModelSource::Gguf(path) => {
            let gguf = Gguf::open(path)?;
            let cfg = gguf.config()?;
            // An explicit tokenizer.json or one beside the file wins; else the file's own.
            let tokenizer = match find_tokenizer(opts.tokenizer.as_deref(), path.parent())? {
                Some(t) => Some(t),
                None => super::gguf::tokenizer::from_header(&gguf.header)?,
            };
            let chat = gguf.chat_template().and_then(|t| ChatMl::from_template(&t));
            Ok(OpenedSource { cfg, weights: Box::new(gguf), tokenizer, chat })
        }
    }
}

/// A model loaded onto a device, with what it took.
pub struct LoadedModel {
    pub model: Qwen2,
    pub tokenizer: Option<Tokenizer>,
    pub chat: Option<ChatMl>,
    pub load_s: f64,
    pub describe: String,
}

/// Loads `source` in `precision` onto `device`. Every tensor passes the probe's checkpoint, so an
/// emulated card's capacity stops the load on CPU as the driver stops it on a GPU.
pub fn load(
    source: &ModelSource,
    opts: &SourceOptions,
    precision: Precision,
    device: &Device,
    probe: &MemoryProbe,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<LoadedModel> {
    load_opened(open(source, opts)?, precision, device, probe, progress)
}

/// Loads a source already opened (whose config a caller may have read first).
pub fn load_opened(
    mut opened: OpenedSource,
    precision: Precision,
    device: &Device,
    probe: &MemoryProbe,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<LoadedModel> {
    let t0 = Instant::now();
    if let Some(pb) = progress {
        pb.set_length(opened.cfg.tensor_specs().len() as u64);
        pb.set_position(0);
    }
    let weights = weights::load_all(&opened.cfg, opened.weights.as_mut(), precision, device, Some(probe), |_, _| {
        if let Some(pb) = progress {
            pb.inc(1);
        }
        probe.check()
    })?;
    let model = Qwen2::new(&opened.cfg, precision, weights, device)?;
    device.synchronize()?;
    Ok(LoadedModel {
        model,
        tokenizer: opened.tokenizer,
        chat: opened.chat,
        load_s: t0.elapsed().as_secs_f64(),
        describe: opened.weights.describe(),
    })
}
