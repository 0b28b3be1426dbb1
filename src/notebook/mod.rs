//! What the notebooks call. One `Setup` at the top (mode, model, card), then one call per stage
//! that returns a `StageRun`: Live runs `vram-lab <stage>` into a run folder (live.rs: the very
//! command, hooks and all); Replay opens the newest committed run folder under data/results/ whose
//! manifest has the stage for that model and card. Either way the notebook reads the same folder
//! through its manifest, shows the stage's declared views and fills its prose from it (prose.rs).

use crate::error::{LabError, Result};
use crate::experiments::{find, registry};
use crate::hw::Card;
use crate::model::Precision;
use crate::report::Table;
use crate::session::run_folder::{run_folders, Manifest, RunFolder, StageStatus, MANIFEST};
use crate::session::{Session, SessionArgs};
use crate::stage::Sizes;
use std::path::PathBuf;

mod live;
mod prose;
mod stage_run;
use live::lab_root;
pub use live::Lab;
pub use prose::MISSING;
pub use stage_run::StageRun;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run the stage through the crate on this kernel's device.
    Live,
    /// Open a committed run (data/results/<gpu>/<run>/manifest.json).
    Replay,
}

#[derive(Debug, Clone)]
pub struct Setup {
    pub mode: Mode,
    /// Model, card and device (Live), and the model and card a replayed run must have.
    pub args: SessionArgs,
    /// Where committed runs are looked for.
    pub results: PathBuf,
    /// Replay only runs started before this time (RFC 3339, or a prefix such as a date): the
    /// runs a notebook's interpretation was written from, when newer ones exist.
    pub before: Option<String>,
    /// Live: the binary and the device it sees, found at the first call that needs them.
    lab: std::sync::OnceLock<std::result::Result<Lab, String>>,
    /// Whether the model and card came from the environment (kept on CPU too).
    chosen: bool,
}

impl Setup {
    /// The environment may override the choice: `VRAM_LAB_NOTEBOOK_MODE=live|replay`,
    /// `VRAM_LAB_NOTEBOOK_MODEL=<source>`, `VRAM_LAB_NOTEBOOK_CARD=<card>|none`,
    /// `VRAM_LAB_NOTEBOOK_DEVICE=cpu|cuda|auto` (CI runs copies of the notebooks live on CPU with
    /// the tiny model this way).
    pub fn new(mode: Mode, model: &str, card: Option<&str>) -> Self {
        let var = |k: &str| std::env::var(k).ok();
        let mode = match var("VRAM_LAB_NOTEBOOK_MODE").as_deref() {
            Some("live") => Mode::Live,
            Some("replay") => Mode::Replay,
            _ => mode,
        };
        let chosen = var("VRAM_LAB_NOTEBOOK_MODEL").is_some() || var("VRAM_LAB_NOTEBOOK_CARD").is_some();
        let card = match var("VRAM_LAB_NOTEBOOK_CARD") {
            Some(c) => Some(c),
            None => Some(card.unwrap_or("none").to_string()),
        };
        let args = SessionArgs {
            device: var("VRAM_LAB_NOTEBOOK_DEVICE").unwrap_or_else(|| "auto".into()),
            model: Some(var("VRAM_LAB_NOTEBOOK_MODEL").unwrap_or_else(|| model.into())),
            card,
            silent: true,
            ..Default::default()
        };
        Self { mode, args, results: results_dir(), before: None, lab: Default::default(), chosen }
    }

    /// Replays the newest run started before `time` (e.g. "2026-11-23"), not the newest of all.
    pub fn before(mut self, time: &str) -> Self {
        self.before = Some(time.to_string());
        self
    }

    /// The unequal-cards run's settings: the articles' 24 GB and 16 GB cards, as the committed run;
    /// live on the CPU (the tiny model) 96 and 48 MiB, which its step divides the same way.
    pub fn unequal_cards(&self) -> &'static str {
        let cpu = self.mode == Mode::Live && self.live_lab().map(|l| !l.is_cuda()).unwrap_or(true);
        const CPU: &str = r#"{"cards": ["96MiB", "48MiB"], "seq": 64, "checkpointing": [true]}"#;
        if cpu {
            CPU
        } else {
            r#"{"cards": ["24GiB", "16GiB"], "seq": 256, "checkpointing": [true]}"#
        }
    }

    /// The binary a Live run uses (built on first use) and its device.
    pub fn live_lab(&self) -> Result<&Lab> {
        self.lab
            .get_or_init(|| Lab::find(&self.args.device).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| LabError::other(e.clone()))
    }

    /// The session flags a Live run of `stage` passes: the notebook's model and card on a GPU; on
    /// the CPU the command's own defaults (the tiny model on the scaled card: the report's story in
    /// minutes) unless the environment chose them.
    /// Training and several ranks run without a card there: a 2-rank step of the tiny model needs
    /// more than the scaled card holds (`vram-lab train --card scaled --settings '{"gpus": 2}'` refuses it).
    fn live_args(&self, stage: &str) -> Result<SessionArgs> {
        let mut args = self.args.clone();
        if !self.live_lab()?.is_cuda() && !self.chosen {
            args.model = None;
            args.card = (!matches!(stage, "train" | "parallel")).then(|| "scaled".into());
        }
        Ok(args)
    }

    fn model(&self) -> &str {
        self.args.model.as_deref().unwrap_or("")
    }

    fn card(&self) -> &str {
        self.args.card.as_deref().unwrap_or("none")
    }

    /// Where this notebook's outputs come from: mode, device, date, the lab's commit.
    pub fn describe(&self) -> String {
        let today = chrono::Utc::now().format("%Y-%m-%d");
        let commit = live::commit();
        match self.mode {
            Mode::Live => {
                let (device, model, card) = match (self.live_lab(), self.live_args("anatomy")) {
                    (Ok(lab), Ok(a)) => (
                        lab.device.clone(),
                        a.model.unwrap_or_else(|| "the CPU default".into()),
                        a.card.unwrap_or_else(|| "none".into()),
                    ),
                    (Err(e), _) | (_, Err(e)) => (format!("unavailable: {e}"), self.model().into(), self.card().into()),
                };
                format!("输出来源 Outputs: Live 现场运行 — `vram-lab` run here on {device}, {today}, commit {commit}\n模型 model {model}, 显卡 card {card}")
            }
            Mode::Replay => {
                let before = self.before.as_ref().map(|t| format!(" started before {t}")).unwrap_or_default();
                format!(
                    "输出来源 Outputs: Replay 回放 — committed GPU runs of {} on card {}{before} (data/results/; each stage below names its run, GPU and date), commit {commit}, {today}",
                    self.model(),
                    self.card()
                )
            }
        }
    }

    /// The stage `name`, run live or replayed.
    pub fn stage(&self, name: &str) -> Result<StageRun> {
        self.stage_with(name, "{}")
    }

    /// The stage `name` with some of its settings, as JSON (`{"gpus": 2, "zero": 1}`, the
    /// config's field names): Live runs the default config with them set; Replay opens the
    /// newest committed run whose config has them.
    pub fn stage_with(&self, name: &str, settings: &str) -> Result<StageRun> {
        let stage = find(name).ok_or_else(|| LabError::input(format!("no stage `{name}`")))?;
        let settings = settings_of(settings)?;
        let run = match self.mode {
            Mode::Replay => RunFolder::open(&self.newest_run_with(name, &settings)?)?,
            Mode::Live => {
                let out = live_run_dir(name);
                self.live_lab()?.run_stage(
                    &self.live_args(stage.name())?,
                    stage.name(),
                    &serde_json::Value::Object(settings).to_string(),
                    &out,
                )?;
                RunFolder::open(&out)?
            }
        };
        finished(run, name, self.mode == Mode::Live)
    }

    /// The run folder whose manifest has `stage` done, for this model and card: the newest that
    /// ran the stage with its default config (a full run), else the newest of any.
    fn newest_run_with(&self, stage: &str, settings: &serde_json::Map<String, serde_json::Value>) -> Result<PathBuf> {
        let defaults = find(stage).map(|s| (s.default_config(Sizes::Report).ok(), s.default_config(Sizes::Cpu).ok()));
        // The PyTorch figures a stage reads (`--pytorch FILE`) add rows without changing what the
        // lab ran: a run with them counts as a full one, and is preferred. Which Q4 plan a run
        // used (the lab's `q4` until 2026-11-23, `q4_k_m` since) does not make it partial.
        let without_reference = |v: &serde_json::Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("pytorch");
                if let Some(serde_json::Value::Array(ps)) = o.get_mut("precisions") {
                    for p in ps.iter_mut() {
                        if p.as_str().and_then(|s| Precision::parse(s).ok()).is_some_and(Precision::is_quantized) {
                            *p = serde_json::Value::String("q4".into());
                        }
                    }
                }
            }
            v
        };
        let mut found: Vec<(bool, bool, String, PathBuf)> = Vec::new();
        for dir in run_folders(&self.results, 3) {
            let Ok(m) = Manifest::read(&dir) else { continue };
            if self.before.as_ref().is_some_and(|t| m.started.as_str() >= t.as_str()) {
                continue;
            }
            let Some(rec) = m.stage(stage).filter(|s| s.status == StageStatus::Done) else { continue };
            if settings.iter().any(|(k, v)| rec.config.get(k) != Some(v)) {
                continue;
            }
            if m.model == self.model() && m.card_name() == self.card() {
                let config = without_reference(&rec.config);
                // A setting the run's config lacks was added to the stage after it ran: the run had
                // its default then.
                let is_default = |d: &serde_json::Value| {
                    let d = without_reference(d);
                    d.as_object().is_some_and(|d| d.iter().all(|(k, v)| config.get(k).unwrap_or(v) == v))
                };
                let full =
                    defaults.as_ref().is_some_and(|(g, c)| [g, c].iter().any(|d| d.as_ref().is_some_and(is_default)));
                let reference = rec.config.get("pytorch").is_some_and(|p| !p.is_null());
                found.push((full, reference, m.started.clone(), dir));
            }
        }
        found.sort();
        found.pop().map(|(_, _, _, d)| d).ok_or_else(|| {
            LabError::input(format!(
                "no committed run of stage {stage}{} for {} on card {} under {} (each run folder has a {MANIFEST}); use Mode::Live",
                if settings.is_empty() { String::new() } else { format!(" with {}", serde_json::Value::Object(settings.clone())) },
                self.model(),
                self.card(),
                self.results.display()
            ))
        })
    }
}

/// One committed run folder under data/results/ (`h200x4/2026-11-26-four-gpus/tp7`), opened as it
/// is in any mode: a run no kernel here can make live (four GPUs, say) shown beside the others.
pub fn committed(folder: &str, stage: &str) -> Result<StageRun> {
    finished(RunFolder::open(&results_dir().join(folder))?, stage, false)
}

fn finished(run: RunFolder, name: &str, live: bool) -> Result<StageRun> {
    let record = run.manifest.stage(name).ok_or_else(|| LabError::other(format!("the run has no stage {name}")))?;
    if record.status != StageStatus::Done {
        return Err(LabError::other(format!(
            "stage {name} did not finish: {}",
            record.error.clone().unwrap_or_default()
        )));
    }
    Ok(StageRun { run, stage: name.to_string(), live })
}

/// The estimator, the planner and the check for a model and card, computed here (formulas and
/// committed CSVs only: no GPU, no weights). `model` is a source (`synthetic:qwen2.5-14b`, a
/// directory with config.json); `card` a preset or a size; `seq` and `batch` the workload.
pub struct Estimator {
    pub estimate: StageRun,
    pub plan: StageRun,
    pub check: StageRun,
}

pub fn estimator(model: &str, card: &str, seq: usize, batch: usize) -> Result<Estimator> {
    use crate::experiments::{check, estimate, plan};
    let est = estimate::EstimateConfig { seq, batch, train: true, ..Default::default() };
    let plan = plan::PlanConfig { seq, ..Default::default() };
    let check = check::CheckConfig { results: results_dir() };
    let stages = vec![
        ("estimate", serde_json::to_value(est)?),
        ("plan", serde_json::to_value(plan)?),
        ("check", serde_json::to_value(check)?),
    ];
    let run = run_in(formulas_session(model, card)?, stages)?;
    let of = |stage: &str| StageRun { run: run.clone(), stage: stage.into(), live: false };
    Ok(Estimator { estimate: of("estimate"), plan: of("plan"), check: of("check") })
}

/// The estimator alone for a model and card with some of its settings as JSON (`{"tp": 2}`, the
/// fields of `vram-lab estimate`'s flags), computed here whatever the notebook's mode: formulas
/// only, no GPU and no weights.
pub fn estimate_with(model: &str, card: &str, settings: &str) -> Result<StageRun> {
    let stage = crate::experiments::find("estimate").ok_or_else(|| LabError::Other("no estimate stage".into()))?;
    let config = crate::stage::with_settings(
        stage.as_ref(),
        serde_json::to_value(crate::experiments::estimate::EstimateConfig::default())?,
        settings,
    )?;
    let run = run_in(formulas_session(model, card)?, vec![("estimate", config)])?;
    Ok(StageRun { run, stage: "estimate".into(), live: false })
}

/// The estimator's session: on the CPU, into a fresh folder (formulas only).
fn formulas_session(model: &str, card: &str) -> Result<Session> {
    let args = SessionArgs {
        device: "cpu".into(),
        model: Some(model.into()),
        card: Some(card.into()),
        silent: true,
        out: Some(live_run_dir("estimate")),
        ..Default::default()
    };
    Session::open(&args, "estimate", false)
}

/// Runs each stage with its config in `session`, then writes the folder and its report.html.
fn run_in(mut session: Session, stages: Vec<(&str, serde_json::Value)>) -> Result<RunFolder> {
    let (names, configs): (Vec<_>, Vec<_>) = stages.into_iter().unzip();
    let found = names
        .into_iter()
        .map(|name| find(name).ok_or_else(|| LabError::input(format!("no stage `{name}`"))))
        .collect::<Result<Vec<_>>>()?;
    let in_turn = found.iter().map(|stage| stage.as_ref()).zip(configs).collect();
    if crate::stage::run_in_turn(&mut session, in_turn, |_| {})? == crate::stage::Ended::Interrupted {
        return Err(LabError::Interrupted);
    }
    session.finish(|run| crate::report::html::write(run, &registry()))
}

/// A stage's settings written as a JSON object (`{"gpus": 2}`).
fn settings_of(text: &str) -> Result<serde_json::Map<String, serde_json::Value>> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| LabError::input(format!("the settings `{text}` are not JSON: {e}")))?;
    v.as_object().cloned().ok_or_else(|| LabError::input(format!("the settings `{text}` are not a JSON object")))
}

/// A fresh folder for a run a notebook makes: target/notebook-runs/<time>-<name>.
/// A new folder for a run made here: the time, then this process and its count of runs, so two
/// made in the same millisecond (two threads, two kernels) never share one.
fn live_run_dir(name: &str) -> PathBuf {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S%3f");
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    lab_root().join("target/notebook-runs").join(format!("{stamp}-{}-{n}-{name}", std::process::id()))
}

/// The device this kernel would use, and its memory summary.
pub fn device_summary(choice: &str) -> Result<String> {
    let device = crate::hw::pick(choice)?;
    Ok(format!("{}\n{}", crate::hw::describe(&device), crate::memory::MemoryProbe::new(&device).summary()))
}

/// The card presets: capacity, bandwidth, and where the capacity comes from.
pub fn card_table() -> Result<Table> {
    let cards = Card::presets();
    Ok(Table::from(polars::df!(
        "card" => cards.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        "total_gib" => cards.iter().map(|c| c.total_mib / 1024.0).collect::<Vec<_>>(),
        "bandwidth_gb_s" => cards.iter().map(|c| c.bandwidth_gbs).collect::<Vec<_>>(),
        "source" => cards.iter().map(|c| c.total_source.clone()).collect::<Vec<_>>(),
    )?))
}

/// The model presets: parameters, weight GiB by precision, KV bytes per token in BF16.
pub fn preset_table() -> Result<Table> {
    use crate::estimate::{kv_bytes_per_token, weight_bytes};
    let names: Vec<&str> = crate::model::config::PRESETS.iter().map(|(n, _)| *n).collect();
    let cfgs = names.iter().map(|n| crate::model::DecoderConfig::preset(n)).collect::<Result<Vec<_>>>()?;
    let gib = |p: Precision| cfgs.iter().map(|c| crate::memory::gib(weight_bytes(c, p))).collect::<Vec<_>>();
    Ok(Table::from(polars::df!(
        "preset" => names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        "parameters" => cfgs.iter().map(|c| c.param_count() as u64).collect::<Vec<_>>(),
        "bf16_gib" => gib(Precision::Bf16),
        "q4_gib" => gib(Precision::Q4),
        "f32_gib" => gib(Precision::F32),
        "kv_bytes_per_token_bf16" => cfgs.iter().map(|c| kv_bytes_per_token(c, 2)).collect::<Vec<_>>(),
    )?))
}

/// The committed record of this crate (`record::root`).
pub fn results_dir() -> PathBuf {
    crate::record::root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_opens_the_committed_full_run() {
        let s = Setup { mode: Mode::Replay, ..Setup::new(Mode::Replay, "synthetic:qwen2.5-7b", Some("rtx4090")) };
        let kv = s.stage("kv").unwrap();
        // A full run of the stage (both precisions), never a quick one such as `vram-lab run`'s kv
        // (BF16 alone).
        let newer_quick = results_dir().join("h100/2026-12-06-run/run");
        assert_eq!(
            RunFolder::open(&newer_quick).unwrap().manifest.stage("kv").unwrap().config["precisions"],
            serde_json::json!(["bf16"])
        );
        assert_ne!(kv.run.dir, newer_quick);
        assert_eq!(kv.run.manifest.stage("kv").unwrap().config["precisions"], serde_json::json!(["bf16", "q4_k_m"]));
        assert!(kv.table("kv_limit").unwrap().height() >= 4);
        let anatomy = s.stage("anatomy").unwrap();
        assert!(anatomy.text("oom_summary_f32.txt").unwrap().unwrap().contains("vram-lab memory summary"));
        assert!(anatomy.findings().unwrap().height() >= 5);
        assert!(anatomy.show("nope").is_err());
    }

    /// `before` replays the newest run started before a time: an older full run of the stage,
    /// never one started at or after it.
    #[test]
    fn replay_before_a_time_skips_newer_runs() {
        let s = Setup { mode: Mode::Replay, ..Setup::new(Mode::Replay, "synthetic:qwen2.5-7b", Some("rtx4090")) };
        let newest = s.stage("kv").unwrap().run.manifest.started.clone();
        let older = s.clone().before(&newest).stage("kv").unwrap();
        assert!(older.run.manifest.started < newest, "{} vs {newest}", older.run.manifest.started);
        assert!(s.clone().before("2000").stage("kv").is_err());
    }

    #[test]
    fn replay_without_a_matching_run_says_so() {
        let mut s = Setup::new(Mode::Replay, "synthetic:qwen2.5-72b", Some("a4000"));
        s.results = std::env::temp_dir().join("vram-lab-no-results");
        let e = s.stage("anatomy").err().unwrap().to_string();
        assert!(e.contains("no committed run of stage anatomy") && e.contains("qwen2.5-72b"), "{e}");
    }

    #[test]
    fn committed_opens_the_folder_named_whatever_the_mode() {
        let run = committed("h200x4/2026-11-26-four-gpus/tp7", "parallel").unwrap();
        assert!(run.run.manifest.command.contains("--gpus 4"), "{}", run.run.manifest.command);
        assert!(committed("h200x4/2026-11-26-four-gpus/tp7", "train").is_err());
        assert!(committed("h200x4/no-such-run", "parallel").is_err());
    }
}
