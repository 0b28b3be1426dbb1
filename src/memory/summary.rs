//! The memory summary as a text table, in the spirit of torch.cuda.memory_summary.

use super::{alloc_hook::AllocCounts, fmt_bytes, Snapshot};

fn opt(b: Option<u64>) -> String {
    b.map(fmt_bytes).unwrap_or_else(|| "n/a".into())
}

pub fn memory_summary(s: &Snapshot, counts: Option<AllocCounts>) -> String {
    let line = "|".to_string() + &"-".repeat(63) + "|";
    let mut rows: Vec<(String, String)> = vec![
        ("Allocated (live tensors)".into(), fmt_bytes(s.allocated)),
        ("Peak allocated".into(), fmt_bytes(s.peak)),
        ("Reserved (allocator)".into(), fmt_bytes(s.reserved)),
        ("Peak reserved".into(), fmt_bytes(s.reserved_peak)),
        ("Cached (reserved - allocated)".into(), fmt_bytes(s.cached())),
        ("Device used / total".into(), format!("{} / {}", opt(s.device_used), opt(s.device_total))),
        ("Device free".into(), opt(s.device_free)),
        ("This process (nvidia-smi / RSS)".into(), opt(s.process_used)),
    ];
    if s.ballast > 0 {
        rows.push(("Ballast (card emulation)".into(), fmt_bytes(s.ballast)));
    }
    if let Some(c) = counts {
        rows.extend([
            ("Allocations live / peak".into(), format!("{} / {}", c.live, c.live_peak)),
            ("Allocations total / freed".into(), format!("{} / {}", c.allocs, c.frees)),
            (
                "Bytes allocated / freed (total)".into(),
                format!("{} / {}", fmt_bytes(c.alloc_bytes), fmt_bytes(c.free_bytes)),
            ),
            ("Largest live allocation".into(), fmt_bytes(c.largest_live)),
            ("Failed allocations (OOM)".into(), c.failures.to_string()),
            ("Requests served after a trim (retried)".into(), c.retried.to_string()),
        ]);
    }
    let mut out = vec![line.replace('-', "="), format!("| {:<61} |", "vram-lab memory summary"), line.clone()];
    out.extend(rows.iter().map(|(k, v)| format!("| {k:<34} | {v:>24} |")));
    out.push(line.replace('-', "="));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_lists_every_reading() {
        let s = Snapshot {
            label: "x".into(),
            t_s: 0.0,
            allocated: 3 << 30,
            reserved: 4 << 30,
            peak: 5 << 30,
            reserved_peak: 5 << 30,
            device_used: Some(6 << 30),
            device_free: Some(18 << 30),
            device_total: Some(24 << 30),
            process_used: None,
            ballast: 1 << 30,
        };
        let text = memory_summary(&s, Some(AllocCounts { failures: 1, ..Default::default() }));
        assert!(text.contains("3.00 GiB"));
        assert!(text.contains("Cached (reserved - allocated)") && text.contains("1.00 GiB"));
        assert!(text.contains("6.00 GiB / 24.00 GiB"));
        assert!(text.contains("Failed allocations (OOM)"));
        assert!(text.contains("n/a"));
    }
}
