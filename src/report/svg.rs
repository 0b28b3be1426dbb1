//! The static picture of a declared chart: the same prepared data as the plotly figure
//! (`chart::prepare`), drawn as SVG with plotters, so a notebook on GitHub (which runs no
//! JavaScript) and nbconvert show the figure. Text stays `<text>`: the viewer's fonts draw it,
//! Chinese included.

use super::prepare::{line_style, prepare, Prepared, FLAG_COLOUR, PALETTE};
use crate::error::{LabError, Result};
use crate::stage::{Axis, ChartKind, ChartSpec, Style};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use polars::prelude::DataFrame;

const WIDTH: u32 = 860;
/// The plot area's height, and the head above it (the title, then the legend's rows).
const PLOT_HEIGHT: u32 = 330;
const TITLE_HEIGHT: u32 = 40;
const LEGEND_ROW: u32 = 22;
/// A character of a 14 px sans-serif label, about: what decides when labels would collide.
const CHAR_PX: f64 = 7.4;

fn rgb((r, g, b): (u8, u8, u8)) -> RGBColor {
    RGBColor(r, g, b)
}

/// The chart `spec` declares, over `df`, as an SVG document.
pub fn draw_svg(spec: &ChartSpec, df: &DataFrame) -> Result<String> {
    let mut p = prepare(spec, df)?;
    // A log x axis is drawn as log2(x) on a linear one: ticks fall on whole doublings, labelled
    // with the values they stand for (plotters' own log ticks are decades).
    let log_x = spec.x_axis != Axis::Linear && p.numeric_x();
    let ticks: Vec<f64> = if log_x { p.log_ticks(spec.x_axis).iter().map(|v| v.log2()).collect() } else { Vec::new() };
    if log_x {
        for t in &mut p.traces {
            t.x = t.x.iter().map(|&v| if v > 0.0 { v.log2() } else { f64::NAN }).collect();
        }
    }
    let legend = legend_rows(&p);
    let head = TITLE_HEIGHT + LEGEND_ROW * legend.len() as u32;
    let labels = label_area(&p);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, head + PLOT_HEIGHT + labels.0)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        // The title and the legend above the plot, so no legend covers a bar.
        let (top, body) = root.split_vertically(head);
        let title = TextStyle::from(("sans-serif", 22).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        top.draw(&Text::new(p.title.clone(), (WIDTH as i32 / 2, 8), title)).map_err(err)?;
        draw_legend(&top, &legend)?;
        let (x_lo, x_hi) = x_range(&p, log_x);
        let (y_lo, y_hi) = y_range(&p, spec.y_log);
        if spec.y_log {
            plot(&body, &p, spec, &ticks, labels, x_lo..x_hi, (y_lo..y_hi).log_scale())?
        } else {
            plot(&body, &p, spec, &ticks, labels, x_lo..x_hi, y_lo..y_hi)?
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}

/// A legend's entry: the name, its colour, drawn paler.
type Entry = (String, (u8, u8, u8), bool);

/// The legend's entries, laid out in rows that fit the width.
fn legend_rows(p: &Prepared) -> Vec<Vec<Entry>> {
    let mut rows: Vec<Vec<Entry>> = Vec::new();
    let mut used = f64::INFINITY;
    for t in p.traces.iter().filter(|t| t.legend) {
        let w = entry_width(&t.name) as f64;
        if used + w > WIDTH as f64 - 80.0 {
            rows.push(Vec::new());
            used = 0.0;
        }
        used += w;
        if let Some(row) = rows.last_mut() {
            row.push((t.name.clone(), PALETTE[t.colour % PALETTE.len()], t.faint));
        }
    }
    rows
}

fn draw_legend(area: &DrawingArea<SVGBackend, plotters::coord::Shift>, rows: &[Vec<Entry>]) -> Result<()> {
    let font = TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (r, row) in rows.iter().enumerate() {
        let y = (TITLE_HEIGHT + LEGEND_ROW * r as u32 + LEGEND_ROW / 2) as i32;
        let mut x = 76;
        for (name, colour, faint) in row {
            let c = rgb(*colour).mix(if *faint { 0.45 } else { 1.0 });
            area.draw(&Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled())).map_err(err)?;
            area.draw(&Text::new(name.clone(), (x + 18, y), font.clone())).map_err(err)?;
            x += entry_width(name);
        }
    }
    Ok(())
}

/// A legend entry's width: the swatch, its gap, the name.
fn entry_width(name: &str) -> i32 {
    30 + (name.chars().count() as f64 * CHAR_PX) as i32
}

/// The height below the plot for the x labels, and whether category labels are turned a quarter:
/// when there are many, or when the widest would run into its neighbour.
fn label_area(p: &Prepared) -> (u32, bool) {
    let widest = p.categories.iter().map(|c| c.chars().count()).max().unwrap_or(0) as f64 * CHAR_PX;
    let each = (WIDTH as f64 - 100.0) / p.categories.len().max(1) as f64;
    if p.categories.len() > 6 || widest > each - 8.0 {
        ((widest + 70.0).clamp(90.0, 260.0) as u32, true)
    } else {
        (56, false)
    }
}

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("drawing the SVG chart: {e:?}"))
}

fn x_range(p: &Prepared, log_x: bool) -> (f64, f64) {
    if !p.numeric_x() {
        return (-0.5, p.categories.len().max(1) as f64 - 0.5);
    }
    let (lo, hi) = p.xs().into_iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    match (lo.is_finite(), log_x) {
        (false, _) => (0.0, 1.0),
        (true, true) => (lo - 0.25, hi + 0.25),
        (true, false) if hi > lo => (lo, hi),
        (true, false) => (lo - 1.0, hi + 1.0),
    }
}

fn y_range(p: &Prepared, log: bool) -> (f64, f64) {
    let ys = p.ys().into_iter().chain(p.lines.iter().map(|(_, y)| *y)).filter(|v| !log || *v > 0.0);
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    if !lo.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    // A little room above the data for a flag's words (the legend is above the plot).
    if log {
        (lo / 2.0, hi * 3.0)
    } else {
        let lo = lo.min(0.0);
        let hi = p.y_top.unwrap_or(hi).max(hi);
        (lo, if hi > lo { hi + (hi - lo) * 0.12 } else { lo + 1.0 })
    }
}

/// Draws the traces on axes `x` and `y` (linear or log): grouped bars over the categories, or
/// lines and markers, and the reference lines; `(labels, turned)` is `label_area`'s.
fn plot<X, Y>(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    p: &Prepared,
    spec: &ChartSpec,
    log2_ticks: &[f64],
    (labels, turned): (u32, bool),
    x: X,
    y: Y,
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .margin_right(if p.lines.is_empty() { 12 } else { 110 })
        .x_label_area_size(labels)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let categories = p.categories.clone();
    let ticks = log2_ticks.to_vec();
    let label = move |v: &f64| -> String {
        if !categories.is_empty() {
            let i = v.round();
            return if (v - i).abs() < 1e-6 && i >= 0.0 {
                categories.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            };
        }
        if !ticks.is_empty() {
            // Only the ticks' doublings, labelled with the value.
            return if ticks.iter().any(|t| (t - v).abs() < 0.02) { short(v.exp2().round()) } else { String::new() };
        }
        short(*v)
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(spec.x_title)
        .y_desc(spec.y_title)
        .x_label_formatter(&label)
        .y_label_formatter(&|v| short(*v))
        .label_style(("sans-serif", 15));
    if !log2_ticks.is_empty() {
        // One key point per whole doubling across the range.
        let span = log2_ticks.last().unwrap_or(&0.0) - log2_ticks.first().unwrap_or(&0.0);
        mesh.x_labels(span.round() as usize + 3);
    }
    if !p.categories.is_empty() {
        mesh.x_labels(p.categories.len() + 1).disable_x_mesh();
    }
    // Labels that would collide are drawn below, turned a quarter.
    if turned {
        mesh.x_label_formatter(&|_| String::new());
    }
    mesh.draw().map_err(err)?;
    if turned {
        let style = TextStyle::from(("sans-serif", 14).into_font().transform(FontTransform::Rotate90))
            .pos(Pos::new(HPos::Left, VPos::Center));
        let foot = chart.y_range().start;
        for (i, c) in p.categories.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(i as f64, foot));
            root.draw(&Text::new(c.clone(), (px, py + 8), style.clone())).map_err(err)?;
        }
    }
    let n = p.traces.len().max(1) as f64;
    // Bars rise from 0, or from the axis' foot on a log scale.
    let base = if spec.y_log { chart.y_range().start } else { chart.y_range().start.max(0.0) };
    // A stacked chart's running ends per category: (below 0, above 0).
    let mut ends: Vec<(f64, f64)> = vec![(0.0, 0.0); p.categories.len()];
    for (k, t) in p.traces.iter().enumerate() {
        let full = rgb(PALETTE[t.colour % PALETTE.len()]);
        let colour = if t.faint { full.mix(0.45) } else { full.mix(1.0) };
        let points: Vec<(f64, f64)> =
            t.x.iter().copied().zip(t.y.iter().copied()).filter(|(a, b)| a.is_finite() && b.is_finite()).collect();
        match spec.kind {
            ChartKind::Stacked => {
                let mut boxes = Vec::new();
                for &(x, y) in &points {
                    let Some(e) = ends.get_mut(x as usize) else { continue };
                    let (from, to) = if y >= 0.0 { (e.1, e.1 + y) } else { (e.0, e.0 + y) };
                    if y >= 0.0 {
                        e.1 = to
                    } else {
                        e.0 = to
                    }
                    boxes.push(Rectangle::new([(x - 0.35, from), (x + 0.35, to)], colour.filled()));
                }
                chart.draw_series(boxes).map_err(err)?
            }
            ChartKind::Bars => {
                // Grouped: the categories' width split among the traces.
                let w = 0.8 / n;
                let left = -0.4 + k as f64 * w;
                chart
                    .draw_series(
                        points
                            .iter()
                            .map(|&(x, y)| Rectangle::new([(x + left, base), (x + left + w, y)], colour.filled())),
                    )
                    .map_err(err)?
            }
            ChartKind::Lines => {
                if t.style != Style::Markers {
                    chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(2))).map_err(err)?;
                }
                let shown = if t.style == Style::Lines { Vec::new() } else { points };
                chart.draw_series(shown.into_iter().map(|pt| Circle::new(pt, 3, colour.filled()))).map_err(err)?
            }
        };
    }
    // Reference lines in greys, each named at its right end (not in the legend).
    let (lo, hi) = (chart.x_range().start, chart.x_range().end);
    let (y_lo, y_hi) = (chart.y_range().start, chart.y_range().end);
    let label_ys = p.line_label_ys((y_hi - y_lo) * 0.035);
    for (j, (name, yv)) in p.lines.iter().enumerate() {
        let (grey, dashed) = line_style(j);
        let style = rgb(grey).stroke_width(2);
        if dashed {
            chart.draw_series(DashedLineSeries::new(vec![(lo, *yv), (hi, *yv)], 8, 5, style)).map_err(err)?;
        } else {
            chart.draw_series(LineSeries::new(vec![(lo, *yv), (hi, *yv)], style)).map_err(err)?;
        }
        let (px, py) = chart.backend_coord(&(hi, label_ys[j]));
        let grey = rgb(grey);
        let text = TextStyle::from(("sans-serif", 13).into_font()).color(&grey).pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(name.clone(), (px + 6, py), text)).map_err(err)?;
    }
    // Flagged rows (an OOM): a red cross where the row's highest value is, and what happened.
    for f in &p.flags {
        let (px, py) = chart.backend_coord(&(f.x, f.y));
        let red = rgb(FLAG_COLOUR);
        root.draw(&Cross::new((px, py - 10), 7, red.stroke_width(3))).map_err(err)?;
        let text =
            TextStyle::from(("sans-serif", 14).into_font()).color(&red).pos(Pos::new(HPos::Center, VPos::Bottom));
        root.draw(&Text::new(f.text.clone(), (px, py - 20), text)).map_err(err)?;
    }
    Ok(())
}

/// 1234567 → "1.23M", 0.00391 → "0.0039", 14.185 → "14.19".
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3}M", v / 1e6).trim_end_matches('0').trim_end_matches('.').replace(".M", "M")
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}").trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Series;
    use polars::prelude::*;

    #[test]
    fn bars_and_log_lines_draw_their_values_as_svg() {
        const BARS: ChartSpec = ChartSpec {
            title: "显存 weights of {model}",
            x: "precision",
            y_title: "GiB",
            series: &[
                Series::column("predicted", &[("gib", 1.0)]),
                Series::column("measured", &[("measured_gib", 1.0)]),
            ],
            ..ChartSpec::BARS
        };
        let df = df!("model" => ["7b", "7b"], "precision" => ["bf16", "f32"], "gib" => [14.19, 28.37], "measured_gib" => [Some(14.19), None]).unwrap();
        let svg = draw_svg(&BARS, &df).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("显存 weights of 7b"), "the title as text, placeholder filled");
        assert!(svg.contains("\nbf16\n") && svg.contains("\nf32\n"), "the categories label the x axis");
        assert!(svg.matches("<rect").count() >= 4, "the background and three bars (one value missing): {svg}");
        assert!(svg.contains("\npredicted\n") && svg.contains("\nmeasured\n"), "a legend");

        const LINES: ChartSpec = ChartSpec {
            x: "seq",
            y_title: "MiB",
            series: &[Series::column("held", &[("mib", 1.0)])],
            x_axis: Axis::LogDoublings,
            ..ChartSpec::LINES
        };
        let df = df!("seq" => [1024i64, 1536, 2048, 4096], "mib" => [56.0, 84.0, 112.0, 224.0]).unwrap();
        let svg = draw_svg(&LINES, &df).unwrap();
        assert!(svg.contains("<polyline"), "a line: {svg}");
        assert!(
            svg.contains("\n1024\n") && svg.contains("\n4096\n") && !svg.contains("\n1536\n"),
            "log ticks at the doublings only"
        );
    }
}
