//! Model sources: `synthetic:<preset>`, a local directory (config.json + *.safetensors), a local
//! `.gguf` file, or a Hugging Face repo id fetched through hf-hub (HF_ENDPOINT, HF_HOME, or
//! `--cache-dir`). Each resolves to a config, a weight source and, when present, a tokenizer.

use super::config::Qwen2Config;
use super::precision::Precision;
use super::qwen2::Qwen2;
use super::weights::{self, Gguf, Safetensors, Synthetic, WeightSource};
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
}

#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// tokenizer.json to use (a GGUF file carries none the lab reads).
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
            "no such model: {s} (use synthetic:<preset>, a directory with config.json, a .gguf file, or an org/name repo id)"
        )))
    }

    pub fn label(&self) -> String {
        match self {
            Self::Synthetic(p) => format!("synthetic:{p}"),
            Self::Dir(p) | Self::Gguf(p) => p.display().to_string(),
            Self::Hub(r) => format!("hub:{r}"),
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

/// Fetches config.json, tokenizer.json and the safetensors shards of `repo` into the cache.
pub fn fetch_from_hub(repo: &str, opts: &SourceOptions) -> Result<PathBuf> {
    let hub = HubSettings::from_env(opts.cache_dir.as_deref());
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        LabError::input(format!(
            "hub: cannot fetch {what} of {repo} from {} into {} ({e}); set HF_ENDPOINT to a mirror or pass a local directory",
            hub.endpoint,
            hub.cache_dir.display()
        ))
    };
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_endpoint(hub.endpoint.clone())
        .with_cache_dir(hub.cache_dir.clone())
        .build()
        .map_err(|e| fail("the client", &e))?;
    let repo_api = api.model(repo.to_string());
    let config = repo_api.get("config.json").map_err(|e| fail("config.json", &e))?;
    let _ = repo_api.get("tokenizer.json");
    match repo_api.get("model.safetensors.index.json") {
        Ok(index) => {
            let files = Safetensors::files_in(index.parent().unwrap_or(Path::new(".")))?;
            for f in files {
                let name = f.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                repo_api.get(&name).map_err(|e| fail(&name, &e))?;
            }
        }
        Err(_) => {
            repo_api.get("model.safetensors").map_err(|e| fail("model.safetensors", &e))?;
        }
    }
    Ok(config.parent().unwrap_or(Path::new(".")).to_path_buf())
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

/// A source opened: its config, weights and tokenizer, nothing loaded yet.
pub struct OpenedSource {
    pub cfg: Qwen2Config,
    pub weights: Box<dyn WeightSource>,
    pub tokenizer: Option<Tokenizer>,
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
        Ok(OpenedSource { cfg, weights: Box::new(weights), tokenizer })
    };
    match source {
        ModelSource::Synthetic(preset) => {
            let cfg = Qwen2Config::preset(preset)?;
            let tokenizer = find_tokenizer(opts.tokenizer.as_deref(), None)?;
            Ok(OpenedSource { weights: Box::new(Synthetic::new(cfg.clone(), opts.seed)), cfg, tokenizer })
        }
        ModelSource::Dir(dir) => open_dir(dir),
        ModelSource::Hub(repo) => open_dir(&fetch_from_hub(repo, opts)?),
        ModelSource::Gguf(path) => {
            let gguf = Gguf::open(path)?;
            let cfg = gguf.config()?;
            let tokenizer = find_tokenizer(opts.tokenizer.as_deref(), path.parent())?;
            Ok(OpenedSource { cfg, weights: Box::new(gguf), tokenizer })
        }
    }
}

/// A model loaded onto a device, with what it took.
pub struct LoadedModel {
    pub model: Qwen2,
    pub tokenizer: Option<Tokenizer>,
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
        load_s: t0.elapsed().as_secs_f64(),
        describe: opened.weights.describe(),
    })
}
