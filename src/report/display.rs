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
    let mut h = String::from(
        "<div class=\"table-scroll\" style=\"overflow-x:auto;max-width:100%\"><table class=\"vram-lab\" style=\"border-collapse:collapse;font-size:12px\">",
    );
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
    show_tables(&[(df.clone(), caption.to_string())]);
}

/// Shows several tables as one output. evcxr keeps one block per MIME type for a cell (the last
/// one printed), so tables printed one by one would show only the last in JupyterLab.
pub fn show_tables(tables: &[(DataFrame, String)]) {
    print!("{}", tables_text(tables, in_notebook()));
}

fn tables_text(tables: &[(DataFrame, String)], notebook: bool) -> String {
    if notebook {
        let html: String = tables.iter().map(|(df, caption)| html_table(df, caption)).collect();
        return format!("EVCXR_BEGIN_CONTENT text/html\n{html}\nEVCXR_END_CONTENT\n");
    }
    let mut out = String::new();
    for (df, caption) in tables {
        if !caption.is_empty() {
            out += &format!("{caption}\n");
        }
        out += &format!("{df}\n");
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_of_one_call_are_one_notebook_output() {
        let t = |v: f64| (df!("x" => [v]).unwrap(), format!("caption {v}"));
        let text = tables_text(&[t(1.0), t(2.0)], true);
        assert_eq!(text.matches("EVCXR_BEGIN_CONTENT").count(), 1, "{text}");
        assert!(text.contains("caption 1") && text.contains("caption 2"));
        let plain = tables_text(&[t(1.0), t(2.0)], false);
        assert!(!plain.contains("EVCXR") && plain.contains("caption 2"));
    }
}
