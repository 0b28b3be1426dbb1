//! The stage contract. A stage is one module under `experiments/` with a typed config (clap
//! `Args` + serde + `Default`), a `run` that returns named tables and texts, and the views of
//! those tables (columns, caption, chart) declared beside them. The CLI, `report.html` and the
//! notebooks all render a stage through its views; adding a stage is one module and one line in
//! `experiments::registry`.

use crate::error::{LabError, Result};
pub use crate::estimate::scaled::{Scale, Sizes};
pub use crate::session::run_folder::Finding;
use crate::session::Session;
use polars::prelude::DataFrame;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::marker::PhantomData;

mod running;
pub use running::{run, run_in_turn, with_settings, Ended};

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

/// A chart of (a group of) a view's table, declared by its stage and drawn by the report layer
/// (plotly in report.html and the notebooks): what to plot, never how.
#[derive(Clone, Copy, Debug)]
pub struct ChartSpec {
    /// The title; `{column}` stands for that column's value in the first row.
    pub title: &'static str,
    pub kind: ChartKind,
    /// The x axis: a column, or a label made of several (`"{precision} {variant}"`).
    pub x: &'static str,
    pub x_title: &'static str,
    pub y_title: &'static str,
    pub series: &'static [Series],
    /// One copy of every series per value of this column, named "value: series".
    pub split_by: Option<&'static str>,
    /// Only the rows where this column holds one of these values; one ending in `*` takes every
    /// value it begins (`"tensor-parallel*"`: a group of any size).
    pub only: Option<(&'static str, &'static [&'static str])>,
    /// Bars whose x label repeats (four runs of one kernel) are told apart by this column: each
    /// label adds the part of the column's value the rows with that label do not share.
    pub variant: Option<&'static str>,
    /// A mark on every row where a column holds a value (an OOM), above its highest bar or point.
    pub flag: Option<Flag>,
    pub x_axis: Axis,
    pub y_log: bool,
    /// Horizontal reference lines, (name, y): each card's capacity. Each is labelled at its right
    /// end in a grey of its own, and the y axis follows the data, not the lines: a line above
    /// every value is left out.
    pub lines: Option<ReferenceLines>,
}

/// Named horizontal lines of a chart, (name, y), computed when the chart is drawn.
pub type ReferenceLines = fn() -> Vec<(String, f64)>;

impl ChartSpec {
    /// Grouped bars over a label column: start a spec from this.
    pub const BARS: ChartSpec = ChartSpec {
        title: "",
        kind: ChartKind::Bars,
        x: "",
        x_title: "",
        y_title: "",
        series: &[],
        split_by: None,
        only: None,
        variant: None,
        flag: None,
        x_axis: Axis::Linear,
        y_log: false,
        lines: None,
    };
    /// Lines over a column.
    pub const LINES: ChartSpec = ChartSpec { kind: ChartKind::Lines, ..Self::BARS };
    /// Stacked bars over a label column (see `ChartKind::Stacked`).
    pub const STACKED: ChartSpec = ChartSpec { kind: ChartKind::Stacked, ..Self::BARS };
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ChartKind {
    Bars,
    Lines,
    /// Each x's series stacked into one bar. Series given a `stack` name make one bar per name
    /// beside each other at every x ("rank 0 · measured", "rank 0 · ledger"); series of the same
    /// name in several stacks share a colour, the stacks after the first drawn paler.
    Stacked,
}

/// Marks the rows where `column` holds `value` with `text` (`{column}`s filled from the row).
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    pub column: &'static str,
    pub value: &'static str,
    pub text: &'static str,
}

/// How the x axis of a line chart is scaled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Axis {
    Linear,
    /// Log scale ticked at the powers of two among the values (a sweep's doublings).
    LogDoublings,
    /// Log scale ticked at every value.
    LogValues,
}

/// One trace: the sum of columns times their weights (`&[("peak_mib", 1.0), ("base_mib", -1.0)]`).
#[derive(Clone, Copy, Debug)]
pub struct Series {
    pub name: &'static str,
    pub y: &'static [(&'static str, f64)],
    pub style: Style,
    /// The stack it belongs to in a stacked chart ("measured", "ledger"); "" for one stack.
    pub stack: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Style {
    Lines,
    Markers,
    LinesMarkers,
}

impl Series {
    /// One column, as the chart's kind draws it (bars, or lines with markers).
    pub const fn column(name: &'static str, y: &'static [(&'static str, f64)]) -> Self {
        Self { name, y, style: Style::LinesMarkers, stack: "" }
    }

    /// A line drawn as `style` says (lines alone for a formula, markers alone for scattered peaks).
    pub const fn styled(name: &'static str, y: &'static [(&'static str, f64)], style: Style) -> Self {
        Self { name, y, style, stack: "" }
    }

    /// One part of the bar named `stack` in a stacked chart.
    pub const fn stacked(stack: &'static str, name: &'static str, y: &'static [(&'static str, f64)]) -> Self {
        Self { name, y, style: Style::LinesMarkers, stack }
    }
}

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
    pub chart: Option<ChartSpec>,
    pub explain: &'static str,
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
    /// The list flags whose values may repeat (two cards alike, equal shares); every other list
    /// names a row or a column once.
    const REPEATABLE: &'static [&'static str] = &[];

    /// The config for a CPU run of the tiny model; the default is the report's setting.
    fn cpu_config() -> Self::Config {
        Self::Config::default()
    }
    /// The config of a `vram-lab run` on a GPU without `--full`: the report's story with the
    /// long parts shortened (coarser bisection, fewer repeats, a smaller checkpoint on disk).
    fn quick_config() -> Self::Config {
        Self::Config::default()
    }
    /// The config on the report's card scaled to a smaller model (`--card scaled`, the CPU's
    /// default): the report's sizes times `scale` where the card's capacity matters.
    fn scaled_config(_scale: Scale) -> Self::Config {
        Self::cpu_config()
    }
    fn run(session: &mut Session, cfg: &Self::Config) -> Result<StageOutput>;
    fn views() -> Vec<View>;
    /// The model the stage ran, named in its report header: the run's, unless the config names
    /// another (`load --model`); None for a stage that runs no model (`check` reads CSVs).
    fn model(_cfg: &Self::Config, run_model: &str) -> Option<String> {
        Some(run_model.to_string())
    }
}

/// A stage as the registry holds it: configs as JSON, so a manifest can record and replay them.
pub trait AnyStage {
    fn name(&self) -> &'static str;
    fn title(&self) -> &'static str;
    fn intro(&self) -> &'static str;
    fn views(&self) -> Vec<View>;
    /// The clap subcommand carrying the config's flags.
    fn command(&self) -> clap::Command;
    /// The config for these sizes (`default_config`), with the flags given on the command line
    /// put over it: `vram-lab kv` on CPU sweeps the tiny model's sizes unless told otherwise.
    fn config_from(&self, matches: &clap::ArgMatches, sizes: Sizes) -> Result<serde_json::Value>;
    /// `settings` (config fields as JSON, a notebook's `--settings`) checked as the flags they
    /// stand for: each value through its flag's parser, each list for a value named twice.
    fn check_settings(&self, settings: &serde_json::Map<String, serde_json::Value>) -> Result<()>;
    fn default_config(&self, sizes: Sizes) -> Result<serde_json::Value>;
    fn run(&self, session: &mut Session, config: &serde_json::Value) -> Result<StageOutput>;
    /// The model a recorded config ran (`Stage::model`); the run's where the config no longer reads.
    fn model(&self, config: &serde_json::Value, run_model: &str) -> Option<String>;
}

struct Registered<S>(PhantomData<S>);

/// Each list a stage takes names a row or a column once (a value given twice wrote two rows under
/// one name), but for the lists of `S::REPEATABLE` (two cards alike, equal shares).
fn repeated<S: Stage>(field: &str, value: &serde_json::Value) -> Result<()> {
    if let Some(twice) = value
        .as_array()
        .filter(|_| !S::REPEATABLE.contains(&field))
        .and_then(|a| a.iter().enumerate().find(|(i, v)| a[..*i].contains(v)))
    {
        return Err(LabError::input(format!("--{} lists {} twice", field.replace('_', "-"), twice.1)));
    }
    Ok(())
}

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
    fn config_from(&self, matches: &clap::ArgMatches, sizes: Sizes) -> Result<serde_json::Value> {
        let parsed = <S::Config as clap::FromArgMatches>::from_arg_matches(matches)
            .map_err(|e| LabError::input(e.to_string()))?;
        let given = serde_json::to_value(parsed)?;
        let mut config = self.default_config(sizes)?;
        if let (Some(config), Some(given)) = (config.as_object_mut(), given.as_object()) {
            for (field, value) in given {
                // clap names each flag's id after its field.
                let from_user = matches!(
                    matches.value_source(field),
                    Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable)
                );
                if from_user {
                    repeated::<S>(field, value)?;
                    config.insert(field.clone(), value.clone());
                }
            }
        }
        Ok(config)
    }
    fn check_settings(&self, settings: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
        let command = self.command();
        let mut argv = vec![S::NAME.to_string()];
        for (field, value) in settings {
            // A name the config lacks is refused by `with_settings`, naming the ones it has.
            let Some(arg) = command.get_arguments().find(|a| a.get_id().as_str() == field.as_str()) else {
                continue;
            };
            let flag = format!("--{}", arg.get_long().unwrap_or(field.as_str()));
            // A config holds an enum as serde names it (`Separate`), its flag as clap does (`separate`).
            let plain = |s: &str| s.chars().filter(|c| c.is_alphanumeric()).collect::<String>().to_lowercase();
            let scalar = |v: &serde_json::Value| match v {
                serde_json::Value::String(s) => arg
                    .get_possible_values()
                    .into_iter()
                    .find(|p| plain(p.get_name()) == plain(s))
                    .map_or_else(|| s.clone(), |p| p.get_name().to_string()),
                other => other.to_string(),
            };
            match value {
                serde_json::Value::Null => {}
                serde_json::Value::Bool(b) if !arg.get_action().takes_values() => {
                    if *b {
                        argv.push(flag);
                    }
                }
                serde_json::Value::Array(items) => argv.extend(items.iter().map(|v| format!("{flag}={}", scalar(v)))),
                v => argv.push(format!("{flag}={}", scalar(v))),
            }
            repeated::<S>(field, value)?;
        }
        command.try_get_matches_from(&argv).map_err(|e| {
            // clap's message without its help sections, on one line: a newline or another control
            // character in the value given is escaped, never printed raw.
            let text = e.to_string();
            let main: Vec<&str> = text
                .split("\n\n")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.trim_start().starts_with('[') && !l.trim_start().starts_with("tip:"))
                .collect();
            let joined = main.join("\n");
            let line: String = joined
                .trim_start_matches("error: ")
                .chars()
                .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
                .collect();
            LabError::input(format!("--settings: {line}"))
        })?;
        Ok(())
    }
    fn default_config(&self, sizes: Sizes) -> Result<serde_json::Value> {
        Ok(serde_json::to_value(match sizes {
            Sizes::Report => S::Config::default(),
            Sizes::Quick => S::quick_config(),
            Sizes::Cpu => S::cpu_config(),
            Sizes::Scaled(scale) => S::scaled_config(scale),
        })?)
    }
    fn model(&self, config: &serde_json::Value, run_model: &str) -> Option<String> {
        match serde_json::from_value::<S::Config>(config.clone()) {
            Ok(cfg) => S::model(&cfg, run_model),
            Err(_) => Some(run_model.to_string()),
        }
    }
    fn run(&self, session: &mut Session, config: &serde_json::Value) -> Result<StageOutput> {
        let cfg: S::Config = serde_json::from_value(config.clone())
            .map_err(|e| LabError::input(format!("config of stage {}: {e}", S::NAME)))?;
        S::run(session, &cfg)
    }
}
