//! A results folder as `vram-lab check --results DIR` walks it, built from the fuzzer's bytes:
//! each pair of bytes adds one entry (a folder, a file, a FIFO, or a link to `.`, `..`, /dev/zero
//! or a file outside) at a path of names `check` looks for. The walk must end, and return only
//! regular files inside the folder; `check`'s readers must end on what it returns.
#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 6] = ["kv_prefill.csv", "kv_batch.csv", "run.jsonl", "env.json", "sub", "llama.log"];

fuzz_target!(|data: &[u8]| {
    let scratch = common::scratch();
    let root = scratch.join("results");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(scratch.join("outside.csv"), "OUTSIDE").unwrap();
    for op in data.chunks_exact(2).take(32) {
        let (what, at) = (op[0], op[1] as usize);
        let depth = 1 + at % 3;
        let path = (0..depth).fold(root.clone(), |p, k| p.join(NAMES[(at / 3 + k * 5 + (what as usize >> 4)) % NAMES.len()]));
        if path.parent().is_some_and(|d| std::fs::create_dir_all(d).is_err()) || path.symlink_metadata().is_ok() {
            continue;
        }
        let _ = match what % 8 {
            0 => std::fs::create_dir(&path),
            1 | 2 => std::fs::write(&path, &data[..data.len().min(256)]),
            3 => {
                let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
                let _ = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
                Ok(())
            }
            k => std::os::unix::fs::symlink(
                [".".into(), "..".into(), "/dev/zero".into(), scratch.join("outside.csv")][k as usize - 4].clone(),
                &path,
            ),
        };
    }
    let files = vram_lab::paths::walk_files(&root, |_| true);
    for f in &files {
        assert!(f.starts_with(&root) && f.symlink_metadata().unwrap().is_file(), "walked {}", f.display());
    }
    let _ = vram_lab::experiments::check::steps(&root);
    let _ = vram_lab::experiments::check::transformers::sweeps(&root);
    let _ = vram_lab::experiments::check::llamacpp::launches(&root);
});
