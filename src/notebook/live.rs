//! A notebook's Live run is the command's run: `vram-lab <stage>` in a child process, writing the
//! run folder the notebook then opens. The binary holds what a notebook kernel cannot: the
//! counting allocator (CPU runs emulate a card with it) and the CUDA allocation hook that retries
//! a failed request after trimming the pool. Without them a Live KV sweep stopped at 16,128 tokens
//! where `vram-lab run` reached 24,064 on the same H100 (issue 41), so Live and the command were
//! two experiments; now they are one.

use crate::error::{LabError, Result};
use crate::session::SessionArgs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `vram-lab` binary a Live notebook runs, and the device it sees.
#[derive(Debug, Clone)]
pub struct Lab {
    pub bin: PathBuf,
    /// `cuda:0 NVIDIA H100 80GB HBM3` or `cpu (8 threads)`, as `vram-lab info` says it.
    pub device: String,
}

impl Lab {
    /// `VRAM_LAB_BIN` when set (a machine without Rust runs a shipped binary); else the crate's own
    /// binary, brought up to date by cargo (a no-op when it is fresh) with CUDA when this notebook
    /// has it. A binary never built is refused with the command that builds it: its first build
    /// takes minutes, which a cell would spend without a word.
    pub fn find(device: &str) -> Result<Self> {
        let bin = match std::env::var_os("VRAM_LAB_BIN") {
            Some(b) => PathBuf::from(b),
            None => build()?,
        };
        if !bin.is_file() {
            return Err(LabError::input(format!("VRAM_LAB_BIN={} is not a file", bin.display())));
        }
        let out = Command::new(&bin).args(["--quiet", "--device", device, "info"]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("device: ")).map(str::to_string);
        match (out.status.success(), line) {
            (true, Some(device)) => Ok(Self { bin, device }),
            _ => Err(LabError::other(format!("{} info --device {device}: {}", bin.display(), last_line(&out.stderr)))),
        }
    }

    pub fn is_cuda(&self) -> bool {
        self.device.starts_with("cuda")
    }

    /// Runs `vram-lab <stage>` with these session flags and the stage's settings (JSON) into `out`.
    /// A stage that fails still leaves its run folder; the caller reads why from the manifest.
    pub fn run_stage(&self, args: &SessionArgs, stage: &str, settings: &str, out: &Path) -> Result<()> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--quiet", "--device", &args.device, "--seed", &args.seed.to_string()]);
        for (flag, value) in [("--model", &args.model), ("--card", &args.card)] {
            if let Some(v) = value {
                cmd.args([flag, v]);
            }
        }
        // Relative to the lab (the child runs there), so the manifest's command names no machine's folders.
        cmd.arg("--out").arg(out.strip_prefix(lab_root()).unwrap_or(out)).arg(stage);
        if settings.trim() != "{}" {
            cmd.args(["--settings", settings]);
        }
        // The command's console streams into the cell as it runs: a stage of minutes shows where it is.
        let mut child = cmd.current_dir(lab_root()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut text = Vec::new();
                let _ = std::io::Read::read_to_end(&mut e, &mut text);
                text
            })
        });
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(std::io::Result::ok) {
                println!("  │ {line}");
            }
        }
        let status = child.wait()?;
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        if !status.success() && !out.join(crate::session::run_folder::MANIFEST).is_file() {
            return Err(LabError::other(format!("vram-lab {stage}: {}", last_line(&stderr))));
        }
        Ok(())
    }
}

/// `cargo build` of the binary, its path from cargo's own messages (CARGO_TARGET_DIR included).
fn build() -> Result<PathBuf> {
    let (profile, build) = if cfg!(feature = "cuda") {
        ("release", "cargo build --release --features cuda")
    } else {
        ("debug", "cargo build")
    };
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| lab_root().join("target"));
    let target = if target.is_absolute() { target } else { lab_root().join(target) };
    if !target.join(profile).join("vram-lab").is_file() {
        return Err(LabError::input(format!(
            "Live runs the lab's own binary, and {} holds none yet: run `{build}` in {} once (minutes), or set VRAM_LAB_BIN",
            target.join(profile).display(),
            lab_root().display()
        )));
    }
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--quiet", "--bin", "vram-lab", "--message-format=json"]);
    if cfg!(feature = "cuda") {
        cmd.args(["--release", "--features", "cuda"]);
    }
    let o = cmd
        .current_dir(lab_root())
        .output()
        .map_err(|e| LabError::other(format!("cargo build of vram-lab (set VRAM_LAB_BIN to a built binary): {e}")))?;
    if !o.status.success() {
        return Err(LabError::other(format!("cargo build of vram-lab failed: {}", last_line(&o.stderr))));
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == "vram-lab")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| LabError::other("cargo built no vram-lab executable"))
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message").to_string()
}

/// The lab's commit: `VRAM_LAB_COMMIT` (a copy without git), else git's, else unknown.
pub fn commit() -> String {
    if let Ok(c) = std::env::var("VRAM_LAB_COMMIT") {
        return c;
    }
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(lab_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) use crate::record::lab_root;
