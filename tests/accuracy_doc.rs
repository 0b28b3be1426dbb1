//! docs/accuracy.md's tables are what the estimator predicts today for the committed measurements:
//! each row is recomputed here from the check's own readers and compared as the page prints it.

use std::collections::BTreeMap;
use std::path::Path;
use vram_lab::experiments::check::{llamacpp::launches, transformers::sweeps};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The page's table rows that start with `| first |`-like cells, as written.
fn page_rows(header: &str) -> Vec<String> {
    let page = std::fs::read_to_string(root().join("docs/accuracy.md")).unwrap();
    let start = page.find(header).unwrap_or_else(|| panic!("no table headed {header:?}"));
    page[start..].lines().skip(2).take_while(|l| l.starts_with('|')).map(str::to_string).collect()
}

fn range(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    format!("{lo:.0}–{hi:.0}")
}

#[test]
fn the_llamacpp_table_is_current() {
    let l = launches(&root().join("data/results")).unwrap();
    let mut groups: BTreeMap<(String, String), Vec<_>> = BTreeMap::new();
    for x in &l {
        groups.entry((x.preset.clone(), x.ftype.name().to_string())).or_default().push(x);
    }
    let want: Vec<String> = groups
        .iter()
        .map(|((preset, ty), v)| {
            let worst = v.iter().map(|x| x.err_mib().abs()).fold(0.0, f64::max);
            let on: Vec<f64> = v.iter().filter(|x| x.launch.flash).map(|x| x.outside_mib()).collect();
            let off: Vec<f64> = v.iter().filter(|x| !x.launch.flash).map(|x| x.outside_mib()).collect();
            let smi = v.iter().map(|x| x.smi_err_mib().abs()).fold(0.0, f64::max);
            format!("| {preset} | {ty} | {} | {worst:.2} | {} | {} | {smi:.1} |", v.len(), range(&on), range(&off))
        })
        .collect();
    assert_eq!(page_rows("| model | type | launches |"), want);
}

#[test]
fn the_transformers_table_is_current() {
    let s = sweeps(&root().join("data/results")).unwrap();
    let mut groups: BTreeMap<(String, String, String), Vec<_>> = BTreeMap::new();
    for x in &s {
        let card = match x.card_mib {
            0.0 => "H200 (whole)".to_string(),
            24084.5 => "RTX 4090".to_string(),
            16376.0 => "A4000".to_string(),
            c => format!("{c} MiB"),
        };
        groups.entry((x.model.clone(), x.dtype.clone(), card)).or_default().push(x);
    }
    let pct = |p: u64, m: u64| (100.0 * (p as f64 - m as f64) / m as f64).abs();
    let want: Vec<String> = groups
        .iter()
        .map(|((model, dtype, card), v)| {
            let pairs: Vec<_> = v.iter().flat_map(|x| x.measured.steps.iter().zip(&x.predicted.steps)).collect();
            let ran: Vec<_> = pairs.iter().filter(|(m, _)| m.oom.is_none()).collect();
            let worst = |f: &dyn Fn(&vram_lab::estimate::transformers::Step) -> u64| {
                ran.iter().map(|(m, p)| pct(f(p), f(m))).fold(0.0, f64::max)
            };
            let mut ooms: Vec<String> =
                v.iter().filter(|x| x.measured.load_oom.is_some()).map(|_| "load".to_string()).collect();
            ooms.extend(pairs.iter().filter(|(m, _)| m.oom.is_some()).map(|(m, _)| m.seq.to_string()));
            let oom = if ooms.is_empty() { "—".to_string() } else { ooms.join(", ") };
            format!(
                "| {model} | {dtype} | {card} | {} | {oom} | {:.2} | {:.2} | {:.2} |",
                ran.len(),
                worst(&|s| s.after),
                worst(&|s| s.peak),
                worst(&|s| s.reserved)
            )
        })
        .collect();
    assert_eq!(page_rows("| model | dtype | card |"), want);
}
