//! What transformers takes on a GPU: the report's own stack. `from_pretrained(device_map="cuda")`
//! then the report's KV-cache sweep (`_ = model(input_ids)`, lengths doubling from 1,024 until
//! PyTorch runs out of memory), replayed request by request (`forward`) through a model of
//! PyTorch's caching allocator (`caching`): allocated, reserved and peak bytes per length, and the
//! request that fails on a given card.
//!
//! Two things the report's script does shape its figures. Every position's logits are kept
//! (seq × vocab in the model's dtype: 4.64 GiB at 16,384 tokens for Qwen2.5-7B, the request its
//! RTX 4090 refused). And `_` holds the previous length's output (its logits and its cache) until
//! the next forward returns, so each step carries the one before it.

pub mod forward;

use crate::estimate::caching::{Caching, Oom};
use crate::model::DecoderConfig;

/// What the CUDA context and PyTorch's start take of a card before the first tensor: measured on
/// an H200 (CUDA 13.0, driver 580, PyTorch 2.11) as the card's size less what
/// `torch.cuda.mem_get_info` left free after `torch.empty(1)` (529.3 MiB,
/// `data/results/h200/2026-11-27-transformers`).
pub const TORCH_CONTEXT: u64 = 555_024_384;

/// The card as PyTorch sees it: what it may map, and the cuBLAS workspace it takes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub capacity: u64,
    pub cublas_workspace: u64,
}

impl Target {
    /// A card of `total` bytes: PyTorch's context off the top; compute 9.0 or later (`hopper`)
    /// takes the larger cuBLAS workspace.
    pub fn card(total: u64, hopper: bool) -> Self {
        let cublas_workspace = if hopper { forward::CUBLAS_WORKSPACE_HOPPER } else { forward::CUBLAS_WORKSPACE_OLDER };
        Self { capacity: total.saturating_sub(TORCH_CONTEXT), cublas_workspace }
    }
}

/// The bytes of one element in the model's dtype (`torch_dtype`): 2 for BF16/F16, 4 for F32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dtype {
    pub bytes: u64,
}

/// One length of the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub seq: usize,
    /// Allocated when the forward starts (the input ids made, the previous output held).
    pub before: u64,
    /// Allocated after it (or, on an OOM, what the frames still hold when Python catches it).
    pub after: u64,
    pub peak: u64,
    pub reserved: u64,
    pub oom: Option<Oom>,
}

/// The sweep: the model loaded, then each length until the first OOM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub loaded_allocated: u64,
    pub loaded_reserved: u64,
    /// The load's own refusal, when the weights do not fit.
    pub load_oom: Option<Oom>,
    pub steps: Vec<Step>,
}

/// How the weights came onto the GPU.
pub enum Load<'a> {
    /// `from_pretrained(device_map="cuda")`: transformers first reserves the weights' bytes in
    /// one block (`caching_allocator_warmup`) and frees it, so the large tensors are carved from
    /// one segment; the small ones (norms, biases, the rotary's two buffers) share 2 MiB ones.
    Pretrained,
    /// A state measured after the load: (small pool, segment size, bytes in use) per segment.
    Segments(&'a [(bool, u64, u64)]),
}

/// `from_pretrained`'s allocations: each weight, then the rotary embedding's `inv_freq` and its
/// copy `original_inv_freq` (head_dim / 2 F32 values each). A model with tied embeddings has its
/// head materialised as a copy of the embedding, which stays allocated (3,554,177,024 B for
/// Qwen2.5-1.5B where the parameters take 3,087,428,608), and `tie_weights` compares the two
/// through a vocab × hidden bool tensor it frees again.
fn load_pretrained(a: &mut Caching, cfg: &DecoderConfig, dtype: Dtype) -> Result<(), Oom> {
    let mut sizes: Vec<u64> = cfg.tensor_specs().iter().map(|t| t.elem_count() as u64 * dtype.bytes).collect();
    let warmup: u64 = sizes.iter().sum();
    let block = a.alloc(warmup)?;
    a.free(block);
    let embedding = cfg.vocab_size as u64 * cfg.hidden_size as u64;
    if cfg.tie_word_embeddings {
        sizes.insert(1, embedding * dtype.bytes);
    }
    let inv_freq = cfg.head_dim() as u64 / 2 * 4;
    sizes.extend([inv_freq, inv_freq]);
    for size in sizes {
        a.alloc(size)?;
    }
    if cfg.tie_word_embeddings {
        let compared = [embedding, 1, 1781, 4].map(|b| a.alloc(b)).into_iter().collect::<Result<Vec<_>, _>>()?;
        for h in compared {
            a.free(h);
        }
    }
    Ok(())
}

/// The report's sweep on `target`, from `start` tokens doubling while at most `max`.
pub fn sweep(cfg: &DecoderConfig, dtype: Dtype, target: Target, load: Load, start: usize, max: usize) -> Sweep {
    let mut a = Caching::new(target.capacity);
    let load_oom = match load {
        Load::Pretrained => load_pretrained(&mut a, cfg, dtype).err(),
        Load::Segments(segments) => {
            for &(small, size, used) in segments {
                a.resume_segment(small, size, used);
            }
            None
        }
    };
    let mut out = Sweep { loaded_allocated: a.allocated(), loaded_reserved: a.reserved(), load_oom, steps: Vec::new() };
    if out.load_oom.is_some() {
        return out;
    }
    let (mut workspaces, mut previous, mut ids) =
        (forward::Workspaces::new(target.cublas_workspace), Vec::new(), None::<u64>);
    let mut seq = start.max(1);
    while seq <= max {
        // input_ids = torch.randint(..., (1, seq)).to("cuda"): int64, made before the old one goes.
        let new_ids = match a.alloc(seq as u64 * 8) {
            Ok(h) => h,
            Err(oom) => {
                out.steps.push(Step {
                    seq,
                    before: a.allocated(),
                    after: a.allocated(),
                    peak: a.peak(),
                    reserved: a.reserved(),
                    oom: Some(oom),
                });
                break;
            }
        };
        if let Some(old) = ids.replace(new_ids) {
            a.free(old);
        }
        a.reset_peak();
        let before = a.allocated();
        let result = forward::forward(&mut a, cfg, seq, dtype.bytes, &mut workspaces);
        let oom = match result {
            Ok(o) => {
                for h in std::mem::replace(&mut previous, o.handles) {
                    a.free(h);
                }
                None
            }
            Err(oom) => Some(oom),
        };
        out.steps.push(Step { seq, before, after: a.allocated(), peak: a.peak(), reserved: a.reserved(), oom });
        if oom.is_some() {
            break;
        }
        seq = seq.saturating_mul(2);
    }
    out
}
