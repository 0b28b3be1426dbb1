//! Running one hostile case: a scratch folder laid out with the case's files (regular files,
//! symlinks, FIFOs) beside the user's own files, the binary run there under a time limit, and a
//! snapshot of every path before and after: nothing that was there may change, and new paths may
//! appear only under `out/` (the run folder) — so an attack that writes through a link, replaces a
//! file or creates one elsewhere fails its case.

pub use super::snapshot::{snapshot, Seen};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A hang guard, not a benchmark: every case answers in well under a second on CPU.
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The user's own file, in every scratch folder: an attack aims at it.
pub const VICTIM: &str = "victim.txt";
pub const VICTIM_TEXT: &str = "the user's own file: nothing may change it\n";

pub enum Entry {
    File(Vec<u8>),
    /// A symbolic link to this target (relative to the link's folder, or absolute).
    Link(String),
    Fifo,
}

pub struct Case {
    pub group: &'static str,
    pub args: Vec<String>,
    /// What the scratch folder holds before the run, by relative path.
    pub entries: Vec<(String, Entry)>,
    pub env: Vec<(&'static str, String)>,
    /// A word or phrase the error line must contain.
    pub expect: &'static str,
}

pub fn case(group: &'static str, args: &str, expect: &'static str) -> Case {
    Case { group, args: args.split_whitespace().map(str::to_string).collect(), entries: vec![], env: vec![], expect }
}

impl Case {
    pub fn file(mut self, path: &str, bytes: impl Into<Vec<u8>>) -> Self {
        self.entries.push((path.to_string(), Entry::File(bytes.into())));
        self
    }
    pub fn files(mut self, files: Vec<(String, Vec<u8>)>) -> Self {
        self.entries.extend(files.into_iter().map(|(p, b)| (p, Entry::File(b))));
        self
    }
    pub fn link(mut self, path: &str, target: &str) -> Self {
        self.entries.push((path.to_string(), Entry::Link(target.to_string())));
        self
    }
    pub fn fifo(mut self, path: &str) -> Self {
        self.entries.push((path.to_string(), Entry::Fifo));
        self
    }
    pub fn env(mut self, key: &'static str, value: &str) -> Self {
        self.env.push((key, value.to_string()));
        self
    }
}

pub struct Outcome {
    pub code: Option<i32>,
    pub stderr: String,
    pub stdout: String,
    pub hung: bool,
    /// Paths created outside `out/`, and paths that were there and changed or went.
    pub stray: Vec<PathBuf>,
    pub changed: Vec<PathBuf>,
}

/// The binary under test: VRAM_LAB_BIN (a release build, for the same-verdict check), else the
/// one cargo built for this test.
pub fn binary() -> PathBuf {
    std::env::var_os("VRAM_LAB_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vram-lab")))
}

fn lay_out(root: &Path, c: &Case) {
    std::fs::write(root.join(VICTIM), VICTIM_TEXT).unwrap();
    for (path, entry) in &c.entries {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        // A later entry takes the place of an earlier one (a run folder's report.html as a link).
        let _ = std::fs::remove_file(&p);
        match entry {
            Entry::File(bytes) => std::fs::write(&p, bytes).unwrap(),
            Entry::Link(target) => std::os::unix::fs::symlink(target, &p).unwrap(),
            Entry::Fifo => {
                let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
            }
        }
    }
}

pub fn run(c: &Case) -> Outcome {
    let scratch = tempfile::tempdir().unwrap();
    lay_out(scratch.path(), c);
    let before = snapshot(scratch.path(), None);
    let mut cmd = Command::new(binary());
    cmd.args(&c.args).args(["--quiet", "--out", "out"]).current_dir(scratch.path());
    cmd.env("HF_HOME", scratch.path().join("out/hf"))
        .env_remove("HF_ENDPOINT")
        .env_remove("RUST_BACKTRACE")
        .env_remove("HF_TOKEN");
    for (k, v) in &c.env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut so, &mut s).ok();
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut se, &mut s).ok();
        s
    });
    let start = Instant::now();
    let (code, hung) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break (status.code(), false);
        }
        if start.elapsed() > TIME_LIMIT {
            child.kill().ok();
            child.wait().ok();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let after = snapshot(scratch.path(), None);
    let stray = after.keys().filter(|p| !before.contains_key(*p) && !p.starts_with("out")).cloned().collect();
    let changed = before.iter().filter(|(p, seen)| after.get(*p) != Some(seen)).map(|(p, _)| p.clone()).collect();
    Outcome { code, stderr: err_t.join().unwrap(), stdout: out_t.join().unwrap(), hung, stray, changed }
}
