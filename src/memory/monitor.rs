//! `MemoryMonitor`: labelled snapshots with the bytes each category holds where the caller knows
//! them (weights, KV cache, logits, activations, workspace), and growth between marks flagged
//! above a threshold — the related article's monitor (100 MB), with two corrections: it watches
//! allocated bytes, not reserved (a pool that keeps freed memory only looks like a leak), and it
//! says which category grew.

use super::{MemoryProbe, Snapshot};
use serde::{Deserialize, Serialize};

/// What a byte is for, where the lab knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Weights,
    KvCache,
    Logits,
    Activations,
    Workspace,
}

impl Category {
    pub const ALL: [Category; 5] = [Self::Weights, Self::KvCache, Self::Logits, Self::Activations, Self::Workspace];

    pub fn name(self) -> &'static str {
        match self {
            Self::Weights => "weights",
            Self::KvCache => "kv_cache",
            Self::Logits => "logits",
            Self::Activations => "activations",
            Self::Workspace => "workspace",
        }
    }
}

/// Bytes held per category at one moment; what the allocator holds beyond them is unattributed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldBytes(pub Vec<(Category, u64)>);

impl HeldBytes {
    pub fn of(pairs: &[(Category, u64)]) -> Self {
        let mut h = HeldBytes::default();
        for &(c, b) in pairs {
            h.add(c, b);
        }
        h
    }
    pub fn add(&mut self, c: Category, bytes: u64) {
        match self.0.iter_mut().find(|(k, _)| *k == c) {
            Some((_, b)) => *b += bytes,
            None => self.0.push((c, bytes)),
        }
    }
    pub fn get(&self, c: Category) -> u64 {
        self.0.iter().find(|(k, _)| *k == c).map(|(_, b)| *b).unwrap_or(0)
    }
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, b)| b).sum()
    }
}

/// One labelled snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mark {
    pub label: String,
    pub snapshot: Snapshot,
    pub held: HeldBytes,
}

/// Growth from one mark to the next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Growth {
    pub from: String,
    pub to: String,
    pub allocated: i64,
    pub reserved: i64,
    /// Per category, where the caller said what it holds.
    pub by_category: Vec<(Category, i64)>,
    /// Allocated growth no category explains.
    pub unattributed: i64,
    /// Allocated grew by more than the threshold.
    pub flagged: bool,
}

impl Growth {
    /// What grew most: a category, or "unattributed" when no category explains most of it.
    pub fn main_cause(&self) -> Option<&'static str> {
        let top = self.by_category.iter().filter(|(_, b)| *b > 0).max_by_key(|(_, b)| *b);
        match top {
            Some((c, b)) if *b >= self.unattributed => Some(c.name()),
            _ if self.unattributed > 0 => Some("unattributed"),
            _ => None,
        }
    }
}

pub struct MemoryMonitor {
    /// Growth of allocated bytes between two marks above this is flagged.
    pub threshold: u64,
    /// A slow leak: this many consecutive growths, each above `noise`, are flagged too (the
    /// article's monitor misses a leak that stays under its threshold at every step).
    pub sustained_steps: usize,
    pub noise: u64,
    pub marks: Vec<Mark>,
}

impl MemoryMonitor {
    /// The article's monitor flags growth above 100 MB.
    pub const ARTICLE_THRESHOLD: u64 = 100 << 20;

    pub fn new(threshold: u64) -> Self {
        Self { threshold, sustained_steps: 3, noise: threshold / 100, marks: Vec::new() }
    }

    /// Takes a snapshot now (after the device has synchronised) and records it with `held`.
    pub fn mark(&mut self, probe: &MemoryProbe, label: &str, held: HeldBytes) -> &Mark {
        let snapshot = probe.snapshot(label);
        self.push(Mark { label: label.into(), snapshot, held })
    }

    pub fn push(&mut self, mark: Mark) -> &Mark {
        let i = self.marks.len();
        self.marks.push(mark);
        &self.marks[i]
    }

    /// Growth between consecutive marks.
    pub fn growth(&self) -> Vec<Growth> {
        self.marks.windows(2).map(|w| self.between(&w[0], &w[1])).collect()
    }

    fn between(&self, a: &Mark, b: &Mark) -> Growth {
        let allocated = b.snapshot.allocated as i64 - a.snapshot.allocated as i64;
        let mut cats: Vec<Category> = a.held.0.iter().chain(&b.held.0).map(|(c, _)| *c).collect();
        cats.sort();
        cats.dedup();
        let by_category: Vec<(Category, i64)> =
            cats.into_iter().map(|c| (c, b.held.get(c) as i64 - a.held.get(c) as i64)).collect();
        let explained: i64 = by_category.iter().map(|(_, d)| d).sum();
        Growth {
            from: a.label.clone(),
            to: b.label.clone(),
            allocated,
            reserved: b.snapshot.reserved as i64 - a.snapshot.reserved as i64,
            by_category,
            unattributed: allocated - explained,
            flagged: allocated > self.threshold as i64,
        }
    }

    /// The flagged steps: what the article's `detect_leaks` returns, with categories.
    pub fn leaks(&self) -> Vec<Growth> {
        self.growth().into_iter().filter(|g| g.flagged).collect()
    }

    /// The first run of `sustained_steps` consecutive growths above `noise`: (first step index,
    /// last step index, bytes grown over them).
    pub fn sustained(&self) -> Option<(usize, usize, i64)> {
        let g = self.growth();
        let n = self.sustained_steps.max(1);
        (0..g.len().saturating_sub(n - 1))
            .find(|&i| g[i..i + n].iter().all(|x| x.allocated > self.noise as i64))
            .map(|i| (i, i + n - 1, g[i..i + n].iter().map(|x| x.allocated).sum()))
    }

    /// Flagged by either rule.
    pub fn flagged(&self) -> bool {
        !self.leaks().is_empty() || self.sustained().is_some()
    }

    /// Allocated growth from the first mark to the last.
    pub fn total_growth(&self) -> i64 {
        match (self.marks.first(), self.marks.last()) {
            (Some(a), Some(b)) => b.snapshot.allocated as i64 - a.snapshot.allocated as i64,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(label: &str, allocated: u64, reserved: u64, kv: u64) -> Mark {
        let snapshot = Snapshot {
            label: label.into(),
            t_s: 0.0,
            allocated,
            reserved,
            peak: allocated,
            reserved_peak: reserved,
            device_used: None,
            device_free: None,
            device_total: None,
            process_used: None,
            ballast: 0,
        };
        Mark {
            label: label.into(),
            snapshot,
            held: HeldBytes::of(&[(Category::Weights, 1000), (Category::KvCache, kv)]),
        }
    }

    #[test]
    fn growth_above_the_threshold_is_flagged_and_attributed() {
        let mut m = MemoryMonitor::new(100);
        m.push(mark("a", 1000, 2000, 0));
        m.push(mark("b", 1250, 2000, 200)); // +250, 200 of it KV
        m.push(mark("c", 1260, 2000, 200)); // +10: under the threshold
        let g = m.growth();
        assert_eq!(g.len(), 2);
        assert!(g[0].flagged && !g[1].flagged);
        assert_eq!(g[0].allocated, 250);
        assert_eq!(g[0].unattributed, 50);
        assert_eq!(g[0].main_cause(), Some("kv_cache"));
        assert_eq!(m.leaks().len(), 1);
        assert_eq!(m.total_growth(), 260);
        assert!(m.sustained().is_none());
    }

    #[test]
    fn a_slow_leak_under_the_threshold_is_flagged_when_sustained() {
        let mut m = MemoryMonitor::new(1000); // noise: 10 B
        for (i, a) in [100u64, 150, 200, 250, 250].into_iter().enumerate() {
            m.push(mark(&i.to_string(), a, a, 0));
        }
        assert!(m.leaks().is_empty());
        assert_eq!(m.sustained(), Some((0, 2, 150)));
        assert!(m.flagged());
        assert_eq!(m.growth()[0].main_cause(), Some("unattributed"));
        // Two growths then a flat step: not sustained.
        let mut m = MemoryMonitor::new(1000);
        for (i, a) in [100u64, 150, 200, 200, 250].into_iter().enumerate() {
            m.push(mark(&i.to_string(), a, a, 0));
        }
        assert!(!m.flagged());
    }

    #[test]
    fn reserved_growth_alone_is_not_a_leak() {
        let mut m = MemoryMonitor::new(100);
        m.push(mark("a", 1000, 1000, 0));
        m.push(mark("b", 1000, 900_000, 0)); // the pool kept what was freed
        m.push(mark("c", 900, 900_000, 0));
        assert!(m.leaks().is_empty());
        assert!(!m.flagged());
        assert_eq!(m.growth()[0].reserved, 899_000);
    }
}
