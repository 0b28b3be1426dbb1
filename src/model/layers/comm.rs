//! The sum across tensor-parallel ranks: each rank gives its partial output and gets the total.
//! `ThreadComm` joins ranks that are threads of one process (the CPU's emulation of N GPUs, and
//! the tests): every rank adds the same tensors in the same order, so all ranks hold the same
//! bits afterwards, as NCCL's all-reduce guarantees.

use crate::error::{LabError, Result};
use candle_core::Tensor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};

/// One rank's handle on the group.
pub trait AllReduce: Send + Sync {
    fn rank(&self) -> usize;
    fn ranks(&self) -> usize;
    /// The sum of every rank's `x` (same shape on each), on this rank's device.
    fn all_reduce_sum(&self, x: &Tensor) -> Result<Tensor>;
    /// The sum, then `res` added (a row-parallel product's residual): one kernel where the sum
    /// has its own, else the sum and candle's add.
    fn all_reduce_sum_add(&self, x: &Tensor, res: Option<&Tensor>) -> Result<Tensor> {
        plus(self.all_reduce_sum(x)?, res)
    }
    /// How the sums travel, in a few words (printed by the parallel stage).
    fn route(&self) -> &'static str {
        "shared host memory"
    }
    /// An error when a sum went wrong without failing at once (the peer sum's wait that ran out).
    fn healthy(&self) -> Result<()> {
        Ok(())
    }
    /// Whether a CUDA graph can record the sum (no host work inside it), so a rank decodes with
    /// the captured static step.
    fn capturable(&self) -> bool {
        false
    }
}

/// A rank's communicator as a model's layers hold it: every layer of a rank shares one.
#[derive(Clone)]
pub struct RankComm {
    pub group: Arc<dyn AllReduce>,
    /// Profiling only: while set, the rank's sums return its own partial (`skip_sums`).
    skipped: Arc<AtomicBool>,
}

/// Dropped, the rank sums again.
pub struct SkippedSums(Arc<AtomicBool>);

impl Drop for SkippedSums {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl RankComm {
    pub fn new(group: Arc<dyn AllReduce>) -> Self {
        Self { group, skipped: Arc::new(AtomicBool::new(false)) }
    }

    /// Profiling only: until the guard is dropped, each sum returns the rank's own partial (the
    /// outputs are wrong), so a decoding step timed then is the step's work without its sums, and
    /// the difference from the summed step is what the sums cost (`experiments/parallel/ranks.rs`).
    /// Every rank sets it before they meet and drops it after they meet again, so no rank records
    /// a sum its peers skip.
    pub fn skip_sums(&self) -> SkippedSums {
        self.skipped.store(true, Ordering::SeqCst);
        SkippedSums(self.skipped.clone())
    }

    /// The sum of every rank's `x` (the rank's own `x` while the sums are skipped).
    pub fn sum(&self, x: &Tensor) -> Result<Tensor> {
        if self.skipped.load(Ordering::SeqCst) {
            return Ok(x.clone());
        }
        self.group.all_reduce_sum(x)
    }

    /// The sum of every rank's `x`, plus `res` (the rank's own `x` plus `res` while skipped).
    pub fn sum_add(&self, x: &Tensor, res: Option<&Tensor>) -> Result<Tensor> {
        if self.skipped.load(Ordering::SeqCst) {
            return plus(x.clone(), res);
        }
        self.group.all_reduce_sum_add(x, res)
    }
}

/// `y`, plus the residual `r` where there is one (`r + y`, as the layer adds it).
pub fn plus(y: Tensor, r: Option<&Tensor>) -> Result<Tensor> {
    Ok(match r {
        Some(r) => (r + y)?,
        None => y,
    })
}

impl std::fmt::Debug for RankComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {}", self.group.rank(), self.group.ranks())
    }
}

/// Where a group's threads wait for each other between phases, so that a rank that failed stops
/// the others before they block in a sum it will never join.
pub struct Rendezvous {
    barrier: Barrier,
    failed: std::sync::atomic::AtomicBool,
}

impl Rendezvous {
    pub fn new(ranks: usize) -> Self {
        Self { barrier: Barrier::new(ranks), failed: Default::default() }
    }

    /// Waits for every rank (`ok`: this rank's phase went well); false when any rank failed.
    pub fn meet(&self, ok: bool) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if !ok {
            self.failed.store(true, SeqCst);
        }
        self.barrier.wait();
        let all_ok = !self.failed.load(SeqCst);
        // Every rank reads this phase's verdict before any can mark the next phase failed: with
        // one wait, a rank that failed its next phase at once was read by a slower rank as this
        // phase's failure, which then left while the other waited for it (a hang, seen on the CPU).
        self.barrier.wait();
        all_ok
    }

    /// `r`, or when another rank failed in this phase, an error that says so.
    pub fn settle<T>(&self, what: &str, r: Result<T>) -> Result<T> {
        if !self.meet(r.is_ok()) {
            return r.and_then(|_| Err(LabError::other(format!("another rank failed while {what}"))));
        }
        r
    }
}

struct Group {
    slots: Mutex<Vec<Option<Tensor>>>,
    barrier: Barrier,
}

/// A rank of a group of threads.
#[derive(Clone)]
pub struct ThreadComm {
    group: Arc<Group>,
    rank: usize,
    ranks: usize,
}

impl ThreadComm {
    /// The handles of a group of `ranks` threads, one per rank.
    pub fn group(ranks: usize) -> Vec<ThreadComm> {
        let group = Arc::new(Group { slots: Mutex::new(vec![None; ranks]), barrier: Barrier::new(ranks) });
        (0..ranks).map(|rank| ThreadComm { group: group.clone(), rank, ranks }).collect()
    }
}

impl AllReduce for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.ranks
    }

    fn all_reduce_sum(&self, x: &Tensor) -> Result<Tensor> {
        if self.ranks == 1 {
            return Ok(x.clone());
        }
        let poisoned = |_| LabError::other("a tensor-parallel rank panicked");
        self.group.slots.lock().map_err(poisoned)?[self.rank] = Some(x.clone());
        self.group.barrier.wait();
        let parts: Vec<Tensor> = self.group.slots.lock().map_err(poisoned)?.iter().flatten().cloned().collect();
        // Every rank has read every part before any rank writes its next one.
        self.group.barrier.wait();
        if parts.len() != self.ranks {
            return Err(LabError::other("a tensor-parallel rank gave no tensor"));
        }
        let mut sum = parts[0].to_device(x.device())?;
        for p in &parts[1..] {
            sum = (sum + p.to_device(x.device())?)?;
        }
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A rank that fails the phase after one every rank passed: every rank passes the first and
    /// fails the second, however the threads are scheduled (with one wait a meeting, a slow rank
    /// read the next phase's failure as the first's and left the other waiting).
    #[test]
    fn a_failure_counts_for_its_own_phase() {
        for _ in 0..500 {
            let meet = Rendezvous::new(2);
            let verdicts: Vec<(bool, bool)> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..2)
                    .map(|rank| {
                        let meet = &meet;
                        s.spawn(move || (meet.meet(true), meet.meet(rank == 0)))
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(verdicts, vec![(true, false), (true, false)]);
        }
    }

    #[test]
    fn three_threads_sum_to_the_same_bits() {
        let comms = ThreadComm::group(3);
        let out: Vec<Vec<f32>> = std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .map(|c| {
                    s.spawn(move || {
                        let mut last = vec![];
                        // Twice: the slots are reused safely.
                        for round in 0..2 {
                            let x = Tensor::new(&[c.rank() as f32 + 0.1, round as f32], &Device::Cpu).unwrap();
                            last = c.all_reduce_sum(&x).unwrap().to_vec1::<f32>().unwrap();
                        }
                        last
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(out[0], vec![0.1 + 1.1 + 2.1, 3.0]);
        assert!(out.iter().all(|o| o == &out[0]));
    }
}
