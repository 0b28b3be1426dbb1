//! Decoding as one captured CUDA graph. Batch-1 decoding launches about 30 kernels per layer and
//! the host takes longer to launch them than the GPU takes to run them (the speed
//! stage's `issue_ms`). Captured once and replayed, a step costs one launch. A graph replays
//! fixed kernels with fixed arguments, so everything that changes per token lives in device
//! memory: the input ids, the position (`Qwen2::decode_static` reads the rotary row, the cache
//! slot and the attention mask from it), and the step itself writes the next ids and position
//! back. candle 0.11 makes the rest capturable: its kernel-parameter uploads are cached during a
//! warm-up step (`enable_cuda_graph_htod_cache`) and its allocations are stream-ordered.

use super::kv_cache::KvCache;
use super::qwen2::{last_logits, Logits, Qwen2};
use crate::error::{LabError, Result};
use candle_core::{DType, Tensor};

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
    /// `own`: the lab's kernels the step takes where there are some (CUDA, BF16 or F32).
    pub fn new(model: &Qwen2, capacity: usize, own: OwnKernels) -> Result<Self> {
        let dev = model.device();
        let act = model.act_dtype();
        let (cos, sin) = model.rope(0, capacity)?;
        Ok(Self {
            cos,
            sin,
            positions: Tensor::arange(0u32, capacity as u32, dev)?,
            neg_inf: Tensor::full(f32::NEG_INFINITY, capacity, dev)?.to_dtype(act)?,
            zeros: Tensor::zeros(capacity, act, dev)?,
            kernels: Kernels::new(model, own)?,
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
    pub fn new(tables: &'a Tables, pos: &'a Tensor, batch: usize, cfg: &crate::model::Qwen2Config) -> Self {
        let (kv_heads, head_dim) = (cfg.num_key_value_heads, cfg.head_dim());
        Self { tables, pos, batch, kv_heads, head_dim, rope: Default::default(), slot: Default::default(), mask: Default::default() }
    }

    /// The rotary cos and sin rows of the position.
    pub fn rope(&self) -> Result<&(Tensor, Tensor)> {
        once(&self.rope, || Ok((self.tables.cos.index_select(self.pos, 0)?, self.tables.sin.index_select(self.pos, 0)?)))
    }

    /// [batch, kv_heads, 1, head_dim] of the position: where `scatter_set` writes k and v.
    pub fn slot(&self) -> Result<&Tensor> {
        once(&self.slot, || Ok(self.pos.reshape((1, 1, 1, 1))?.broadcast_as((self.batch, self.kv_heads, 1, self.head_dim))?.contiguous()?))
    }

    /// [1, 1, 1, capacity]: 0 up to the position, -inf after.
    pub fn mask(&self) -> Result<&Tensor> {
        let t = self.tables;
        once(&self.mask, || Ok(t.positions.broadcast_gt(self.pos)?.where_cond(&t.neg_inf, &t.zeros)?.reshape((1, 1, 1, t.positions.dim(0)?))?))
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

    /// Attention of the position over the cache, q from the stacked product `y` that `qkv_store`
    /// rotated and scaled: None when the step has no such kernel (the caller uses candle's).
    pub fn attend(&self, y: &Tensor, kc: &Tensor, vc: &Tensor, heads: usize) -> Result<Option<Tensor>> {
        #[cfg(feature = "cuda")]
        if let Some(k) = self.tables.kernels.at_least(OwnKernels::All) {
            return k.attend(y, kc, vc, self.pos, heads);
        }
        let _ = (y, kc, vc, heads);
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

/// One weight of a product, [n, k], and its bias.
pub type Part<'a> = (&'a Tensor, Option<&'a Tensor>);

/// What the step's matrix-vector kernel computes besides the product: the RMS norm of x before it
/// (its weight and eps), and after it the residual, or silu(gate)·up of the gate and up weights.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fused<'a> {
    pub norm: Option<(&'a Tensor, f32)>,
    pub res: Option<&'a Tensor>,
    pub glu: bool,
}

/// Which of the lab's CUDA kernels the static step takes in place of candle's; each level adds
/// to the one before. On a CPU, or in a dtype they have no variant for, candle's kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum OwnKernels {
    #[default]
    None,
    /// Rotary, q's scale and the cache writes in one kernel (`decode_kernels::qkv_store`).
    Store,
    /// And every matrix-vector product, with its bias, residual or silu·up (`decode_kernels::gemv`).
    Products,
    /// And the norms inside the products, attention in one kernel, and the greedy pick.
    All,
}

/// The lab's CUDA kernels for the step (`decode_kernels.rs`), when there are some for this device
/// and dtype, and the level asked for.
pub struct Kernels {
    #[cfg(feature = "cuda")]
    own: Option<super::decode_kernels::DecodeKernels>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    level: OwnKernels,
}

impl Kernels {
    fn new(model: &Qwen2, level: OwnKernels) -> Result<Self> {
        #[cfg(feature = "cuda")]
        if let (true, candle_core::Device::Cuda(dev)) = (level > OwnKernels::None, model.device()) {
            return Ok(Self { own: super::decode_kernels::DecodeKernels::new(dev, model.act_dtype())?, level });
        }
        let _ = model;
        Ok(Self {
            #[cfg(feature = "cuda")]
            own: None,
            level,
        })
    }

    #[cfg(feature = "cuda")]
    fn at_least(&self, level: OwnKernels) -> Option<&super::decode_kernels::DecodeKernels> {
        self.own.as_ref().filter(|_| self.level >= level)
    }
}

/// A decoder whose state (ids, position, cache) is in device memory; `step` runs one token, and
/// on CUDA `capture` turns the step into a graph that `advance` replays.
pub struct StaticDecoder<'a> {
    model: &'a Qwen2,
    cache: KvCache,
    tables: Tables,
    /// [batch, 1] u32: the step's input, overwritten with its output.
    ids: Tensor,
    /// [1] u32.
    pos: Tensor,
    one: Tensor,
    /// Positions left in the cache.
    room: usize,
    #[cfg(feature = "cuda")]
    graph: Option<candle_core::cuda_backend::cudarc::driver::CudaGraph>,
}

impl<'a> StaticDecoder<'a> {
    /// Prefills `prompt` ([batch, s] u32) into a cache of `capacity` positions and holds the
    /// greedy ids that follow.
    pub fn prefill(model: &'a Qwen2, prompt: &Tensor, capacity: usize, own: OwnKernels) -> Result<Self> {
        let (b, s) = prompt.dims2()?;
        let mut cache = model.new_cache(b, capacity)?;
        let logits = last_logits(&model.forward(prompt, &mut cache, Logits::Last)?)?;
        let ids = logits.argmax_keepdim(candle_core::D::Minus1)?.to_dtype(DType::U32)?;
        let dev = model.device();
        Ok(Self {
            tables: Tables::new(model, capacity, own)?,
            model,
            cache,
            ids,
            pos: Tensor::new(&[s as u32], dev)?,
            one: Tensor::new(&[1u32], dev)?,
            room: capacity - s,
            #[cfg(feature = "cuda")]
            graph: None,
        })
    }

    /// One token, kernel by kernel: the ids and the position advance in device memory.
    pub fn step(&mut self) -> Result<()> {
        self.take_room()?;
        self.run_step()
    }

    fn take_room(&mut self) -> Result<()> {
        if self.room == 0 {
            return Err(LabError::input("KV cache full: the static decoder has no position left"));
        }
        self.room -= 1;
        Ok(())
    }

    fn run_step(&self) -> Result<()> {
        let next = self.model.decode_static(&self.ids, &self.pos, &self.tables, &self.cache)?;
        self.ids.slice_set(&next, 0, 0)?;
        let pos = self.pos.broadcast_add(&self.one)?;
        self.pos.slice_set(&pos, 0, 0)?;
        Ok(())
    }

    /// The bytes of the decoder's KV cache (its whole capacity).
    pub fn cache_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    /// The ids the last step produced.
    pub fn ids(&self) -> Result<Vec<u32>> {
        Ok(self.ids.flatten_all()?.to_vec1::<u32>()?)
    }

    /// On CUDA, captures the step as a graph that `advance` then replays, after one real step
    /// that fills candle's parameter cache (that step counts: the ids and position advance).
    /// Elsewhere nothing happens and `advance` runs the step kernel by kernel. Returns whether a
    /// graph was captured.
    pub fn capture(&mut self) -> Result<bool> {
        #[cfg(feature = "cuda")]
        if let candle_core::Device::Cuda(dev) = self.model.device() {
            use candle_core::cuda_backend::cudarc::driver::sys;
            let _params = dev.enable_cuda_graph_htod_cache();
            self.step()?;
            self.model.device().synchronize()?;
            let stream = dev.cuda_stream();
            stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(cuda)?;
            let body = self.run_step();
            // The capture ends whatever the body did, or the stream stays unusable.
            let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(cuda);
            body?;
            let graph = graph?.ok_or_else(|| LabError::other("graph capture recorded nothing"))?;
            graph.upload().map_err(cuda)?;
            self.graph = Some(graph);
            return Ok(true);
        }
        Ok(false)
    }

    /// One token: the captured graph replayed (one launch) if there is one, else `step`.
    pub fn advance(&mut self) -> Result<()> {
        #[cfg(feature = "cuda")]
        if self.graph.is_some() {
            self.take_room()?;
            return self.graph.as_ref().map_or(Ok(()), |g| g.launch().map_err(cuda));
        }
        self.step()
    }
}

#[cfg(feature = "cuda")]
fn cuda(e: candle_core::cuda_backend::cudarc::driver::DriverError) -> LabError {
    LabError::other(format!("CUDA graph: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{generate, Precision};

    fn tiny() -> Qwen2 {
        let cfg = crate::model::Qwen2Config::preset("tiny").unwrap();
        let mut src = crate::model::weights::Synthetic::new(cfg.clone(), 5);
        let w = crate::model::weights::load_all(&cfg, &mut src, Precision::F32, &candle_core::Device::Cpu, None, |_, _| Ok(())).unwrap();
        Qwen2::new(&cfg, Precision::F32, w, &candle_core::Device::Cpu).unwrap()
    }

    /// The static step (position in device memory, attention over the whole capacity with a
    /// mask) decodes the same greedy ids as the lab's loop, separate or stacked projections.
    #[test]
    fn static_steps_decode_what_the_loop_decodes() {
        let mut model = tiny();
        for fused in [false, true] {
            if fused {
                model.fuse_projections().unwrap();
            }
            let prompt = generate::seeded_ids(7, model.cfg.vocab_size, 1);
            let cfg = generate::GenerateConfig { max_new_tokens: 9, ..Default::default() };
            let want = generate::generate(&model, &prompt, &cfg).unwrap().generated_ids;
            let ids = Tensor::new(prompt.as_slice(), model.device()).unwrap().unsqueeze(0).unwrap();
            let mut dec = StaticDecoder::prefill(&model, &ids, 16, OwnKernels::All).unwrap();
            let mut got = dec.ids().unwrap();
            for _ in 1..want.len() {
                dec.step().unwrap();
                got.extend(dec.ids().unwrap());
            }
            assert_eq!(got, want, "fused: {fused}");
            // The capacity is a hard edge, not a silent wrap.
            while dec.room > 0 {
                dec.step().unwrap();
            }
            assert!(dec.step().is_err());
        }
    }
}
