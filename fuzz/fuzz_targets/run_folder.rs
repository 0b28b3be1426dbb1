//! A run folder's manifest.json as `vram-lab report DIR` reads it: the stages, their tables and
//! texts named by the manifest, rendered into report.html. The folder also holds a CSV, a text
//! and a link to a file outside it, so a manifest that names them (or climbs out, or names the
//! folder itself) is tried too. Errors are fine; a panic, a hang, or a read outside the folder
//! (the outside file's marker in the page) is the bug.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use vram_lab::session::run_folder::RunFolder;

const OUTSIDE: &str = "OUTSIDE-THE-RUN-FOLDER";

fuzz_target!(|data: &[u8]| {
    let root = common::scratch();
    let dir = root.join("r");
    if !dir.is_dir() {
        std::fs::create_dir_all(dir.join("estimate")).unwrap();
        std::fs::write(root.join("outside.txt"), OUTSIDE).unwrap();
        std::fs::write(dir.join("estimate/t.csv"), "a,b\n1,2\n").unwrap();
        std::fs::write(dir.join("estimate/notes.txt"), "notes").unwrap();
        let _ = std::os::unix::fs::symlink("../../outside.txt", dir.join("estimate/link.txt"));
    }
    std::fs::write(dir.join("manifest.json"), data).unwrap();
    let _ = std::fs::remove_file(dir.join("report.html"));
    if let Ok(run) = RunFolder::open(&dir) {
        if let Ok(page) = vram_lab::report::html::render(&run, &vram_lab::experiments::registry()) {
            assert!(!page.contains(OUTSIDE), "the report embedded a file outside its run folder");
        }
    }
});
