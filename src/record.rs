//! The committed record, `data/results/<gpu>/<date>-<name>/`: the one door through which the lab reads it
//! (Replay in the notebooks, `vram-lab check`, and the stage times `vram-lab run` expects). Each folder holds its
//! RUN.md, its CSVs and the few files the code reads (run folders' manifests, llama.cpp's launch logs, PyTorch's
//! allocator traces); `scripts/compact_results.py` keeps a new folder to that, and docs/results.md maps each claim
//! to its folder.

use std::path::PathBuf;

/// The record's folder, relative to the lab's (the default of `check --results`).
pub const DIR: &str = "data/results";

/// The lab's folder: `VRAM_LAB_HOME` when set (a notebook compiled here and run as a program on another machine,
/// `scripts/notebook_program.py`), else the crate's own.
pub fn lab_root() -> PathBuf {
    std::env::var_os("VRAM_LAB_HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The record of this lab, absolute, so a notebook or the binary may run from any folder; a binary carried to
/// another machine (a GPU machine without the source tree it was built from) reads it relative to where it runs.
pub fn root() -> PathBuf {
    let own = lab_root().join(DIR);
    if own.is_dir() {
        own
    } else {
        PathBuf::from(DIR)
    }
}
