//! Draws a stage's declared chart (`stage::ChartSpec`) from its table, live or replayed, with
//! plotly: report.html and the notebooks draw the same figure, from the same prepared data as the
//! static SVG (`report::prepare`). Knows no stage.

use crate::error::Result;
use crate::stage::{Axis, ChartKind, ChartSpec, Style};
use plotly::common::{Anchor, DashType, Font, Marker, MarkerSymbol, Mode, Orientation, Position, Title};
use plotly::layout::{
    Annotation, Axis as PAxis, AxisType, BarMode, CategoryOrder, Layout, Legend, Margin, Shape, ShapeLine, ShapeType,
};
use plotly::{Bar, Plot, Scatter};
use polars::prelude::*;

use super::prepare::{hex, line_style, FLAG_COLOUR, PALETTE};
pub use super::prepare::{prepare, Mark, Prepared, Trace};

/// The chart `spec` declares, over `df` (one group of a view's table), as a plotly figure.
pub fn draw(spec: &ChartSpec, df: &DataFrame) -> Result<Plot> {
    let p = prepare(spec, df)?;
    let mut plot = Plot::new();
    for t in &p.traces {
        let colour = hex(PALETTE[t.colour % PALETTE.len()]);
        let marker = Marker::new().color(colour.clone());
        match spec.kind {
            ChartKind::Bars | ChartKind::Stacked => {
                let bar = Bar::new(t.labels.clone(), t.y.clone())
                    .name(&t.name)
                    .marker(marker)
                    .legend_group(&t.name)
                    .show_legend(t.legend);
                plot.add_trace(if t.faint { bar.opacity(0.45) } else { bar });
            }
            ChartKind::Lines if p.numeric_x() => plot.add_trace(
                Scatter::new(t.x.clone(), t.y.clone())
                    .mode(mode(t.style))
                    .name(&t.name)
                    .marker(marker)
                    .line(plotly::common::Line::new().color(colour)),
            ),
            ChartKind::Lines => plot.add_trace(
                Scatter::new(t.labels.clone(), t.y.clone())
                    .mode(mode(t.style))
                    .name(&t.name)
                    .marker(marker)
                    .line(plotly::common::Line::new().color(colour)),
            ),
        }
    }
    if !p.flags.is_empty() {
        // The flagged rows (an OOM): a red cross above the row's highest value, said in words.
        let marker = Marker::new().symbol(MarkerSymbol::X).size(14).color(hex(FLAG_COLOUR));
        let texts: Vec<String> = p.flags.iter().map(|f| f.text.clone()).collect();
        let ys: Vec<f64> = p.flags.iter().map(|f| f.y).collect();
        if p.numeric_x() {
            let xs: Vec<f64> = p.flags.iter().map(|f| f.x).collect();
            plot.add_trace(
                Scatter::new(xs, ys)
                    .mode(Mode::MarkersText)
                    .text_array(texts)
                    .text_position(Position::TopCenter)
                    .marker(marker)
                    .name("flag")
                    .show_legend(false),
            );
        } else {
            let xs: Vec<String> = p.flags.iter().map(|f| f.label.clone()).collect();
            plot.add_trace(
                Scatter::new(xs, ys)
                    .mode(Mode::MarkersText)
                    .text_array(texts)
                    .text_position(Position::TopCenter)
                    .marker(marker)
                    .name("flag")
                    .show_legend(false),
            );
        }
    }
    let mut x_axis = PAxis::new().title(Title::with_text(spec.x_title));
    if spec.x_axis != Axis::Linear {
        x_axis = x_axis.type_(AxisType::Log).tick_values(p.log_ticks(spec.x_axis));
    }
    if !p.numeric_x() {
        // The categories in the prepared order: a stacked chart's ledger bars beside their ranks.
        x_axis = x_axis.category_order(CategoryOrder::Array).category_array(p.categories.clone()).auto_margin(true);
    }
    let mut y_axis = PAxis::new().title(Title::with_text(spec.y_title));
    if spec.y_log {
        y_axis = y_axis.type_(AxisType::Log);
    }
    let lo = p.ys().into_iter().fold(0.0f64, f64::min);
    if let Some(top) = p.y_top {
        y_axis = y_axis.range(vec![lo, top]);
    }
    let mut layout = Layout::new().title(Title::with_text(&p.title)).x_axis(x_axis).y_axis(y_axis).height(420);
    layout = match spec.kind {
        ChartKind::Bars => layout.bar_mode(BarMode::Group),
        ChartKind::Stacked => layout.bar_mode(BarMode::Relative),
        ChartKind::Lines => layout,
    };
    if !p.lines.is_empty() {
        let top = p.y_top.unwrap_or_else(|| p.lines.iter().map(|l| l.1).fold(0.0, f64::max));
        let label_ys = p.line_label_ys((top - lo) * 0.045);
        let mut shapes = Vec::new();
        let mut notes = Vec::new();
        for (j, (name, y)) in p.lines.iter().enumerate() {
            let (grey, dashed) = line_style(j);
            let dash = if dashed { DashType::Dash } else { DashType::Solid };
            shapes.push(
                Shape::new()
                    .shape_type(ShapeType::Line)
                    .x_ref("paper")
                    .x0(0.0)
                    .x1(1.0)
                    .y_ref("y")
                    .y0(*y)
                    .y1(*y)
                    .line(ShapeLine::new().color(hex(grey)).width(1.5).dash(dash)),
            );
            notes.push(
                Annotation::new()
                    .x_ref("paper")
                    .x(1.0)
                    .x_anchor(Anchor::Left)
                    .y_ref("y")
                    .y(label_ys[j])
                    .text(name)
                    .show_arrow(false)
                    .font(Font::new().size(12).color(hex(grey))),
            );
        }
        // The labels take the right margin, so the legend goes above the plot.
        layout = layout
            .shapes(shapes)
            .annotations(notes)
            .margin(Margin::new().right(110).top(90))
            .legend(Legend::new().orientation(Orientation::Horizontal).x(0.0).y(1.0).y_anchor(Anchor::Bottom));
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
            only: Some(("outcome", &["ok"])),
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
