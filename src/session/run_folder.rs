//! A run folder and its manifest.json: what a run folder holds and how it was made — the command line, each stage's
//! config, status and files, the machine and the versions. report.html, `vram-lab report` and the
//! notebooks' replay open a run through it, never through folder names.

use super::env::Env;
use crate::error::{LabError, Result};
use crate::hw::Card;
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "manifest.json";

/// The largest manifest or stage text the lab reads back from a run folder (a stage's text is a
/// memory summary of a few KiB; the largest manifest committed is under 1 MiB).
pub const MAX_RUN_FILE: u64 = 16 << 20;
/// Stages a run records at most (the registry has a dozen), and files one stage names at most.
const MAX_STAGES: usize = 64;
const MAX_STAGE_FILES: usize = 256;
/// A table of a run, read back: the largest the lab writes are a few MB.
pub const MAX_RUN_TABLE: u64 = 256 << 20;
/// All the tables and texts read through one opened run (what its report embeds): the largest
/// run folder committed holds a few hundred KB, so a manifest naming more than this is refused, not paged.
pub const MAX_RUN_READ: u64 = 64 << 20;

/// A headline figure: the measurement beside its prediction, the report's RTX 4090 figure and,
/// for a throughput, its physical ceiling. The run's summary table is made of these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub what: String,
    pub unit: String,
    pub measured: Option<f64>,
    pub predicted: Option<f64>,
    /// A lower bound, not a prediction (a load's file read + copy): no error is read against it.
    #[serde(default)]
    pub floor: Option<f64>,
    pub report: Option<f64>,
    pub ceiling: Option<f64>,
    pub note: String,
}

impl Finding {
    pub fn new(what: impl Into<String>, unit: &str, measured: Option<f64>) -> Self {
        Self { what: what.into(), unit: unit.into(), measured, ..Default::default() }
    }
    pub fn predicted(mut self, v: impl Into<Option<f64>>) -> Self {
        self.predicted = v.into();
        self
    }
    pub fn floor(mut self, v: impl Into<Option<f64>>) -> Self {
        self.floor = v.into();
        self
    }
    pub fn report(mut self, v: impl Into<Option<f64>>) -> Self {
        self.report = v.into();
        self
    }
    pub fn ceiling(mut self, v: impl Into<Option<f64>>) -> Self {
        self.ceiling = v.into();
        self
    }
    pub fn note(mut self, s: impl Into<String>) -> Self {
        self.note = s.into();
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Complete,
    Interrupted,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    /// Ran to the end (an OOM inside a stage is a result, not a failure).
    Done,
    Failed,
    Interrupted,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    pub name: String,
    pub title: String,
    pub config: serde_json::Value,
    pub status: StageStatus,
    pub error: Option<String>,
    pub seconds: f64,
    /// Table name → CSV path relative to the run folder.
    pub tables: BTreeMap<String, String>,
    /// Text name → file path relative to the run folder.
    pub texts: BTreeMap<String, String>,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub status: RunStatus,
    pub command: String,
    pub started: String,
    pub finished: Option<String>,
    pub model: String,
    /// The emulated card, when there was one.
    pub card: Option<Card>,
    /// Where device tensors lived (`--allocator`; runs before it was a flag used the pool).
    #[serde(default)]
    pub allocator: crate::memory::policy::Allocator,
    pub env: Env,
    pub stages: Vec<StageRecord>,
}

impl Manifest {
    pub fn read(dir: &Path) -> Result<Self> {
        let p = dir.join(MANIFEST);
        if !p.exists() {
            return Err(LabError::input(format!("{} is not a vram-lab run folder (no {MANIFEST})", dir.display())));
        }
        let text = crate::paths::read_own_text(&p, MAX_RUN_FILE)?;
        let m: Self = serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", p.display())))?;
        m.check_shape().map_err(|why| LabError::input(format!("{}: {why}", p.display())))?;
        Ok(m)
    }

    /// A run records each stage once, a stage each of its files once, and no more than the lab
    /// writes: a manifest naming one text half a million times would have a report embed it as
    /// often.
    fn check_shape(&self) -> std::result::Result<(), String> {
        if self.stages.len() > MAX_STAGES {
            return Err(format!("{} stages, more than the {MAX_STAGES} a run may record", self.stages.len()));
        }
        for (i, s) in self.stages.iter().enumerate() {
            if self.stages[..i].iter().any(|t| t.name == s.name) {
                return Err(format!("the stage `{}` is recorded twice", s.name.escape_debug()));
            }
            let n = s.tables.len() + s.texts.len();
            if n > MAX_STAGE_FILES {
                return Err(format!("stage `{}` names {n} files, more than {MAX_STAGE_FILES}", s.name.escape_debug()));
            }
            // A table is read for the views that show it; a text is embedded once per name.
            let texts: Vec<&String> = s.texts.values().collect();
            if let Some((_, f)) = texts.iter().enumerate().find(|(j, f)| texts[..*j].contains(f)) {
                return Err(format!("stage `{}` names the text `{}` twice", s.name.escape_debug(), f.escape_debug()));
            }
        }
        Ok(())
    }

    pub fn stage(&self, name: &str) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.name == name)
    }

    pub fn card_name(&self) -> &str {
        self.card.as_ref().map(|c| c.name.as_str()).unwrap_or("none")
    }
}

/// A run folder opened through its manifest.
#[derive(Debug, Clone)]
pub struct RunFolder {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Bytes read so far through this run (its clones share the count).
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl RunFolder {
    pub fn open(dir: &Path) -> Result<Self> {
        Ok(Self { dir: dir.to_path_buf(), manifest: Manifest::read(dir)?, read: Default::default() })
    }

    /// What `path` may still take of MAX_RUN_READ, checked against its size before it is read.
    fn budget(&self, path: &Path) -> Result<u64> {
        let left = MAX_RUN_READ.saturating_sub(self.read.load(std::sync::atomic::Ordering::Relaxed));
        let size = std::fs::symlink_metadata(path).map(|m| m.len()).unwrap_or(0);
        if size > left {
            return Err(LabError::input(format!(
                "{}: its tables and texts add up past {} MiB, more than a report of a run embeds",
                self.dir.join(MANIFEST).display(),
                MAX_RUN_READ >> 20
            )));
        }
        Ok(left)
    }

    fn charge(&self, bytes: usize) {
        self.read.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The manifest's record of `stage`, or an error naming the run.
    pub fn record(&self, stage: &str) -> Result<&StageRecord> {
        self.manifest
            .stage(stage)
            .ok_or_else(|| LabError::input(format!("the run in {} has no stage {stage}", self.dir.display())))
    }

    /// A stage's table, read back from its CSV.
    pub fn table(&self, stage: &str, name: &str) -> Result<DataFrame> {
        let rel = self.record(stage)?.tables.get(name).ok_or_else(|| {
            LabError::input(format!("stage {stage} of the run in {} has no table {name}", self.dir.display()))
        })?;
        let path = self.inside(rel)?;
        // polars opens the path itself: a link is refused before it does.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_file()) {
            return Err(LabError::input(format!("{} is not a regular file", path.display())));
        }
        let bytes = read_table_bytes(&path, self.budget(&path)?.min(MAX_RUN_TABLE))?;
        self.charge(bytes.len());
        csv_table(bytes)
    }

    /// A stage's text file. The manifest names it: the name is checked to lie inside the folder
    /// and the file to be a regular one of bounded size, so a manifest cannot have the report
    /// embed /etc/passwd or hang on a FIFO.
    pub fn text(&self, stage: &str, name: &str) -> Result<Option<String>> {
        match self.record(stage)?.texts.get(name) {
            Some(rel) => {
                let path = self.inside(rel)?;
                let text = crate::paths::read_own_text(&path, self.budget(&path)?.min(MAX_RUN_FILE))?;
                self.charge(text.len());
                Ok(Some(text))
            }
            None => Ok(None),
        }
    }

    fn inside(&self, rel: &str) -> Result<PathBuf> {
        crate::paths::inside(&self.dir, &format!("{}: the file", self.dir.join(MANIFEST).display()), rel)
    }
}

/// Creates the folder and its manifest in one exclusive step: a second run into the same folder,
/// or one started at the same time, is refused. True when the folder was made here.
pub fn claim(dir: &Path, manifest: &Manifest) -> Result<bool> {
    let existed = std::fs::symlink_metadata(dir).is_ok();
    // A folder of the user's is not written into: only a new or an empty one becomes a run.
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if !meta.file_type().is_dir() {
            return Err(LabError::input(format!("{} exists and is not a folder: choose another --out", dir.display())));
        }
        // A folder holding a run is refused below, naming its manifest.
        let empty = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        if !empty && !dir.join(MANIFEST).exists() {
            return Err(LabError::input(format!(
                "{} exists and is not empty: a run goes into a new or empty folder (choose another --out)",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::input(format!("cannot create output folder {}: {e}", dir.display())))?;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(dir.join(MANIFEST)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            LabError::input(format!("{} already holds a run (its {MANIFEST}): choose another --out", dir.display()))
        } else {
            LabError::input(format!("cannot write {}: {e}", dir.join(MANIFEST).display()))
        }
    })?;
    use std::io::Write;
    f.write_all(serde_json::to_string_pretty(manifest)?.as_bytes())?;
    Ok(!existed)
}

/// A table as CSV at `path`, a new file or one the lab wrote before (never through a link).
pub fn write_csv(path: &Path, df: &DataFrame) -> Result<()> {
    let mut bytes = Vec::new();
    CsvWriter::new(&mut bytes).finish(&mut df.clone())?;
    crate::paths::replace_own(path, &bytes)
}

/// A table the lab wrote, read back: a regular file (a FIFO or a link to /dev/zero is refused,
/// not read for ever) of at most MAX_RUN_TABLE bytes.
pub fn read_csv(path: &Path) -> Result<DataFrame> {
    csv_table(read_table_bytes(path, MAX_RUN_TABLE)?)
}

fn read_table_bytes(path: &Path, max: u64) -> Result<Vec<u8>> {
    if !path.is_file() {
        return Err(LabError::input(format!("no table {}", path.display())));
    }
    crate::paths::read_regular(path, max)
}

fn csv_table(bytes: Vec<u8>) -> Result<DataFrame> {
    Ok(CsvReadOptions::default()
        .with_has_header(true)
        .into_reader_with_file_handle(std::io::Cursor::new(bytes))
        .finish()?)
}

/// A finding as the table shows it: the manifests written before the floor had its own field put
/// a load's floor under "predicted", saying so in the note; it moves to the floor.
fn floor_of_old(f: &Finding) -> Finding {
    match f.note.strip_prefix("predicted: the floor, ") {
        Some(rest) if f.floor.is_none() => {
            Finding { floor: f.predicted, predicted: None, note: format!("floor: {rest}"), ..f.clone() }
        }
        _ => f.clone(),
    }
}

/// The findings of every stage as one table.
pub fn findings_table(manifest: &Manifest) -> Result<DataFrame> {
    // Each row in the byte unit that fits its magnitude (a scaled card's MiB and KiB).
    let fitted: Vec<(&str, Finding)> = manifest
        .stages
        .iter()
        .flat_map(|s| s.findings.iter().map(move |f| (s.name.as_str(), f)))
        .map(|(stage, f)| (stage, floor_of_old(f)))
        .map(|(stage, f)| {
            let largest = [f.measured, f.predicted, f.floor, f.report, f.ceiling]
                .into_iter()
                .flatten()
                .map(f64::abs)
                .fold(0.0, f64::max);
            let (unit, k) = crate::units::fitting(&f.unit, largest);
            let scale = |v: Option<f64>| v.map(|v| v * k);
            (
                stage,
                Finding {
                    unit,
                    measured: scale(f.measured),
                    predicted: scale(f.predicted),
                    floor: scale(f.floor),
                    report: scale(f.report),
                    ceiling: scale(f.ceiling),
                    ..f.clone()
                },
            )
        })
        .collect();
    let rows: Vec<(&str, &Finding)> = fitted.iter().map(|(s, f)| (*s, f)).collect();
    let opt = |g: fn(&Finding) -> Option<f64>| rows.iter().map(|(_, f)| g(f)).collect::<Vec<_>>();
    Ok(df!(
        "stage" => rows.iter().map(|(s, _)| s.to_string()).collect::<Vec<_>>(),
        "what" => rows.iter().map(|(_, f)| f.what.clone()).collect::<Vec<_>>(),
        "unit" => rows.iter().map(|(_, f)| f.unit.clone()).collect::<Vec<_>>(),
        "measured" => opt(|f| f.measured),
        "predicted" => opt(|f| f.predicted),
        "floor" => opt(|f| f.floor),
        "report_rtx4090" => opt(|f| f.report),
        "ceiling" => opt(|f| f.ceiling),
        "note" => rows.iter().map(|(_, f)| f.note.clone()).collect::<Vec<_>>(),
    )?)
}

/// The run folders (those with a manifest.json) under `dir`, at most `depth` folders down.
pub fn run_folders(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    // Real folders only: a link to a folder (a loop back to `.`) is not entered.
    let subdirs = std::fs::read_dir(dir)
        .map(|r| r.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    for sub in subdirs {
        if sub.join(MANIFEST).is_file() {
            out.push(sub);
        } else if depth > 1 {
            out.extend(run_folders(&sub, depth - 1));
        }
    }
    out
}
