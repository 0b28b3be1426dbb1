//! A run of the lab: the device and its card emulation (in the device's `MemoryProbe`), the model
//! source, the console and progress bars, and the run folder with its manifest. Every front end
//! — the `vram-lab` commands, `vram-lab run`, the notebooks' Live mode — runs stages through one
//! `Session`, so they all write the same folder (`run_folder`); a stage runs in it through
//! `stage::run`.

pub mod allocator;
pub mod console;
mod context;
pub mod env;
pub mod expected;
pub mod run_folder;

pub use crate::stop::{stop_on_ctrl_c, stop_requested};
pub use allocator::one_pool;
pub use console::Console;

use crate::error::{LabError, Result};
use crate::estimate::scaled::{scaled_card, Scale, Sizes, SCALED};
use crate::frame::console_columns;
use crate::hw::{self, Card};
use crate::memory::policy::Allocator;
use crate::memory::{guarded, MemoryProbe};
use crate::model::source::{self as sources, OpenedSource};
use crate::model::{precision::Compute, LoadedModel, ModelSource, Precision, SourceOptions};
use candle_core::Device;
use env::Env;
use polars::prelude::DataFrame;
use run_folder::{Manifest, RunFolder, RunStatus, StageRecord, StageStatus, MANIFEST};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What every command shares: where to run, on what, and where to write.
#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct SessionArgs {
    /// auto (CUDA when built in and present), cpu, cuda or cuda:N
    #[arg(long, global = true, default_value = "auto")]
    pub device: String,
    /// Model: synthetic:<preset>, a directory (config.json + *.safetensors), a .gguf file, or a
    /// Hugging Face repo id. Default: synthetic:qwen2.5-7b on a GPU, synthetic:tiny on CPU.
    #[arg(long, global = true)]
    pub model: Option<String>,
    /// Emulate a smaller card: rtx4090, rtx3090, a4000, l40s, a100-40g, a100-80g, h100, h200, a
    /// size such as 24GiB, scaled (the RTX 4090 scaled to the model, with every stage's sizes), or
    /// none. Default for `run`: rtx4090 on a GPU, as the report; scaled on CPU.
    #[arg(long, global = true)]
    pub card: Option<String>,
    /// tokenizer.json (default: the one beside the model, or a GGUF's own metadata)
    #[arg(long, global = true)]
    pub tokenizer: Option<PathBuf>,
    /// hf-hub download cache (AutoDL: /root/autodl-tmp/hf); default $HF_HOME/hub
    #[arg(long, global = true, env = "VRAM_LAB_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The dtype Q4_K_M models compute in: bf16 (llama.cpp's 16-bit cache; the default) or f32
    /// (twice the cache and logits). Dense weights compute in their own dtype.
    #[arg(long, global = true, value_enum)]
    pub compute: Option<Compute>,
    /// Where device tensors live: pool (CUDA's stream-ordered pool, as candle uses it) or pages
    /// (the lab's page allocator, as PyTorch's expandable segments; one GPU, the vram-lab binary)
    #[arg(long, global = true, value_enum, default_value = "pool")]
    #[serde(default)]
    pub allocator: Allocator,
    /// Seed of synthetic weights and random prompts
    #[arg(long, global = true, default_value_t = 42)]
    pub seed: u64,
    /// Output folder (default out/<date>-<command>); it must not hold a run already
    #[arg(long, global = true)]
    pub out: Option<PathBuf>,
    /// No progress bars
    #[arg(long, global = true)]
    pub quiet: bool,
    /// Errors with their backtrace
    #[arg(long, global = true)]
    pub verbose: bool,
    /// Print nothing (a notebook shows the tables instead)
    #[arg(skip)]
    #[serde(skip)]
    pub silent: bool,
}

impl Default for SessionArgs {
    fn default() -> Self {
        Self {
            device: "auto".into(),
            model: None,
            card: None,
            tokenizer: None,
            cache_dir: None,
            compute: None,
            allocator: Allocator::Pool,
            seed: 42,
            out: None,
            quiet: true,
            verbose: false,
            silent: false,
        }
    }
}

impl SessionArgs {
    /// `--compute` applied to a stage's config: each precision it names (`precision`,
    /// `precisions`) as `Precision::with_compute` makes it, so the manifest says what ran.
    pub fn apply_compute(&self, mut config: serde_json::Value) -> Result<serde_json::Value> {
        if self.compute.is_none() {
            return Ok(config);
        }
        let mut set = |v: &mut serde_json::Value| -> Result<()> {
            if let serde_json::Value::String(s) = v {
                *s = Precision::parse(s)?.with_compute(self.compute).name().to_string();
            }
            Ok(())
        };
        if let Some(obj) = config.as_object_mut() {
            for key in ["precision", "precisions"] {
                match obj.get_mut(key) {
                    Some(serde_json::Value::Array(items)) => items.iter_mut().try_for_each(&mut set)?,
                    Some(v) => set(v)?,
                    None => {}
                }
            }
        }
        Ok(config)
    }

    /// The card to emulate and the sizes the stages' defaults are made for: `--card` (a preset,
    /// a size, `scaled` or `none`), else when `report_card` the report's RTX 4090 on a GPU and
    /// that card scaled to the model on CPU. Only `scaled` reads the model's config.
    pub fn card_for(&self, device: &Device, source: &ModelSource, report_card: bool) -> Result<(Option<Card>, Sizes)> {
        let plain = Sizes::for_device(device.is_cuda());
        let choice = match self.card.as_deref() {
            Some(c) => Some(c.trim()),
            None if report_card && device.is_cuda() => Some("rtx4090"),
            None if report_card => Some(SCALED),
            None => None,
        };
        match choice {
            None => Ok((None, plain)),
            Some(c) if c.eq_ignore_ascii_case("none") => Ok((None, plain)),
            Some(c) if c.eq_ignore_ascii_case(SCALED) => {
                let cfg = sources::open(source, &self.source_options())?.cfg;
                Ok((Some(scaled_card(&cfg)?), Sizes::Scaled(Scale::of(&cfg)?)))
            }
            Some(c) => Ok((Some(Card::parse(c)?), plain)),
        }
    }

    pub fn source_options(&self) -> SourceOptions {
        SourceOptions { tokenizer: self.tokenizer.clone(), cache_dir: self.cache_dir.clone(), seed: self.seed }
    }
}

/// The model a device runs by default: the report's 7B on a GPU, the tiny preset on CPU.
pub fn default_model(device: &Device) -> &'static str {
    if device.is_cuda() {
        "synthetic:qwen2.5-7b"
    } else {
        "synthetic:tiny"
    }
}

pub struct Session {
    pub device: Device,
    /// Reads this device's memory and holds its card emulation.
    pub probe: MemoryProbe,
    pub source: ModelSource,
    pub opts: SourceOptions,
    pub console: Console,
    pub dir: PathBuf,
    manifest: Manifest,
    /// The bandwidths measured once per session (see `bandwidths`).
    bandwidths: std::cell::OnceCell<crate::memory::bandwidth::Bandwidths>,
    /// Every stage that failed failed on the user's input (the command exits 2, not 1).
    pub failed_on_input: bool,
    /// The sizes the stages' default configs are made for (the card's, the device's).
    pub sizes: Sizes,
    /// The run folder was made by this session (not a user's empty folder).
    made_dir: bool,
}

impl Session {
    /// Picks the device, resolves the model and card, claims the run folder (a folder that holds a
    /// run already is refused, so two runs never mix) and starts the card emulation.
    pub fn open(args: &SessionArgs, what: &str, report_card: bool) -> Result<Self> {
        let device = hw::pick(&args.device)?;
        allocator::enable(args.allocator, &device, what)?;
        let model = args.model.clone().unwrap_or_else(|| default_model(&device).to_string());
        let source = ModelSource::parse(&model)?;
        let (card, sizes) = args.card_for(&device, &source, report_card)?;
        let dir = match &args.out {
            Some(d) => d.clone(),
            None => default_out(what),
        };
        let env = Env::capture(&device);
        let manifest = Manifest {
            status: RunStatus::Running,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started: now(),
            finished: None,
            model: source.label(),
            card: card.clone(),
            allocator: args.allocator,
            env,
            stages: Vec::new(),
        };
        // The card first: a card the GPU cannot emulate leaves no folder behind.
        let mut probe = MemoryProbe::new(&device);
        let emulating = match &card {
            Some(c) => {
                if c.is_scaled() {
                    context::warm(&source, &args.source_options(), &probe)?;
                }
                Some(probe.emulate(c)?.describe())
            }
            None => None,
        };
        let made_dir = run_folder::claim(&dir, &manifest)?;
        let mut s = Self {
            probe,
            device,
            source,
            opts: args.source_options(),
            console: Console::new(args.silent, !args.quiet),
            dir,
            manifest,
            bandwidths: std::cell::OnceCell::new(),
            failed_on_input: false,
            sizes,
            made_dir,
        };
        s.say(format!("vram-lab {} on {}", s.manifest.env.vram_lab, s.manifest.env.device));
        s.say(format!("model {}", s.source.label()));
        if let Some(line) = emulating {
            s.say(line);
        }
        Ok(s)
    }

    pub fn say(&mut self, s: impl AsRef<str>) {
        self.console.line(s);
    }

    /// Err(Interrupted) once Ctrl-C was pressed: stages call it between steps.
    pub fn check_stop(&self) -> Result<()> {
        if stop_requested() {
            Err(LabError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// The run's manifest so far: its model, card, machine and the stages recorded.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The card this session emulates, if any.
    pub fn card(&self) -> Option<&crate::hw::Card> {
        self.probe.card()
    }

    /// The emulated card's name, or "none".
    pub fn card_name(&self) -> String {
        self.card().map(|c| c.name.clone()).unwrap_or_else(|| "none".into())
    }

    /// `f` on the whole device when `lift`: the emulated card lifted for it (saying `why`) and put
    /// back after, whatever `f` returns. A stage that must see every byte of its GPUs (each rank of
    /// a group, the CPU's one heap) runs in this scope.
    pub fn whole_device<T>(&mut self, lift: bool, why: &str, f: impl FnOnce(&mut Session) -> Result<T>) -> Result<T> {
        let lifted = self.card().filter(|_| lift).cloned();
        if lifted.is_some() {
            self.probe.stop_emulating();
            self.say(why);
        }
        let out = f(self);
        if let Some(card) = &lifted {
            self.probe.emulate(card)?;
        }
        out
    }

    /// The device read, pinned host → device and host read bandwidths of this machine, measured
    /// once per run (`memory::bandwidth::quick`) and quoted by every stage after: decoding reads
    /// every weight once per token, so its ceiling is the device read ÷ bytes per token.
    pub fn bandwidths(&self) -> Result<crate::memory::bandwidth::Bandwidths> {
        if let Some(bw) = self.bandwidths.get() {
            return Ok(*bw);
        }
        let bw = crate::memory::bandwidth::quick(&self.device)?;
        Ok(*self.bandwidths.get_or_init(|| bw))
    }

    /// Loads a source already opened, with a bar over its tensors; an OOM is captured.
    pub fn load_opened(&mut self, opened: OpenedSource, precision: Precision) -> Result<LoadedModel> {
        self.console.step(format!("loading in {precision}"));
        let pb = self.console.bar(0, &format!("load {precision}"), "tensors");
        let loaded = guarded(&self.probe, &format!("loading in {precision}"), || {
            sources::load_opened(opened, precision, &self.device, &self.probe, Some(&pb))
        });
        pb.finish_and_clear();
        loaded
    }

    /// Opens the model source and loads it in `precision`.
    pub fn load(&mut self, precision: Precision) -> Result<LoadedModel> {
        let opened = sources::open(&self.source, &self.opts)?;
        self.load_opened(opened, precision)
    }

    pub fn begin_stage(&mut self, title: &str) {
        self.console.begin_stage(title);
    }

    pub fn end_stage(&mut self) {
        self.console.end_stage();
    }

    /// Writes a stage's tables and texts into `<run>/<stage>/` and names them in its record.
    pub fn write_stage(
        &mut self,
        record: &mut StageRecord,
        tables: &[(String, DataFrame)],
        texts: &[(String, String)],
    ) -> Result<()> {
        let folder = self.dir.join(&record.name);
        if !folder.is_dir() {
            std::fs::create_dir(&folder)?;
        }
        for (name, df) in tables {
            run_folder::write_csv(&folder.join(format!("{name}.csv")), df)?;
            record.tables.insert(name.clone(), format!("{}/{name}.csv", record.name));
        }
        for (name, text) in texts {
            crate::paths::replace_own(&folder.join(name), text.as_bytes())?;
            record.texts.insert(name.clone(), format!("{}/{name}", record.name));
        }
        Ok(())
    }

    /// A finished stage into the manifest, saved at once.
    pub fn record(&mut self, record: StageRecord) -> Result<()> {
        self.manifest.stages.push(record);
        self.save_manifest()
    }

    /// A failed stage into the manifest; the run's exit code says "input" only when every
    /// failure so far was the user's.
    pub fn record_failure(&mut self, record: StageRecord, input: bool) -> Result<()> {
        let earlier_failed = self.manifest.stages.iter().any(|s| s.status == StageStatus::Failed);
        self.failed_on_input = input && (self.failed_on_input || !earlier_failed);
        self.record(record)
    }

    fn save_manifest(&self) -> Result<()> {
        crate::paths::replace_own(&self.dir.join(MANIFEST), serde_json::to_string_pretty(&self.manifest)?.as_bytes())
    }

    /// A run refused before any stage ran (a flag or a setting out of range) leaves nothing behind:
    /// its manifest goes, and its folder when this session made it, so the corrected command may
    /// use the same --out.
    pub fn abandon(self) {
        if self.manifest.stages.is_empty() {
            let _ = std::fs::remove_file(self.dir.join(MANIFEST));
            if self.made_dir {
                let _ = std::fs::remove_dir(&self.dir);
            }
        }
    }

    /// Closes the run: the manifest's final status, the summary of findings on the console,
    /// report.html (`render`, from the run folder, as `vram-lab report` makes it) and console.txt.
    /// A run whose report or console cannot be written (a full disk) is recorded as failed.
    pub fn finish(mut self, render: impl FnOnce(&RunFolder) -> Result<PathBuf>) -> Result<RunFolder> {
        let statuses: Vec<StageStatus> = self.manifest.stages.iter().map(|s| s.status).collect();
        self.manifest.status = if statuses.contains(&StageStatus::Interrupted) {
            RunStatus::Interrupted
        } else if statuses.contains(&StageStatus::Failed) {
            RunStatus::Failed
        } else {
            RunStatus::Complete
        };
        self.manifest.finished = Some(now());
        self.save_manifest()?;
        let findings = run_folder::findings_table(&self.manifest)?;
        if findings.height() > 0 {
            let text =
                console_columns(&findings, "Summary — measured, predicted, the report's RTX 4090 figure, the ceiling")?;
            self.say(format!("\n{text}"));
        }
        let written = RunFolder::open(&self.dir).and_then(|run| {
            let html = render(&run)?;
            self.say(format!("\nwrote {} (open {})", self.dir.display(), html.display()));
            crate::paths::replace_own(&self.dir.join("console.txt"), self.console.text.as_bytes())?;
            Ok(run)
        });
        if written.is_err() {
            self.manifest.status = RunStatus::Failed;
            let _ = self.save_manifest();
        }
        written
    }
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// out/<date-time>-<what>, with a suffix if that name is taken.
fn default_out(what: &str) -> PathBuf {
    let base = PathBuf::from("out").join(format!("{}-{what}", chrono::Utc::now().format("%Y-%m-%d-%H%M%S")));
    (1..)
        .map(|i| if i == 1 { base.clone() } else { PathBuf::from(format!("{}-{i}", base.display())) })
        .find(|p| !p.exists())
        .unwrap_or(base)
}
