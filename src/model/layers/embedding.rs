//! The token embedding: a dense table, or a quantized one looked up block by block on its device.

use crate::error::Result;
use crate::model::load::weights::Weight;
use candle_core::{Device, Tensor};

/// Token embedding: a dense table, or a quantized one looked up block by block on its device.
#[derive(Debug, Clone)]
pub(crate) enum Embedding {
    Dense(Tensor),
    Quant(Weight),
}

impl Embedding {
    pub(crate) fn device(&self) -> Device {
        match self {
            Self::Dense(t) | Self::Quant(Weight::Dense(t)) => t.device().clone(),
            Self::Quant(Weight::Quant(q)) => q.device(),
        }
    }

    pub(crate) fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, s) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        let rows = match self {
            Self::Dense(t) => t.index_select(&flat, 0)?,
            Self::Quant(Weight::Quant(q)) => q.embedding(&flat)?,
            Self::Quant(Weight::Dense(t)) => t.index_select(&flat, 0)?,
        };
        let h = rows.dim(1)?;
        Ok(rows.reshape((b, s, h))?)
    }
}
