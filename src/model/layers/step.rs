//! What one static decoding step reads besides the weights: the tables of every position of the
//! cache (rotary, mask), the inputs made once per step from the position, and the lab's kernels the
//! step takes in place of candle's (`kernels::decode`). The model's layers read these; the
//! captured decoder (`model::generate::graph`) owns them.

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::kernels::{Fused, Part};
use candle_core::{DType, Device, Tensor};

/// What the static step reads for every position of the cache's capacity.
pub struct Tables {
    /// Rotary cos and sin, [capacity, head_dim / 2], in the activation dtype.
    pub cos: Tensor,
    pub sin: Tensor,
    /// 0..capacity (u32), compared with the position to build the mask.
    pub positions: Tensor,
    pub neg_inf: Tensor,
    pub zeros: Tensor,
    pub kernels: Kernels,
}

impl Tables {
    /// `rope`: the model's rotary cos and sin of positions 0..capacity, in the activation dtype
    /// `act`; `own`: the lab's kernels the step takes where there are some (CUDA, BF16 or F32).
    pub fn new(dev: &Device, act: DType, (cos, sin): (Tensor, Tensor), own: OwnKernels) -> Result<Self> {
        let capacity = cos.dim(0)?;
        Ok(Self {
            cos,
            sin,
            positions: Tensor::arange(0u32, capacity as u32, dev)?,
            neg_inf: Tensor::full(f32::NEG_INFINITY, capacity, dev)?.to_dtype(act)?,
            zeros: Tensor::zeros(capacity, act, dev)?,
            kernels: Kernels::new(dev, act, own)?,
        })
    }
}

/// What one static step computes once for all its layers from the position, when a layer first
/// asks (with every kernel its own, the step asks for none of these).
pub struct StepInputs<'a> {
    pub tables: &'a Tables,
    pub pos: &'a Tensor,
    batch: usize,
    kv_heads: usize,
    head_dim: usize,
    /// The rotary rows of the position, [1, head_dim / 2] each.
    rope: std::cell::OnceCell<(Tensor, Tensor)>,
    slot: std::cell::OnceCell<Tensor>,
    mask: std::cell::OnceCell<Tensor>,
}

impl<'a> StepInputs<'a> {
    pub fn new(tables: &'a Tables, pos: &'a Tensor, batch: usize, cfg: &DecoderConfig) -> Self {
        let (kv_heads, head_dim) = (cfg.num_key_value_heads, cfg.head_dim());
        Self {
            tables,
            pos,
            batch,
            kv_heads,
            head_dim,
            rope: Default::default(),
            slot: Default::default(),
            mask: Default::default(),
        }
    }

    /// The rotary cos and sin rows of the position.
    pub fn rope(&self) -> Result<&(Tensor, Tensor)> {
        once(&self.rope, || {
            Ok((self.tables.cos.index_select(self.pos, 0)?, self.tables.sin.index_select(self.pos, 0)?))
        })
    }

    /// [batch, kv_heads, 1, head_dim] of the position: where `scatter_set` writes k and v.
    pub fn slot(&self) -> Result<&Tensor> {
        once(&self.slot, || {
            Ok(self
                .pos
                .reshape((1, 1, 1, 1))?
                .broadcast_as((self.batch, self.kv_heads, 1, self.head_dim))?
                .contiguous()?)
        })
    }

    /// [1, 1, 1, capacity]: 0 up to the position, -inf after.
    pub fn mask(&self) -> Result<&Tensor> {
        let t = self.tables;
        once(&self.mask, || {
            Ok(t.positions.broadcast_gt(self.pos)?.where_cond(&t.neg_inf, &t.zeros)?.reshape((
                1,
                1,
                1,
                t.positions.dim(0)?,
            ))?)
        })
    }

    /// Rotates and scales q in the stacked product `y` and stores k and v at the position, with
    /// the lab's kernel: Ok(false) when there is none (the caller uses candle's kernels).
    pub fn qkv_store(&self, y: &Tensor, kc: &Tensor, vc: &Tensor, heads: usize, scale: f32) -> Result<bool> {
        #[cfg(feature = "cuda")]
        if let Some(k) = self.tables.kernels.at_least(OwnKernels::Store) {
            k.qkv_store(y, &self.tables.cos, &self.tables.sin, self.pos, kc, vc, heads, scale)?;
            return Ok(true);
        }
        let _ = (y, kc, vc, heads, scale);
        Ok(false)
    }

    /// `x` times the weight `parts` one under the other, with what `f` fuses, by the lab's
    /// matrix-vector kernel: None when the step does not take the kernel (or the norm in it) or
    /// the kernel does not take these tensors (the caller uses candle's kernels).
    pub fn gemv(&self, parts: &[Part], x: &Tensor, f: Fused) -> Result<Option<Tensor>> {
        let level = if f.norm.is_some() { OwnKernels::All } else { OwnKernels::Products };
        #[cfg(feature = "cuda")]
        if let Some(k) = self.tables.kernels.at_least(level) {
            return k.gemv(parts, x, f);
        }
        let _ = (parts, x, f, level);
        Ok(None)
    }

    /// The position's rotary, cache store and attention over the cache in one kernel, from the
    /// stacked product `y` as it came out: None when the step has no such kernel (the caller
    /// stores with `qkv_store` or candle's kernels and attends with candle's).
    pub fn attend(&self, y: &Tensor, kc: &Tensor, vc: &Tensor, heads: usize, scale: f32) -> Result<Option<Tensor>> {
        #[cfg(feature = "cuda")]
        if let Some(k) = self.tables.kernels.at_least(OwnKernels::All) {
            return k.attend(y, &self.tables.cos, &self.tables.sin, kc, vc, self.pos, heads, scale);
        }
        let _ = (y, kc, vc, heads, scale);
        Ok(None)
    }

    /// The greedy ids ([b, 1] u32) of the logits [b, 1, vocab].
    pub fn argmax(&self, logits: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(k) = self.tables.kernels.at_least(OwnKernels::All) {
            if let Some(ids) = k.argmax(logits)? {
                return Ok(ids);
            }
        }
        Ok(logits.argmax_keepdim(candle_core::D::Minus1)?.squeeze(2)?)
    }
}

/// The value in `cell`, made by `make` the first time.
fn once<T>(cell: &std::cell::OnceCell<T>, make: impl FnOnce() -> Result<T>) -> Result<&T> {
    if cell.get().is_none() {
        let _ = cell.set(make()?);
    }
    cell.get().ok_or_else(|| LabError::other("a step input was not made"))
}

/// Which of the lab's CUDA kernels the static step takes in place of candle's; each level adds
/// to the one before. On a CPU, or in a dtype they have no variant for, candle's kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum OwnKernels {
    #[default]
    None,
    /// Rotary, q's scale and the cache writes in one kernel (`kernels::decode`).
    Store,
    /// And every matrix-vector product, with its bias, residual or silu·up (`kernels::decode`).
    Products,
    /// And the norms inside the products, attention in one kernel, and the greedy pick.
    All,
}

/// The lab's CUDA kernels for the step (`kernels::decode`), when there are some for this device
/// and dtype, and the level asked for.
pub struct Kernels {
    #[cfg(feature = "cuda")]
    own: Option<crate::model::kernels::decode::DecodeKernels>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    level: OwnKernels,
}

impl Kernels {
    fn new(dev: &Device, act: DType, level: OwnKernels) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if let (true, Device::Cuda(dev)) = (level > OwnKernels::None, dev) {
            return Ok(Self { own: crate::model::kernels::decode::DecodeKernels::new(dev, act)?, level });
        }
        let _ = (dev, act);
        Ok(Self {
            #[cfg(feature = "cuda")]
            own: None,
            level,
        })
    }

    #[cfg(feature = "cuda")]
    fn at_least(&self, level: OwnKernels) -> Option<&crate::model::kernels::decode::DecodeKernels> {
        self.own.as_ref().filter(|_| self.level >= level)
    }
}
