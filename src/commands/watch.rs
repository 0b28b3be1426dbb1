//! `vram-lab watch`: a process's GPU memory over time (NVML, or its RSS without NVML), as the
//! related article's pynvml monitor.

use crate::error::{LabError, Result};
use crate::memory::fmt_bytes;
use crate::session::SessionArgs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct WatchArgs {
    /// The process to watch (default: the command after --, else the whole GPU)
    #[arg(long)]
    pub pid: Option<u32>,
    /// The GPU's index, as nvidia-smi numbers them
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// Milliseconds between samples (1 to 3,600,000)
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub interval_ms: u64,
    /// Stop after this many seconds (default: when the process ends; Ctrl-C stops too)
    #[arg(long, value_parser = duration_s)]
    pub duration_s: Option<f64>,
    /// Write the samples here
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// A jump of the process's memory between two samples above this is flagged, MiB
    #[arg(long, default_value_t = 100.0, value_parser = crate::limits::mib_f64)]
    pub threshold_mib: f64,
    /// A command to start and watch (after --)
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// The longest watch: a week.
const MAX_DURATION_S: f64 = 7.0 * 24.0 * 3600.0;

/// The most samples one watch keeps (about 100 B each): a week at the shortest interval would
/// fill the host's memory.
const MAX_SAMPLES: usize = 1_000_000;

/// Ends the watched command's process group: SIGTERM, two seconds to go, then SIGKILL.
fn end_group(c: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let group = -(c.id() as i32);
    // SAFETY: signals to the group this command made (process_group(0): its pid is the group's id).
    unsafe { libc::kill(group, libc::SIGTERM) };
    for _ in 0..20 {
        if let Ok(Some(st)) = c.try_wait() {
            unsafe { libc::kill(group, libc::SIGKILL) };
            return Some(st);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    unsafe { libc::kill(group, libc::SIGKILL) };
    c.wait().ok()
}

fn duration_s(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= MAX_DURATION_S) {
        return Err(format!("{s} s is outside (0, {MAX_DURATION_S}] (a week)"));
    }
    Ok(v)
}

/// Samples a process's GPU memory (NVML; its RSS where there is no NVML) until it ends, the
/// duration passes or Ctrl-C; writes the CSV and returns the summary.
pub fn watch(args: &SessionArgs, w: &WatchArgs) -> Result<String> {
    use crate::memory::nvml::{Poller, Source};
    if w.pid.is_none() && w.command.is_empty() && w.duration_s.is_none() {
        return Err(LabError::input(
            "watch what? give --pid PID, a command after --, or --duration-s to watch the whole GPU",
        ));
    }
    if w.interval_ms == 0 {
        return Err(LabError::input("--interval-ms must be above 0"));
    }
    // The samples go to a new file: checked before the command starts, not after it ran.
    if let Some(path) = w.csv.as_ref().filter(|p| std::fs::symlink_metadata(p).is_ok()) {
        return Err(LabError::input(format!("{} already exists: --csv writes a new file", path.display())));
    }
    let mut child = match w.command.split_first() {
        Some((prog, rest)) => Some(
            // Its own process group, so that ending it ends what it started too (a shell's children).
            std::process::Command::new(prog)
                .args(rest)
                .process_group(0)
                .spawn()
                .map_err(|e| LabError::input(format!("cannot start `{prog}`: {e}")))?,
        ),
        None => None,
    };
    let pid = w.pid.or(child.as_ref().map(|c| c.id()));
    if let Some(p) = w.pid {
        if !Path::new(&format!("/proc/{p}")).exists() {
            return Err(LabError::input(format!("no process {p}")));
        }
    }
    let sampler = Poller::new(pid, w.gpu);
    let what = match (pid, sampler.source) {
        (Some(p), Source::Nvml) => format!("process {p} on GPU {} (NVML)", w.gpu),
        (Some(p), Source::Rss) => format!("process {p}: no NVML here, its host RSS instead"),
        (None, Source::Nvml) => format!("GPU {} (NVML)", w.gpu),
        (None, Source::Rss) => {
            return Err(LabError::Unsupported(
                "no NVML here (no NVIDIA driver): give --pid or a command to watch its RSS".into(),
            ))
        }
    };
    let bar = if args.silent { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new_spinner() };
    let mut samples = Vec::new();
    let mut status = None;
    let mut truncated = false;
    let started = std::time::Instant::now();
    loop {
        let s = sampler.sample();
        bar.set_message(format!(
            "{what}: {:.1} s, {} · device {}",
            s.t_s,
            s.process_used.map(fmt_bytes).unwrap_or_else(|| "—".into()),
            s.device_used.map(fmt_bytes).unwrap_or_else(|| "—".into())
        ));
        bar.tick();
        samples.push(s);
        if let Some(c) = child.as_mut() {
            if let Some(st) = c.try_wait()? {
                status = Some(st);
                break;
            }
        } else if let Some(p) = pid {
            if !Path::new(&format!("/proc/{p}")).exists() {
                break;
            }
        }
        if w.duration_s.is_some_and(|d| samples.last().map(|s| s.t_s).unwrap_or(0.0) >= d)
            || crate::session::stop_requested()
        {
            break;
        }
        if samples.len() >= MAX_SAMPLES {
            truncated = true;
            break;
        }
        // The last sleep ends at --duration-s, not a whole interval past it.
        let mut nap = std::time::Duration::from_millis(w.interval_ms);
        if let Some(d) = w.duration_s {
            nap = nap.min(std::time::Duration::from_secs_f64(d).saturating_sub(started.elapsed()));
        }
        std::thread::sleep(nap);
    }
    bar.finish_and_clear();
    if let Some(c) = child.as_mut() {
        if status.is_none() {
            status = end_group(c);
        }
    }
    let used: Vec<Option<u64>> =
        samples.iter().map(|s| s.process_used.or(if pid.is_none() { s.device_used } else { None })).collect();
    let threshold = (w.threshold_mib * crate::memory::MIB) as i64;
    let jumps: Vec<(f64, i64)> = samples
        .windows(2)
        .zip(used.windows(2))
        .filter_map(|(s, u)| Some((s[1].t_s, u[1]? as i64 - u[0]? as i64)))
        .filter(|(_, d)| *d > threshold)
        .collect();
    if let Some(path) = &w.csv {
        let df = polars::df!(
            "t_s" => samples.iter().map(|s| s.t_s).collect::<Vec<_>>(),
            "pid" => samples.iter().map(|s| s.pid).collect::<Vec<_>>(),
            "process_used_mib" => samples.iter().map(|s| s.process_used.map(crate::memory::mib)).collect::<Vec<_>>(),
            "device_used_mib" => samples.iter().map(|s| s.device_used.map(crate::memory::mib)).collect::<Vec<_>>(),
            "device_total_mib" => samples.iter().map(|s| s.device_total.map(crate::memory::mib)).collect::<Vec<_>>(),
            "source" => samples.iter().map(|s| format!("{:?}", s.source).to_lowercase()).collect::<Vec<_>>(),
        )?;
        use polars::prelude::{CsvWriter, SerWriter};
        let mut bytes = Vec::new();
        CsvWriter::new(&mut bytes).finish(&mut df.clone())?;
        crate::paths::write_new(path, &bytes)?;
    }
    let peak = used.iter().flatten().max().copied();
    let first = used.iter().flatten().next().copied();
    let last = used.iter().flatten().last().copied();
    let mut lines = vec![format!(
        "watched {what}: {} samples over {:.1} s",
        samples.len(),
        samples.last().map(|s| s.t_s).unwrap_or(0.0)
    )];
    lines.push(format!(
        "first {}, last {}, peak {}",
        first.map(fmt_bytes).unwrap_or_else(|| "—".into()),
        last.map(fmt_bytes).unwrap_or_else(|| "—".into()),
        peak.map(fmt_bytes).unwrap_or_else(|| "—".into())
    ));
    lines.push(match jumps.len() {
        0 => format!("no jump above {} MiB between samples", w.threshold_mib),
        n => format!(
            "{n} jumps above {} MiB, the first at {:.1} s (+{})",
            w.threshold_mib,
            jumps[0].0,
            fmt_bytes(jumps[0].1 as u64)
        ),
    });
    if let Some(st) = status {
        lines.push(format!("the command ended: {st}"));
    }
    if truncated {
        lines.push(format!("stopped after {MAX_SAMPLES} samples, the most one watch keeps"));
    }
    if let Some(path) = &w.csv {
        lines.push(format!("wrote {}", path.display()));
    }
    Ok(lines.join("\n"))
}
