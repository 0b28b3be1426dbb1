//! The lab's own CUDA kernels for the static decoding step (`graph.rs`), compiled with NVRTC at
//! first use.
//! - `qkv_store`: after the q|k|v product, one kernel rotates q and k, scales q, and writes k and
//!   v into the cache at the position held in device memory (seven of candle's kernels per layer:
//!   three heads-first copies, two rotary, two scatters).
//! - `gemv`: the matrix-vector product of one or two rows. cuBLAS computes a one-row product as a
//!   general GEMM and reads the weights at about 60 % of the bandwidth the read kernel reaches;
//!   here warps stream the weight rows with 16-byte loads (four in flight per lane), so the step
//!   reads its weights the way the read kernel does. The RMS norm of x before it, and the bias,
//!   the residual or silu(gate)·up after it, are in the same kernel, one rounding to the output.
//! - `attend`: the one position's attention over the cache, in 16-byte loads (over a long cache, its
//!   positions in runs over the card and `attend_merge` adding them up); `argmax`: the greedy pick,
//!   in 16-byte runs where the row is aligned.
//!
//! BF16 values are handled as raw 16-bit patterns (no header needed): widened to F32, computed,
//! rounded to nearest even once.

use crate::error::{LabError, Result};
use crate::model::kernels::fused::{Fused, Part, Weights};
use crate::model::kernels::quant_gemv::QuantKernels;
use crate::model::kernels::target::Target;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("decode.cu");

/// Rows of activations one `gemv` launch takes (the kernel is instantiated for 1 to this many).
/// On the H200 (`2026-11-22-own/development/batches`) the kernel beats cuBLAS at batch 1 and 2 and loses from 4:
/// every row of x costs its conversions and FMAs per weight loaded, and from 4 rows that work,
/// not the reading, sets the time.
pub const GEMV_MAX_BATCH: usize = 2;
/// Rows per block: two, so the rows spread evenly over the SMs.
const GEMV_ROWS_PER_BLOCK: u32 = 2;
/// Warps per row the kernel is built for.
const GEMV_SPLITS: [usize; 4] = [1, 2, 4, 8];

/// Runs a head's attention over a cache of `cap` positions is split into: one below 512 positions
/// (a block a head reads them in a few rounds), else as many as give the card about four blocks
/// an SM, each run at least 256 positions, at most 64. One block a head read a 16,384-position cache
/// at 24 % of the card's bandwidth (`data/results/h200/2026-11-28-layer-kernel/long`).
fn attend_splits(cap: usize, blocks: usize, sms: usize) -> usize {
    if cap < 512 {
        return 1;
    }
    (cap / 256).min(4 * sms / blocks.max(1)).clamp(1, 64)
}

/// Warps per row for `n` rows of `loads` 16-byte loads. A lane waits for its loads once per round
/// of four: a matrix of few rows (q|k|v, o, down: 3,584-4,608 rows of 448 or 2,368 loads in BF16)
/// splits its rows so a lane has about one round (up to eight warps a row); a matrix of many rows
/// (gate|up, the head) has warps enough with one per row.
fn gemv_split(loads: usize, n: usize) -> usize {
    if n >= 8192 {
        return 1;
    }
    loads.div_ceil(128).next_power_of_two().min(8)
}

/// Every `gemv` entry point of a dtype, in the order `DecodeKernels::gemv` indexes them:
/// (rows of x, row group, norm, warps per row).
fn gemv_variants() -> impl Iterator<Item = (usize, usize, bool, usize)> {
    (1..=GEMV_MAX_BATCH).flat_map(|b| {
        (1..=2).flat_map(move |g| {
            [false, true].into_iter().flat_map(move |n| GEMV_SPLITS.into_iter().map(move |s| (b, g, n, s)))
        })
    })
}

fn gemv_name(dtype: &str, (b, g, norm, split): (usize, usize, bool, usize)) -> String {
    format!("vram_lab_gemv_{dtype}_b{b}_g{g}{}_s{split}", if norm { "_norm" } else { "" })
}

/// The kernels' source: `decode.cu` and its entry points, instantiated per dtype (and for `gemv`
/// per variant) with the file's macros.
fn source() -> String {
    let mut s = format!("{}{SOURCE}", super::target::COMMON);
    for (name, t) in [("bf16", "unsigned short"), ("f32", "float")] {
        for v @ (b, g, norm, split) in gemv_variants() {
            s.push_str(&format!("VRAM_LAB_GEMV({}, {t}, {b}, {g}, {norm}, {split})\n", gemv_name(name, v)));
        }
        s.push_str(&format!("VRAM_LAB_ATTEND_ARGMAX({name}, {t})\n"));
    }
    s
}

/// The kernels compiled to PTX by NVRTC (no GPU needed), once per process: later decoders reuse it.
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "decode", 0, source)
}

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("decode kernel: {e:?}"))
}

/// The compiled kernels for one activation dtype.
pub struct DecodeKernels {
    target: Target,
    qkv: CudaFunction,
    /// In the order of `gemv_variants`.
    gemv: Vec<CudaFunction>,
    attend: CudaFunction,
    attend_merge: CudaFunction,
    argmax: CudaFunction,
    /// The card's SMs, which the attention's runs over a long cache are sized by.
    sms: usize,
    /// The products over GGUF k-quant blocks.
    quant: QuantKernels,
}

impl DecodeKernels {
    /// Compiles (once per process; candle caches the module) the kernels for `dtype`, or None for
    /// a dtype they have no variant for (F16): the step then uses candle's kernels.
    pub fn new(dev: &CudaDevice, dtype: DType) -> Result<Option<Self>> {
        let Some(target) = Target::new(dev, dtype) else { return Ok(None) };
        let (name, ptx) = (target.name(), ptx()?);
        // Each with the threads a block of it is launched with (below).
        let load = |f: &str, threads: u32| target.load("vram_lab_decode", &ptx, f, threads);
        let gemv = gemv_variants()
            .map(|v| load(&gemv_name(name, v), 32 * v.3 as u32 * GEMV_ROWS_PER_BLOCK))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Self {
            target: target.clone(),
            qkv: load(&format!("vram_lab_qkv_store_{name}"), 256)?,
            gemv,
            attend: load(&format!("vram_lab_attend_{name}"), 512)?,
            attend_merge: load(&format!("vram_lab_attend_merge_{name}"), 256)?,
            argmax: load(&format!("vram_lab_argmax_{name}"), 1024)?,
            sms: crate::memory::cuda::sm_count(dev)?,
            quant: QuantKernels::for_target(target.clone())?,
        }))
    }

    /// Rotates and scales q in `y` ([b, 1, (heads + 2 kv) · d], contiguous) in place and writes k
    /// and v into `kc`, `vc` ([b, kv, cap, d]) at the position `pos` ([1] u32) holds.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_store(
        &self,
        y: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        pos: &Tensor,
        kc: &Tensor,
        vc: &Tensor,
        heads: usize,
        scale: f32,
    ) -> Result<()> {
        let (b, kv, cap, d) = kc.dims4()?;
        let stream = self.target.dev.cuda_stream();
        let (py, pc, ps, pp, pk, pv) = (
            self.target.ptr(y)?,
            self.target.ptr(cos)?,
            self.target.ptr(sin)?,
            self.target.ptr(pos)?,
            self.target.ptr(kc)?,
            self.target.ptr(vc)?,
        );
        let pairs = (b * (heads + 2 * kv) * d / 2) as u32;
        let cfg = LaunchConfig { grid_dim: (pairs.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (b, heads, kv, d, cap) = (b as i32, heads as i32, kv as i32, d as i32, cap as i32);
        let mut l = stream.launch_builder(&self.qkv);
        l.arg(&py)
            .arg(&pc)
            .arg(&ps)
            .arg(&pp)
            .arg(&pk)
            .arg(&pv)
            .arg(&b)
            .arg(&heads)
            .arg(&kv)
            .arg(&d)
            .arg(&cap)
            .arg(&scale);
        // SAFETY: every pointer is a live contiguous tensor of the sizes the arguments give; the
        // kernel writes y's q part and one row of each cache, within bounds for pos < cap.
        unsafe { l.launch(cfg) }.map(|_| ()).map_err(err)
    }

    /// `x · wᵀ` for `x` [.., k] of at most `GEMV_MAX_BATCH` rows, `w` the `parts` one under the
    /// other (one to three weights [n_i, k], each with its bias or none: q, k and v compute as
    /// one product whether they are stacked in memory or not), with what `f` fuses (with `glu`,
    /// the parts are gate and up, [n, k] each, without bias). The result has `x`'s shape with the
    /// rows last. None when the kernel does not take these tensors (another dtype, a batch too
    /// large, rows not a whole number of 16-byte loads, unaligned or strided): the caller computes
    /// with candle. Parts in GGUF blocks go to `quant_gemv` (all of a product's parts, or none).
    pub fn gemv(&self, parts: &[Part], x: &Tensor, f: Fused) -> Result<Option<Tensor>> {
        let quant: Option<Vec<_>> =
            parts.iter().map(|&(w, b)| if let Weights::Quant(q) = w { Some((q, b)) } else { None }).collect();
        if let Some(quant) = quant {
            return self.quant.gemv(&quant, x, f);
        }
        let dense: Option<Vec<_>> =
            parts.iter().map(|&(w, b)| if let Weights::Dense(t) = w { Some((t, b)) } else { None }).collect();
        let Some(parts) = dense else { return Ok(None) };
        let Some(&(first, _)) = parts.first() else { return Ok(None) };
        let k = first.dim(1)?;
        let mut rows = Vec::with_capacity(parts.len());
        for &(w, bias) in &parts {
            let (n, kw) = w.dims2()?;
            if kw != k
                || !self.target.ours(&[w])
                || bias.is_some_and(|b| f.glu || !self.target.ours(&[b]) || b.elem_count() != n)
            {
                return Ok(None);
            }
            rows.push(n);
        }
        let n = if f.glu { rows[0] } else { rows.iter().sum() };
        let batch = x.elem_count() / k.max(1);
        let per = 16 / self.target.dtype.size_in_bytes();
        let takes = x.dims().last() == Some(&k)
            && (1..=GEMV_MAX_BATCH).contains(&batch)
            && k % per == 0
            && if f.glu { parts.len() == 2 && rows[1] == n } else { parts.len() <= 3 }
            && self.target.ours(&[x])
            && f.norm.is_none_or(|(g, _)| self.target.ours(&[g]) && g.elem_count() == k)
            && f.res.is_none_or(|t| !f.glu && self.target.ours(&[t]) && t.elem_count() == batch * n);
        if !takes {
            return Ok(None);
        }
        let stream = self.target.dev.cuda_stream();
        let mut w = [0u64; 3];
        let mut bs = [0u64; 3];
        for (i, &(wi, bi)) in parts.iter().enumerate() {
            w[i] = self.target.ptr(wi)?;
            bs[i] = bi.map(|t| self.target.ptr(t)).transpose()?.unwrap_or(0);
        }
        let px = self.target.ptr(x)?;
        let pg = f.norm.map(|(g, _)| self.target.ptr(g)).transpose()?.unwrap_or(0);
        if w.iter().chain([&px, &pg]).any(|p| p % 16 != 0) {
            return Ok(None);
        }
        let mut shape = x.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let y = crate::memory::cuda_copy::uninit(&self.target.dev, self.target.dtype, shape)?;
        let py = self.target.ptr(&y)?;
        let pr = f.res.map(|t| self.target.ptr(t)).transpose()?.unwrap_or(0);
        let eps = f.norm.map_or(0.0, |(_, e)| e);
        let split = gemv_split(k / per, n);
        let block = 32 * split as u32 * GEMV_ROWS_PER_BLOCK;
        let cfg = LaunchConfig {
            grid_dim: ((n as u32).div_ceil(GEMV_ROWS_PER_BLOCK), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        let variant = (batch, if f.glu { 2 } else { 1 }, f.norm.is_some(), split);
        let Some(at) = gemv_variants().position(|v| v == variant) else { return Ok(None) };
        let func = &self.gemv[at];
        let (n0, n1) = (rows[0] as i32, rows.get(1).copied().unwrap_or(0) as i32);
        let (n, k) = (n as i32, k as i32);
        let mut l = stream.launch_builder(func);
        l.arg(&w[0]).arg(&w[1]).arg(&w[2]).arg(&bs[0]).arg(&bs[1]).arg(&bs[2]).arg(&n0).arg(&n1);
        l.arg(&px).arg(&pr).arg(&pg).arg(&eps).arg(&py).arg(&n).arg(&k);
        // SAFETY: each weight part holds its rows of k (contiguous, 16-byte aligned, k a whole
        // number of 16-byte loads), each bias its rows or null, x batch rows of k, g k values or
        // null, res batch·n or null, and y (fresh) batch·n: the kernel reads and writes within.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(y))
    }

    /// Attention of one position with its rotary and cache store: q, k and v from the stacked
    /// product `y` ([b, 1, (heads + 2 kv) · d], not rotated), q rotated and scaled and k rotated
    /// (`cos`, `sin`: [positions, d / 2]), k and v written into `kc`, `vc` ([b, kv, cap, d]) at
    /// the position `pos` ([1] u32) holds, attention over positions 0 to `pos`; [b, 1, heads · d].
    /// One kernel where `qkv_store` and an attention were two; over a cache of 512 positions or more
    /// a second one merges the runs its positions were split into. None when it does not take the
    /// shapes.
    #[allow(clippy::too_many_arguments)]
    pub fn attend(
        &self,
        y: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        kc: &Tensor,
        vc: &Tensor,
        pos: &Tensor,
        heads: usize,
        scale: f32,
    ) -> Result<Option<Tensor>> {
        let (b, kv, cap, d) = kc.dims4()?;
        let takes = d.is_power_of_two()
            && (32..=256).contains(&d)
            && kv > 0
            && heads.is_multiple_of(kv)
            && y.elem_count() == b * (heads + 2 * kv) * d
            && cos.dims().last() == Some(&(d / 2))
            && sin.dims() == cos.dims()
            && self.target.ours(&[y, cos, sin, kc, vc])
            && vc.dims() == kc.dims();
        if !takes {
            return Ok(None);
        }
        let t = &self.target;
        let (py, pc, ps, pk, pv, pp) = (t.ptr(y)?, t.ptr(cos)?, t.ptr(sin)?, t.ptr(kc)?, t.ptr(vc)?, t.ptr(pos)?);
        // The kernel reads rows of y, the tables and the caches in 16-byte runs.
        if [py, pc, ps, pk, pv].iter().any(|p| p % 16 != 0) {
            return Ok(None);
        }
        let out = crate::memory::cuda_copy::uninit(&t.dev, t.dtype, vec![b, 1, heads * d])?;
        let po = t.ptr(&out)?;
        let stream = t.dev.cuda_stream();
        // The graph replays one grid at every position, so the runs are sized by the capacity.
        let splits = attend_splits(cap, heads * b, self.sms);
        let part = match splits {
            1 => None,
            _ => Some(crate::memory::cuda_copy::uninit(&t.dev, DType::F32, vec![b * heads * splits * (d + 2)])?),
        };
        let pr = part.as_ref().map(|p| t.ptr(p)).transpose()?.unwrap_or(0);
        let cfg = LaunchConfig {
            grid_dim: (heads as u32, splits as u32, b as u32),
            block_dim: (512, 1, 1),
            shared_mem_bytes: 0,
        };
        let (heads_i, kv, d_i, cap) = (heads as i32, kv as i32, d as i32, cap as i32);
        let mut l = stream.launch_builder(&self.attend);
        l.arg(&py)
            .arg(&pc)
            .arg(&ps)
            .arg(&pk)
            .arg(&pv)
            .arg(&pp)
            .arg(&po)
            .arg(&pr)
            .arg(&heads_i)
            .arg(&kv)
            .arg(&d_i)
            .arg(&cap)
            .arg(&scale);
        // SAFETY: y, the tables, the caches and out are live contiguous tensors of the sizes checked
        // above, 16-byte aligned; the kernel reads cache rows below pos, writes row pos (pos < cap,
        // the decoder's room, and < the tables' positions), and out, or with splits its run's
        // b · heads · splits · (d + 2) values of part.
        unsafe { l.launch(cfg) }.map_err(err)?;
        if splits > 1 {
            let cfg = LaunchConfig {
                grid_dim: (heads as u32, b as u32, 1),
                block_dim: (d as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            let splits = splits as i32;
            let mut l = stream.launch_builder(&self.attend_merge);
            l.arg(&pr).arg(&po).arg(&heads_i).arg(&d_i).arg(&splits);
            // SAFETY: part holds b · heads · splits runs of d + 2 values (written above), out b · heads · d.
            unsafe { l.launch(cfg) }.map_err(err)?;
        }
        Ok(Some(out))
    }

    /// The greedy ids ([b, 1] u32) of logits [b, 1, vocab]; None for another dtype or layout.
    pub fn argmax(&self, logits: &Tensor) -> Result<Option<Tensor>> {
        let (b, one, vocab) = logits.dims3()?;
        if one != 1 || !self.target.ours(&[logits]) {
            return Ok(None);
        }
        let ids = crate::memory::cuda_copy::uninit(&self.target.dev, DType::U32, vec![b, 1])?;
        let stream = self.target.dev.cuda_stream();
        let (pl, pi) = (self.target.ptr(logits)?, self.target.ptr(&ids)?);
        let cfg = LaunchConfig { grid_dim: (b as u32, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
        let vocab = vocab as i32;
        let mut l = stream.launch_builder(&self.argmax);
        l.arg(&pl).arg(&pi).arg(&vocab);
        // SAFETY: logits holds b rows of vocab values, ids b u32: the kernel reads and writes within.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(ids))
    }
}
