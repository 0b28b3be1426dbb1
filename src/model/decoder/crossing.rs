//! Moving a pass's tensors to the device each layer runs on: the offload's CPU layers, a
//! pipeline's other GPUs.

use crate::error::Result;
use crate::model::profile::Profiler;
use candle_core::{DType, Device, Tensor};
use std::time::Instant;

/// `t` on `dev`. Between two GPUs through host memory: candle's device-to-device copy (cudarc's
/// `cuMemcpyPeerAsync` on the destination's stream, from the source's stream-ordered pool) gave a
/// pipeline wrong hidden states at random on two H100s, in 5 of 12 greedy runs, even with both
/// GPUs synchronised around it; through the host, 12 of 12 equal to one GPU
/// (`tests/gpu_parallel.rs`, data/results/h100x2/2026-11-25-evening-multi-gpu/development). The
/// source is synchronised before the read back; the copy up (staged from pageable memory before
/// it returns) is ordered on the destination's stream before anything that reads it.
pub(crate) fn moved_to(t: &Tensor, dev: &Device) -> Result<Tensor> {
    if t.device().same_device(dev) {
        return Ok(t.clone());
    }
    if t.device().is_cuda() && dev.is_cuda() {
        t.device().synchronize()?;
        return Ok(t.to_device(&Device::Cpu)?.to_device(dev)?);
    }
    Ok(t.to_device(dev)?)
}

/// How one pass's activations cross devices, as mistral.rs's `DeviceMapper` maps them: each
/// layer's input moved to the layer's device with the rotary table there (made once per device:
/// on the CPU in F32 as CPU layers compute, on another GPU in the activation dtype), and the last
/// layer's output moved home. A decoding step's crossings are timed into the model's profile.
pub(crate) struct Crossing<'a> {
    home: Device,
    /// The model's own first.
    tables: Vec<(Device, (Tensor, Tensor))>,
    timed: Option<&'a Profiler>,
}

impl<'a> Crossing<'a> {
    /// `rope` (cos, sin) as the model made it on `home`; `timed` for a decoding step.
    pub(crate) fn new(rope: (Tensor, Tensor), home: &Device, timed: Option<&'a Profiler>) -> Self {
        Self { home: home.clone(), tables: vec![(home.clone(), rope)], timed }
    }

    /// `x` on `dev`, and the rotary table there.
    pub(crate) fn enter(&mut self, x: Tensor, dev: &Device) -> Result<(Tensor, (Tensor, Tensor))> {
        let x = self.moved(x, dev)?;
        Ok((x, self.rope_on(dev)?))
    }

    /// `x` back on the model's device.
    pub(crate) fn leave(&self, x: Tensor) -> Result<Tensor> {
        self.moved(x, &self.home)
    }

    fn moved(&self, x: Tensor, dev: &Device) -> Result<Tensor> {
        if x.device().same_device(dev) {
            return Ok(x);
        }
        let t = Instant::now();
        let x = moved_to(&x, dev)?;
        if let Some(p) = self.timed {
            p.crossing(t);
        }
        Ok(x)
    }

    fn rope_on(&mut self, dev: &Device) -> Result<(Tensor, Tensor)> {
        if let Some((_, r)) = self.tables.iter().find(|(d, _)| d.same_device(dev)) {
            return Ok(r.clone());
        }
        let home = self.tables[0].1.clone();
        let to = |t: &Tensor| -> Result<Tensor> {
            let t = moved_to(t, dev)?;
            Ok(if dev.is_cuda() { t } else { t.to_dtype(DType::F32)? })
        };
        let r = (to(&home.0)?, to(&home.1)?);
        self.tables.push((dev.clone(), r.clone()));
        Ok(r)
    }
}
