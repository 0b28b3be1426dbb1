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
            let Some(df) = runs.iter().find_map(|r| r.table(stage.name(), view.table).ok()) else {
                panic!("no committed run holds {}'s table {}", stage.name(), view.table);
            };
            let (_, part) = groups(&df, view.group_by).unwrap().into_iter().next().unwrap();
            let prepared = prepare(&spec, &part).unwrap();
            assert!(!prepared.traces.is_empty(), "{}/{}: no series with a value", stage.name(), view.name);
            let plot = draw(&spec, &part).unwrap().to_json();
            let svg = draw_svg(&spec, &part).unwrap();
            let text = svg.replace("&apos;", "'").replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{}/{}", stage.name(), view.name);
            assert!(text.contains(&format!("\n{}\n", prepared.title)), "{}/{}: the title in the SVG", stage.name(), view.name);
            for t in &prepared.traces {
                assert!(plot.contains(&t.name.replace('"', "\\\"")), "{}/{}: trace {} in plotly", stage.name(), view.name, t.name);
                assert!(text.contains(&format!("\n{}\n", t.name)), "{}/{}: trace {} in the SVG's legend", stage.name(), view.name, t.name);
            }
            let marks = svg.matches("<rect").count() + svg.matches("<polyline").count() + svg.matches("<circle").count();
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
