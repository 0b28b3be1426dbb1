//! `examples/notebooks_live.rs` is the notebooks' code as a program (built with `--features cuda`
//! and run Live on a GPU without a toolchain, `scripts/notebook_program.py`): it must hold every
//! code cell of every notebook, in order, or it is stale. Building it (`cargo test` builds the
//! examples) compiles every notebook's code as a program here.

use std::path::Path;

#[test]
fn the_notebook_program_holds_every_code_cell() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = std::fs::read_to_string(root.join("examples/notebooks_live.rs")).unwrap();
    let mut notebooks: Vec<_> = std::fs::read_dir(root.join("notebooks"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "ipynb"))
        .collect();
    notebooks.sort();
    assert!(notebooks.len() >= 6);
    let mut at = 0;
    for nb in &notebooks {
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(nb).unwrap()).unwrap();
        let stem = nb.file_stem().unwrap().to_str().unwrap();
        let head = format!("fn nb_{}() -> Out {{", stem.replace(|c: char| !c.is_alphanumeric(), "_"));
        at = at
            + program[at..].find(&head).unwrap_or_else(|| {
                panic!("{stem} is not in the program: run python3 scripts/notebook_program.py write")
            });
        for cell in doc["cells"].as_array().unwrap().iter().filter(|c| c["cell_type"] == "code") {
            let src: String = cell["source"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
            let kept: Vec<&str> =
                src.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with(':')).collect();
            // A cell of `:dep` lines and comments only has nothing to run.
            if kept.iter().all(|l| l.trim_start().starts_with("//")) {
                continue;
            }
            for line in kept {
                let found = program[at..].find(line.trim()).unwrap_or_else(|| {
                    panic!(
                        "{stem}: `{line}` is not in the program (stale): run python3 scripts/notebook_program.py write"
                    )
                });
                at += found;
            }
        }
    }
}

/// Every notebook in Replay (the committed GPU runs), run as the program `cargo test` built: what
/// CI checks of Replay, in seconds rather than an evcxr kernel's minutes per notebook (the Live
/// copies still run in evcxr, `scripts/run_notebooks.py ci`).
#[test]
fn every_notebook_replays_as_a_program() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/this-test → target/<profile>/examples/notebooks_live
    let exe = std::env::current_exe().unwrap();
    let program = exe.parent().and_then(Path::parent).unwrap().join("examples").join("notebooks_live");
    assert!(program.is_file(), "{} is missing: plain `cargo test` builds the examples", program.display());
    let mut names: Vec<String> = std::fs::read_dir(root.join("notebooks"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension().is_some_and(|x| x == "ipynb")).then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    for nb in &names {
        let o = std::process::Command::new(&program)
            .arg(nb)
            .current_dir(root.join("notebooks"))
            .env("VRAM_LAB_HOME", root)
            .env("VRAM_LAB_NOTEBOOK_MODE", "replay")
            .env_remove("EVCXR_IS_RUNTIME")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && !out.contains("@@vram-lab-error"),
            "{nb} in Replay failed:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.matches("@@vram-lab-cell").count() >= 5, "{nb}: too few cells ran:\n{out}");
    }
}
