//! A notebook's prose may quote only figures its own outputs show, or a committed file it names
//! (issue 41: "the bisection finds 24,064" sat above a table of 16,128). Every number of three
//! or more digits, or with a decimal point, in a markdown cell must appear among the numbers of
//! that notebook's outputs (tables, text, filled prose; not chart JSON) or of a file the cell
//! names in backticks or a link. The interpretations themselves are filled from the run at render
//! time (`StageRun::say`), so they cannot drift; this test keeps the markdown around them honest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text_of(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(a) => a.iter().filter_map(|l| l.as_str()).collect(),
        _ => String::new(),
    }
}

/// "24,064" → "24064", "352.50" → "352.5": a figure however it is written.
fn normal(token: &str) -> String {
    let t = token.replace(',', "");
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        t
    }
}

/// The numbers of a text, as written (commas grouping thousands, a decimal part).
fn numbers(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        // ",ddd" groups, then ".d+".
        while i + 3 < b.len()
            && b[i] == b','
            && b[i + 1..i + 4].iter().all(u8::is_ascii_digit)
            && !b.get(i + 4).is_some_and(u8::is_ascii_digit)
        {
            i += 4;
        }
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
        out.push(text[start..i].to_string());
    }
    out
}

/// A figure the prose makes a claim with: three digits or more, or a decimal part.
fn is_figure(token: &str) -> bool {
    token.contains('.') || token.chars().filter(char::is_ascii_digit).count() >= 3
}

/// Markdown without code (fenced or inline) and link targets; and the files those name.
fn prose_and_files(md: &str) -> (String, Vec<PathBuf>) {
    let mut prose = String::new();
    let mut files = Vec::new();
    let mut named = |s: &str| {
        let s = s.trim();
        for base in [root(), root().join("notebooks")] {
            let p = base.join(s);
            if !s.is_empty() && p.exists() {
                files.push(if p.is_dir() { p.join("RUN.md") } else { p });
            }
        }
    };
    let mut in_fence = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find(['`', ']']) {
            prose.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if rest.as_bytes()[i] == b'`' {
                let end = after.find('`').unwrap_or(after.len());
                named(&after[..end]);
                rest = after.get(end + 1..).unwrap_or("");
            } else if let Some(target) = after.strip_prefix('(') {
                let end = target.find(')').unwrap_or(target.len());
                named(&target[..end]);
                rest = target.get(end + 1..).unwrap_or("");
            } else {
                rest = after;
            }
        }
        prose.push_str(rest);
        prose.push('\n');
    }
    (prose, files)
}

/// The outputs' text a reader sees: streams, tables, filled prose; not chart JSON or SVG.
fn outputs_text(nb: &serde_json::Value) -> String {
    let mut text = String::new();
    for cell in nb["cells"].as_array().into_iter().flatten() {
        for o in cell["outputs"].as_array().into_iter().flatten() {
            text += &text_of(&o["text"]);
            for mime in ["text/plain", "text/html", "text/markdown"] {
                text += &text_of(&o["data"][mime]);
            }
            text.push('\n');
        }
    }
    text
}

/// The figures of a notebook's markdown that none of its outputs or named files show.
fn drift(path: &Path) -> Vec<String> {
    let nb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let shown: BTreeSet<String> = numbers(&outputs_text(&nb)).iter().map(|t| normal(t)).collect();
    let mut missing = Vec::new();
    for cell in nb["cells"].as_array().into_iter().flatten().filter(|c| c["cell_type"] == "markdown") {
        let (prose, files) = prose_and_files(&text_of(&cell["source"]));
        let in_files: BTreeSet<String> = files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .flat_map(|t| numbers(&t))
            .map(|t| normal(&t))
            .collect();
        for t in numbers(&prose).into_iter().filter(|t| is_figure(t)) {
            let n = normal(&t);
            if !shown.contains(&n) && !in_files.contains(&n) && !missing.contains(&t) {
                missing.push(t);
            }
        }
    }
    missing
}

fn notebooks() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("notebooks"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ipynb"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_figure_in_a_notebooks_prose_is_one_of_its_outputs() {
    let nbs = notebooks();
    assert_eq!(nbs.len(), 7, "{nbs:?}");
    let bad: Vec<String> = nbs
        .iter()
        .filter_map(|p| {
            let d = drift(p);
            (!d.is_empty()).then(|| format!("{}: {}", p.file_name().unwrap().to_string_lossy(), d.join(", ")))
        })
        .collect();
    assert!(bad.is_empty(), "figures in the prose that no output shows:\n{}", bad.join("\n"));
}

/// The committed broken copy (02_kv_cache with an older run's 16,128 in its prose): a markdown cell
/// quoting a figure no output shows is caught, and
/// only that one.
#[test]
fn a_drifted_copy_fails() {
    let d = drift(&root().join("tests/fixtures/notebooks/drifted.ipynb"));
    assert_eq!(d, vec!["16,128".to_string()]);
}

/// What a template field shows when a Live run lacks its row (`notebook::MISSING`): the
/// committed notebooks never print it (a committed run answers every field, or the field errs).
#[test]
fn no_committed_notebook_prints_a_hole() {
    let holes: Vec<String> = notebooks()
        .iter()
        .filter_map(|p| {
            let nb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
            let n = outputs_text(&nb).matches(vram_lab::notebook::MISSING).count();
            (n > 0).then(|| format!("{}: {n}", p.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(holes.is_empty(), "outputs printing `{}`: {holes:?}", vram_lab::notebook::MISSING);
}

/// The committed broken template (05's load interpretation with keys from another run than the one
/// it replays): filled from that committed load run it fails, naming the field, instead of printing a
/// hole; with the run's own keys it fills.
#[test]
fn a_stale_key_fails_its_notebook() {
    let template = std::fs::read_to_string(root().join("tests/fixtures/notebooks/stale-key.md")).unwrap();
    let load = vram_lab::notebook::committed("h200/2026-11-22-load/load", "load").unwrap();
    let e = load.fill(&template).unwrap_err().to_string();
    assert!(e.contains("checkpoint=gguf q4_k_m, precision=q4_k_m") && e.contains("stale key"), "{e}");
    let mended = template.replace("gguf q4_k_m,", "gguf q4,").replace("precision=q4_k_m,", "precision=q4,");
    assert!(load.fill(&mended).is_ok());
}

/// Every notebook's first output says where its outputs come from, and no output names a
/// machine's folders (the build machine's or a runner's).
#[test]
fn outputs_say_where_they_come_from_and_name_no_machine() {
    for p in notebooks() {
        let nb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let first =
            nb["cells"].as_array().unwrap().iter().flat_map(|c| c["outputs"].as_array().into_iter().flatten()).next();
        let first = first.map(|o| text_of(&o["text"]) + &text_of(&o["data"]["text/plain"])).unwrap_or_default();
        assert!(
            first.contains("输出来源 Outputs:"),
            "{name}: the first output is not where the outputs come from:\n{first}"
        );
        let all = outputs_text(&nb);
        for folder in ["/work/", "/tmp/", "/root/", "/home/"] {
            assert!(!all.contains(folder), "{name}: an output names {folder}");
        }
    }
}

#[test]
fn numbers_are_read_as_written() {
    assert_eq!(
        numbers("at 24,064 tokens, 2.1 % below 1,234,567.50; qwen2.5-7b 1,2"),
        ["24,064", "2.1", "1,234,567.50", "2.5", "7", "1", "2"]
    );
    assert!(is_figure("24,064") && is_figure("2.1") && !is_figure("28"));
    assert_eq!(normal("352.50"), "352.5");
    let (prose, _) = prose_and_files("see `data/results` and [x](README.md) 123\n```\n999\n```");
    assert!(prose.contains("123") && !prose.contains("999") && !prose.contains("README"));
}
