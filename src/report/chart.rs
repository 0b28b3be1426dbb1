//! Draws a stage's declared chart (`stage::ChartSpec`) from its table, live or replayed, with
//! plotly: report.html and the notebooks draw the same figure. Knows no stage.

use crate::error::Result;
use crate::frame::{floats, groups, strings};
use crate::stage::{Axis, ChartKind, ChartSpec, Series, Style};
use plotly::common::{Mode, Title};
use plotly::layout::{Axis as PAxis, AxisType, BarMode, Layout};
use plotly::{Bar, Plot, Scatter};
use polars::prelude::*;

/// One trace of a chart, ready for either renderer: numeric x, or labels (with their positions
/// among the chart's categories).
#[derive(Debug, Clone)]
pub struct Trace {
    pub name: String,
    pub labels: Vec<String>,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub style: Style,
}

/// A chart's data as the spec selects it from a table: what plotly (`draw`) and the static SVG
/// (`report::svg`) both draw.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub title: String,
    /// The x labels in order of first appearance, when x is not numeric (bars always).
    pub categories: Vec<String>,
    pub traces: Vec<Trace>,
    /// Horizontal reference lines (name, y).
    pub lines: Vec<(String, f64)>,
}

impl Prepared {
    pub fn numeric_x(&self) -> bool {
        self.categories.is_empty()
    }

    /// Every numeric x drawn (none over categories): the log ticks and the reference lines'
    /// extent come from these.
    pub fn xs(&self) -> Vec<f64> {
        if !self.numeric_x() {
            return Vec::new();
        }
        self.traces.iter().flat_map(|t| t.x.iter().copied()).filter(|v| v.is_finite()).collect()
    }

    /// The x ticks of a log axis.
    pub fn log_ticks(&self, axis: Axis) -> Vec<f64> {
        let keep = |n: f64| match axis {
            Axis::LogDoublings => n > 0.0 && (n as u64).is_power_of_two(),
            _ => n > 0.0,
        };
        let mut t: Vec<f64> = self.xs().into_iter().filter(|&v| keep(v)).collect();
        t.sort_by(f64::total_cmp);
        t.dedup();
        t
    }
}

/// Selects the spec's rows, splits them, and computes every series.
pub fn prepare(spec: &ChartSpec, df: &DataFrame) -> Result<Prepared> {
    let df = match spec.only {
        Some((col, value)) => df.filter(&df.column(col)?.cast(&DataType::String)?.str()?.equal(value))?,
        None => df.clone(),
    };
    // Split by a column: `groups` labels each part "column=value"; its series are named "value: …".
    let split: &[&str] = match &spec.split_by {
        Some(col) => std::slice::from_ref(col),
        None => &[],
    };
    let parts: Vec<(String, DataFrame)> = groups(&df, split)?
        .into_iter()
        .map(|(label, part)| (label.split_once('=').map(|(_, v)| format!("{v}: ")).unwrap_or_default(), part))
        .collect();
    let numeric_x = spec.kind == ChartKind::Lines && !spec.x.contains('{') && df.column(spec.x).map(|c| c.dtype().is_primitive_numeric()).unwrap_or(false);
    let mut categories: Vec<String> = Vec::new();
    if !numeric_x {
        for (_, part) in &parts {
            for l in x_labels(spec.x, part)? {
                if !categories.contains(&l) {
                    categories.push(l);
                }
            }
        }
    }
    let mut traces = Vec::new();
    for (prefix, part) in &parts {
        let labels = if numeric_x { Vec::new() } else { x_labels(spec.x, part)? };
        let x = if numeric_x { floats(part, spec.x)? } else { labels.iter().map(|l| categories.iter().position(|c| c == l).unwrap_or(0) as f64).collect() };
        for s in spec.series {
            let y = series(s, part)?;
            if !y.iter().any(|v| v.is_finite()) {
                continue;
            }
            // A split series without a name of its own is named by its group alone.
            let name = if s.name.is_empty() { prefix.trim_end_matches(": ").to_string() } else { format!("{prefix}{}", s.name) };
            traces.push(Trace { name, labels: labels.clone(), x: x.clone(), y, style: s.style });
        }
    }
    let lines = spec.lines.map(|f| f()).unwrap_or_default();
    Ok(Prepared { title: fill(spec.title, &df)?, categories, traces, lines })
}

/// The chart `spec` declares, over `df` (one group of a view's table), as a plotly figure.
pub fn draw(spec: &ChartSpec, df: &DataFrame) -> Result<Plot> {
    let p = prepare(spec, df)?;
    let mut plot = Plot::new();
    for t in &p.traces {
        match spec.kind {
            ChartKind::Bars => plot.add_trace(Bar::new(t.labels.clone(), t.y.clone()).name(&t.name)),
            ChartKind::Lines if p.numeric_x() => plot.add_trace(Scatter::new(t.x.clone(), t.y.clone()).mode(mode(t.style)).name(&t.name)),
            ChartKind::Lines => plot.add_trace(Scatter::new(t.labels.clone(), t.y.clone()).mode(mode(t.style)).name(&t.name)),
        }
    }
    if !p.lines.is_empty() {
        let xs = p.xs();
        let (lo, hi) = (xs.iter().copied().fold(f64::INFINITY, f64::min), xs.iter().copied().fold(0.0, f64::max));
        for (name, y) in &p.lines {
            plot.add_trace(Scatter::new(vec![lo, hi], vec![*y, *y]).mode(Mode::Lines).name(name));
        }
    }
    let mut layout = Layout::new()
        .title(Title::with_text(&p.title))
        .x_axis(PAxis::new().title(Title::with_text(spec.x_title)))
        .y_axis(PAxis::new().title(Title::with_text(spec.y_title)))
        .height(420);
    if spec.kind == ChartKind::Bars {
        layout = layout.bar_mode(BarMode::Group);
    }
    if spec.x_axis != Axis::Linear {
        layout = layout.x_axis(PAxis::new().type_(AxisType::Log).tick_values(p.log_ticks(spec.x_axis)).title(Title::with_text(spec.x_title)));
    }
    if spec.y_log {
        layout = layout.y_axis(PAxis::new().type_(AxisType::Log).title(Title::with_text(spec.y_title)));
    }
    plot.set_layout(layout);
    Ok(plot)
}

fn mode(style: Style) -> Mode {
    match style {
        Style::Lines => Mode::Lines,
        Style::Markers => Mode::Markers,
        Style::LinesMarkers => Mode::LinesMarkers,
    }
}

/// A series' values: its columns times their weights, summed row by row.
fn series(s: &Series, df: &DataFrame) -> Result<Vec<f64>> {
    let mut out = vec![0.0; df.height()];
    for (col, w) in s.y {
        for (o, v) in out.iter_mut().zip(floats(df, col)?) {
            *o += w * v;
        }
    }
    Ok(out)
}

/// The x labels: a column's values, or a template's `{column}`s filled row by row.
fn x_labels(x: &str, df: &DataFrame) -> Result<Vec<String>> {
    if !x.contains('{') {
        return strings(df, x);
    }
    (0..df.height()).map(|row| fill_row(x, df, row)).collect()
}

/// `template` with each `{column}` replaced by that column's value in the first row.
fn fill(template: &str, df: &DataFrame) -> Result<String> {
    if df.height() == 0 || !template.contains('{') {
        return Ok(template.to_string());
    }
    fill_row(template, df, 0)
}

fn fill_row(template: &str, df: &DataFrame, row: usize) -> Result<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').map(|c| open + c).unwrap_or(rest.len() - 1);
        out.push_str(&rest[..open]);
        let col = &rest[open + 1..close];
        out.push_str(strings(df, col)?.get(row).map(|s| s.as_str()).unwrap_or(""));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Series;

    const SPEC: ChartSpec = ChartSpec {
        title: "weights of {model}",
        x: "precision",
        y_title: "GiB",
        series: &[
            Series::column("predicted weights", &[("predicted_weights_gib", 1.0)]),
            Series::column("allocated, report", &[("report_allocated_gib", 1.0)]),
            Series::column("peak above allocated", &[("after_peak_gib", 1.0), ("loaded_allocated_gib", -1.0)]),
            Series::column("never measured", &[("missing_gib", 1.0)]),
        ],
        ..ChartSpec::BARS
    };

    #[test]
    fn charts_carry_the_table_values() {
        let df = df!(
            "model" => ["qwen2.5-7b", "qwen2.5-7b"],
            "precision" => ["bf16", "f32"],
            "predicted_weights_gib" => [14.185, 28.37],
            "loaded_allocated_gib" => [Some(14.0), None],
            "after_peak_gib" => [Some(14.5), None],
            "report_allocated_gib" => [Some(14.19), None],
            "missing_gib" => [None::<f64>, None],
        )
        .unwrap();
        let json = draw(&SPEC, &df).unwrap().to_json();
        assert!(json.contains("14.185") && json.contains("28.37") && json.contains("allocated, report"), "{json}");
        assert!(json.contains("\"barmode\":\"group\""));
        assert!(json.contains("weights of qwen2.5-7b"), "the title's placeholder is filled");
        assert!(json.contains("peak above allocated") && json.contains("0.5"), "a series sums its weighted columns");
        assert!(!json.contains("never measured"), "an all-empty series is left out");
    }

    #[test]
    fn lines_split_by_a_column_and_filtered() {
        const LINES: ChartSpec = ChartSpec {
            x: "tokens",
            series: &[Series::column("allocated", &[("mib", 1.0)])],
            split_by: Some("cache"),
            only: Some(("outcome", "ok")),
            x_axis: Axis::LogDoublings,
            ..ChartSpec::LINES
        };
        let df = df!(
            "tokens" => [1024i64, 1536, 2048, 4096],
            "cache" => ["pre", "pre", "concat", "concat"],
            "outcome" => ["ok", "ok", "ok", "oom"],
            "mib" => [1.0, 1.5, 2.0, 4.0],
        )
        .unwrap();
        let json = draw(&LINES, &df).unwrap().to_json();
        assert!(json.contains("pre: allocated") && json.contains("concat: allocated"), "{json}");
        assert!(!json.contains("4096"), "the OOM row is filtered out: {json}");
        assert!(json.contains("\"tickvals\":[1024.0,2048.0]"), "ticks at the doublings only: {json}");
    }
}
