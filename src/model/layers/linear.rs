//! A linear layer over dense weights (candle_nn's product) or GGUF blocks (candle's QMatMul, cast
//! as candle's CUDA MMQ path casts), on the GPU or in host memory, with an optional bias; and a
//! tensor-parallel rank's shares: a row-parallel product, which completes its partial sum across
//! the group, and the head's vocabulary rows, gathered to every rank (tensor parallelism lives in
//! the linear layer, as in mistral.rs: a layer holds no communicator).

use crate::error::{LabError, Result};
use crate::model::generate::StepInputs;
use crate::model::host::linear::HostLinear;
use crate::model::kernels::{Fused, Part, Weights};
use crate::model::layers::comm::RankComm;
use crate::model::layers::elementwise::bias_add;
use crate::model::load::weights::Weight;
use candle_core::quantized::QMatMul;
use candle_core::{DType, Module, Tensor};

/// A linear layer over dense or quantized weights, with an optional bias.
#[derive(Debug, Clone)]
pub(crate) enum Linear {
    Dense(candle_nn::Linear),
    Quant(QMatMul, Option<Tensor>),
    /// Computed on the CPU from host memory (an offloaded layer).
    Host(HostLinear),
    /// A rank's share of a product whose input columns are split over the group (o and down,
    /// Megatron's row-parallel layer): its output is a partial sum, summed across the ranks.
    RowParallel(Box<Linear>, RankComm),
    /// A rank's rows of a product whose output rows are split over the group (the head, split by
    /// vocabulary as Megatron's parallel output layer): each rank's logits are put in their place
    /// among zeros and summed, so every rank holds them all.
    Gathered(Box<Linear>, RankComm),
}

impl Linear {
    pub(crate) fn new(w: Weight, bias: Option<Tensor>) -> Result<Self> {
        Ok(match w {
            Weight::Dense(t) => Self::Dense(candle_nn::Linear::new(t, bias)),
            Weight::Quant(q) => Self::Quant(QMatMul::from_arc(q)?, bias),
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            // The bias through `elementwise` (the lab's kernel on a GPU), the product as candle_nn's.
            Self::Dense(l) => match l.bias() {
                Some(b) => bias_add(candle_nn::Linear::new(l.weight().clone(), None).forward(x)?, b),
                None => Ok(l.forward(x)?),
            },
            Self::Host(h) => h.forward(x),
            Self::RowParallel(l, c) => c.sum(&l.forward(x)?),
            Self::Gathered(l, c) => gather(&l.forward(x)?, c),
            Self::Quant(q, bias) => {
                // candle's CUDA quantized matmul takes BF16 (over 8 rows it casts to F32 and back
                // itself); its CPU path and a dequantized matrix take F32: cast around them the
                // same way, so both backends hold the same tensors (`estimate::transient`).
                let native = x.dtype() == DType::F32 || (x.device().is_cuda() && matches!(q, QMatMul::QTensor(_)));
                let y =
                    if native { q.forward(x)? } else { q.forward(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype())? };
                match bias {
                    Some(b) => bias_add(y, b),
                    None => Ok(y),
                }
            }
        }
    }

    /// The weight and bias of a layer on the GPU, as a part of the static step's product.
    pub(crate) fn part(&self) -> Option<Part<'_>> {
        match self {
            Self::Dense(l) => Some((Weights::Dense(l.weight()), l.bias())),
            Self::Quant(QMatMul::QTensor(q), bias) => Some((Weights::Quant(q), bias.as_ref())),
            _ => None,
        }
    }

    /// `forward` (+ `res`) in the static decoding step: through the step's matrix-vector kernel
    /// when it has one, the bias and the residual in the same kernel.
    pub(crate) fn forward_step(&self, x: &Tensor, res: Option<&Tensor>, step: &StepInputs) -> Result<Tensor> {
        // A partial sum is summed before the residual is added: the share's product through the
        // step's kernel, then the all-reduce with the residual's add (which a CUDA graph records
        // with the step).
        if let Self::RowParallel(l, c) = self {
            return c.sum_add(&l.forward_step(x, None, step)?, res);
        }
        if let Some(part) = self.part() {
            if let Some(y) = step.gemv(&[part], x, Fused { res, ..Default::default() })? {
                return Ok(y);
            }
        }
        let y = self.forward(x)?;
        Ok(match res {
            Some(r) => (r + y)?,
            None => y,
        })
    }

    /// Whether a CUDA graph can record the product (a row-parallel one: whether its sum can be).
    pub(crate) fn capturable(&self) -> bool {
        match self {
            Self::RowParallel(_, c) | Self::Gathered(_, c) => c.group.capturable(),
            _ => true,
        }
    }

    /// A host product's (nanoseconds, weight bytes) of decoding since the last call; (0, 0) for
    /// one on a device.
    pub(crate) fn take_host_time(&self) -> (u64, u64) {
        match self {
            Self::Host(h) => h.take_time(),
            Self::RowParallel(l, _) | Self::Gathered(l, _) => l.take_host_time(),
            _ => (0, 0),
        }
    }

    /// This product as a rank's row-parallel share, summed across `comm`'s group.
    pub(crate) fn row_parallel(self, comm: RankComm) -> Self {
        Self::RowParallel(Box::new(self), comm)
    }

    /// This product as a rank's rows of the output, gathered across `comm`'s group.
    pub(crate) fn gathered(self, comm: RankComm) -> Self {
        Self::Gathered(Box::new(self), comm)
    }

    /// The product a rank computes itself (the share of a gathered one), for the step's kernel.
    pub(crate) fn local(&self) -> &Linear {
        match self {
            Self::Gathered(l, _) => l,
            l => l,
        }
    }

    /// `y` of `local()` completed as `forward` completes it (gathered across the group).
    pub(crate) fn complete(&self, y: Tensor) -> Result<Tensor> {
        match self {
            Self::Gathered(_, c) => gather(&y, c),
            _ => Ok(y),
        }
    }

    /// Output features: the weight's rows.
    pub(crate) fn out_dim(&self) -> Result<usize> {
        Ok(match self {
            Self::Dense(l) => l.weight().dim(0)?,
            Self::Quant(q, _) => match q {
                QMatMul::QTensor(t) => t.shape().dims()[0],
                QMatMul::Tensor(t) | QMatMul::TensorF16(t) => t.dim(0)?,
            },
            Self::Host(h) => h.weight().dim(0)?,
            Self::RowParallel(l, _) => l.out_dim()?,
            Self::Gathered(l, c) => l.out_dim()? * c.group.ranks(),
        })
    }

    /// The same weights computed on the CPU.
    pub(crate) fn to_host(&self) -> Result<Self> {
        match self {
            Self::Dense(l) => Ok(Self::Host(HostLinear::new(l.weight().clone(), l.bias().cloned())?)),
            Self::Host(h) => Ok(Self::Host(h.clone())),
            Self::RowParallel(l, c) => Ok(Self::RowParallel(Box::new(l.to_host()?), c.clone())),
            Self::Gathered(l, c) => Ok(Self::Gathered(Box::new(l.to_host()?), c.clone())),
            Self::Quant(..) => Err(LabError::Unsupported(
                "CPU layers of the offload compute dense weights (BF16, F16 or F32), not GGUF blocks".into(),
            )),
        }
    }

    /// The weight and the bias, for a dense layer.
    pub(crate) fn dense_parts(&self) -> Result<(Tensor, Option<Tensor>)> {
        match self {
            Self::Dense(l) => Ok((l.weight().clone(), l.bias().cloned())),
            Self::Host(h) => Ok((h.weight().clone(), h.bias().cloned())),
            Self::RowParallel(l, _) | Self::Gathered(l, _) => l.dense_parts(),
            Self::Quant(..) => Err(LabError::Unsupported("streaming moves dense weights, not GGUF blocks".into())),
        }
    }
}

/// A rank's columns `y` (the last dimension) put in their place among zeros and summed across the
/// group: every rank gets the whole output, exactly (each sum adds zeros to one value).
fn gather(y: &Tensor, c: &RankComm) -> Result<Tensor> {
    let (rank, ranks) = (c.group.rank(), c.group.ranks());
    let n = y.dim(candle_core::D::Minus1)?;
    let placed = y.pad_with_zeros(candle_core::D::Minus1, rank * n, (ranks - rank - 1) * n)?;
    c.sum(&placed)
}
