//! Streamed layers: their weights live in host memory (pinned on a GPU) and are copied into one of
//! a few reusable GPU buffers ("slots") just before they run, so only `slots` layers of them sit
//! on the GPU at a time.
//!
//! The k-th streamed layer the forward passes need (counting across tokens, cyclically over the
//! streamed layers) goes to slot k mod slots. After the k-th has run, the copy of the (k+slots)-th
//! into the same slot is queued: on a GPU on a copy stream of its own, after an event saying the
//! slot's compute is done, so it overlaps the layers in between (double buffering with 2 slots);
//! on the CPU (tests) the same schedule copies at once.

use crate::error::{LabError, Result};
use crate::model::decoder::layer::Layer;
use candle_core::{Device, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One streamed layer's weights in host memory.
enum HostLayer {
    /// CPU tensors, in `Layer::tensors` order (the CPU stand-in for a GPU).
    Tensors(Vec<Tensor>),
    /// One pinned buffer holding every tensor, at these (offset, length) byte ranges.
    #[cfg(feature = "cuda")]
    Pinned(crate::memory::cuda_copy::Pinned, Vec<(usize, usize)>),
}

#[cfg(feature = "cuda")]
struct Copier {
    stream: crate::memory::cuda_copy::CopyStream,
    compute: std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
    /// Per slot: its copy has landed / its layer has run.
    copied: Vec<candle_core::cuda_backend::cudarc::driver::CudaEvent>,
    computed: Vec<candle_core::cuda_backend::cudarc::driver::CudaEvent>,
    /// Per slot: device addresses of its tensors.
    dst: Vec<Vec<(u64, usize)>>,
}

pub struct Streamer {
    /// The model layer index of each streamed layer, in forward order.
    order: Vec<usize>,
    host: Vec<HostLayer>,
    slots: Vec<Layer>,
    /// Streamed layers acquired so far (k).
    step: AtomicUsize,
    layer_bytes: u64,
    #[cfg(feature = "cuda")]
    copier: Option<Copier>,
}

impl Streamer {
    /// `layers`: (model index, layer with its tensors in host memory), in forward order.
    pub(crate) fn new(layers: Vec<(usize, Layer)>, slots: usize, device: &Device) -> Result<Self> {
        let slots_n = slots.clamp(1, layers.len().max(1));
        let template = &layers.first().ok_or_else(|| LabError::other("a streamer without layers"))?.1;
        let first = template.tensors()?;
        let layer_bytes = crate::memory::tensor_bytes(&first);
        let mut slot_layers = Vec::with_capacity(slots_n);
        for _ in 0..slots_n {
            let bufs = first
                .iter()
                .map(|t| Tensor::zeros(t.shape(), t.dtype(), device))
                .collect::<candle_core::Result<Vec<_>>>()?;
            slot_layers.push(template.with_tensors(bufs)?);
        }
        let order = layers.iter().map(|(l, _)| *l).collect();
        let mut host = Vec::with_capacity(layers.len());
        for (_, layer) in layers {
            let t = layer.tensors()?;
            drop(layer);
            host.push(Self::host_layer(t, device)?);
        }
        #[cfg(feature = "cuda")]
        let copier = match device {
            Device::Cuda(dev) => {
                let stream = crate::memory::cuda_copy::CopyStream::new(dev)?;
                let compute = dev.cuda_stream();
                let mut dst = Vec::new();
                for s in &slot_layers {
                    let ptrs = s
                        .tensors()?
                        .iter()
                        .map(|t| crate::memory::cuda_copy::device_ptr(t, &compute))
                        .collect::<Result<Vec<_>>>()?;
                    dst.push(ptrs);
                }
                let copied = (0..slots_n).map(|_| stream.event()).collect::<Result<Vec<_>>>()?;
                let computed = (0..slots_n).map(|_| stream.event()).collect::<Result<Vec<_>>>()?;
                Some(Copier { stream, compute, copied, computed, dst })
            }
            _ => None,
        };
        let s = Self {
            order,
            host,
            slots: slot_layers,
            step: AtomicUsize::new(0),
            layer_bytes,
            #[cfg(feature = "cuda")]
            copier,
        };
        s.prime(0)?;
        Ok(s)
    }

    fn host_layer(tensors: Vec<Tensor>, device: &Device) -> Result<HostLayer> {
        let tensors =
            tensors.into_iter().map(|t| t.to_device(&Device::Cpu)).collect::<candle_core::Result<Vec<_>>>()?;
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => {
                let total = crate::memory::tensor_bytes(&tensors) as usize;
                let mut pinned = crate::memory::cuda_copy::Pinned::new(dev, total)?;
                let buf = pinned.as_mut_slice()?;
                let mut ranges = Vec::with_capacity(tensors.len());
                let mut at = 0;
                for t in &tensors {
                    let n = crate::memory::cuda_copy::with_host_bytes(t, |b| {
                        buf[at..at + b.len()].copy_from_slice(b);
                        b.len()
                    })?;
                    ranges.push((at, n));
                    at += n;
                }
                Ok(HostLayer::Pinned(pinned, ranges))
            }
            _ => Ok(HostLayer::Tensors(tensors)),
        }
    }

    /// Queues the copies of the streamed layers needed k, k+1, … into their slots.
    fn prime(&self, k: usize) -> Result<()> {
        for j in k..k + self.slots.len() {
            self.copy(j)?;
        }
        self.step.store(k, Ordering::SeqCst);
        Ok(())
    }

    /// Starts a forward pass: the schedule must stand at the first streamed layer. A pass that
    /// failed half way (an OOM) leaves it elsewhere; then the slots are loaded afresh.
    pub(crate) fn start_pass(&self) -> Result<()> {
        let k = self.step.load(Ordering::SeqCst);
        let n = self.order.len();
        if !k.is_multiple_of(n) {
            self.synchronize()?;
            self.prime(k.div_ceil(n) * n)?;
        }
        Ok(())
    }

    /// The weights of model layer `l`, which must be the next streamed layer due.
    pub(crate) fn acquire(&self, l: usize) -> Result<&Layer> {
        let k = self.step.load(Ordering::SeqCst);
        let due = self.order[k % self.order.len()];
        if due != l {
            return Err(LabError::other(format!("streamer out of step: layer {l} asked, layer {due} due")));
        }
        let slot = k % self.slots.len();
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.copier {
            c.compute.wait(&c.copied[slot]).map_err(|e| LabError::other(format!("{e:?}")))?;
        }
        Ok(&self.slots[slot])
    }

    /// The layer acquired last has been queued to run: its slot takes the layer due `slots` steps later.
    pub(crate) fn release(&self) -> Result<()> {
        let k = self.step.fetch_add(1, Ordering::SeqCst);
        let next = k + self.slots.len();
        // With as many slots as streamed layers, every slot keeps its layer.
        if self.slots.len() == self.order.len() {
            return Ok(());
        }
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.copier {
            let slot = k % self.slots.len();
            c.computed[slot].record(&c.compute).map_err(|e| LabError::other(format!("{e:?}")))?;
            c.stream.wait(&c.computed[slot])?;
        }
        self.copy(next)
    }

    /// Copies the j-th due streamed layer into slot j mod slots.
    fn copy(&self, j: usize) -> Result<()> {
        let slot = j % self.slots.len();
        match &self.host[j % self.order.len()] {
            HostLayer::Tensors(src) => {
                for (dst, src) in self.slots[slot].tensors()?.iter().zip(src) {
                    dst.slice_set(&src.to_device(dst.device())?, 0, 0)?;
                }
                Ok(())
            }
            #[cfg(feature = "cuda")]
            HostLayer::Pinned(buf, ranges) => {
                let c = self.copier.as_ref().ok_or_else(|| LabError::other("pinned layers without a copy stream"))?;
                let bytes = buf.as_slice()?;
                for (&(dst, len), &(at, n)) in c.dst[slot].iter().zip(ranges) {
                    if len != n {
                        return Err(LabError::other("a streamed tensor's size differs from its buffer's"));
                    }
                    c.stream.htod(dst, &bytes[at..at + n])?;
                }
                c.stream.record(&c.copied[slot])
            }
        }
    }

    fn synchronize(&self) -> Result<()> {
        #[cfg(feature = "cuda")]
        if let Some(c) = &self.copier {
            c.stream.synchronize()?;
            c.compute.synchronize().map_err(|e| LabError::other(format!("{e:?}")))?;
        }
        Ok(())
    }

    /// Bytes of the GPU buffers.
    pub fn gpu_bytes(&self) -> u64 {
        self.slots.len() as u64 * self.layer_bytes
    }

    /// Bytes of the host copies.
    pub fn host_bytes(&self) -> u64 {
        self.order.len() as u64 * self.layer_bytes
    }
}
