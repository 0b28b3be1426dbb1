//! A stage is its own code and one registry line: this test defines a stage outside the crate
//! (docs/ARCHITECTURE.md shows the same example), runs it through the contract in a CPU session,
//! and gets its CSV, its console view, its finding and its declared chart in report.html — the
//! session, the report and the manifest know nothing of it.

use polars::prelude::*;
use serde::{Deserialize, Serialize};
use vram_lab::error::Result;
use vram_lab::estimate::kv_bytes_per_token;
use vram_lab::model::DecoderConfig;
use vram_lab::report::html;
use vram_lab::session::{Session, SessionArgs};
use vram_lab::stage::{self, register, ChartSpec, Finding, Series, Stage, StageOutput, View};

/// KV bytes per token of every Qwen2.5 preset: a stage that measures nothing.
struct KvPerToken;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
struct KvPerTokenConfig {
    /// Bytes per cached element (2: BF16).
    #[arg(long, default_value_t = 2)]
    dtype_bytes: usize,
}

/// The stage's defaults are the config's `Default` (the flags' defaults apply only on a command line).
impl Default for KvPerTokenConfig {
    fn default() -> Self {
        Self { dtype_bytes: 2 }
    }
}

const CHART: ChartSpec = ChartSpec {
    title: "KV bytes per token",
    x: "preset",
    y_title: "KiB",
    series: &[Series::column("KV per token", &[("kv_kib", 1.0)])],
    ..ChartSpec::BARS
};

impl Stage for KvPerToken {
    const NAME: &'static str = "kvpt";
    const TITLE: &'static str = "KV per token";
    const ABOUT: &'static str = "KV bytes per token of each preset";
    const INTRO: &'static str = "2 × layers × KV heads × head dim × bytes.";
    type Config = KvPerTokenConfig;

    fn run(_s: &mut Session, cfg: &KvPerTokenConfig) -> Result<StageOutput> {
        let presets = ["qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b"];
        let kib: Vec<f64> = presets
            .iter()
            .map(|p| Ok(kv_bytes_per_token(&DecoderConfig::preset(p)?, cfg.dtype_bytes) as f64 / 1024.0))
            .collect::<Result<_>>()?;
        let mut out = StageOutput::default();
        out.findings.push(Finding::new("7B KV per token", "KiB", Some(kib[1])).predicted(56.0));
        out.table("kvpt_presets", df!("preset" => presets, "kv_kib" => kib)?);
        Ok(out)
    }

    fn views() -> Vec<View> {
        vec![View {
            name: "presets",
            table: "kvpt_presets",
            caption: "KV per token by preset",
            columns: &["preset", "kv_kib"],
            group_by: &[],
            chart: Some(CHART),
            explain: "",
        }]
    }
}

#[test]
fn a_stage_outside_the_crate_runs_and_is_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let args = SessionArgs {
        device: "cpu".into(),
        out: Some(dir.path().join("run")),
        quiet: true,
        silent: true,
        ..Default::default()
    };
    let registry = vec![register::<KvPerToken>()];
    let mut session = Session::open(&args, "kvpt", false).unwrap();
    let config = registry[0].default_config(session.sizes).unwrap();
    stage::run(&mut session, registry[0].as_ref(), config).unwrap();
    let run = session.finish(|run| html::write(run, &registry)).unwrap();

    let csv = std::fs::read_to_string(dir.path().join("run/kvpt/kvpt_presets.csv")).unwrap();
    assert!(csv.contains("qwen2.5-7b,56.0"), "7B BF16 keeps 56 KiB per token: {csv}");
    assert_eq!(run.manifest.stages[0].findings[0].measured, Some(56.0));
    let page = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(page.contains("KV per token by preset"), "the view's caption");
    assert!(page.contains("data-charts=\"1\""), "one chart declared, one drawn");
    assert!(page.contains("KV bytes per token") && page.contains("qwen2.5-72b"), "the chart's title and its x labels");
}

/// A notebook's settings (`--settings`, `estimate_with`) pass the checks of the flags they stand
/// for: every stage's own defaults, each field as a setting, pass; a value out of its flag's range
/// or a list naming a value twice is refused, the flag named.
#[test]
fn settings_pass_the_checks_of_their_flags() {
    use vram_lab::estimate::scaled::Sizes;
    for s in vram_lab::experiments::registry() {
        for sizes in [Sizes::Report, Sizes::Quick, Sizes::Cpu] {
            let config = s.default_config(sizes).unwrap();
            if let Err(e) = s.check_settings(config.as_object().unwrap()) {
                panic!("{} ({sizes:?}): its own defaults as settings are refused: {e}", s.name());
            }
        }
    }
    let refused = |stage: &str, settings: serde_json::Value, needle: &str| {
        let s = vram_lab::experiments::find(stage).unwrap();
        let e = s.check_settings(settings.as_object().unwrap()).unwrap_err().to_string();
        assert!(e.contains(needle), "{stage} {settings}: {e}");
    };
    refused("kv", serde_json::json!({"max": 1u64 << 40}), "--max");
    refused("frag", serde_json::json!({"blocks": 1_000_000_000}), "--blocks");
    refused("train", serde_json::json!({"steps": 1_000_000_000}), "--steps");
    refused("estimate", serde_json::json!({"gpus": 0}), "--gpus");
    refused("estimate", serde_json::json!({"precisions": ["bf16", "bf16"]}), "--precisions lists");
    // A value clap refuses is echoed without a raw control character.
    let estimate = vram_lab::experiments::find("estimate").unwrap();
    let bad = serde_json::json!({"precisions": ["\u{1b}[31mbf16\n"]});
    let e = estimate.check_settings(bad.as_object().unwrap()).unwrap_err().to_string();
    assert!(e.contains("--precisions") && !e.chars().any(char::is_control), "{e:?}");
    let e = stage::with_settings(
        vram_lab::experiments::find("kv").unwrap().as_ref(),
        serde_json::json!({"max": 1024}),
        "{\"\u{1b}[31m\": 1}",
    )
    .unwrap_err()
    .to_string();
    assert!(!e.contains('\u{1b}'), "a setting's name is echoed escaped: {e:?}");
}
