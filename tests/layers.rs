//! The one-way structure of `src/` (docs/ARCHITECTURE.md): every file imports only its own layer
//! and the layers below, no files import each other in a circle, and docs/module-graph.md is the
//! graph of the code as it is. The reading of the code is `examples/module_graph.rs`.

#[path = "../examples/module_graph.rs"]
mod module_graph;

use module_graph::{code_of, layer_of, model_layer_of, Graph, MODEL_LAYERS};
use std::path::Path;

fn graph() -> Graph {
    Graph::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).unwrap()
}

#[test]
fn no_file_imports_a_higher_layer() {
    let g = graph();
    assert!(g.unplaced().is_empty(), "modules without a layer in module_graph::LAYERS: {:?}", g.unplaced());
    let up = g.upward();
    assert!(
        up.is_empty(),
        "upward imports ({}):\n{}",
        up.len(),
        up.iter().map(|(a, b)| format!("  {a} -> {b}")).collect::<Vec<_>>().join("\n")
    );
}

/// Inside model/ too: config, formats, layers and kernels, the decoder, running it
/// (`module_graph::MODEL_LAYERS`, docs/ARCHITECTURE.md), no import running back up.
#[test]
fn no_model_file_imports_a_higher_sub_layer() {
    let g = graph();
    assert!(g.model_unplaced().is_empty(), "model/ files without a sub-layer: {:?}", g.model_unplaced());
    let up = g.model_upward();
    assert!(
        up.is_empty(),
        "upward imports inside model/ ({}):\n{}",
        up.len(),
        up.iter().map(|(a, b)| format!("  {a} -> {b}")).collect::<Vec<_>>().join("\n")
    );
    // Whole folders (or files of model/ itself) are placed, never a file apart from its folder.
    for (what, prefixes) in MODEL_LAYERS {
        assert!(prefixes.iter().all(|p| p.matches("::").count() == 1), "{what}: {prefixes:?} places a file alone");
    }
    assert!(g.model_folders_upward().is_empty(), "folder arrows up: {:?}", g.model_folders_upward());
    assert_eq!((model_layer_of("model::layers::linear"), model_layer_of("model::decoder::model")), (Some(2), Some(3)));
    assert_eq!(model_layer_of("model"), None);
}

#[test]
fn no_import_circles() {
    let circles = graph().circles();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.iter().map(|c| format!("  {}", c.join(" ↔ "))).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_module_graph_page_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/module-graph.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == graph().page(),
        "docs/module-graph.md is stale: run `cargo run --example module_graph -- --write`"
    );
}

/// The reader sees the imports that are there and nothing in comments, strings or tests.
#[test]
fn the_reader_finds_imports_and_skips_comments_strings_and_tests() {
    let dir = std::env::temp_dir().join(format!("vram-lab-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("memory")).unwrap();
    std::fs::create_dir_all(dir.join("model")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod error; pub mod memory; pub mod model;").unwrap();
    std::fs::write(
        dir.join("error.rs"),
        "// use crate::model::Foo;\nconst S: &str = \"crate::memory::x\"; const C: char = '\"';\n#[cfg(test)]\nmod tests { use crate::model::Foo; }\n",
    )
    .unwrap();
    std::fs::write(dir.join("memory/mod.rs"), "pub mod probe;\npub use probe::Probe;\n").unwrap();
    std::fs::write(dir.join("memory/probe.rs"), "use crate::error::E;\npub struct Probe;").unwrap();
    std::fs::write(dir.join("model/mod.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(dir.join("model/a.rs"), "use super::b::{B, self};\nfn f() { crate::memory::Probe; }").unwrap();
    std::fs::write(dir.join("model/b.rs"), "pub struct B; fn g() { super::a::f(); }").unwrap();
    let g = Graph::read(&dir).unwrap();
    assert!(g.edges["error"].is_empty(), "{:?}", g.edges["error"]);
    assert_eq!(
        g.edges["model::a"].iter().cloned().collect::<Vec<_>>(),
        ["memory::probe", "model::b"],
        "a re-export counts as its defining file"
    );
    assert_eq!(g.circles(), vec![vec!["model::a".to_string(), "model::b".to_string()]]);
    assert_eq!(layer_of("model::a"), Some(3));
    assert!(!code_of("let s = r#\"crate::x\"#;").contains("crate::x"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One file, one idea: every file of `src/` opens by saying what it holds (its `//!` lines). Length is no rule: a
/// long file is fine when it is one idea, and a split names the concern it separates in the new file's first line.
#[test]
fn every_file_says_what_it_holds() {
    let g = graph();
    let silent: Vec<String> = g
        .files
        .values()
        .filter(|p| !std::fs::read_to_string(p).unwrap().starts_with("//!"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(silent.is_empty(), "files that do not open with what they hold: {silent:?}");
}

/// Every CUDA kernel's source is a `.cu` file, included at build time: no `__global__` inside a
/// Rust string.
#[test]
fn cuda_kernels_live_in_cu_files() {
    let g = graph();
    let inline: Vec<String> = g
        .files
        .values()
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("__global__"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(inline.is_empty(), "CUDA source inside Rust files: {inline:?}");
    let cu: Vec<_> = walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    assert!(cu.len() >= 3, "decode.cu, flash_attention.cu and read.cu: {cu:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
