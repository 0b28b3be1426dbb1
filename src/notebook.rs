//! What the notebooks call: one `Setup` chosen at the top (mode, model, card), then one call per
//! stage that returns the stage's tables, run live on this kernel's device or replayed from a
//! committed GPU run under data/results/.

use crate::error::Result;
use crate::experiments::{anatomy, kv, Lab};
use crate::memory::{Card, CardEmulation};
use crate::model::{self, ModelSource, Precision, SourceOptions};
use crate::report::OutputDir;
use polars::prelude::DataFrame;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run the stage through the crate on this kernel's device.
    Live,
    /// Read the tables of a committed run (`data/results/<gpu>/<run>/`).
    Replay,
}

#[derive(Debug, Clone)]
pub struct Setup {
    pub mode: Mode,
    /// synthetic:<preset>, a directory, a .gguf file or a repo id (live mode).
    pub model: String,
    /// A card to emulate (live mode), e.g. "rtx4090".
    pub card: Option<String>,
    /// auto, cpu or cuda.
    pub device: String,
    /// The committed run replayed, relative to data/results/.
    pub replay: String,
}

/// The committed GPU runs the notebooks replay by default.
pub const REPLAY_STAGE1: &str = "h200/2026-11-21-stage1";
pub const REPLAY_STAGE2: &str = "h200/2026-11-21-stage2";

impl Setup {
    /// `VRAM_LAB_NOTEBOOK_MODE=live|replay` overrides `mode` (CI runs copies of the notebooks live).
    pub fn new(mode: Mode, model: &str, card: Option<&str>) -> Self {
        let mode = match std::env::var("VRAM_LAB_NOTEBOOK_MODE").as_deref() {
            Ok("live") => Mode::Live,
            Ok("replay") => Mode::Replay,
            _ => mode,
        };
        Self {
            mode,
            model: model.into(),
            card: card.map(str::to_string),
            device: "auto".into(),
            replay: REPLAY_STAGE1.into(),
        }
    }

    /// The folder a stage's tables are replayed from.
    pub fn replay_dir(&self, run: &str) -> PathBuf {
        results_dir().join(&self.replay).join(run)
    }

    fn lab(&self) -> Result<Lab> {
        let device = crate::device::pick(&self.device)?;
        let source = ModelSource::parse(&self.model)?;
        Ok(Lab::new(device, source, SourceOptions { seed: 42, ..Default::default() }))
    }

    fn emulate(&self, lab: &Lab) -> Result<Option<CardEmulation>> {
        self.card.as_deref().map(|c| CardEmulation::start(&Card::parse(c)?, &lab.device)).transpose()
    }

    pub fn describe(&self) -> String {
        match self.mode {
            Mode::Live => format!(
                "live: {} on {} ({}), card {}",
                self.model,
                self.device,
                crate::device::pick(&self.device).map(|d| crate::device::describe(&d)).unwrap_or_else(|e| e.to_string()),
                self.card.as_deref().unwrap_or("none")
            ),
            Mode::Replay => format!("replay: data/results/{}", self.replay),
        }
    }

    /// Stage 1: (anatomy table, timeline table).
    pub fn anatomy(&self) -> Result<(DataFrame, DataFrame)> {
        match self.mode {
            Mode::Replay => {
                let dir = self.replay_dir("anatomy-rtx4090");
                Ok((OutputDir::read_csv(&dir, "anatomy")?, OutputDir::read_csv(&dir, "anatomy_timeline")?))
            }
            Mode::Live => {
                let mut lab = self.lab()?;
                lab.console.quiet = true;
                let _card = self.emulate(&lab)?;
                let result = anatomy::run(&mut lab, &anatomy::AnatomyConfig { max_new_tokens: 32, ..Default::default() })?;
                Ok((result.table()?, result.timeline.to_dataframe()?))
            }
        }
    }

    /// Stage 1's memory summary at the F32 OOM, when the run had one.
    pub fn oom_summary(&self) -> Result<String> {
        match self.mode {
            Mode::Replay => std::fs::read_to_string(self.replay_dir("anatomy-rtx4090").join("oom_summary_f32.txt"))
                .or_else(|_| Ok("(this run had no OOM)".into())),
            Mode::Live => {
                let mut lab = self.lab()?;
                lab.console.quiet = true;
                let _card = self.emulate(&lab)?;
                let cfg = anatomy::AnatomyConfig { precisions: vec![Precision::F32], max_new_tokens: 4 };
                let r = anatomy::run(&mut lab, &cfg)?;
                Ok(r.scenarios.first().map(|s| s.oom_summary.clone()).filter(|s| !s.is_empty()).unwrap_or_else(|| "(F32 fit: no OOM on this card)".into()))
            }
        }
    }

    /// Stage 2, prefill sweep with bisection: (ledger table, limit table).
    pub fn kv_prefill(&self, precision: &str, logits: model::Logits) -> Result<(DataFrame, Option<DataFrame>)> {
        let tag = format!("kv-{precision}-{}-rtx4090", if logits == model::Logits::All { "all" } else { "last" });
        match self.mode {
            Mode::Replay => {
                let dir = self.replay_dir(&tag);
                Ok((OutputDir::read_csv(&dir, "kv_prefill")?, OutputDir::read_csv(&dir, "kv_limit").ok()))
            }
            Mode::Live => {
                let mut lab = self.lab()?;
                lab.console.quiet = true;
                let card = self.emulate(&lab)?;
                let p = Precision::parse(precision)?;
                let lm = model::source::load(&lab.source, &lab.opts, p, &lab.device, &lab.probe, None)?;
                let cfg = kv::PrefillConfig { lengths: kv::PrefillConfig::doubling(256, 8192), batch: 1, logits };
                let mut steps = kv::prefill_sweep(&mut lab, &lm.model, &cfg);
                let limit = kv::find_limit(&mut lab, &lm.model, &steps, logits, 64);
                let limit_df = match &limit {
                    Some(l) => Some(kv::limit_table(std::slice::from_ref(l), card.as_ref().map(|c| c.card.name.as_str()).unwrap_or("none"))?),
                    None => None,
                };
                if let Some(l) = limit {
                    steps.extend(l.trials);
                    steps.sort_by_key(|s| s.seq);
                }
                Ok((kv::prefill_table(&steps, lm.model.attention, p.name())?, limit_df))
            }
        }
    }

    /// Stage 2, decode sweep: both cache kinds.
    pub fn kv_decode(&self, precision: &str) -> Result<DataFrame> {
        match self.mode {
            Mode::Replay => OutputDir::read_csv(&self.replay_dir(&format!("kv-{precision}-all-rtx4090")), "kv_decode"),
            Mode::Live => {
                let mut lab = self.lab()?;
                lab.console.quiet = true;
                let _card = self.emulate(&lab)?;
                let p = Precision::parse(precision)?;
                let lm = model::source::load(&lab.source, &lab.opts, p, &lab.device, &lab.probe, None)?;
                let mut points = Vec::new();
                for kind in [model::CacheKind::Preallocated, model::CacheKind::Concat] {
                    points.extend(kv::decode_sweep(&mut lab, &lm.model, kind, 64, &[256, 512, 1024]));
                }
                kv::decode_table(&points, p.name())
            }
        }
    }
}

/// data/results of this crate (absolute, so a notebook may run from any folder).
pub fn results_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/results")
}

/// A self-check for exercises: compares an answer with the expected value, within `rel_tol`.
pub fn check_answer(name: &str, answer: f64, expected: f64, rel_tol: f64) -> String {
    if answer == 0.0 || answer.is_nan() {
        return format!("{name}: not answered yet — fill in your value above / 还没有作答");
    }
    let err = (answer - expected).abs() / expected.abs().max(f64::MIN_POSITIVE);
    if err <= rel_tol {
        format!("{name}: ✅ correct ({answer}) / 正确")
    } else {
        format!("{name}: ❌ {answer} is off by {:.1}% — try again / 再想想", err * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_check_says_each_case() {
        assert!(check_answer("q", 0.0, 14.19, 0.01).contains("not answered"));
        assert!(check_answer("q", 14.2, 14.19, 0.01).contains("✅"));
        assert!(check_answer("q", 16.0, 14.19, 0.01).contains("❌"));
    }

    #[test]
    fn replay_reads_the_committed_run() {
        let s = Setup { mode: Mode::Replay, ..Setup::new(Mode::Replay, "synthetic:tiny", None) };
        let (table, timeline) = s.anatomy().unwrap();
        assert_eq!(table.height(), 3);
        assert!(timeline.height() > 5);
        assert!(s.oom_summary().unwrap().contains("vram-lab memory summary"));
    }
}
