//! What the notebooks call: one `Setup` chosen at the top (mode, model, card), then one call per
//! stage that returns the stage's tables, run live on this kernel's device or replayed from a
//! committed GPU run under data/results/.

use crate::error::Result;
use crate::experiments::{anatomy, kv, Lab};
use crate::memory::{Card, CardEmulation};
use crate::model::{self, ModelSource, Precision, SourceOptions};
use crate::report::OutputDir;
use crate::report::Table;
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
    /// The GPU whose committed runs are replayed (a folder of data/results/).
    pub replay_gpu: String,
}

/// The committed GPU runs the notebooks replay, per stage.
pub const REPLAY_STAGE1: &str = "2026-11-21-stage1";
pub const REPLAY_STAGE2: &str = "2026-11-21-stage2";

impl Setup {
    /// The environment may override the choice: `VRAM_LAB_NOTEBOOK_MODE=live|replay`,
    /// `VRAM_LAB_NOTEBOOK_MODEL=<source>`, `VRAM_LAB_NOTEBOOK_CARD=<card>|none` (CI runs copies of
    /// the notebooks live on CPU with the tiny model this way).
    pub fn new(mode: Mode, model: &str, card: Option<&str>) -> Self {
        let mode = match std::env::var("VRAM_LAB_NOTEBOOK_MODE").as_deref() {
            Ok("live") => Mode::Live,
            Ok("replay") => Mode::Replay,
            _ => mode,
        };
        let model = std::env::var("VRAM_LAB_NOTEBOOK_MODEL").unwrap_or_else(|_| model.into());
        let card = match std::env::var("VRAM_LAB_NOTEBOOK_CARD").as_deref() {
            Ok("none") => None,
            Ok(c) => Some(c.to_string()),
            Err(_) => card.map(str::to_string),
        };
        Self {
            mode,
            model,
            card,
            device: std::env::var("VRAM_LAB_NOTEBOOK_DEVICE").unwrap_or_else(|_| "auto".into()),
            replay_gpu: "h200".into(),
        }
    }

    /// The folder a stage's tables are replayed from.
    pub fn replay_dir(&self, stage: &str, run: &str) -> PathBuf {
        results_dir().join(&self.replay_gpu).join(stage).join(run)
    }

    fn lab(&self) -> Result<Lab> {
        let device = crate::device::pick(&self.device)?;
        let source = ModelSource::parse(&self.model)?;
        Ok(Lab::new(device, source, SourceOptions { seed: 42, ..Default::default() }))
    }

    fn emulate(&self, lab: &Lab) -> Result<Option<CardEmulation>> {
        self.card.as_deref().map(|c| CardEmulation::start(&Card::parse(c)?, &lab.device)).transpose()
    }

    /// A quiet lab on the emulated card with the model loaded in `precision` (live mode).
    fn live(&self, precision: &str) -> Result<Live> {
        let mut lab = self.lab()?;
        lab.console.quiet = true;
        let card = self.emulate(&lab)?;
        let p = Precision::parse(precision)?;
        let loaded = model::source::load(&lab.source, &lab.opts, p, &lab.device, &lab.probe, None)?;
        Ok(Live { lab, loaded, card })
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
            Mode::Replay => format!("replay: the committed runs in data/results/{}/", self.replay_gpu),
        }
    }

    /// Stage 1: (anatomy table, timeline table).
    pub fn anatomy(&self) -> Result<(Table, Table)> {
        match self.mode {
            Mode::Replay => {
                let dir = self.replay_dir(REPLAY_STAGE1, "anatomy-rtx4090");
                Ok((OutputDir::read_csv(&dir, "anatomy")?.into(), OutputDir::read_csv(&dir, "anatomy_timeline")?.into()))
            }
            Mode::Live => {
                let mut lab = self.lab()?;
                lab.console.quiet = true;
                let _card = self.emulate(&lab)?;
                let result = anatomy::run(&mut lab, &anatomy::AnatomyConfig { max_new_tokens: 32, ..Default::default() })?;
                Ok((result.table()?.into(), result.timeline.to_dataframe()?.into()))
            }
        }
    }

    /// Stage 1's memory summary at the F32 OOM, when the run had one.
    pub fn oom_summary(&self) -> Result<String> {
        match self.mode {
            Mode::Replay => std::fs::read_to_string(self.replay_dir(REPLAY_STAGE1, "anatomy-rtx4090").join("oom_summary_f32.txt"))
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

    /// Stage 2, batch sweep at 1024 tokens, all logits kept.
    pub fn kv_batch(&self, precision: &str) -> Result<Table> {
        match self.mode {
            Mode::Replay => Ok(OutputDir::read_csv(&self.replay_dir(REPLAY_STAGE2, &format!("kv-{precision}-all-rtx4090")), "kv_batch")?.into()),
            Mode::Live => {
                let Live { mut lab, loaded, .. } = self.live(precision)?;
                let steps = kv::batch_sweep(&mut lab, &loaded.model, 256, 16, model::Logits::All);
                Ok(kv::prefill_table(&steps, loaded.model.attention, loaded.model.precision.name())?.into())
            }
        }
    }

    /// Stage 2, prefill sweep with bisection: (ledger table, limit table).
    pub fn kv_prefill(&self, precision: &str, logits: model::Logits) -> Result<(Table, Option<Table>)> {
        let tag = format!("kv-{precision}-{}-rtx4090", if logits == model::Logits::All { "all" } else { "last" });
        match self.mode {
            Mode::Replay => {
                let dir = self.replay_dir(REPLAY_STAGE2, &tag);
                Ok((OutputDir::read_csv(&dir, "kv_prefill")?.into(), OutputDir::read_csv(&dir, "kv_limit").ok().map(Table::from)))
            }
            Mode::Live => {
                let mut live = self.live(precision)?;
                let model = &live.loaded.model;
                let cfg = kv::PrefillConfig { lengths: kv::PrefillConfig::doubling(256, 8192), batch: 1, logits };
                let mut steps = kv::prefill_sweep(&mut live.lab, model, &cfg);
                let limit = kv::find_limit(&mut live.lab, model, &steps, logits, 64);
                let limit_df = match &limit {
                    Some(l) => Some(kv::limit_table(std::slice::from_ref(l), live.card_name())?.into()),
                    None => None,
                };
                if let Some(l) = limit {
                    steps.extend(l.trials);
                    steps.sort_by_key(|s| s.seq);
                }
                Ok((kv::prefill_table(&steps, model.attention, model.precision.name())?.into(), limit_df))
            }
        }
    }

    /// Stage 2: the longest prefill that fits, for BF16 and Q4, with all-position and last-only
    /// logits (rows only for the sweeps that ran into an OOM).
    pub fn kv_limits(&self) -> Result<Option<Table>> {
        let mut out: Option<Table> = None;
        for p in ["bf16", "q4"] {
            for l in [model::Logits::All, model::Logits::Last] {
                if let (_, Some(t)) = self.kv_prefill(p, l)? {
                    out = Some(match out {
                        Some(o) => o.vstack(&t)?,
                        None => t,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Stage 2 with attention as stock candle-transformers computes it (K/V repeated per head, the
    /// full score matrix), all logits kept.
    pub fn kv_naive(&self) -> Result<(Table, Option<Table>)> {
        match self.mode {
            Mode::Replay => {
                let dir = self.replay_dir(REPLAY_STAGE2, "kv-bf16-naive-rtx4090");
                Ok((OutputDir::read_csv(&dir, "kv_prefill")?.into(), OutputDir::read_csv(&dir, "kv_limit").ok().map(Table::from)))
            }
            Mode::Live => {
                let Live { mut lab, mut loaded, .. } = self.live("bf16")?;
                loaded.model.attention = crate::model::AttentionMode::Naive;
                let cfg = kv::PrefillConfig { lengths: kv::PrefillConfig::doubling(256, 2048), batch: 1, logits: model::Logits::All };
                let steps = kv::prefill_sweep(&mut lab, &loaded.model, &cfg);
                Ok((kv::prefill_table(&steps, loaded.model.attention, "bf16")?.into(), None))
            }
        }
    }

    /// Stage 2, decode sweep: both cache kinds.
    pub fn kv_decode(&self, precision: &str) -> Result<Table> {
        match self.mode {
            Mode::Replay => Ok(OutputDir::read_csv(&self.replay_dir(REPLAY_STAGE2, &format!("kv-{precision}-all-rtx4090")), "kv_decode")?.into()),
            Mode::Live => {
                let Live { mut lab, loaded, .. } = self.live(precision)?;
                let mut points = Vec::new();
                for kind in [model::CacheKind::Preallocated, model::CacheKind::Concat] {
                    points.extend(kv::decode_sweep(&mut lab, &loaded.model, kind, 64, &[256, 512, 1024]));
                }
                Ok(kv::decode_table(&points, loaded.model.precision.name())?.into())
            }
        }
    }
}

/// What a live stage runs with; the card emulation lasts as long as this does.
struct Live {
    lab: Lab,
    loaded: model::LoadedModel,
    card: Option<CardEmulation>,
}

impl Live {
    fn card_name(&self) -> &str {
        self.card.as_ref().map(|c| c.card.name.as_str()).unwrap_or("none")
    }
}

/// The device this kernel would use, and its memory summary.
pub fn device_summary(choice: &str) -> Result<String> {
    let device = crate::device::pick(choice)?;
    Ok(format!("{}\n{}", crate::device::describe(&device), crate::memory::MemoryProbe::new(&device).summary()))
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
    let cfgs = names.iter().map(|n| crate::model::Qwen2Config::preset(n)).collect::<Result<Vec<_>>>()?;
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
