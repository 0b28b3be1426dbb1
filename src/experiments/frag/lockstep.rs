//! The allocator model and the device driven in step: every request goes to both, and each
//! reading holds the measured figures beside the model's.

use crate::error::{LabError, Result};
use crate::estimate::caching::Caching;
use crate::estimate::pool::AllocModel;
use crate::memory::policy::GRANULE;
use crate::memory::{DeviceAllocator, MemoryProbe};
use crate::search::bisect;
use crate::stage::Outcome;

/// One reading of the report's sequence.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub allocator: String,
    pub step: String,
    /// The request's outcome on the device ("" where nothing ran or nothing was asked).
    pub outcome: String,
    pub model_outcome: String,
    pub allocated: Option<u64>,
    pub reserved: Option<u64>,
    pub device_free: Option<u64>,
    pub process_used: Option<u64>,
    pub largest_block: Option<u64>,
    pub model_allocated: u64,
    pub model_reserved: u64,
    pub model_largest: u64,
}

/// What the device is driven beside: a model of the lab's own allocators (`estimate::pool`) or of
/// PyTorch's (`estimate::caching`), for the reference script's figures.
#[derive(Debug, Clone)]
pub enum Model {
    Lab(AllocModel),
    Torch(Caching),
}

impl Model {
    fn alloc(&mut self, bytes: u64) -> Option<u64> {
        match self {
            Model::Lab(m) => m.alloc(bytes).ok(),
            Model::Torch(m) => m.alloc(bytes).ok(),
        }
    }

    fn free(&mut self, handle: u64) {
        match self {
            Model::Lab(m) => m.free(handle),
            Model::Torch(m) => m.free(handle),
        }
    }

    /// PyTorch's allocator gives nothing back at a synchronisation.
    fn synchronize(&mut self) {
        if let Model::Lab(m) = self {
            m.synchronize()
        }
    }

    /// A trim: `torch.cuda.empty_cache()` for PyTorch.
    fn release_idle(&mut self) {
        match self {
            Model::Lab(m) => m.release_idle(),
            Model::Torch(m) => m.release_cached(),
        }
    }

    pub fn unmapped(&self) -> u64 {
        match self {
            Model::Lab(m) => m.unmapped(),
            Model::Torch(m) => m.unmapped(),
        }
    }

    pub fn allocated(&self) -> u64 {
        match self {
            Model::Lab(m) => m.allocated(),
            Model::Torch(m) => m.allocated(),
        }
    }

    pub fn reserved(&self) -> u64 {
        match self {
            Model::Lab(m) => m.reserved(),
            Model::Torch(m) => m.reserved(),
        }
    }

    fn largest_block(&self) -> u64 {
        match self {
            Model::Lab(m) => m.largest_block(),
            Model::Torch(m) => m.largest_block(GRANULE),
        }
    }
}

/// The device and the model driven by the same calls.
pub struct Lockstep<'a> {
    pub name: String,
    pub device: Option<Box<dyn DeviceAllocator + 'a>>,
    pub model: Model,
    pub probe: Option<&'a MemoryProbe>,
    /// (device handle, model handle) per block, None once freed or refused.
    pub blocks: Vec<(Option<u64>, Option<u64>)>,
}

fn outcome_of<T>(r: &Result<T>) -> Result<String> {
    match r {
        Ok(_) => Ok(Outcome::OK.into()),
        Err(LabError::Oom(_)) => Ok(Outcome::OOM.into()),
        Err(e) => Err(LabError::other(e)),
    }
}

impl<'a> Lockstep<'a> {
    /// Allocates on both sides; returns the block's index and the two outcomes.
    pub fn alloc(&mut self, bytes: u64) -> Result<(usize, String, String)> {
        let (dev, dev_outcome) = match self.device.as_mut() {
            Some(d) => {
                let r = d.alloc(bytes);
                let o = outcome_of(&r)?;
                (r.ok(), o)
            }
            None => (None, String::new()),
        };
        let m = self.model.alloc(bytes);
        let model_outcome = if m.is_some() { Outcome::OK } else { Outcome::OOM };
        self.blocks.push((dev, m));
        Ok((self.blocks.len() - 1, dev_outcome, model_outcome.into()))
    }

    pub fn free(&mut self, i: usize) {
        let (d, m) = std::mem::take(&mut self.blocks[i]);
        if let (Some(h), Some(dev)) = (d, self.device.as_mut()) {
            dev.free(h);
        }
        if let Some(h) = m {
            self.model.free(h);
        }
    }

    pub fn synchronize(&mut self) -> Result<()> {
        self.model.synchronize();
        match self.device.as_mut() {
            Some(d) => d.synchronize(),
            None => Ok(()),
        }
    }

    pub fn trim(&mut self) -> Result<()> {
        self.model.release_idle();
        match self.device.as_mut() {
            Some(d) => d.trim(),
            None => Ok(()),
        }
    }

    /// Bytes the device (or, without one, the model) has free.
    pub fn free_now(&self) -> u64 {
        self.device.as_ref().map(|d| d.device_free()).unwrap_or_else(|| self.model.unmapped())
    }

    pub fn largest_on_device(&mut self) -> Result<Option<u64>> {
        let Some(d) = self.device.as_mut() else { return Ok(None) };
        let hi = d.device_free() + d.reserved().saturating_sub(d.allocated()) + GRANULE;
        Ok(Some(bisect(0, hi, GRANULE, |b| d.fits(b))?.0))
    }

    pub fn read(&mut self, step: &str, outcomes: (String, String), largest: bool) -> Result<Reading> {
        // The process's own usage only where a device runs (on CPU it would be the lab's RSS).
        let snap = self.probe.filter(|_| self.device.is_some()).map(|p| p.snapshot(step));
        let largest_block = if largest { self.largest_on_device()? } else { None };
        Ok(Reading {
            allocator: self.name.clone(),
            step: step.into(),
            outcome: outcomes.0,
            model_outcome: outcomes.1,
            allocated: self.device.as_ref().map(|d| d.allocated()),
            reserved: self.device.as_ref().map(|d| d.reserved()),
            device_free: self.device.as_ref().map(|d| d.device_free()),
            process_used: snap.and_then(|s| s.process_used),
            largest_block,
            model_allocated: self.model.allocated(),
            model_reserved: self.model.reserved(),
            model_largest: if largest { self.model.largest_block() } else { 0 },
        })
    }

    pub fn free_all(&mut self) {
        for i in 0..self.blocks.len() {
            self.free(i);
        }
    }
}
