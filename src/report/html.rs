//! report.html: one self-contained, offline page per run folder, made from its manifest — the run's
//! machine and command, the summary of findings (measured beside predicted, the report's RTX 4090
//! figure and the ceiling), then each stage's views: tables, plotly charts, explanations. plotly.js
//! is embedded once. A last script counts the charts drawn and the script errors seen into
//! `#vram-lab-render-check`, which the browser test reads and a reader sees when something broke.

use super::chart::draw;
use super::display::html_table;
use crate::error::Result;
use crate::frame::{groups, present_columns};
use crate::session::run_folder::{findings_table, Manifest, RunFolder, StageStatus};
use crate::stage::AnyStage;
use std::fmt::Write;
use std::path::PathBuf;

pub const FILE: &str = "report.html";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Noto Sans CJK SC',sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{font-size:1.05em;margin-top:1.5em}
table.vram-lab{border-collapse:collapse;font-size:12px;margin:.5em 0}table.vram-lab td,table.vram-lab th{padding:2px 6px}
table.vram-lab tr:nth-child(even){background:#f6f6f6}.explain{background:#f4f8ff;border-left:3px solid #6a9be0;padding:.5em 1em;font-size:14px}
.table-scroll{overflow-x:auto;max-width:100%}.model{font-weight:normal;font-size:.7em;color:#555}details.tables>summary{cursor:pointer;font-weight:bold;margin:1em 0 .5em}
.meta td{padding:1px 8px;font-size:13px;vertical-align:top}.failed{color:#b00}pre{font-size:12px;background:#f6f6f6;padding:.5em;overflow-x:auto}
#vram-lab-render-check{font-size:12px;color:#888;margin-top:3em}#vram-lab-render-check.bad{color:#b00;font-weight:bold}";

/// Collects script errors from the start, so the check at the end can report them.
const ERROR_HOOK: &str =
    "<script>window.vramLabErrors=[];window.addEventListener('error',function(e){window.vramLabErrors.push(String(e.message||e))});</script>";

/// Counts the charts drawn (plotly marks each with `js-plotly-plot`) against those expected.
const RENDER_CHECK: &str = "<script>(function(){var el=document.getElementById('vram-lab-render-check');
var want=+el.dataset.charts,got=document.querySelectorAll('.js-plotly-plot').length;el.dataset.rendered=got;
el.dataset.errors=JSON.stringify(window.vramLabErrors);var ok=got===want&&window.vramLabErrors.length===0;
el.className=ok?'ok':'bad';el.textContent=(ok?'render check: ':'render check FAILED: ')+got+' of '+want+' charts drawn, '+window.vramLabErrors.length+' script errors';})();</script>";

/// plotly.js, without MathJax (the charts use no LaTeX).
pub fn plotly_js() -> String {
    let all = plotly::Plot::offline_js_sources();
    match all.find("</script>") {
        Some(end) => all[..end + "</script>".len()].to_string(),
        None => all,
    }
}

fn meta_rows(run: &RunFolder) -> Vec<(String, String)> {
    let m = &run.manifest;
    let e = &m.env;
    let card = m
        .card
        .as_ref()
        .map(|c| format!("{} — {} ({})", c.label, crate::units::fmt_bytes(c.total_bytes()), c.total_source));
    let versions: Vec<String> = e.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut rows = vec![
        ("command".into(), m.command.clone()),
        ("date".into(), format!("{} → {}", m.started, m.finished.clone().unwrap_or_else(|| "(unfinished)".into()))),
        ("status".into(), format!("{:?}", m.status).to_lowercase()),
        ("model".into(), m.model.clone()),
        ("card emulated / 模拟显卡".into(), card.unwrap_or_else(|| "none (the device as it is)".into())),
        ("device".into(), e.device.clone()),
    ];
    if let Some(gpu) = &e.gpu {
        rows.push((
            "GPU".into(),
            format!(
                "{gpu}, compute {}, driver {}, CUDA {}, {:.0} MiB",
                e.compute_capability.as_deref().unwrap_or("?"),
                e.driver.as_deref().unwrap_or("?"),
                e.cuda_driver_api.as_deref().unwrap_or("?"),
                e.device_total_mib.unwrap_or(f64::NAN)
            ),
        ));
    }
    rows.push(("host".into(), format!("{} CPUs, {:.1} GiB", e.host_cpus, e.host_mem_gib.unwrap_or(f64::NAN))));
    rows.push(("versions".into(), format!("vram-lab {}; {}", e.vram_lab, versions.join(", "))));
    rows
}

/// A view with more tables than this and no chart is folded away below its first line.
const FOLD_AFTER: usize = 6;

/// A device's name without the vendor: "NVIDIA GeForce RTX 4090 24 GB" → "RTX 4090 24 GB".
fn short(name: &str) -> &str {
    name.trim_start_matches("NVIDIA ").trim_start_matches("GeForce ")
}

/// What ran where: the card the run emulated and the device that emulated it ("RTX 4090 24 GB
/// emulated on an H100 80GB HBM3"), or the device alone.
pub fn title(m: &Manifest) -> String {
    let device = m.env.gpu.as_deref().map(short).map(|g| {
        // "an H100", "an A100", "a GH200": the article as the first letter is spoken.
        let article =
            if g.starts_with(['A', 'E', 'F', 'H', 'I', 'L', 'M', 'N', 'O', 'R', 'S', 'X']) { "an" } else { "a" };
        format!("{article} {g}")
    });
    let on = match (&m.card, device) {
        (Some(card), Some(gpu)) => format!("{} emulated on {gpu}", short(&card.label)),
        (Some(card), None) => format!("{} emulated on the CPU", short(&card.label)),
        (None, Some(gpu)) => format!("on {gpu}"),
        (None, None) => format!("on {}", m.env.device),
    };
    format!("vram-lab — {}, {on}", m.model)
}

/// The page for a run folder.
pub fn render(run: &RunFolder, stages: &[Box<dyn AnyStage>]) -> Result<String> {
    let m = &run.manifest;
    let mut body = String::new();
    let mut charts = 0usize;
    let title = title(m);
    let _ = write!(body, "<h1>{}</h1><p>显存解剖学与精度边界测试 — GPU memory of LLM inference, byte by byte. Every measurement stands beside its prediction, the report's RTX 4090 figure (PyTorch) and, for speeds, the physical ceiling.</p>", esc(&title));
    body += "<table class=\"meta\">";
    for (k, v) in meta_rows(run) {
        let _ = write!(body, "<tr><td><b>{}</b></td><td>{}</td></tr>", esc(&k), esc(&v));
    }
    body += "</table>";
    let findings = findings_table(m)?;
    if findings.height() > 0 {
        body += "<h2>总结 · Summary</h2>";
        body += &html_table(&findings, "measured / predicted / floor (a lower bound, not a prediction) / the report (RTX 4090, PyTorch) / physical ceiling");
    }
    for rec in &m.stages {
        let stage = stages.iter().find(|s| s.name() == rec.name);
        // The model each stage ran: `load` writes a smaller one than the run's; `check` runs none.
        let model = match stage.map(|s| s.model(&rec.config, &m.model)) {
            Some(None) => "no model: the committed runs' tables".to_string(),
            Some(Some(model)) => format!("model {model}"),
            None => format!("model {}", m.model),
        };
        let _ = write!(
            body,
            "<h2 id=\"{}\">{} <span class=\"model\">· {}</span></h2>",
            esc(&rec.name),
            esc(&rec.title),
            esc(&model)
        );
        if let Some(s) = stage {
            let _ = write!(body, "<div class=\"explain\">{}</div>", s.intro());
        }
        let config = serde_json::to_string(&rec.config).unwrap_or_default();
        let _ = write!(
            body,
            "<p style=\"font-size:12px\">{:?} in {:.1} s; config <code>{}</code></p>",
            rec.status,
            rec.seconds,
            esc(&config)
        );
        if rec.status != StageStatus::Done {
            let _ = write!(body, "<p class=\"failed\">{}</p>", esc(rec.error.as_deref().unwrap_or("")));
            continue;
        }
        let Some(stage) = stage else { continue };
        for view in stage.views() {
            // A view whose table the stage did not write is left out; a table the manifest names
            // is read, and a name that is not a file of the folder is an error, not a gap.
            if !rec.tables.contains_key(view.table) {
                continue;
            }
            let df = run.table(&rec.name, view.table)?;
            let parts = groups(&df, view.group_by)?;
            // Hundreds of rows in tens of tables (the check's) would bury what follows.
            let fold = view.chart.is_none() && parts.len() > FOLD_AFTER;
            if fold {
                let _ = write!(
                    body,
                    "<details class=\"tables\"><summary>{} — {} tables</summary>",
                    esc(view.caption),
                    parts.len()
                );
            }
            for (label, part) in parts {
                let caption =
                    if label.is_empty() { view.caption.to_string() } else { format!("{} — {label}", view.caption) };
                let _ = write!(body, "<h3>{}</h3>", esc(&caption));
                body += &html_table(&present_columns(&part, view.columns)?, "");
                if let Some(chart) = &view.chart {
                    charts += 1;
                    body += &draw(chart, &part)?.to_inline_html(Some(&format!("chart-{charts}")));
                }
            }
            if fold {
                body += "</details>";
            }
            if !view.explain.is_empty() {
                let _ = write!(body, "<div class=\"explain\">{}</div>", view.explain);
            }
        }
        for name in rec.texts.keys() {
            if let Some(text) = run.text(&rec.name, name)? {
                let _ = write!(body, "<details><summary>{}</summary><pre>{}</pre></details>", esc(name), esc(&text));
            }
        }
    }
    let _ = write!(
        body,
        "<div id=\"vram-lab-render-check\" data-charts=\"{charts}\">render check: scripts did not run</div>"
    );
    Ok(format!(
        "<!doctype html>\n<html lang=\"zh-CN\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style>{ERROR_HOOK}{}</head><body>{body}{RENDER_CHECK}</body></html>\n",
        esc(&title),
        plotly_js()
    ))
}

/// Writes `report.html` into the run folder.
pub fn write(run: &RunFolder, stages: &[Box<dyn AnyStage>]) -> Result<PathBuf> {
    let path = run.dir.join(FILE);
    crate::paths::replace_own(&path, render(run, stages)?.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::registry;

    fn committed() -> RunFolder {
        RunFolder::open(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/h100/2026-11-26-run/run"))
            .unwrap()
    }

    #[test]
    fn the_title_names_the_card_emulated_and_the_device_that_ran_it() {
        let mut m = committed().manifest;
        assert_eq!(title(&m), "vram-lab — synthetic:qwen2.5-7b, RTX 4090 24 GB emulated on an H100 80GB HBM3");
        let gpu = m.env.gpu.take();
        assert!(title(&m).ends_with("RTX 4090 24 GB emulated on the CPU"), "{}", title(&m));
        m.env.gpu = gpu;
        m.card = None;
        assert!(title(&m).ends_with(", on an H100 80GB HBM3"), "no card: the device alone: {}", title(&m));
    }

    #[test]
    fn the_page_names_each_stage_model_puts_floors_apart_and_scrolls_wide_tables() {
        let page = render(&committed(), &registry()).unwrap();
        let header = |stage: &str| {
            let at = page.find(&format!("<h2 id=\"{stage}\">")).unwrap_or_else(|| panic!("no stage {stage}"));
            page[at..at + page[at..].find("</h2>").unwrap()].to_string()
        };
        assert!(
            header("load").contains("model synthetic:qwen2.5-0.5b"),
            "the load stage's own model: {}",
            header("load")
        );
        assert!(header("anatomy").contains("model synthetic:qwen2.5-7b"), "{}", header("anatomy"));
        assert!(header("check").contains("no model"), "{}", header("check"));
        // The summary: a load's floor in its own column, never under "predicted".
        let findings = findings_table(&committed().manifest).unwrap();
        let stages = crate::frame::strings(&findings, "stage").unwrap();
        let units = crate::frame::strings(&findings, "unit").unwrap();
        let (floor, predicted) =
            (crate::frame::floats(&findings, "floor").unwrap(), crate::frame::floats(&findings, "predicted").unwrap());
        let loads: Vec<usize> = (0..stages.len()).filter(|&i| stages[i] == "load" && units[i] == "s").collect();
        assert!(!loads.is_empty());
        assert!(loads.iter().all(|&i| floor[i].is_finite() && predicted[i].is_nan()), "floors moved out of predicted");
        // Every table sits in a box that scrolls sideways.
        let tables = page.matches("<table class=\"vram-lab\"").count();
        assert!(tables > 10);
        assert_eq!(
            page.matches(
                "<div class=\"table-scroll\" style=\"overflow-x:auto;max-width:100%\"><table class=\"vram-lab\""
            )
            .count(),
            tables
        );
        assert!(STYLE.contains(".table-scroll{overflow-x:auto"));
        // The check's many tables are folded below their caption.
        let check = &page[page.find("<h2 id=\"check\">").unwrap()..];
        assert!(
            check.find("<details class=\"tables\">").unwrap() < check.find("<h3>").unwrap(),
            "the check's per-file tables are folded"
        );
    }
}
