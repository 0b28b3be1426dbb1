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
//! - `attend`: the one position's attention over the cache, in 16-byte loads; `argmax`: the greedy
//!   pick, in 16-byte runs where the row is aligned.
//! - `layer`: a whole layer of one row (the five launches above as the phases of one grid).
//!
//! BF16 values are handled as raw 16-bit patterns (no header needed): widened to F32, computed,
//! rounded to nearest even once.

use crate::error::{LabError, Result};
use crate::model::kernels::fused::{Fused, Part, Weights};
use crate::model::kernels::quant_gemv::QuantKernels;
use crate::model::kernels::target::Target;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig, PushKernelArg};
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
/// Threads of a block of the layer kernel: eight warps, so every product's warps per row
/// (`gemv_split`) divide a block.
const LAYER_THREADS: u32 = 256;
/// Warps per row the kernel is built for.
const GEMV_SPLITS: [usize; 4] = [1, 2, 4, 8];

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
    argmax: CudaFunction,
    /// The whole layer in one grid, with the blocks that are resident at once (0: not launchable).
    layer: CudaFunction,
    layer_blocks: u32,
    /// The layer's grid barrier: its counter and its failure word (set when a barrier waited past
    /// two seconds), [2] u32.
    bar: Tensor,
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
        let three = std::env::var("VRAM_LAB_LAYER_BLOCKS").is_ok_and(|v| v == "3");
        let layer = load(&format!("vram_lab_layer{}_{name}", if three { "3" } else { "" }), LAYER_THREADS)?;
        let sms = dev
            .cuda_stream()
            .context()
            .attribute(candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(err)? as u32;
        let per_sm = layer.occupancy_max_active_blocks_per_multiprocessor(LAYER_THREADS, 0, None).map_err(err)?;
        Ok(Some(Self {
            target: target.clone(),
            qkv: load(&format!("vram_lab_qkv_store_{name}"), 256)?,
            gemv,
            attend: load(&format!("vram_lab_attend_{name}"), 512)?,
            argmax: load(&format!("vram_lab_argmax_{name}"), 1024)?,
            layer,
            layer_blocks: per_sm * sms,
            bar: Tensor::zeros(2, DType::U32, &candle_core::Device::Cuda(dev.clone()))?,
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
    /// One kernel where `qkv_store` and an attention were two. None when it does not take the shapes.
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
        let cfg = LaunchConfig { grid_dim: (heads as u32, b as u32, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 };
        let (heads, kv, d, cap) = (heads as i32, kv as i32, d as i32, cap as i32);
        let mut l = stream.launch_builder(&self.attend);
        l.arg(&py)
            .arg(&pc)
            .arg(&ps)
            .arg(&pk)
            .arg(&pv)
            .arg(&pp)
            .arg(&po)
            .arg(&heads)
            .arg(&kv)
            .arg(&d)
            .arg(&cap)
            .arg(&scale);
        // SAFETY: y, the tables, the caches and out are live contiguous tensors of the sizes checked
        // above, 16-byte aligned; the kernel reads cache rows below pos, writes row pos (pos < cap,
        // the decoder's room, and < the tables' positions) and out.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(out))
    }

    /// A whole layer of one row in one kernel: `x` [1, 1, hidden] → the layer's output, computed
    /// as `gemv` (q|k|v with the norm), `attend`, `gemv` (o + x), `gemv` (gate|up with the norm)
    /// and `gemv` (down + the residual) compute it, to the same bits, with k and v stored at the
    /// position `pos` holds. None when it does not take these tensors (a batch, a bias where the
    /// layer kernel has none, quantized weights, shapes or alignment the kernels refuse, or a
    /// card where its grid cannot be resident at once): the caller launches the five.
    pub fn layer(&self, w: &LayerWeights, x: &Tensor, at: &LayerAt) -> Result<Option<Tensor>> {
        let t = &self.target;
        let (Some((wq, bq)), Some((wk, bk)), Some((wv, bv))) = (dense(w.qkv[0]), dense(w.qkv[1]), dense(w.qkv[2]))
        else {
            return Ok(None);
        };
        let (b, kv, cap, d) = at.kc.dims4()?;
        let hidden = x.elem_count();
        let (heads, nq, nk) = (at.heads, at.heads * d, kv * d);
        let inter = w.gate.dim(0).unwrap_or(0);
        let per = 16 / t.dtype.size_in_bytes();
        let shaped = |m: &Tensor, n: usize, k: usize| m.dims() == [n, k];
        let biased = |b: Option<&Tensor>, n: usize| b.is_none_or(|b| t.ours(&[b]) && b.elem_count() == n);
        let takes = self.layer_blocks > 0
            && b == 1
            && x.dims().last() == Some(&hidden)
            && [hidden, nq, inter].iter().all(|k| k % per == 0 && *k > 0)
            && d.is_power_of_two()
            && (32..=256).contains(&d)
            && kv > 0
            && heads.is_multiple_of(kv)
            && shaped(wq, nq, hidden)
            && shaped(wk, nk, hidden)
            && shaped(wv, nk, hidden)
            && shaped(w.o, hidden, nq)
            && shaped(w.gate, inter, hidden)
            && shaped(w.up, inter, hidden)
            && shaped(w.down, hidden, inter)
            && biased(bq, nq)
            && biased(bk, nk)
            && biased(bv, nk)
            && at.cos.dims().last() == Some(&(d / 2))
            && at.sin.dims() == at.cos.dims()
            && at.vc.dims() == at.kc.dims()
            && w.ln1.elem_count() == hidden
            && w.ln2.elem_count() == hidden
            && t.ours(&[x, w.ln1, w.ln2, wq, wk, wv, w.o, w.gate, w.up, w.down, at.cos, at.sin, at.kc, at.vc]);
        if !takes {
            return Ok(None);
        }
        let ptr = |m: Option<&Tensor>| m.map(|m| t.ptr(m)).transpose().map(|p| p.unwrap_or(0));
        let new = |n: usize| crate::memory::cuda_copy::uninit(&t.dev, t.dtype, vec![1, 1, n]);
        let (y, att, h, m, out) = (new(nq + 2 * nk)?, new(nq)?, new(hidden)?, new(inter)?, new(hidden)?);
        let bar = t.ptr(&self.bar)?;
        let args = LayerArgs {
            x: t.ptr(x)?,
            ln1: t.ptr(w.ln1)?,
            wq: t.ptr(wq)?,
            wk: t.ptr(wk)?,
            wv: t.ptr(wv)?,
            bq: ptr(bq)?,
            bk: ptr(bk)?,
            bv: ptr(bv)?,
            cos: t.ptr(at.cos)?,
            sin: t.ptr(at.sin)?,
            kc: t.ptr(at.kc)?,
            vc: t.ptr(at.vc)?,
            pos: t.ptr(at.pos)?,
            wo: t.ptr(w.o)?,
            ln2: t.ptr(w.ln2)?,
            wg: t.ptr(w.gate)?,
            wu: t.ptr(w.up)?,
            wd: t.ptr(w.down)?,
            y: t.ptr(&y)?,
            att: t.ptr(&att)?,
            h: t.ptr(&h)?,
            m: t.ptr(&m)?,
            out: t.ptr(&out)?,
            count: bar,
            fail: bar + 4,
            hidden: hidden as i32,
            heads: heads as i32,
            kv: kv as i32,
            d: d as i32,
            cap: cap as i32,
            inter: inter as i32,
            s_qkv: gemv_split(hidden / per, nq + 2 * nk) as i32,
            s_o: gemv_split(nq / per, hidden) as i32,
            s_mlp: gemv_split(hidden / per, inter) as i32,
            s_down: gemv_split(inter / per, hidden) as i32,
            eps: w.eps,
            scale: at.scale,
            pipe: std::env::var("VRAM_LAB_LAYER_PIPE").map_or(1, |v| i32::from(v != "0")),
        };
        // Every product and the attention read 16-byte runs of what they are given.
        let aligned = [args.x, args.ln1, args.wq, args.wk, args.wv, args.cos, args.sin, args.kc, args.vc]
            .into_iter()
            .chain([args.wo, args.ln2, args.wg, args.wu, args.wd, args.y, args.att, args.h, args.m]);
        if aligned.into_iter().any(|p| p % 16 != 0) {
            return Ok(None);
        }
        let cfg =
            LaunchConfig { grid_dim: (self.layer_blocks, 1, 1), block_dim: (LAYER_THREADS, 1, 1), shared_mem_bytes: 0 };
        let stream = t.dev.cuda_stream();
        let mut l = stream.launch_builder(&self.layer);
        l.arg(&args);
        // SAFETY: every pointer is a live contiguous tensor of the shapes checked above (biases
        // null or n values), 16-byte aligned where the kernel reads 16-byte runs; the kernel
        // writes y, att, h, m, out (fresh), the two barrier words and row pos of each cache
        // (pos < cap, the decoder's room). Its grid is at most the blocks resident at once.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(out))
    }

    /// Whether a layer kernel's barrier ever waited past its bound (its grid was not resident at
    /// once, so its outputs are wrong): read back from the device (a synchronisation).
    pub fn layer_failed(&self) -> Result<bool> {
        Ok(self.bar.to_vec1::<u32>()?[1] != 0)
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

/// The weights of one layer, as the layer kernel takes them.
pub struct LayerWeights<'a> {
    pub ln1: &'a Tensor,
    /// q, k and v, each with its bias or none.
    pub qkv: [Part<'a>; 3],
    pub o: &'a Tensor,
    pub ln2: &'a Tensor,
    pub gate: &'a Tensor,
    pub up: &'a Tensor,
    pub down: &'a Tensor,
    pub eps: f32,
}

/// Where the layer attends: the rotary tables [positions, d / 2], its caches [1, kv, cap, d], the
/// position ([1] u32 in device memory), the q heads and q's scale.
pub struct LayerAt<'a> {
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    pub kc: &'a Tensor,
    pub vc: &'a Tensor,
    pub pos: &'a Tensor,
    pub heads: usize,
    pub scale: f32,
}

fn dense<'a>((w, b): Part<'a>) -> Option<(&'a Tensor, Option<&'a Tensor>)> {
    match w {
        Weights::Dense(t) => Some((t, b)),
        Weights::Quant(_) => None,
    }
}

/// `LayerArgs<T>` of `decode.cu`, field for field: device pointers (0 for none), then the sizes.
#[repr(C)]
struct LayerArgs {
    x: u64,
    ln1: u64,
    wq: u64,
    wk: u64,
    wv: u64,
    bq: u64,
    bk: u64,
    bv: u64,
    cos: u64,
    sin: u64,
    kc: u64,
    vc: u64,
    pos: u64,
    wo: u64,
    ln2: u64,
    wg: u64,
    wu: u64,
    wd: u64,
    y: u64,
    att: u64,
    h: u64,
    m: u64,
    out: u64,
    count: u64,
    fail: u64,
    hidden: i32,
    heads: i32,
    kv: i32,
    d: i32,
    cap: i32,
    inter: i32,
    s_qkv: i32,
    s_o: i32,
    s_mlp: i32,
    s_down: i32,
    eps: f32,
    scale: f32,
    pipe: i32,
}

// SAFETY: plain integers and floats in C's layout, the kernel's by-value argument.
unsafe impl DeviceRepr for LayerArgs {}
