//! Decoding as one captured CUDA graph. Batch-1 decoding launches about 30 kernels per layer and
//! the host takes longer to launch them than the GPU takes to run them (the speed
//! stage's `issue_ms`). Captured once and replayed, a step costs one launch. A graph replays
//! fixed kernels with fixed arguments, so everything that changes per token lives in device
//! memory: the input ids, the position (`Qwen2::decode_static` reads the rotary row, the cache
//! slot and the attention mask from it), and the step itself writes the next ids and position
//! back. candle 0.11 makes the rest capturable: its kernel-parameter uploads are cached during a
//! warm-up step (`enable_cuda_graph_htod_cache`) and its allocations are stream-ordered.

use crate::error::{LabError, Result};
use crate::model::decoder::{last_logits, Decoder, Logits};
use crate::model::generate::sampling::check_finite;
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::step::{OwnKernels, StepInputs, Tables};
use candle_core::{DType, Tensor};

/// A decoder whose state (ids, position, cache) is in device memory; `step` runs one token, and
/// on CUDA `capture` turns the step into a graph that `advance` replays.
pub struct StaticDecoder<'a> {
    model: &'a Decoder,
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
    pub fn prefill(model: &'a Decoder, prompt: &Tensor, capacity: usize, own: OwnKernels) -> Result<Self> {
        Ok(Self::prefill_logits(model, prompt, capacity, own)?.0)
    }

    /// `prefill`, with the prompt's last logits ([batch, vocab], F32).
    pub fn prefill_logits(
        model: &'a Decoder,
        prompt: &Tensor,
        capacity: usize,
        own: OwnKernels,
    ) -> Result<(Self, Tensor)> {
        let (b, s) = prompt.dims2()?;
        let mut cache = model.new_cache(b, capacity)?;
        let logits = last_logits(&model.forward(prompt, &mut cache, Logits::Last)?)?;
        // Checked once: weights holding NaN or an infinity show in the prefill's logits, and the
        // captured step stays one launch with no read back.
        check_finite(&logits, 0)?;
        let ids = logits.argmax_keepdim(candle_core::D::Minus1)?.to_dtype(DType::U32)?;
        let dev = model.device();
        let dec = Self {
            tables: Tables::new(model.device(), model.act_dtype(), model.rope(0, capacity)?, own)?,
            model,
            cache,
            ids,
            pos: Tensor::new(&[s as u32], dev)?,
            one: Tensor::new(&[1u32], dev)?,
            room: capacity - s,
            #[cfg(feature = "cuda")]
            graph: None,
        };
        Ok((dec, logits))
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

    /// One step, kernel by kernel, whose input is `ids` ([batch, 1] u32) instead of the last pick,
    /// returning its logits ([batch, vocab], F32): a reference's tokens forced through the step's
    /// kernels (`generate::parity`). The position advances as in `step`.
    pub fn step_forced(&mut self, ids: &Tensor) -> Result<Tensor> {
        self.take_room()?;
        self.ids.slice_set(&ids.to_dtype(DType::U32)?, 0, 0)?;
        let step = StepInputs::new(&self.tables, &self.pos, self.ids.dim(0)?, &self.model.cfg);
        let logits = self.model.static_logits(&self.ids, &step, &self.cache)?;
        let pos = self.pos.broadcast_add(&self.one)?;
        self.pos.slice_set(&pos, 0, 0)?;
        Ok(logits.to_dtype(DType::F32)?)
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

    fn tiny() -> Decoder {
        let cfg = crate::model::DecoderConfig::preset("tiny").unwrap();
        let mut src = crate::model::load::synthetic::Synthetic::new(cfg.clone(), 5);
        let w = crate::model::load::weights::load_all(
            &cfg,
            &mut src,
            Precision::F32,
            &candle_core::Device::Cpu,
            None,
            |_, _| Ok(()),
        )
        .unwrap();
        Decoder::new(&cfg, Precision::F32, w, &candle_core::Device::Cpu).unwrap()
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
