//! Model sources: `synthetic:<preset>`, a local directory (config.json + *.safetensors), a local
//! `.gguf` file, or a Hugging Face repo id fetched through `model::load::hub` (HF_ENDPOINT, HF_HOME, or
//! `--cache-dir`). Each resolves to a config, a weight source and, when present, a tokenizer.

use crate::error::{LabError, Result};
use crate::memory::MemoryProbe;
use crate::model::config::DecoderConfig;
use crate::model::decoder::Decoder;
use crate::model::gguf::Gguf;
use crate::model::load::chat::{self, ChatMl};
use crate::model::load::synthetic::Synthetic;
use crate::model::load::weights::{self, Safetensors, WeightSource};
use crate::model::precision::Precision;
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
    HubFile {
        repo: String,
        file: String,
    },
}

#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// tokenizer.json to use (else the one beside the model, or a GGUF's own).
    pub tokenizer: Option<PathBuf>,
    /// Where Hub downloads are kept (default: $HF_HUB_CACHE, else $HF_HOME/hub).
    pub cache_dir: Option<PathBuf>,
    pub seed: u64,
}

impl ModelSource {
    pub fn parse(s: &str) -> Result<Self> {
        if let Some(preset) = s.strip_prefix("synthetic:") {
            DecoderConfig::preset(preset)?;
            return Ok(Self::Synthetic(preset.to_string()));
        }
        let path = Path::new(s);
        if let Some((repo, file)) = s.split_once(':').filter(|_| !path.exists()) {
            let looks_like_repo = repo.split('/').count() == 2 && !repo.starts_with('.') && !repo.starts_with('/');
            if looks_like_repo && file.to_ascii_lowercase().ends_with(".gguf") {
                // Both become paths in the cache: checked before anything is fetched.
                crate::model::load::hub::names::repo_id(repo)?;
                crate::model::load::hub::names::file("the file name", file)?;
                return Ok(Self::HubFile { repo: repo.to_string(), file: file.to_string() });
            }
        }
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
            if !path.is_file() {
                return Err(LabError::input(format!("no such GGUF file: {}", s.escape_debug())));
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
            crate::model::load::hub::names::repo_id(s)?;
            return Ok(Self::Hub(s.to_string()));
        }
        Err(LabError::input(format!(
            "no such model: {} (use synthetic:<preset>, a directory with config.json, a .gguf file, an org/name repo id or org/name:file.gguf)",
            s.escape_debug()
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
            Self::HubFile { repo, file } => {
                Ok(Self::Gguf(crate::model::load::hub::fetch_file_from_hub(repo, file, opts.cache_dir.as_deref())?))
            }
            other => Ok(other.clone()),
        }
    }
}

fn read_tokenizer(path: &Path) -> Result<Tokenizer> {
    // tokenizer.json is data: a regular file of bounded size (Qwen2.5's is 7 MiB), not a FIFO.
    let bytes = crate::paths::read_regular(path, 256 << 20)?;
    Tokenizer::from_bytes(bytes).map_err(|e| LabError::input(format!("cannot read tokenizer {}: {e}", path.display())))
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
    pub cfg: DecoderConfig,
    pub weights: Box<dyn WeightSource>,
    pub tokenizer: Option<Tokenizer>,
    /// The model's chat template, when it is ChatML (`model::load::chat`).
    pub chat: Option<ChatMl>,
}

/// A model folder's config.json.
pub fn dir_config(dir: &Path) -> Result<DecoderConfig> {
    let cfg_path = dir.join("config.json");
    if !cfg_path.is_file() {
        return Err(LabError::input(format!("{} has no config.json", dir.display())));
    }
    DecoderConfig::from_file(&cfg_path)
}

pub fn open(source: &ModelSource, opts: &SourceOptions) -> Result<OpenedSource> {
    let open_dir = |dir: &Path| -> Result<OpenedSource> {
        let cfg = dir_config(dir)?;
        let weights = Safetensors::open(&Safetensors::files_in(dir)?, &cfg)?;
        let tokenizer = find_tokenizer(opts.tokenizer.as_deref(), Some(dir))?;
        let chat = chat::template_in(dir).and_then(|t| ChatMl::from_template(&t));
        Ok(OpenedSource { cfg, weights: Box::new(weights), tokenizer, chat })
    };
    match source {
        ModelSource::Synthetic(preset) => {
            let cfg = DecoderConfig::preset(preset)?;
            // Qwen2.5's tokenizer ships with the lab: a synthetic Qwen2.5 tokenizes as the real one.
            let tokenizer = match find_tokenizer(opts.tokenizer.as_deref(), None)? {
                Some(t) => Some(t),
                None => crate::model::load::tokenizer::for_vocab(cfg.vocab_size)?,
            };
            Ok(OpenedSource { weights: Box::new(Synthetic::new(cfg.clone(), opts.seed)), cfg, tokenizer, chat: None })
        }
        ModelSource::Dir(dir) => open_dir(dir),
        ModelSource::Hub(repo) => open_dir(&crate::model::load::hub::fetch_from_hub(repo, opts.cache_dir.as_deref())?),
        ModelSource::HubFile { .. } => open(&source.fetched(opts)?, opts),
        ModelSource::Gguf(path) => {
            let gguf = Gguf::open(path)?;
            let cfg = gguf.config()?;
            // Llama 3.1's scaled RoPE travels as a tensor of factors the lab does not read.
            if gguf.header.tensor("rope_freqs.weight").is_some() {
                return Err(LabError::input(format!(
                    "{}: its RoPE is scaled (rope_freqs.weight, Llama 3.1's); the lab prices it (estimate, plan) but computes GGUFs without RoPE scaling (use the safetensors folder)",
                    path.display()
                )));
            }
            if cfg.model_type.is_moe() {
                return Err(LabError::input(format!(
                    "{}: a mixture's GGUF holds each layer's experts in one tensor; the lab prices it (estimate, plan) and computes mixtures from safetensors or synthetic presets",
                    path.display()
                )));
            }
            // An explicit tokenizer.json or one beside the file wins; else the file's own.
            let tokenizer = match find_tokenizer(opts.tokenizer.as_deref(), path.parent())? {
                Some(t) => Some(t),
                None => crate::model::load::gguf_tokenizer::from_header(&gguf.header)?,
            };
            let chat = gguf.chat_template().and_then(|t| ChatMl::from_template(&t));
            Ok(OpenedSource { cfg, weights: Box::new(gguf), tokenizer, chat })
        }
    }
}

/// A model loaded onto a device, with what it took.
pub struct LoadedModel {
    pub model: Decoder,
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
    let model = Decoder::new(&opened.cfg, precision, weights, device)?;
    device.synchronize()?;
    Ok(LoadedModel {
        model,
        tokenizer: opened.tokenizer,
        chat: opened.chat,
        load_s: t0.elapsed().as_secs_f64(),
        describe: opened.weights.describe(),
    })
}
