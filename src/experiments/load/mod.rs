//! Stage 1b, loading time: what the disk costs. The model is written as a checkpoint (safetensors
//! shards as transformers saves them, and a Q4_K_M GGUF) where `--dir` says, read back from a cold and
//! a warm page cache, and loaded per source and precision, cold and warm: each load beside the
//! floor the file read and the host→device copy set. A real model (a directory, a GGUF file, a
//! hub repo) is measured in place, nothing written.

pub mod tables;

use crate::error::{LabError, Result};
use crate::memory::disk::{self, ReadTime};
use crate::model::load::checkpoint;
use crate::model::{self, DecoderConfig, ModelSource, Precision};
use crate::session::Session;
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use crate::{estimate, limits};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tables::{col, DISK_TABLE, TIME_TABLE};

pub struct Load;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct LoadConfig {
    /// Where the synthetic model's checkpoint is written (the disk being measured; on AutoDL the
    /// data disk is /root/autodl-tmp); default: a folder in the run folder, removed after
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the checkpoint written (it is removed after the stage otherwise)
    #[arg(long)]
    pub keep: bool,
    /// Precisions the safetensors checkpoint is loaded in (Q4 quantizes while loading)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = LoadConfig::default().precisions)]
    pub precisions: Vec<Precision>,
    /// Skip the Q4_K_M GGUF checkpoint
    #[arg(long)]
    pub no_gguf: bool,
    /// Largest safetensors shard, MiB (Qwen2.5-7B's checkpoint has four of about 3.7 GiB)
    #[arg(long, default_value_t = LoadConfig::default().shard_mib, value_parser = limits::mib())]
    pub shard_mib: u64,
    /// The model written as the checkpoint (default: the run's; `run` on a GPU without --full
    /// writes Qwen2.5-0.5B, 1.4 GB with its GGUF, not 7B's 19 GB)
    #[arg(long)]
    #[serde(default)]
    pub model: Option<String>,
}

impl Default for LoadConfig {
    fn default() -> Self {
        Self {
            dir: None,
            keep: false,
            precisions: vec![Precision::Bf16, Precision::Q4KM],
            no_gguf: false,
            shard_mib: 3800,
            model: None,
        }
    }
}

/// One checkpoint on disk: its files and what it can be loaded as.
struct Checkpoint {
    kind: &'static str,
    files: Vec<PathBuf>,
    source: ModelSource,
    precisions: Vec<Precision>,
    /// Its writing, and what the time covers.
    written: Option<(ReadTime, &'static str)>,
}

/// A read of the checkpoint's files (or its writing).
struct DiskRow {
    checkpoint: &'static str,
    op: &'static str,
    resident: Option<f64>,
    time: ReadTime,
}

struct LoadRow {
    checkpoint: &'static str,
    precision: Precision,
    cache: &'static str,
    outcome: Outcome,
    resident: Option<f64>,
    file_bytes: u64,
    device_bytes: u64,
    load_s: f64,
    read_s: f64,
    copy_s: f64,
}

impl LoadRow {
    /// The floor of a loader that reads, converts and copies tensor by tensor: the file read
    /// plus the host→device copy, one after the other.
    fn floor_s(&self) -> f64 {
        self.read_s + self.copy_s
    }
}

/// Writes the synthetic model where `dir` says, or finds the files of a real source.
fn checkpoints(
    s: &mut Session,
    source: &ModelSource,
    cfg: &DecoderConfig,
    c: &LoadConfig,
    dir: &Path,
) -> Result<Vec<Checkpoint>> {
    let dense: Vec<Precision> = c.precisions.clone();
    match source.clone() {
        ModelSource::Synthetic(_) => {
            let mut out = Vec::new();
            let st_dir = dir.join("safetensors");
            s.console.step("writing the safetensors checkpoint");
            let mut opened = model::source::open(source, &s.opts)?;
            let (files, seconds) = checkpoint::write_safetensors(
                cfg,
                opened.weights.as_mut(),
                &st_dir,
                Precision::Bf16,
                c.shard_mib << 20,
            )?;
            let written = ReadTime { bytes: disk::size(&files)?, seconds };
            out.push(Checkpoint {
                kind: "safetensors bf16",
                files,
                source: ModelSource::Dir(st_dir),
                precisions: dense,
                written: Some((written, "write (synced)")),
            });
            if !c.no_gguf {
                s.console.step("writing the Q4_K_M GGUF");
                let path = dir.join("model-q4_k_m.gguf");
                let mut opened = model::source::open(source, &s.opts)?;
                let t0 = std::time::Instant::now();
                // llama.cpp's Q4_K_M, as stage 1's Q4 loads it and as users download it.
                let plan = model::gguf::writer::FileTypes::Llama(model::gguf::recipe::FileType::Q4KM);
                model::gguf::writer::write_gguf(cfg, opened.weights.as_mut(), &path, plan, None, |_| {})?;
                std::fs::File::open(&path)?.sync_all()?;
                let files = vec![path.clone()];
                // Quantizing dominates this time: it is the GGUF's cost of making, not of the disk.
                let written = ReadTime { bytes: disk::size(&files)?, seconds: t0.elapsed().as_secs_f64() };
                out.push(Checkpoint {
                    kind: "gguf q4_k_m",
                    files,
                    source: ModelSource::Gguf(path),
                    precisions: vec![Precision::Q4KM],
                    written: Some((written, "quantize + write (synced)")),
                });
            }
            Ok(out)
        }
        ModelSource::Dir(d) => in_dir(d, dense),
        ModelSource::Hub(repo) => in_dir(model::load::hub::fetch_from_hub(&repo, s.opts.cache_dir.as_deref())?, dense),
        ModelSource::HubFile { .. } => {
            let f = match source.fetched(&s.opts)? {
                ModelSource::Gguf(f) => f,
                other => return Err(LabError::other(format!("{} was not fetched to a GGUF file", other.label()))),
            };
            Ok(vec![Checkpoint {
                kind: "gguf",
                files: vec![f.clone()],
                source: ModelSource::Gguf(f),
                precisions: vec![Precision::Q4KM],
                written: None,
            }])
        }
        ModelSource::Gguf(f) => Ok(vec![Checkpoint {
            kind: "gguf",
            files: vec![f.clone()],
            source: ModelSource::Gguf(f),
            precisions: vec![Precision::Q4KM],
            written: None,
        }]),
    }
}

/// A model directory measured in place.
fn in_dir(d: PathBuf, precisions: Vec<Precision>) -> Result<Vec<Checkpoint>> {
    Ok(vec![Checkpoint {
        kind: "safetensors",
        files: model::load::weights::Safetensors::files_in(&d)?,
        source: ModelSource::Dir(d),
        precisions,
        written: None,
    }])
}

/// Why the synthetic checkpoint cannot be written in `dir`, if it cannot: both checkpoints and a
/// 10 % margin must fit the disk's free space (AutoDL's system disk is small).
fn no_room(source: &ModelSource, cfg: &DecoderConfig, c: &LoadConfig, dir: &Path) -> Result<Option<String>> {
    if !matches!(source, ModelSource::Synthetic(_)) {
        return Ok(None);
    }
    let need = estimate::weight_bytes(cfg, Precision::Bf16)
        + if c.no_gguf { 0 } else { estimate::weight_bytes(cfg, Precision::Q4KM) };
    let need = need + need / 10;
    Ok(disk::free_bytes(dir)?.filter(|&free| free < need).map(|free| {
        format!(
            "{} has {} free, the checkpoint needs {}: pass --dir on a larger disk (AutoDL: /root/autodl-tmp) or --no-gguf",
            dir.display(),
            crate::memory::fmt_bytes(free),
            crate::memory::fmt_bytes(need)
        )
    }))
}

/// Evicts the files when `cold`, and says how much of them the cache still held.
fn prepare(files: &[PathBuf], cold: bool) -> Result<Option<f64>> {
    if cold {
        disk::evict(files)?;
    }
    disk::resident(files)
}

fn measure(
    s: &mut Session,
    cfg: &DecoderConfig,
    ck: &Checkpoint,
    disk_rows: &mut Vec<DiskRow>,
    loads: &mut Vec<LoadRow>,
) -> Result<()> {
    if let Some((w, op)) = ck.written {
        disk_rows.push(DiskRow { checkpoint: ck.kind, op, resident: None, time: w });
    }
    let mut read_s = [0.0; 2];
    for (i, (cache, cold)) in [("cold", true), ("warm", false)].into_iter().enumerate() {
        s.check_stop()?;
        s.console.step(format!("{}: {cache} read", ck.kind));
        let resident = prepare(&ck.files, cold)?;
        let t = disk::read(&ck.files)?;
        read_s[i] = t.seconds;
        s.say(format!(
            "{} read {cache}: {:.2} GB/s ({:.0} % cached before)",
            ck.kind,
            t.gbs(),
            100.0 * resident.unwrap_or(f64::NAN)
        ));
        disk_rows.push(DiskRow {
            checkpoint: ck.kind,
            op: if cold { "read cold" } else { "read warm" },
            resident,
            time: t,
        });
    }
    let file_bytes = disk::size(&ck.files)?;
    let h2d = if s.device.is_cuda() { Some(s.bandwidths()?.pcie) } else { None };
    for &p in &ck.precisions {
        let device_bytes = estimate::weight_bytes(cfg, p);
        for (i, (cache, cold)) in [("cold", true), ("warm", false)].into_iter().enumerate() {
            s.check_stop()?;
            let resident = prepare(&ck.files, cold)?;
            let opened = model::source::open(&ck.source, &s.opts)?;
            let (outcome, load_s) = match s.load_opened(opened, p) {
                Ok(lm) => (Outcome::Ok, lm.load_s),
                Err(e @ LabError::Interrupted) => return Err(e),
                Err(e) => (Outcome::from_error(&e), f64::NAN),
            };
            s.say(format!("{} → {p} ({cache}): {} in {load_s:.2} s", ck.kind, outcome.as_str()));
            let copy_s = h2d.map_or(0.0, |g| device_bytes as f64 / (g * 1e9));
            loads.push(LoadRow {
                checkpoint: ck.kind,
                precision: p,
                cache,
                outcome: outcome.clone(),
                resident,
                file_bytes,
                device_bytes,
                load_s,
                read_s: read_s[i],
                copy_s,
            });
            if !outcome.is_ok() {
                break;
            }
        }
    }
    Ok(())
}

impl Stage for Load {
    const NAME: &'static str = "load";
    const TITLE: &'static str = "Stage 1b — loading time / 加载时间";
    const ABOUT: &'static str =
        "Write the checkpoint, read it cold and warm, load it per source and precision: what the disk costs";
    const INTRO: &'static str = "加载时间取决于磁盘:同一个 checkpoint 从冷的和热的页缓存读回,再按来源和精度加载,每次加载都和它的下限(读文件 + 拷贝到显卡)放在一起。<br>Loading time depends on the disk. The model is written as a checkpoint (safetensors shards, and a Q4_K_M GGUF as llama.cpp writes it), read back with the page cache dropped for its files (posix_fadvise, no root needed; the fraction still cached is reported) and warm, then loaded per source and precision, cold and warm. Each load stands beside its floor: the file read plus the host→device copy. On AutoDL, run it once with --dir on the data disk (/root/autodl-tmp) and once on the system disk.";
    type Config = LoadConfig;

    /// A 0.5B checkpoint (1 GB of safetensors, 0.4 GB of GGUF) in place of 7B's 19 GB.
    fn quick_config() -> LoadConfig {
        LoadConfig { model: Some("synthetic:qwen2.5-0.5b".into()), ..Default::default() }
    }

    fn run(s: &mut Session, c: &LoadConfig) -> Result<StageOutput> {
        let source = match &c.model {
            Some(m) => ModelSource::parse(m)?,
            None => s.source.clone(),
        };
        let cfg = model::source::open(&source, &s.opts)?.cfg;
        let dir = match &c.dir {
            Some(d) => d.join(format!("vram-lab-checkpoint-{}", std::process::id())),
            None => s.dir.join(Self::NAME).join("checkpoint"),
        };
        // Asked for a disk by --dir, a full one is an error; the default place (inside the run
        // folder, as `run` uses it) being full is a result: the next stage still runs.
        let skipped = no_room(&source, &cfg, c, &dir)?;
        if let (Some(why), Some(_)) = (&skipped, &c.dir) {
            return Err(LabError::input(why.clone()));
        }
        let result = if let Some(why) = &skipped {
            s.say(format!("loading time not measured: {why}"));
            Ok((Vec::new(), Vec::new()))
        } else {
            checkpoints(s, &source, &cfg, c, &dir).and_then(|cks| {
                let (mut disk_rows, mut loads) = (Vec::new(), Vec::new());
                for ck in &cks {
                    measure(s, &cfg, ck, &mut disk_rows, &mut loads)?;
                }
                Ok((disk_rows, loads))
            })
        };
        if !c.keep && dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        } else if dir.exists() {
            s.say(format!("checkpoint kept in {}", dir.display()));
        }
        let (disk_rows, loads) = result?;
        let pct = |r: Option<f64>| r.map(|f| 100.0 * f);
        let mib = |b: u64| b as f64 / crate::memory::MIB;
        let disk_df = df!(
            col::CHECKPOINT => disk_rows.iter().map(|r| r.checkpoint).collect::<Vec<_>>(),
            col::OP => disk_rows.iter().map(|r| r.op).collect::<Vec<_>>(),
            col::RESIDENT_PCT => disk_rows.iter().map(|r| pct(r.resident)).collect::<Vec<_>>(),
            col::FILE_MIB => disk_rows.iter().map(|r| mib(r.time.bytes)).collect::<Vec<_>>(),
            col::SECONDS => disk_rows.iter().map(|r| r.time.seconds).collect::<Vec<_>>(),
            col::GBS => disk_rows.iter().map(|r| r.time.gbs()).collect::<Vec<_>>(),
        )?;
        let ok = |r: &LoadRow| r.outcome.is_ok();
        let time_df = df!(
            col::CHECKPOINT => loads.iter().map(|r| r.checkpoint).collect::<Vec<_>>(),
            col::PRECISION => loads.iter().map(|r| r.precision.name()).collect::<Vec<_>>(),
            col::CACHE => loads.iter().map(|r| r.cache).collect::<Vec<_>>(),
            col::OUTCOME => loads.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
            col::RESIDENT_PCT => loads.iter().map(|r| pct(r.resident)).collect::<Vec<_>>(),
            col::FILE_MIB => loads.iter().map(|r| mib(r.file_bytes)).collect::<Vec<_>>(),
            col::DEVICE_MIB => loads.iter().map(|r| mib(r.device_bytes)).collect::<Vec<_>>(),
            col::LOAD_S => loads.iter().map(|r| ok(r).then_some(r.load_s)).collect::<Vec<_>>(),
            col::READ_S => loads.iter().map(|r| r.read_s).collect::<Vec<_>>(),
            col::COPY_S => loads.iter().map(|r| r.copy_s).collect::<Vec<_>>(),
            col::FLOOR_S => loads.iter().map(|r| r.floor_s()).collect::<Vec<_>>(),
            col::PCT_OF_FLOOR => loads.iter().map(|r| ok(r).then(|| 100.0 * r.floor_s() / r.load_s)).collect::<Vec<_>>(),
            col::DISK_SHARE => loads.iter().map(|r| ok(r).then(|| 100.0 * r.read_s / r.load_s)).collect::<Vec<_>>(),
            col::NOTE => loads.iter().map(note).collect::<Vec<_>>(),
        )?;
        let mut out = StageOutput::default();
        if let Some(why) = skipped {
            out.findings.push(Finding::new("loading time", "s", None).note(format!("not measured: {why}")));
        }
        out.table(DISK_TABLE, disk_df);
        out.table(TIME_TABLE, time_df);
        for r in disk_rows.iter().filter(|r| r.op == "read cold") {
            out.findings.push(
                Finding::new(format!("{}: cold read", r.checkpoint), "GB/s", Some(r.time.gbs()))
                    .note(format!("{:.0} % cached before", 100.0 * r.resident.unwrap_or(f64::NAN))),
            );
        }
        for r in loads.iter().filter(|r| ok(r)) {
            out.findings.push(
                Finding::new(format!("{} → {} load, {}", r.checkpoint, r.precision, r.cache), "s", Some(r.load_s))
                    .floor(r.floor_s())
                    .note("floor: file read + host→device copy, one after the other"),
            );
        }
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }

    fn model(cfg: &LoadConfig, run_model: &str) -> Option<String> {
        Some(cfg.model.clone().unwrap_or_else(|| run_model.to_string()))
    }
}

fn note(r: &LoadRow) -> String {
    if !r.outcome.is_ok() {
        return "does not fit the card: the load stopped at the OOM".into();
    }
    match r.precision {
        p if p.is_quantized() && r.checkpoint.starts_with("safetensors") => "quantized on the CPU while loading".into(),
        Precision::F32 | Precision::F16 if r.checkpoint == "safetensors bf16" => {
            "converted from the file's BF16 while loading".into()
        }
        _ => String::new(),
    }
}
