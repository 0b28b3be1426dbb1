//! A declared chart's data as its spec selects it from a table: the rows kept, the x labels told
//! apart, the series computed, the bars stacked, the flagged rows and the reference lines within
//! the data's range. Both renderers draw this (`chart::draw` with plotly, `svg::draw_svg` with
//! plotters), so the interactive and the static figure cannot disagree. Knows no stage.

use crate::error::Result;
use crate::frame::{floats, groups, strings};
use crate::stage::{Axis, ChartKind, ChartSpec, Series, Style};
use polars::prelude::*;

/// plotly's default colours, for the series in both renderers.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4),
    (0xff, 0x7f, 0x0e),
    (0x2c, 0xa0, 0x2c),
    (0xd6, 0x27, 0x28),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
];

/// Reference lines take greys, never a series' colour: four shades, then the same dashed.
pub const GREYS: [(u8, u8, u8); 4] = [(0x30, 0x30, 0x30), (0x5c, 0x5c, 0x5c), (0x84, 0x84, 0x84), (0xa8, 0xa8, 0xa8)];

/// The flag's colour (an OOM), apart from both palettes.
pub const FLAG_COLOUR: (u8, u8, u8) = (0xc0, 0x00, 0x00);

/// Room above the highest value when reference lines would otherwise stretch the axis.
const HEADROOM: f64 = 1.15;

/// The grey and whether dashed, of reference line `j`.
pub fn line_style(j: usize) -> ((u8, u8, u8), bool) {
    (GREYS[j % GREYS.len()], (j / GREYS.len()) % 2 == 1)
}

pub fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// One trace of a chart, ready for either renderer: numeric x, or labels (with their positions
/// among the chart's categories).
#[derive(Debug, Clone)]
pub struct Trace {
    pub name: String,
    pub labels: Vec<String>,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub style: Style,
    /// Its colour in `PALETTE`: the same for a name met in several stacks.
    pub colour: usize,
    /// A stack after the first (the ledger beside the measurement): drawn paler.
    pub faint: bool,
    /// Whether the legend names it (once per name).
    pub legend: bool,
}

/// A flagged row: where its mark goes and what it says.
#[derive(Debug, Clone)]
pub struct Mark {
    pub label: String,
    pub x: f64,
    pub y: f64,
    pub text: String,
}

/// A chart's data as the spec selects it from a table: what plotly (`draw`) and the static SVG
/// (`report::svg`) both draw.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub title: String,
    /// The x labels in order of first appearance, when x is not numeric (bars always).
    pub categories: Vec<String>,
    pub traces: Vec<Trace>,
    /// The horizontal reference lines (name, y) within the axis' range.
    pub lines: Vec<(String, f64)>,
    /// The y axis' top when reference lines are drawn (the data's, not the lines').
    pub y_top: Option<f64>,
    pub stacked: bool,
    pub flags: Vec<Mark>,
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

    /// The values the y axis must show: each point, or each stack's ends, and the flags.
    pub fn ys(&self) -> Vec<f64> {
        let mut out: Vec<f64> = if self.stacked {
            stack_ends(&self.traces).into_iter().flat_map(|(lo, hi)| [lo, hi]).collect()
        } else {
            self.traces.iter().flat_map(|t| t.y.iter().copied()).collect()
        };
        out.extend(self.flags.iter().map(|f| f.y));
        out.retain(|v| v.is_finite());
        out
    }

    /// Where each reference line's label sits: at its line, pushed up to `gap` above the label
    /// below it, so two cards of nearly one size (RTX 4090 and 3090) stay readable.
    pub fn line_label_ys(&self, gap: f64) -> Vec<f64> {
        let mut order: Vec<usize> = (0..self.lines.len()).collect();
        order.sort_by(|&a, &b| self.lines[a].1.total_cmp(&self.lines[b].1));
        let mut out = vec![0.0; self.lines.len()];
        let mut last = f64::NEG_INFINITY;
        for i in order {
            let y = self.lines[i].1.max(last + gap);
            out[i] = y;
            last = y;
        }
        out
    }
}

/// Per category position, the (lowest, highest) end of its stack: negatives stack down from 0.
pub fn stack_ends(traces: &[Trace]) -> Vec<(f64, f64)> {
    let n = traces.iter().flat_map(|t| t.x.iter()).filter(|v| v.is_finite()).fold(-1.0f64, |m, &v| m.max(v));
    let mut ends = vec![(0.0, 0.0); (n + 1.0).max(0.0) as usize];
    for t in traces {
        for (&x, &y) in t.x.iter().zip(&t.y) {
            if let (true, Some(e)) = (y.is_finite(), ends.get_mut(x as usize)) {
                if y >= 0.0 {
                    e.1 += y;
                } else {
                    e.0 += y;
                }
            }
        }
    }
    ends
}

/// The rows of `df` where `col` holds one of `values`.
fn only_rows(df: &DataFrame, col: &str, values: &[&str]) -> Result<DataFrame> {
    let held = strings(df, col)?;
    let takes = |v: &str| {
        values.iter().any(|w| match w.strip_suffix('*') {
            Some(start) => v.starts_with(start),
            None => v == *w,
        })
    };
    let mask: BooleanChunked = held.iter().map(|v| takes(v)).collect();
    Ok(df.filter(&mask)?)
}

/// Labels told apart: a label several rows share gets the part of `variants` (their values of the
/// variant column) those rows do not share, cut where a comma or space ends the shared part.
fn told_apart(labels: &[String], variants: &[String]) -> Vec<String> {
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let same: Vec<&str> =
                labels.iter().zip(variants).filter(|(m, _)| *m == l).map(|(_, v)| v.as_str()).collect();
            if same.len() < 2 {
                return l.clone();
            }
            let first = same[0];
            let mut shared = same
                .iter()
                .fold(first.len(), |n, v| first.bytes().zip(v.bytes()).take(n).take_while(|(a, b)| a == b).count());
            while shared > 0 && !first.is_char_boundary(shared) {
                shared -= 1;
            }
            let cut = first[..shared].rfind([',', ' ']).map(|c| c + 1).unwrap_or(0);
            let rest = variants[i].get(cut..).unwrap_or("").trim();
            if rest.is_empty() {
                l.clone()
            } else {
                format!("{l} {rest}")
            }
        })
        .collect()
}

/// Selects the spec's rows, splits them, and computes every series.
pub fn prepare(spec: &ChartSpec, df: &DataFrame) -> Result<Prepared> {
    let df = match spec.only {
        Some((col, values)) => only_rows(df, col, values)?,
        None => df.clone(),
    };
    // Split by a column: `groups` labels each part "column=value"; its series are named "value: …".
    let split: &[&str] = match &spec.split_by {
        Some(col) => std::slice::from_ref(col),
        None => &[],
    };
    let bars = spec.kind != ChartKind::Lines;
    let numeric_x =
        !bars && !spec.x.contains('{') && df.column(spec.x).map(|c| c.dtype().is_primitive_numeric()).unwrap_or(false);
    let mut stacks: Vec<&str> = Vec::new();
    if spec.kind == ChartKind::Stacked {
        for s in spec.series {
            if !stacks.contains(&s.stack) {
                stacks.push(s.stack);
            }
        }
    }
    let at =
        |label: &str, stack: &str| if stacks.len() > 1 { format!("{label} · {stack}") } else { label.to_string() };
    // Each part: its prefix, its rows (a bar's label met again keeps its first row: one bar per
    // label and series) and their labels.
    let mut parts: Vec<(String, DataFrame, Vec<String>)> = Vec::new();
    let mut categories: Vec<String> = Vec::new();
    for (label, part) in groups(&df, split)? {
        let prefix = label.split_once('=').map(|(_, v)| format!("{v}: ")).unwrap_or_default();
        if numeric_x {
            parts.push((prefix, part, Vec::new()));
            continue;
        }
        let mut labels = x_labels(spec.x, &part)?;
        if let Some(v) = spec.variant {
            labels = told_apart(&labels, &strings(&part, v)?);
        }
        let first: Vec<bool> = labels.iter().enumerate().map(|(i, l)| !bars || !labels[..i].contains(l)).collect();
        let part = part.filter(&first.iter().copied().collect::<BooleanChunked>())?;
        labels = labels.into_iter().zip(&first).filter(|(_, k)| **k).map(|(l, _)| l).collect();
        for l in &labels {
            for s in if stacks.is_empty() { vec![""] } else { stacks.clone() } {
                let c = at(l, s);
                if !categories.contains(&c) {
                    categories.push(c);
                }
            }
        }
        parts.push((prefix, part, labels));
    }
    let mut traces: Vec<Trace> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut flags = Vec::new();
    for (prefix, part, labels) in &parts {
        for s in spec.series {
            // A split series without a name of its own is named by its group alone.
            let name = if s.name.is_empty() {
                prefix.trim_end_matches(": ").to_string()
            } else {
                format!("{prefix}{}", s.name)
            };
            // A name's colour is its place among the spec's names, drawn or not: "weights" keeps
            // its colour in a chart where it has no value.
            if !names.contains(&name) {
                names.push(name.clone());
            }
            let colour = names.iter().position(|n| *n == name).unwrap_or(0);
            let y = series(s, part)?;
            if !y.iter().any(|v| v.is_finite()) {
                continue;
            }
            let shown: Vec<String> = labels.iter().map(|l| at(l, s.stack)).collect();
            let x = if numeric_x {
                floats(part, spec.x)?
            } else {
                shown.iter().map(|l| categories.iter().position(|c| c == l).unwrap_or(0) as f64).collect()
            };
            let legend = !traces.iter().any(|t| t.name == name);
            let faint = stacks.iter().position(|st| *st == s.stack).unwrap_or(0) > 0;
            traces.push(Trace { name, labels: shown, x, y, style: s.style, colour, faint, legend });
        }
        if let Some(f) = spec.flag {
            let held = strings(part, f.column)?;
            let xs = if numeric_x { floats(part, spec.x)? } else { Vec::new() };
            let tops = row_tops(spec, part, &stacks)?;
            for row in (0..part.height()).filter(|&r| held[r] == f.value) {
                let label = labels.get(row).map(|l| at(l, stacks.first().copied().unwrap_or(""))).unwrap_or_default();
                let x =
                    if numeric_x { xs[row] } else { categories.iter().position(|c| *c == label).unwrap_or(0) as f64 };
                flags.push(Mark { label, x, y: tops[row], text: fill_row(f.text, part, row)? });
            }
        }
    }
    let mut p = Prepared {
        title: fill(spec.title, &df)?,
        categories,
        traces,
        lines: Vec::new(),
        y_top: None,
        stacked: spec.kind == ChartKind::Stacked,
        flags,
    };
    let lines = spec.lines.map(|f| f()).unwrap_or_default();
    let data_hi = p.ys().into_iter().fold(f64::NEG_INFINITY, f64::max);
    if !lines.is_empty() && data_hi.is_finite() && data_hi > 0.0 && !spec.y_log {
        // The axis follows what was measured or predicted; a card far above it would flatten it.
        let top = data_hi * HEADROOM;
        p.lines = lines.into_iter().filter(|(_, y)| *y <= top).collect();
        p.y_top = Some(top);
    } else {
        p.lines = lines;
    }
    Ok(p)
}

/// Each row's highest drawn value (the top of its tallest stack), 0 where none: a flag sits there.
fn row_tops(spec: &ChartSpec, part: &DataFrame, stacks: &[&str]) -> Result<Vec<f64>> {
    let mut tops = vec![0.0f64; part.height()];
    let groups: Vec<&str> = if stacks.is_empty() { vec![""] } else { stacks.to_vec() };
    for g in groups {
        let mut sum = vec![0.0f64; part.height()];
        for s in spec.series.iter().filter(|s| stacks.is_empty() || s.stack == g) {
            for (r, v) in series(s, part)?.into_iter().enumerate() {
                if !v.is_finite() {
                    continue;
                }
                if stacks.is_empty() {
                    tops[r] = tops[r].max(v);
                } else if v > 0.0 {
                    sum[r] += v;
                }
            }
        }
        for (t, s) in tops.iter_mut().zip(sum) {
            *t = t.max(s);
        }
    }
    Ok(tops)
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
