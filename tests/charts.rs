//! Every chart a stage declares draws from a committed GPU run, both ways: the plotly figure and
//! the static SVG that notebooks carry for GitHub. Set `VRAM_LAB_SVG_DIR` to keep the SVGs.

use std::path::{Path, PathBuf};
use vram_lab::experiments::registry;
use vram_lab::frame::groups;
use vram_lab::report::chart::{draw, prepare};
use vram_lab::report::svg::draw_svg;
use vram_lab::session::run_folder::{run_folders, RunFolder};

/// Run folders under data/results, newest manifest first.
fn runs() -> Vec<RunFolder> {
    let dirs = run_folders(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results"), 4);
    let mut runs: Vec<RunFolder> = dirs.iter().filter_map(|d| RunFolder::open(d).ok()).collect();
    runs.sort_by(|a, b| b.manifest.started.cmp(&a.manifest.started));
    runs
}

#[test]
fn every_declared_chart_draws_from_a_committed_run_as_plotly_and_svg() {
    let runs = runs();
    let keep = std::env::var_os("VRAM_LAB_SVG_DIR").map(PathBuf::from);
    let mut drawn = 0;
    for stage in registry() {
        for view in stage.views() {
            let Some(spec) = view.chart else { continue };
            // The newest run whose table gives the chart a value: a run can hold the table with
            // nothing to draw (a pipeline alone has no tensor-parallel decode; every row an OOM).
            let drawable = runs.iter().filter_map(|r| r.table(stage.name(), view.table).ok()).find_map(|df| {
                let (_, part) = groups(&df, view.group_by).unwrap().into_iter().next().unwrap();
                let prepared = prepare(&spec, &part).unwrap();
                (!prepared.traces.is_empty()).then_some((part, prepared))
            });
            let Some((part, prepared)) = drawable else {
                panic!("{}/{}: no committed run of table {} gives it a value", stage.name(), view.name, view.table);
            };
            let plot = draw(&spec, &part).unwrap().to_json();
            let svg = draw_svg(&spec, &part).unwrap();
            let text = svg
                .replace("&apos;", "'")
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}/{}", stage.name(), view.name);
            assert!(
                text.contains(&format!("\n{}\n", prepared.title)),
                "{}/{}: the title in the SVG",
                stage.name(),
                view.name
            );
            for t in &prepared.traces {
                assert!(
                    plot.contains(&t.name.replace('"', "\\\"")),
                    "{}/{}: trace {} in plotly",
                    stage.name(),
                    view.name,
                    t.name
                );
                assert!(
                    text.contains(&format!("\n{}\n", t.name)),
                    "{}/{}: trace {} in the SVG's legend",
                    stage.name(),
                    view.name,
                    t.name
                );
            }
            let marks =
                svg.matches("<rect").count() + svg.matches("<polyline").count() + svg.matches("<circle").count();
            assert!(marks > 1 + prepared.traces.len(), "{}/{}: data drawn ({marks} marks)", stage.name(), view.name);
            if let Some(dir) = &keep {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(dir.join(format!("{}-{}.svg", stage.name(), view.name)), &svg).unwrap();
            }
            drawn += 1;
        }
    }
    assert!(drawn >= 10, "the stages declare ten charts; drew {drawn}");
}

fn results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results")
}

/// A stage's declared view, by name.
fn view(stage: &str, name: &str) -> vram_lab::stage::View {
    let views = vram_lab::experiments::find(stage).unwrap().views();
    views.into_iter().find(|v| v.name == name).unwrap_or_else(|| panic!("stage {stage} declares no view {name}"))
}

/// The group of a view's table whose label contains `label`.
fn group(df: &polars::prelude::DataFrame, view: &vram_lab::stage::View, label: &str) -> polars::prelude::DataFrame {
    groups(df, view.group_by)
        .unwrap()
        .into_iter()
        .find(|(l, _)| l.contains(label))
        .unwrap_or_else(|| panic!("no group {label}"))
        .1
}

/// The values of `col` in `df`, as floats.
fn col(df: &polars::prelude::DataFrame, col: &str) -> Vec<f64> {
    vram_lab::frame::floats(df, col).unwrap()
}

/// A trace's value at a category.
fn at(p: &vram_lab::report::chart::Prepared, trace: &str, category: &str) -> Option<f64> {
    let x = p.categories.iter().position(|c| c == category)? as f64;
    p.traces.iter().filter(|t| t.name == trace).find_map(|t| t.x.iter().position(|&v| v == x).map(|i| t.y[i]))
}

#[test]
fn every_gpu_of_the_four_gpu_run_is_a_stacked_bar_beside_the_ledger() {
    let run = RunFolder::open(&results().join("h200x4/2026-11-26-four-gpus/tp7")).unwrap();
    let v = view("parallel", "per_gpu");
    let spec = v.chart.unwrap();
    let df = run.table("parallel", v.table).unwrap();
    let part = group(&df, &v, "tensor-parallel × 4");
    let p = prepare(&spec, &part).unwrap();
    assert!(p.stacked);
    let ranks = col(&part, "rank");
    assert_eq!(ranks.len(), 4, "four ranks in the four-GPU group");
    assert_eq!(p.categories.len(), 2 * ranks.len(), "a measured and a ledger bar per GPU: {:?}", p.categories);
    let (nccl, ledger, weights) = (col(&part, "nccl_mib"), col(&part, "nccl_predicted_mib"), col(&part, "weights_mib"));
    for (i, r) in ranks.iter().enumerate() {
        let (m, l) = (format!("rank {r} · measured"), format!("rank {r} · ledger"));
        assert_eq!(at(&p, "NCCL", &m), Some(nccl[i]), "rank {r}'s NCCL, measured");
        assert_eq!(at(&p, "NCCL", &l), Some(ledger[i]), "rank {r}'s NCCL, the ledger");
        assert_eq!(at(&p, "weights", &m), Some(weights[i]));
        assert!(at(&p, "KV cache", &m).is_some() && at(&p, "transient (peak above weights − KV cache)", &l).is_some());
    }
    // The same part in both stacks shares its colour; the ledger's is the paler.
    let weights: Vec<_> = p.traces.iter().filter(|t| t.name == "weights").collect();
    assert_eq!(weights.len(), 2);
    assert!(
        weights[0].colour == weights[1].colour
            && weights[0].faint != weights[1].faint
            && weights[0].legend != weights[1].legend
    );
    assert!(draw(&spec, &part).unwrap().to_json().contains("\"barmode\":\"relative\""));
    let svg = draw_svg(&spec, &part).unwrap();
    assert!(svg.matches("<rect").count() > 1 + 2 * 8, "at least two visible parts in each of the eight bars");
    assert!(svg.contains("\nrank 3 · ledger\n"), "the bars are labelled");

    // Training under ZeRO-2 over four: the same, from the item rows.
    let run = RunFolder::open(&results().join("h200x4/2026-11-26-four-gpus/zero2-1.5b")).unwrap();
    let v = view("train", "per_gpu");
    let df = run.table("train", v.table).unwrap();
    let part = groups(&df, v.group_by).unwrap().remove(0).1;
    let p = prepare(&v.chart.unwrap(), &part).unwrap();
    assert_eq!(p.categories.len(), 8, "{:?}", p.categories);
    let (items, ranks, measured) =
        (vram_lab::frame::strings(&part, "item").unwrap(), col(&part, "rank"), col(&part, "measured_mib"));
    let nccl3 =
        (0..part.height()).find(|&i| items[i] == "NCCL's device memory" && ranks[i] == 3.0).map(|i| measured[i]);
    assert!(
        nccl3.is_some() && at(&p, "NCCL's device memory", "rank 3 · measured") == nccl3,
        "rank 3's NCCL from its row"
    );
    assert!(
        at(&p, "step peak", "rank 0 · measured").is_none(),
        "the step peak is the stack's height, not a part of it"
    );
    assert!(at(&p, "optimizer states", "rank 2 · ledger").is_some());
}

#[test]
fn decode_over_one_two_and_four_gpus_stands_beside_its_ceiling() {
    let open = |f: &str| {
        RunFolder::open(&results().join("h200x4/2026-11-26-four-gpus").join(f))
            .unwrap()
            .table("parallel", "parallel_ranks")
            .unwrap()
    };
    let (two, four) = (open("tp7-g2"), open("tp7"));
    let both = two.vstack(&four).unwrap();
    let v = view("parallel", "decode");
    let spec = v.chart.unwrap();
    let p = prepare(&spec, &both).unwrap();
    for c in ["one device", "tensor-parallel × 2", "tensor-parallel × 4"] {
        assert!(p.categories.iter().any(|x| x == c), "{c} in {:?}", p.categories);
    }
    assert!(
        !p.categories.iter().any(|c| c.starts_with("pipeline")),
        "a pipeline's stage ceiling is not the pipeline's: {:?}",
        p.categories
    );
    let unique: std::collections::BTreeSet<_> = p.categories.iter().collect();
    assert_eq!(unique.len(), p.categories.len(), "the one-device rows of the two runs are one bar");
    let decode = |df: &polars::prelude::DataFrame, layout: &str, c: &str| {
        let layouts = vram_lab::frame::strings(df, "layout").unwrap();
        col(df, c)[layouts.iter().position(|l| l == layout).unwrap()]
    };
    assert_eq!(
        at(&p, "decode, measured", "tensor-parallel × 4"),
        Some(decode(&four, "tensor-parallel × 4", "decode_tok_s"))
    );
    assert_eq!(
        at(&p, "decode, measured", "one device"),
        Some(decode(&two, "one device", "decode_tok_s")),
        "the first run's row is kept"
    );
    let ceiling = p.traces.iter().find(|t| t.name.starts_with("ceiling")).unwrap();
    assert_eq!(ceiling.y.len(), p.categories.len(), "a ceiling beside every bar");
    assert!(draw_svg(&spec, &both).unwrap().contains("\ntensor-parallel × 2\n"));
}

#[test]
fn card_lines_are_labelled_in_greys_and_the_axis_follows_the_needs() {
    let run = RunFolder::open(&results().join("h100/2026-11-26-run/run")).unwrap();
    let v = view("estimate", "curve");
    let spec = v.chart.unwrap();
    let df = run.table("estimate", v.table).unwrap();
    let p = prepare(&spec, &df).unwrap();
    let need = col(&df, "need_gib").into_iter().fold(0.0, f64::max);
    let cards = (spec.lines.unwrap())();
    let largest = cards.iter().map(|c| c.1).fold(0.0, f64::max);
    let top = p.y_top.expect("a chart with card lines sets its top");
    assert!(
        top >= need && top < largest,
        "the axis goes to {top}: above the largest need {need}, below the largest card {largest}"
    );
    assert!(!p.lines.is_empty() && p.lines.len() < cards.len(), "the cards within the range only: {:?}", p.lines);
    assert!(p.lines.iter().all(|l| l.1 <= top));
    let plot = draw(&spec, &df).unwrap().to_json();
    let svg = draw_svg(&spec, &df).unwrap();
    for (j, (name, _)) in p.lines.iter().enumerate() {
        assert!(plot.contains(&format!("\"text\":\"{name}\"")), "plotly labels {name}: {plot}");
        assert!(svg.contains(&format!("\n{name}\n")), "the SVG labels {name}");
        let (grey, _) = vram_lab::report::prepare::line_style(j);
        assert!(!vram_lab::report::prepare::PALETTE.contains(&grey), "a card line takes no series colour");
    }
    assert!(plot.contains("\"range\":[0.0,"), "plotly's y axis is set: {plot}");
    // Two cards of nearly one size keep their labels apart.
    let ys = p.line_label_ys(top * 0.045);
    for i in 0..ys.len() {
        for j in 0..i {
            assert!(
                (ys[i] - ys[j]).abs() >= top * 0.045 - 1e-9,
                "labels {} and {} overlap",
                p.lines[i].0,
                p.lines[j].0
            );
        }
    }
}

#[test]
fn the_anatomy_chart_marks_the_f32_oom() {
    let run = RunFolder::open(&results().join("h100/2026-11-26-run/run")).unwrap();
    let v = view("anatomy", "memory");
    let spec = v.chart.unwrap();
    let df = run.table("anatomy", v.table).unwrap();
    let outcomes = vram_lab::frame::strings(&df, "outcome").unwrap();
    let oom = outcomes.iter().position(|o| o == "oom").expect("the committed run's F32 ran out of memory");
    let p = prepare(&spec, &df).unwrap();
    assert_eq!(p.flags.len(), 1, "{:?}", p.flags);
    let precision = &vram_lab::frame::strings(&df, "precision").unwrap()[oom];
    assert_eq!(&p.flags[0].label, precision, "the mark stands on the precision that ran out");
    assert_eq!(p.flags[0].y, col(&df, "predicted_weights_gib")[oom], "above its only bar, the prediction");
    assert!(p.flags[0].text.contains("OOM"));
    assert!(draw(&spec, &df).unwrap().to_json().contains("OOM"), "plotly draws the mark");
    assert!(draw_svg(&spec, &df).unwrap().contains("OOM"), "the SVG draws the mark");
    // No OOM, no mark.
    let ok = df.filter(&polars::prelude::BooleanChunked::from_iter(outcomes.iter().map(|o| o != "oom"))).unwrap();
    assert!(prepare(&spec, &ok).unwrap().flags.is_empty());
}

#[test]
fn each_host_kernel_variant_is_its_own_bar() {
    let run = RunFolder::open(&results().join("h100/2026-11-26-run/run")).unwrap();
    let v = view("bandwidth", "bandwidth");
    let spec = v.chart.unwrap();
    let df = run.table("bandwidth", v.table).unwrap();
    let tests = vram_lab::frame::strings(&df, "test").unwrap();
    let gemv = tests.iter().filter(|t| *t == "host_gemv").count();
    assert!(gemv >= 2, "the committed run timed several tilings");
    let p = prepare(&spec, &df).unwrap();
    let bars: Vec<&String> = p.categories.iter().filter(|c| c.starts_with("host_gemv")).collect();
    assert_eq!(bars.len(), gemv, "one bar per variant: {bars:?}");
    assert!(bars.iter().all(|b| !b.contains("[75776")), "named by what they do not share: {bars:?}");
    let measured = p.traces.iter().find(|t| t.name == "measured").unwrap();
    assert_eq!(measured.y.len(), tests.len(), "every row drawn");
}

#[test]
fn a_notebook_draws_a_view_over_two_runs_put_together() {
    let table = |f: &str| -> vram_lab::report::Table {
        RunFolder::open(&results().join("h200x4/2026-11-26-four-gpus").join(f))
            .unwrap()
            .table("parallel", "parallel_ranks")
            .unwrap()
            .into()
    };
    let both = table("tp7-g2").vstack(&table("tp7")).unwrap();
    let written = std::env::temp_dir().join("vram-lab-parallel-decode-.svg");
    let _ = std::fs::remove_file(&written);
    both.chart("parallel", "decode").unwrap();
    assert!(std::fs::read_to_string(&written).unwrap().contains("\ntensor-parallel × 4\n"), "{}", written.display());
    assert!(both.chart("parallel", "ranks").is_err(), "a view without a chart says so");
}
