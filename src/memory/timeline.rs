//! A timeline of labelled snapshots, as a polars DataFrame for tables and charts.

use super::{mib, Snapshot};
use crate::error::Result;
use polars::prelude::*;

#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub snapshots: Vec<Snapshot>,
}

impl Timeline {
    pub fn push(&mut self, s: Snapshot) {
        self.snapshots.push(s);
    }

    /// One row a snapshot, in MiB, with the allocated delta against the previous row.
    pub fn to_dataframe(&self) -> Result<DataFrame> {
        let s = &self.snapshots;
        let col = |f: fn(&Snapshot) -> u64| s.iter().map(|x| mib(f(x))).collect::<Vec<f64>>();
        let opt = |f: fn(&Snapshot) -> Option<u64>| s.iter().map(|x| f(x).map(mib)).collect::<Vec<Option<f64>>>();
        let delta: Vec<f64> = s
            .iter()
            .enumerate()
            .map(|(i, x)| if i == 0 { 0.0 } else { x.delta_allocated(&s[i - 1]) as f64 / super::MIB })
            .collect();
        Ok(df!(
            "label" => s.iter().map(|x| x.label.clone()).collect::<Vec<_>>(),
            "t_s" => s.iter().map(|x| x.t_s).collect::<Vec<_>>(),
            "allocated_mib" => col(|x| x.allocated),
            "reserved_mib" => col(|x| x.reserved),
            "peak_mib" => col(|x| x.peak),
            "reserved_peak_mib" => col(|x| x.reserved_peak),
            "delta_allocated_mib" => delta,
            "device_used_mib" => opt(|x| x.device_used),
            "device_total_mib" => opt(|x| x.device_total),
            "process_used_mib" => opt(|x| x.process_used),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(label: &str, allocated: u64, reserved: u64, peak: u64) -> Snapshot {
        Snapshot {
            label: label.into(),
            t_s: 0.0,
            allocated,
            reserved,
            peak,
            reserved_peak: reserved,
            device_used: None,
            device_free: None,
            device_total: None,
            process_used: None,
            ballast: 0,
        }
    }

    #[test]
    fn arithmetic_and_frame() {
        let a = snap("init", 0, 0, 0);
        let b = snap("loaded", 100 << 20, 128 << 20, 150 << 20);
        assert_eq!(b.cached(), 28 << 20);
        assert_eq!(b.transient(), 50 << 20);
        assert_eq!(b.delta_allocated(&a), 100 << 20);
        assert_eq!(a.delta_allocated(&b), -(100 << 20));
        let mut t = Timeline::default();
        t.push(a);
        t.push(b);
        t.push(snap("freed", 40 << 20, 128 << 20, 150 << 20));
        let df = t.to_dataframe().unwrap();
        assert_eq!(df.height(), 3);
        let d = df.column("delta_allocated_mib").unwrap().f64().unwrap();
        assert_eq!(d.get(1), Some(100.0));
        assert_eq!(d.get(2), Some(-60.0));
    }
}
