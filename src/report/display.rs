//! Rich display in Jupyter through evcxr's protocol (`EVCXR_BEGIN_CONTENT <mime>` blocks on
//! stdout): DataFrames as HTML tables, plotly charts inline. Outside a kernel the same calls print
//! plain text, so the notebooks' code also runs in a terminal.

use polars::prelude::*;

/// evcxr sets this in the process that runs a notebook's code.
pub fn in_notebook() -> bool {
    std::env::var_os("EVCXR_IS_RUNTIME").is_some()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn cell(col: &Column, row: usize) -> String {
    match col.get(row) {
        Ok(AnyValue::Null) | Err(_) => "—".into(),
        Ok(AnyValue::String(s)) => s.to_string(),
        Ok(AnyValue::StringOwned(s)) => s.to_string(),
        Ok(AnyValue::Float64(v)) if v.is_nan() => "NaN".into(),
        Ok(AnyValue::Float64(v)) => v.to_string(),
        Ok(AnyValue::Float32(v)) => v.to_string(),
        Ok(v) => v.to_string(),
    }
}

/// The table as HTML (polars has no Rust to_html), floats rounded per column, in a box that
/// scrolls sideways when the table is wider than the page.
pub fn html_table(df: &DataFrame, caption: &str) -> String {
    let df = crate::frame::rounded(df).unwrap_or_else(|_| df.clone());
    let cols = df.columns();
    let mut h = String::from("<div style=\"overflow-x:auto\"><table class=\"vram-lab\" style=\"border-collapse:collapse;font-size:12px\">");
    if !caption.is_empty() {
        h += &format!("<caption style=\"text-align:left;font-weight:bold\">{}</caption>", escape(caption));
    }
    h += "<thead><tr>";
    for c in cols {
        h += &format!("<th style=\"border-bottom:1px solid #999;padding:2px 6px\">{}</th>", escape(c.name()));
    }
    h += "</tr></thead><tbody>";
    for r in 0..df.height() {
        h += "<tr>";
        for c in cols {
            let align = if c.dtype().is_primitive_numeric() { "right" } else { "left" };
            h += &format!("<td style=\"padding:2px 6px;text-align:{align}\">{}</td>", escape(&cell(c, r)));
        }
        h += "</tr>";
    }
    h + "</tbody></table></div>"
}

/// Shows a table: HTML in a notebook, polars' text table elsewhere.
pub fn show_table(df: &DataFrame, caption: &str) {
    if in_notebook() {
        println!("EVCXR_BEGIN_CONTENT text/html\n{}\nEVCXR_END_CONTENT", html_table(df, caption));
    } else {
        if !caption.is_empty() {
            println!("{caption}");
        }
        println!("{df}");
    }
}

/// Only the columns named, in that order.
pub fn show_columns(df: &DataFrame, cols: &[&str], caption: &str) -> crate::Result<()> {
    show_table(&df.select(cols.iter().copied())?, caption);
    Ok(())
}

/// Shows a chart. In a notebook, one output with two MIME types: plotly's own (drawn by
/// JupyterLab's plotly renderer: `scripts/install-kernel.sh --lab`) and the static SVG of the same
/// data (`report::svg`), which GitHub, nbconvert and a JupyterLab without the renderer show.
/// plotly.js itself (4.6 MB) is not put into the output: report.html embeds it once for offline
/// reading. Elsewhere it writes `<name>.html` (and `<name>.svg`) and says where.
pub fn show_chart(plot: &plotly::Plot, svg: Option<&str>, name: &str) {
    let div = format!("vram-lab-{}", name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    if in_notebook() {
        println!("EVCXR_BEGIN_CONTENT application/vnd.plotly.v1+json\n{}\nEVCXR_END_CONTENT", plot.to_json());
        if let Some(svg) = svg {
            println!("EVCXR_BEGIN_CONTENT image/svg+xml\n{svg}\nEVCXR_END_CONTENT");
        }
    } else {
        let path = std::env::temp_dir().join(format!("{div}.html"));
        plot.write_html(&path);
        if let Some(svg) = svg {
            let _ = std::fs::write(path.with_extension("svg"), svg);
        }
        println!("chart written to {}", path.display());
    }
}
