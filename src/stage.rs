//! The stage contract. A stage is one module under `experiments/` with a typed config (clap
//! `Args` + serde + `Default`), a `run` that returns named tables and texts, and the views of
//! those tables (columns, caption, chart) declared beside them. The CLI, `report.html` and the
//! notebooks all render a stage through its views; adding a stage is one module and one line in
//! `experiments::registry`.

use crate::error::{LabError, Result};
use crate::session::Session;
use polars::prelude::DataFrame;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::marker::PhantomData;

/// How a step, a scenario or a sweep ended. Tables hold `as_str()`: "ok", "oom" or "error: …".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    #[default]
    Ok,
    Oom,
    Error(String),
}

impl Outcome {
    pub const OK: &'static str = "ok";
    pub const OOM: &'static str = "oom";

    pub fn from_error(e: &LabError) -> Self {
        match e {
            LabError::Oom(_) => Self::Oom,
            other => Self::Error(other.to_string()),
        }
    }

    pub fn is_ok(&self) -> bool {
        *self == Self::Ok
    }

    pub fn as_str(&self) -> String {
        match self {
            Self::Ok => Self::OK.into(),
            Self::Oom => Self::OOM.into(),
            Self::Error(e) => format!("error: {e}"),
        }
    }
}

/// Builds a chart from (a group of) a stage's table.
pub type ChartFn = fn(&DataFrame) -> Result<plotly::Plot>;

/// How one table is shown: the columns in order, a caption, an optional chart, and a short
/// explanation (Chinese with English). With `group_by`, one table (and chart) per distinct value
/// of those columns, in order of first appearance.
#[derive(Clone)]
pub struct View {
    /// How notebooks ask for it: "memory", "prefill", …
    pub name: &'static str,
    pub table: &'static str,
    pub caption: &'static str,
    pub columns: &'static [&'static str],
    pub group_by: &'static [&'static str],
    pub chart: Option<ChartFn>,
    pub explain: &'static str,
}

/// A headline figure: the measurement beside its prediction, the report's RTX 4090 figure and,
/// for a throughput, its physical ceiling. The run's summary table is made of these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub what: String,
    pub unit: String,
    pub measured: Option<f64>,
    pub predicted: Option<f64>,
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

/// What a stage returns: named tables (written as `<stage>/<name>.csv`), named texts (written as
/// `<stage>/<name>`), and its headline findings.
#[derive(Default)]
pub struct StageOutput {
    pub tables: Vec<(String, DataFrame)>,
    pub texts: Vec<(String, String)>,
    pub findings: Vec<Finding>,
}

impl StageOutput {
    pub fn table(&mut self, name: &str, df: DataFrame) {
        self.tables.push((name.to_string(), df));
    }
    pub fn text(&mut self, name: &str, text: String) {
        self.texts.push((name.to_string(), text));
    }
}

pub trait Stage {
    /// The subcommand and the folder name: `anatomy`, `kv`.
    const NAME: &'static str;
    /// "Stage 1 — anatomy / 显存解剖".
    const TITLE: &'static str;
    /// One line for `--help`.
    const ABOUT: &'static str;
    /// What the stage does and what the report printed, for report.html (Chinese with English).
    const INTRO: &'static str;
    type Config: clap::Args + Serialize + DeserializeOwned + Default + Clone;

    /// The config for a CPU run of the tiny model; the default is the report's setting.
    fn cpu_config() -> Self::Config {
        Self::Config::default()
    }
    fn run(session: &mut Session, cfg: &Self::Config) -> Result<StageOutput>;
    fn views() -> Vec<View>;
}

/// A stage as the registry holds it: configs as JSON, so a manifest can record and replay them.
pub trait AnyStage {
    fn name(&self) -> &'static str;
    fn title(&self) -> &'static str;
    fn intro(&self) -> &'static str;
    fn views(&self) -> Vec<View>;
    /// The clap subcommand carrying the config's flags.
    fn command(&self) -> clap::Command;
    /// The config for this device (`default_config`), with the flags given on the command line
    /// put over it: `vram-lab kv` on CPU sweeps the tiny model's sizes unless told otherwise.
    fn config_from(&self, matches: &clap::ArgMatches, gpu: bool) -> Result<serde_json::Value>;
    fn default_config(&self, gpu: bool) -> Result<serde_json::Value>;
    fn run(&self, session: &mut Session, config: &serde_json::Value) -> Result<StageOutput>;
}

struct Registered<S>(PhantomData<S>);

/// The registry's entry for a stage.
pub fn register<S: Stage + 'static>() -> Box<dyn AnyStage> {
    Box::new(Registered::<S>(PhantomData))
}

impl<S: Stage> AnyStage for Registered<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }
    fn title(&self) -> &'static str {
        S::TITLE
    }
    fn intro(&self) -> &'static str {
        S::INTRO
    }
    fn views(&self) -> Vec<View> {
        S::views()
    }
    fn command(&self) -> clap::Command {
        <S::Config as clap::Args>::augment_args(clap::Command::new(S::NAME).about(S::ABOUT))
    }
    fn config_from(&self, matches: &clap::ArgMatches, gpu: bool) -> Result<serde_json::Value> {
        let parsed = <S::Config as clap::FromArgMatches>::from_arg_matches(matches).map_err(|e| LabError::input(e.to_string()))?;
        let given = serde_json::to_value(parsed)?;
        let mut config = self.default_config(gpu)?;
        if let (Some(config), Some(given)) = (config.as_object_mut(), given.as_object()) {
            for (field, value) in given {
                // clap names each flag's id after its field.
                let from_user = matches!(matches.value_source(field), Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable));
                if from_user {
                    config.insert(field.clone(), value.clone());
                }
            }
        }
        Ok(config)
    }
    fn default_config(&self, gpu: bool) -> Result<serde_json::Value> {
        Ok(serde_json::to_value(if gpu { S::Config::default() } else { S::cpu_config() })?)
    }
    fn run(&self, session: &mut Session, config: &serde_json::Value) -> Result<StageOutput> {
        let cfg: S::Config = serde_json::from_value(config.clone())
            .map_err(|e| LabError::input(format!("config of stage {}: {e}", S::NAME)))?;
        S::run(session, &cfg)
    }
}
