//! The stages' charts, built from their tables (live or replayed), so the CLI's CSVs and the
//! notebooks draw the same thing.

use crate::error::Result;
use crate::experiments::{anatomy::col as a, frag::col as f, kv::col as k};
use crate::stage::Outcome;
use plotly::common::{Mode, Title};
use plotly::layout::{Axis, AxisType, BarMode, Layout};
use plotly::{Bar, Plot, Scatter};
use polars::prelude::*;

use crate::report::format::{floats, strings};

fn layout(title: &str, x: &str, y: &str) -> Layout {
    Layout::new()
        .title(Title::with_text(title))
        .x_axis(Axis::new().title(Title::with_text(x)))
        .y_axis(Axis::new().title(Title::with_text(y)))
        .height(420)
}

/// Stage 1: per precision, predicted weights vs measured allocated, peak, and the report.
pub fn anatomy(df: &DataFrame) -> Result<Plot> {
    let x = strings(df, a::PRECISION)?;
    let mut plot = Plot::new();
    for (col, name) in [
        (a::PREDICTED_WEIGHTS_GIB, "predicted weights"),
        (a::LOADED_ALLOCATED_GIB, "allocated after load (this run)"),
        (a::AFTER_PEAK_GIB, "peak during generation (this run)"),
        (a::REPORT_ALLOCATED_GIB, "allocated, report (RTX 4090, PyTorch)"),
    ] {
        plot.add_trace(Bar::new(x.clone(), floats(df, col)?).name(name));
    }
    plot.set_layout(layout("显存解剖 VRAM anatomy: weights and peak by precision", "precision", "GiB").bar_mode(BarMode::Group));
    Ok(plot)
}

/// Stage 1: allocated and peak over the timeline of snapshots.
pub fn timeline(df: &DataFrame) -> Result<Plot> {
    let x = strings(df, "label")?;
    let mut plot = Plot::new();
    for (col, name) in [("allocated_mib", "allocated"), ("reserved_mib", "reserved"), ("peak_mib", "peak")] {
        plot.add_trace(Scatter::new(x.clone(), floats(df, col)?).mode(Mode::LinesMarkers).name(name));
    }
    plot.set_layout(layout("Memory timeline 显存时间线", "snapshot", "MiB"));
    Ok(plot)
}

/// Stage 2: held bytes per prefill length against the GQA formula and the report's formula.
pub fn kv_prefill(df: &DataFrame) -> Result<Plot> {
    let ok = df.filter(&df.column(k::OUTCOME)?.str()?.equal(Outcome::OK))?;
    let seq = floats(&ok, k::SEQ)?;
    let kv_plus_logits: Vec<f64> =
        floats(&ok, k::KV_GQA_FORMULA_MIB)?.iter().zip(floats(&ok, k::LOGITS_FORMULA_MIB)?).map(|(a, b)| a + b).collect();
    let naive_plus_logits: Vec<f64> =
        floats(&ok, k::KV_NAIVE_FORMULA_MIB)?.iter().zip(floats(&ok, k::LOGITS_FORMULA_MIB)?).map(|(a, b)| a + b).collect();
    // Ticks at the doublings only; the bisection's lengths crowd between them.
    let seq_ticks: Vec<f64> = seq.iter().copied().filter(|&n| n > 0.0 && (n as u64).is_power_of_two()).collect();
    let peak_above_base: Vec<f64> = floats(&ok, k::PEAK_MIB)?.iter().zip(floats(&ok, k::BASE_MIB)?).map(|(p, b)| p - b).collect();
    let mut plot = Plot::new();
    plot.add_trace(Scatter::new(seq.clone(), floats(&ok, k::HELD_MIB)?).mode(Mode::LinesMarkers).name("measured: held after prefill, above the weights"));
    plot.add_trace(Scatter::new(seq.clone(), kv_plus_logits).mode(Mode::Lines).name("GQA formula: KV + logits"));
    plot.add_trace(Scatter::new(seq.clone(), naive_plus_logits).mode(Mode::Lines).name("report's formula 2·L·H·S·B + logits"));
    plot.add_trace(Scatter::new(seq, peak_above_base).mode(Mode::Markers).name("peak during the prefill, above the weights"));
    // A log axis ticked at the sweep's lengths: 1k, 2k, 4k, … sit evenly, as doublings should.
    let l = layout("KV cache 线性增长 prefill sweep", "sequence length (log2)", "MiB").x_axis(
        Axis::new().type_(AxisType::Log).tick_values(seq_ticks).title(Title::with_text("sequence length (log scale)")),
    );
    plot.set_layout(l);
    Ok(plot)
}

/// Stage 2: allocated and peak during a long decode, per cache kind.
pub fn kv_decode(df: &DataFrame) -> Result<Plot> {
    let mut plot = Plot::new();
    for kind in ["preallocated", "concat"] {
        let d = df.filter(&df.column(k::CACHE)?.str()?.equal(kind))?;
        let t = floats(&d, k::TOKENS)?;
        plot.add_trace(Scatter::new(t.clone(), floats(&d, k::ALLOCATED_MIB)?).mode(Mode::LinesMarkers).name(format!("{kind}: allocated")));
        plot.add_trace(Scatter::new(t, floats(&d, k::PEAK_MIB)?).mode(Mode::Markers).name(format!("{kind}: peak")));
    }
    plot.set_layout(layout("Decode: preallocated vs concatenating KV cache", "tokens in cache", "MiB"));
    Ok(plot)
}

/// Stage 3: allocated and reserved at each step of the report's sequence, measured and modelled,
/// with the report's figures (one chart per allocator).
pub fn frag_steps(df: &DataFrame) -> Result<Plot> {
    let x = strings(df, f::STEP)?;
    let mut plot = Plot::new();
    for (col, name) in [
        (f::ALLOCATED_GIB, "allocated (measured)"),
        (f::RESERVED_GIB, "reserved (measured)"),
        (f::MODEL_RESERVED_GIB, "reserved (model)"),
        (f::REPORT_RESERVED_GIB, "reserved, report (PyTorch, RTX 4090)"),
        (f::LARGEST_BLOCK_GIB, "largest allocatable block (measured)"),
    ] {
        let y = floats(df, col)?;
        if y.iter().any(|v| v.is_finite()) {
            plot.add_trace(Bar::new(x.clone(), y).name(name));
        }
    }
    let who = strings(df, f::ALLOCATOR)?.into_iter().next().unwrap_or_default();
    plot.set_layout(layout(&format!("碎片化 fragmentation: {who}"), "step", "GiB").bar_mode(BarMode::Group));
    Ok(plot)
}

/// Stage 4a: measured bandwidth per test beside the vendor figure (log scale: 25 to 4,000 GB/s).
pub fn bandwidth(df: &DataFrame) -> Result<Plot> {
    use crate::experiments::bandwidth::col as b;
    let x = strings(df, b::TEST)?;
    let mut plot = Plot::new();
    plot.add_trace(Bar::new(x.clone(), floats(df, b::GBS)?).name("measured"));
    plot.add_trace(Bar::new(x, floats(df, b::VENDOR_GBS)?).name("vendor figure"));
    plot.set_layout(layout("带宽 Bandwidths: the straws", "transfer", "GB/s").bar_mode(BarMode::Group).y_axis(Axis::new().type_(AxisType::Log).title(Title::with_text("GB/s"))));
    Ok(plot)
}

/// Stage 4b: decode tok/s per mode beside its ceiling (log scale: 0.6 to 200 tok/s).
pub fn offload(df: &DataFrame) -> Result<Plot> {
    use crate::experiments::offload::col as o;
    let x = strings(df, o::MODE)?;
    let mut plot = Plot::new();
    plot.add_trace(Bar::new(x.clone(), floats(df, o::TOK_S)?).name("measured tok/s"));
    plot.add_trace(Bar::new(x.clone(), floats(df, o::CEILING_TOK_S)?).name("ceiling from this run's bandwidths"));
    let report = floats(df, o::REPORT_TOK_S)?;
    if report.iter().any(|v| v.is_finite()) {
        plot.add_trace(Bar::new(x.clone(), report).name("report (RTX 4090, PyTorch)"));
    }
    let article = floats(df, o::ARTICLE_TOK_S)?;
    if article.iter().any(|v| v.is_finite()) {
        plot.add_trace(Bar::new(x, article).name("unified-memory article (14B on a 4090)"));
    }
    plot.set_layout(layout("卸载 Offload: decode speed by mode", "mode", "tok/s").bar_mode(BarMode::Group).y_axis(Axis::new().type_(AxisType::Log).title(Title::with_text("tok/s"))));
    Ok(plot)
}

/// Stage 1b: each load's time beside its floor (file read + host→device copy).
pub fn load_time(df: &DataFrame) -> Result<Plot> {
    use crate::experiments::loading::col as l;
    let (ck, p, cache) = (strings(df, l::CHECKPOINT)?, strings(df, l::PRECISION)?, strings(df, l::CACHE)?);
    let x: Vec<String> = ck.iter().zip(&p).zip(&cache).map(|((c, p), k)| format!("{c} → {p}, {k}")).collect();
    let mut plot = Plot::new();
    plot.add_trace(Bar::new(x.clone(), floats(df, l::LOAD_S)?).name("load (this run)"));
    plot.add_trace(Bar::new(x.clone(), floats(df, l::READ_S)?).name("file read alone"));
    plot.add_trace(Bar::new(x, floats(df, l::FLOOR_S)?).name("floor: read + host→device copy"));
    plot.set_layout(layout("加载时间 Loading time: what the disk costs", "checkpoint → precision, page cache", "seconds").bar_mode(BarMode::Group));
    Ok(plot)
}

/// Speed: batch-1 decode tok/s per precision and variant beside its ceiling and PyTorch's.
pub fn bench_decode(df: &DataFrame) -> Result<Plot> {
    use crate::experiments::speed::col as b;
    let (p, v, batch) = (strings(df, b::PRECISION)?, strings(df, b::VARIANT)?, strings(df, b::BATCH)?);
    let x: Vec<String> = p.iter().zip(&v).zip(&batch).map(|((p, v), n)| format!("{p} {v} ×{n}")).collect();
    let mut plot = Plot::new();
    plot.add_trace(Bar::new(x.clone(), floats(df, b::TOK_S)?).name("the lab (this run)"));
    plot.add_trace(Bar::new(x.clone(), floats(df, b::CEILING_TOK_S)?).name("ceiling: read bandwidth ÷ bytes per step"));
    let torch = floats(df, b::PYTORCH_TOK_S)?;
    if torch.iter().any(|v| v.is_finite()) {
        plot.add_trace(Bar::new(x.clone(), torch).name("PyTorch (same GPU, same call)"));
    }
    let other = floats(df, b::OTHER_TOK_S)?;
    if other.iter().any(|v| v.is_finite()) {
        plot.add_trace(Bar::new(x, other).name("llama.cpp (H200)"));
    }
    plot.set_layout(layout("速度 Decode speed beside its ceiling", "precision, variant, batch", "tok/s").bar_mode(BarMode::Group));
    Ok(plot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_carry_the_table_values() {
        let df = df!(
            "precision" => ["bf16", "f32"],
            "predicted_weights_gib" => [14.185, 28.37],
            "loaded_allocated_gib" => [Some(14.185), None],
            "after_peak_gib" => [Some(14.28), None],
            "report_allocated_gib" => [Some(14.19), None],
        )
        .unwrap();
        let json = anatomy(&df).unwrap().to_json();
        assert!(json.contains("14.185") && json.contains("28.37") && json.contains("report (RTX 4090"));
        assert!(json.contains("\"barmode\":\"group\""));
    }
}

/// Estimator: memory against context per precision, with each card's capacity as a line.
pub fn estimate_curve(df: &DataFrame) -> Result<Plot> {
    use crate::experiments::estimate::col as e;
    let precision = strings(df, e::PRECISION)?;
    let seq = floats(df, e::SEQ)?;
    let need = floats(df, e::NEED_GIB)?;
    let mut plot = Plot::new();
    let mut names: Vec<&String> = precision.iter().collect();
    names.dedup();
    for name in names {
        let (x, y): (Vec<f64>, Vec<f64>) = precision.iter().zip(seq.iter().zip(&need)).filter(|(p, _)| *p == name).map(|(_, (s, n))| (*s, *n)).unzip();
        plot.add_trace(Scatter::new(x, y).mode(Mode::LinesMarkers).name(name.as_str()));
    }
    let (lo, hi) = (seq.iter().copied().fold(f64::INFINITY, f64::min), seq.iter().copied().fold(0.0, f64::max));
    for card in crate::hw::Card::presets() {
        let gib = card.total_mib / 1024.0;
        plot.add_trace(Scatter::new(vec![lo, hi], vec![gib, gib]).mode(Mode::Lines).name(card.name.as_str()));
    }
    let ticks: Vec<f64> = seq.iter().copied().filter(|&n| n > 0.0).collect();
    plot.set_layout(
        layout("显存 vs 上下文 memory against context", "context (tokens)", "GiB").x_axis(Axis::new().type_(AxisType::Log).tick_values(ticks).title(Title::with_text("context, tokens (log scale)"))),
    );
    Ok(plot)
}
