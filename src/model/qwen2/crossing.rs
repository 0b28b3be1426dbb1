//! Moving a pass's tensors to the device each layer runs on: the offload's CPU layers, a
//! pipeline's other GPUs.

use crate::error::Result;
use candle_core::{DType, Device, Tensor};

/// `t` on `dev`. Between two GPUs candle copies on the destination's stream without waiting for
/// the source's (the lab runs with cudarc's event tracking off, `hw::set_event_tracking`): wait
/// for the source before the copy, and for the copy before the source's memory can be reused.
/// Found on two H100s: a pipeline's greedy tokens differed from one GPU's from the first.
pub(crate) fn moved_to(t: &Tensor, dev: &Device) -> Result<Tensor> {
    if t.device().same_device(dev) {
        return Ok(t.clone());
    }
    let gpus = t.device().is_cuda() && dev.is_cuda();
    if gpus {
        t.device().synchronize()?;
    }
    let out = t.to_device(dev)?;
    if gpus {
        dev.synchronize()?;
    }
    Ok(out)
}

/// A pass's rotary table on each device a layer runs on, made once per pass: on the CPU in F32
/// as CPU layers compute, on another GPU (a pipeline stage) in the activation dtype.
pub(crate) struct RopeTables {
    /// The model's own first.
    tables: Vec<(Device, (Tensor, Tensor))>,
}

impl RopeTables {
    /// `rope` (cos, sin) as the model made it on `home`.
    pub(crate) fn new(rope: (Tensor, Tensor), home: &Device) -> Self {
        Self { tables: vec![(home.clone(), rope)] }
    }

    pub(crate) fn on(&mut self, dev: &Device) -> Result<(Tensor, Tensor)> {
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
