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
//! - `attend`: the one position's attention over the cache; `argmax`: the greedy pick.
//!
//! BF16 values are handled as raw 16-bit patterns (no header needed): widened to F32, computed,
//! rounded to nearest even once.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use super::graph::{Fused, Part};
use candle_core::{DType, Tensor};

const SOURCE: &str = r#"
#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float ld(const unsigned short* p, long i) { return __uint_as_float(((unsigned)p[i]) << 16); }
__device__ __forceinline__ void st(unsigned short* p, long i, float f) {
    unsigned u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    p[i] = (unsigned short)(u >> 16);
}
__device__ __forceinline__ float ld(const float* p, long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, long i, float f) { p[i] = f; }

// y: [b, (heads + 2 kv) * d] (q | k | v of one position), rotated and scaled in place for q;
// k rotated and v copied into the caches [b, kv, cap, d] at row pos[0]. One thread per pair (i, i + d/2).
template <typename T>
__device__ void qkv_store(T* y, const T* cos_t, const T* sin_t, const unsigned* pos, T* kc, T* vc,
                          int b, int heads, int kv, int d, int cap, float scale) {
    int half = d / 2, total = heads + 2 * kv;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)b * total * half) return;
    int i = idx % half;
    int h = (idx / half) % total;
    int bi = idx / ((long)half * total);
    unsigned p = pos[0];
    long at = (long)bi * total * d + (long)h * d;
    float x1 = ld(y, at + i), x2 = ld(y, at + i + half);
    if (h < heads + kv) {
        float c = ld(cos_t, (long)p * half + i), s = ld(sin_t, (long)p * half + i);
        float r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
        x1 = r1; x2 = r2;
    }
    if (h < heads) {
        st(y, at + i, x1 * scale); st(y, at + i + half, x2 * scale);
    } else {
        int kh = h < heads + kv ? h - heads : h - heads - kv;
        T* cache = h < heads + kv ? kc : vc;
        long row = (((long)bi * kv + kh) * cap + p) * d;
        st(cache, row + i, x1); st(cache, row + i + half, x2);
    }
}

// The dot product of 16 bytes of weights with 16 bytes of activations, in F32.
__device__ __forceinline__ float lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi(unsigned u) { return __uint_as_float(u & 0xFFFF0000u); }
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, const unsigned short*) {
    acc = fmaf(lo(w.x), lo(x.x), acc); acc = fmaf(hi(w.x), hi(x.x), acc);
    acc = fmaf(lo(w.y), lo(x.y), acc); acc = fmaf(hi(w.y), hi(x.y), acc);
    acc = fmaf(lo(w.z), lo(x.z), acc); acc = fmaf(hi(w.z), hi(x.z), acc);
    acc = fmaf(lo(w.w), lo(x.w), acc); acc = fmaf(hi(w.w), hi(x.w), acc);
    return acc;
}
__device__ __forceinline__ float dot16(uint4 w, uint4 x, float acc, const float*) {
    acc = fmaf(__uint_as_float(w.x), __uint_as_float(x.x), acc);
    acc = fmaf(__uint_as_float(w.y), __uint_as_float(x.y), acc);
    acc = fmaf(__uint_as_float(w.z), __uint_as_float(x.z), acc);
    acc = fmaf(__uint_as_float(w.w), __uint_as_float(x.w), acc);
    return acc;
}

__device__ __forceinline__ float dot16g(uint4 w, uint4 x, uint4 g, float acc, const unsigned short*) {
    acc = fmaf(lo(w.x), lo(x.x) * lo(g.x), acc); acc = fmaf(hi(w.x), hi(x.x) * hi(g.x), acc);
    acc = fmaf(lo(w.y), lo(x.y) * lo(g.y), acc); acc = fmaf(hi(w.y), hi(x.y) * hi(g.y), acc);
    acc = fmaf(lo(w.z), lo(x.z) * lo(g.z), acc); acc = fmaf(hi(w.z), hi(x.z) * hi(g.z), acc);
    acc = fmaf(lo(w.w), lo(x.w) * lo(g.w), acc); acc = fmaf(hi(w.w), hi(x.w) * hi(g.w), acc);
    return acc;
}
__device__ __forceinline__ float dot16g(uint4 w, uint4 x, uint4 g, float acc, const float*) {
    acc = fmaf(__uint_as_float(w.x), __uint_as_float(x.x) * __uint_as_float(g.x), acc);
    acc = fmaf(__uint_as_float(w.y), __uint_as_float(x.y) * __uint_as_float(g.y), acc);
    acc = fmaf(__uint_as_float(w.z), __uint_as_float(x.z) * __uint_as_float(g.z), acc);
    acc = fmaf(__uint_as_float(w.w), __uint_as_float(x.w) * __uint_as_float(g.w), acc);
    return acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// y[b, n] = x[b, k] · w[n, k]ᵀ (+ bias[n]) (+ res[b, n]), where w is up to three weights one
// under the other (q, k, v: rows [0, n0) of w0, the next n1 of w1, the rest of w2, each with its
// bias or none), so separate projections compute as one without being stacked in memory. With
// G = 2, y = silu(x·w0ᵀ) · (x·w1ᵀ) (gate and up, n rows each). With N, x is first RMS-normed with
// the weight g (eps). S warps share a row (each an interleaved part of k, so long rows take fewer
// rounds of loads); a block holds blockDim / (32 S) rows. k · sizeof(T) a multiple of 16 and the
// weights, x and g 16-byte aligned (the caller checks).
template <typename T, int B, int G, bool N, int S>
__device__ void gemv(const T* __restrict__ w0, const T* __restrict__ w1, const T* __restrict__ w2,
                     const T* __restrict__ b0, const T* __restrict__ b1, const T* __restrict__ b2, int n0, int n1,
                     const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ g, float eps,
                     T* __restrict__ y, int n, int k) {
    __shared__ float part_sums[16][G * B + B];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, part = warp % S;
    const int row = blockIdx.x * ((blockDim.x >> 5) / S) + warp / S;
    const bool live = row < n;
    const int kv = k / (16 / (int)sizeof(T));
    const uint4* xr = (const uint4*)x;
    const uint4* gr = (const uint4*)g;
    // The weight part the row lies in, and the row within it.
    const int seg = G == 2 ? 0 : (row < n0 ? 0 : (row < n0 + n1 ? 1 : 2));
    const int local = row - (seg > 0 ? n0 : 0) - (seg > 1 ? n1 : 0);
    const T* wseg = seg == 0 ? w0 : (seg == 1 ? w1 : w2);
    const T* bias = seg == 0 ? b0 : (seg == 1 ? b1 : b2);
    const uint4* wr[G];
    float acc[G][B], ss[B];
#pragma unroll
    for (int r = 0; r < G; r++) {
        const T* base = G == 2 ? (r == 0 ? w0 : w1) : wseg;
        wr[r] = (const uint4*)(base + (long)(live ? local : 0) * k);
#pragma unroll
        for (int b = 0; b < B; b++) acc[r][b] = 0.f;
    }
#pragma unroll
    for (int b = 0; b < B; b++) ss[b] = 0.f;
    const int step = 32 * S;
    // Four 16-byte loads per row in flight per lane, the last round's past the row's end left
    // out; the weights are read once (streaming loads). With N the sum of squares of x is taken
    // from the same loads of x.
    for (int i = lane + 32 * part; live && i < kv; i += 4 * step) {
        uint4 wv[G][4];
#pragma unroll
        for (int r = 0; r < G; r++)
#pragma unroll
            for (int u = 0; u < 4; u++) wv[r][u] = i + step * u < kv ? __ldcs(wr[r] + i + step * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (i + step * u >= kv) break;
            uint4 gv = N ? __ldg(gr + i + step * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int b = 0; b < B; b++) {
                uint4 xv = __ldg(xr + (long)b * kv + i + step * u);
                if (N) ss[b] = dot16(xv, xv, ss[b], x);
#pragma unroll
                for (int r = 0; r < G; r++) acc[r][b] = N ? dot16g(wv[r][u], xv, gv, acc[r][b], x) : dot16(wv[r][u], xv, acc[r][b], x);
            }
        }
    }
#pragma unroll
    for (int b = 0; b < B; b++) {
        if (N) ss[b] = warp_sum(ss[b]);
#pragma unroll
        for (int r = 0; r < G; r++) acc[r][b] = warp_sum(acc[r][b]);
    }
    if (S > 1) {
        // The row's warps add their parts through shared memory; the first keeps the sums.
        if (lane == 0) {
#pragma unroll
            for (int b = 0; b < B; b++) {
                part_sums[warp][G * B + b] = ss[b];
#pragma unroll
                for (int r = 0; r < G; r++) part_sums[warp][r * B + b] = acc[r][b];
            }
        }
        __syncthreads();
        if (part != 0 || lane != 0) return;
#pragma unroll
        for (int o = 1; o < S; o++)
#pragma unroll
            for (int b = 0; b < B; b++) {
                ss[b] += part_sums[warp + o][G * B + b];
#pragma unroll
                for (int r = 0; r < G; r++) acc[r][b] += part_sums[warp + o][r * B + b];
            }
    }
    if (lane != 0 || !live) return;
#pragma unroll
    for (int b = 0; b < B; b++) {
        // The norm's scale 1/rms(x) is one factor per row of x, applied to the sums.
        float rs = N ? rsqrtf(ss[b] / (float)k + eps) : 1.f;
        float v = acc[0][b] * rs;
        if (G == 2) {
            float u = acc[G - 1][b] * rs;
            v = v / (1.f + __expf(-v)) * u;
        } else {
            if (bias) v += ld(bias, local);
            if (res) v += ld(res, (long)b * n + row);
        }
        st(y, (long)b * n + row, v);
    }
}

// Attention of one decoding position over the cache: block (h, b) reads q (rotated and scaled by
// qkv_store) from y [b, (heads + 2 kv) d] and k, v from the caches [b, kv, cap, d] at positions
// 0..pos[0], and writes its head of out [b, heads d]. Each warp keeps a running max, sum and
// output over its share of the positions (four positions' k and v loaded at once); the block
// combines them. d a multiple of 32, at most 256; at most 16 warps.
template <typename T>
__device__ void attend(const T* __restrict__ y, const T* __restrict__ kc, const T* __restrict__ vc,
                       const unsigned* __restrict__ pos, T* __restrict__ out, int heads, int kv, int d, int cap) {
    __shared__ float sm_m[16], sm_l[16], sm_acc[16 * 256];
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.x, bi = blockIdx.y, e_n = d / 32;
    const int n = (int)pos[0] + 1;
    const T* q = y + (long)bi * (heads + 2 * kv) * d + (long)h * d + lane * e_n;
    const long head = ((long)bi * kv + h / (heads / kv)) * cap * d + lane * e_n;
    float qf[8], acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) { qf[e] = e < e_n ? ld(q, e) : 0.f; acc[e] = 0.f; }
    float m = NEG_INF, l = 0.f;
    for (int t0 = warp * 4; t0 < n; t0 += nw * 4) {
        // k and v of four positions loaded together, then used.
        float kf[4][8], vf[4][8];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                bool in = t0 + u < n && e < e_n;
                long at = head + (long)(t0 + u) * d + e;
                kf[u][e] = in ? ld(kc, at) : 0.f;
                vf[u][e] = in ? ld(vc, at) : 0.f;
            }
        float s[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float dot = 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) dot = fmaf(qf[e], kf[u][e], dot);
            s[u] = warp_sum(dot);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (t0 + u >= n) break;
            float mn = fmaxf(m, s[u]);
            float c = __expf(m - mn), p = __expf(s[u] - mn);
            l = l * c + p;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = fmaf(p, vf[u][e], acc[e] * c);
            m = mn;
        }
    }
    if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
#pragma unroll
    for (int e = 0; e < 8; e++) if (e < e_n) sm_acc[warp * d + lane * e_n + e] = acc[e];
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float mx = NEG_INF;
        for (int w = 0; w < nw; w++) mx = fmaxf(mx, sm_m[w]);
        float sum = 0.f, o = 0.f;
        for (int w = 0; w < nw; w++) {
            if (sm_l[w] == 0.f) continue;
            float c = __expf(sm_m[w] - mx);
            sum += sm_l[w] * c;
            o += sm_acc[w * d + j] * c;
        }
        st(out, ((long)bi * heads + h) * d + j, o / sum);
    }
}

// The greedy id of each row of logits [rows, vocab]: block per row; the first index of the
// largest value.
template <typename T>
__device__ void argmax(const T* __restrict__ logits, unsigned* __restrict__ ids, int vocab) {
    __shared__ float sm_v[32];
    __shared__ int sm_i[32];
    const T* row = logits + (long)blockIdx.x * vocab;
    float best = NEG_INF;
    int at = 0x7fffffff;
    // Eight loads in flight per thread: one block reads the row, so latency, not bandwidth, is
    // its time. Each thread's indices rise, so a strict > keeps the first of equal values.
    for (int j0 = threadIdx.x; j0 < vocab; j0 += 8 * blockDim.x) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) { int j = j0 + u * blockDim.x; v[u] = j < vocab ? ld(row, j) : NEG_INF; }
#pragma unroll
        for (int u = 0; u < 8; u++) if (v[u] > best) { best = v[u]; at = j0 + u * blockDim.x; }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, off);
        int oi = __shfl_xor_sync(0xffffffffu, at, off);
        if (ov > best || (ov == best && oi < at)) { best = ov; at = oi; }
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (lane == 0) { sm_v[warp] = best; sm_i[warp] = at; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nw; w++)
            if (sm_v[w] > best || (sm_v[w] == best && sm_i[w] < at)) { best = sm_v[w]; at = sm_i[w]; }
        ids[blockIdx.x] = (unsigned)(at == 0x7fffffff ? 0 : at);
    }
}

extern "C" __global__ void vram_lab_qkv_store_bf16(unsigned short* y, const unsigned short* cos_t, const unsigned short* sin_t, const unsigned* pos,
        unsigned short* kc, unsigned short* vc, int b, int heads, int kv, int d, int cap, float scale) {
    qkv_store(y, cos_t, sin_t, pos, kc, vc, b, heads, kv, d, cap, scale);
}
extern "C" __global__ void vram_lab_qkv_store_f32(float* y, const float* cos_t, const float* sin_t, const unsigned* pos,
        float* kc, float* vc, int b, int heads, int kv, int d, int cap, float scale) {
    qkv_store(y, cos_t, sin_t, pos, kc, vc, b, heads, kv, d, cap, scale);
}
"#;

/// Rows of activations one `gemv` launch takes (the kernel is instantiated for 1 to this many).
/// On the H200 (`2026-11-22-own/development/batches`) the kernel beats cuBLAS at batch 1 and 2 and loses from 4:
/// every row of x costs its conversions and FMAs per weight loaded, and from 4 rows that work,
/// not the reading, sets the time.
pub const GEMV_MAX_BATCH: usize = 2;
/// Rows per block: two, so the rows spread evenly over the SMs.
const GEMV_ROWS_PER_BLOCK: u32 = 2;
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
    (1..=GEMV_MAX_BATCH).flat_map(|b| (1..=2).flat_map(move |g| [false, true].into_iter().flat_map(move |n| GEMV_SPLITS.into_iter().map(move |s| (b, g, n, s)))))
}

fn gemv_name(dtype: &str, (b, g, norm, split): (usize, usize, bool, usize)) -> String {
    format!("vram_lab_gemv_{dtype}_b{b}_g{g}{}_s{split}", if norm { "_norm" } else { "" })
}

/// The kernels' source: the templates above and an entry point per dtype (and for `gemv` per
/// variant).
fn source() -> String {
    let mut s = String::from(SOURCE);
    for (name, t) in [("bf16", "unsigned short"), ("f32", "float")] {
        for v @ (b, g, norm, split) in gemv_variants() {
            s.push_str(&format!(
                "extern \"C\" __global__ void {}(const {t}* w0, const {t}* w1, const {t}* w2, const {t}* b0, const {t}* b1, const {t}* b2, int n0, int n1, const {t}* x, const {t}* res, const {t}* g, float eps, {t}* y, int n, int k) {{ gemv<{t}, {b}, {g}, {norm}, {split}>(w0, w1, w2, b0, b1, b2, n0, n1, x, res, g, eps, y, n, k); }}\n",
                gemv_name(name, v)
            ));
        }
        s.push_str(&format!(
            "extern \"C\" __global__ void vram_lab_attend_{name}(const {t}* y, const {t}* kc, const {t}* vc, const unsigned* pos, {t}* out, int heads, int kv, int d, int cap) {{ attend<{t}>(y, kc, vc, pos, out, heads, kv, d, cap); }}\n\
             extern \"C\" __global__ void vram_lab_argmax_{name}(const {t}* logits, unsigned* ids, int vocab) {{ argmax<{t}>(logits, ids, vocab); }}\n"
        ));
    }
    s
}

/// The kernels compiled to PTX by NVRTC (no GPU needed), once per process: later decoders reuse it.
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    crate::memory::cuda_copy::ptx_once(&PTX, || Ok(candle_core::cuda_backend::cudarc::nvrtc::compile_ptx(source()).map_err(err)?.to_src()))
}

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("decode kernel: {e:?}"))
}

/// The compiled kernels for one activation dtype.
pub struct DecodeKernels {
    dev: CudaDevice,
    dtype: DType,
    qkv: CudaFunction,
    /// In the order of `gemv_variants`.
    gemv: Vec<CudaFunction>,
    attend: CudaFunction,
    argmax: CudaFunction,
}

impl DecodeKernels {
    /// Compiles (once per process; candle caches the module) the kernels for `dtype`, or None for
    /// a dtype they have no variant for (F16): the step then uses candle's kernels.
    pub fn new(dev: &CudaDevice, dtype: DType) -> Result<Option<Self>> {
        let name = match dtype {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            _ => return Ok(None),
        };
        let ptx = ptx()?;
        let load = |f: &str| -> Result<CudaFunction> { Ok(dev.get_or_load_custom_func(f, "vram_lab_decode", &ptx)?.into_cuda_function()) };
        let gemv = gemv_variants().map(|v| load(&gemv_name(name, v))).collect::<Result<Vec<_>>>()?;
        Ok(Some(Self {
            dev: dev.clone(),
            dtype,
            qkv: load(&format!("vram_lab_qkv_store_{name}"))?,
            gemv,
            attend: load(&format!("vram_lab_attend_{name}"))?,
            argmax: load(&format!("vram_lab_argmax_{name}"))?,
        }))
    }

    /// Rotates and scales q in `y` ([b, 1, (heads + 2 kv) · d], contiguous) in place and writes k
    /// and v into `kc`, `vc` ([b, kv, cap, d]) at the position `pos` ([1] u32) holds.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_store(&self, y: &Tensor, cos: &Tensor, sin: &Tensor, pos: &Tensor, kc: &Tensor, vc: &Tensor, heads: usize, scale: f32) -> Result<()> {
        let (b, kv, cap, d) = kc.dims4()?;
        let stream = self.dev.cuda_stream();
        let (py, pc, ps, pp, pk, pv) = (self.ptr(y)?, self.ptr(cos)?, self.ptr(sin)?, self.ptr(pos)?, self.ptr(kc)?, self.ptr(vc)?);
        let pairs = (b * (heads + 2 * kv) * d / 2) as u32;
        let cfg = LaunchConfig { grid_dim: (pairs.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (b, heads, kv, d, cap) = (b as i32, heads as i32, kv as i32, d as i32, cap as i32);
        let mut l = stream.launch_builder(&self.qkv);
        l.arg(&py).arg(&pc).arg(&ps).arg(&pp).arg(&pk).arg(&pv).arg(&b).arg(&heads).arg(&kv).arg(&d).arg(&cap).arg(&scale);
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
    /// with candle.
    pub fn gemv(&self, parts: &[Part], x: &Tensor, f: Fused) -> Result<Option<Tensor>> {
        let Some(&(first, _)) = parts.first() else { return Ok(None) };
        let k = first.dim(1)?;
        let mut rows = Vec::with_capacity(parts.len());
        for &(w, bias) in parts {
            let (n, kw) = w.dims2()?;
            if kw != k || !self.ours(&[w]) || bias.is_some_and(|b| f.glu || !self.ours(&[b]) || b.elem_count() != n) {
                return Ok(None);
            }
            rows.push(n);
        }
        let n = if f.glu { rows[0] } else { rows.iter().sum() };
        let batch = x.elem_count() / k.max(1);
        let per = 16 / self.dtype.size_in_bytes();
        let takes = x.dims().last() == Some(&k)
            && (1..=GEMV_MAX_BATCH).contains(&batch)
            && k % per == 0
            && if f.glu { parts.len() == 2 && rows[1] == n } else { parts.len() <= 3 }
            && self.ours(&[x])
            && f.norm.is_none_or(|(g, _)| self.ours(&[g]) && g.elem_count() == k)
            && f.res.is_none_or(|t| !f.glu && self.ours(&[t]) && t.elem_count() == batch * n);
        if !takes {
            return Ok(None);
        }
        let stream = self.dev.cuda_stream();
        let mut w = [0u64; 3];
        let mut bs = [0u64; 3];
        for (i, &(wi, bi)) in parts.iter().enumerate() {
            w[i] = self.ptr(wi)?;
            bs[i] = bi.map(|t| self.ptr(t)).transpose()?.unwrap_or(0);
        }
        let px = self.ptr(x)?;
        let pg = f.norm.map(|(g, _)| self.ptr(g)).transpose()?.unwrap_or(0);
        if w.iter().chain([&px, &pg]).any(|p| p % 16 != 0) {
            return Ok(None);
        }
        let mut shape = x.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let y = crate::memory::cuda_copy::uninit(&self.dev, self.dtype, shape)?;
        let py = self.ptr(&y)?;
        let pr = f.res.map(|t| self.ptr(t)).transpose()?.unwrap_or(0);
        let eps = f.norm.map_or(0.0, |(_, e)| e);
        let split = gemv_split(k / per, n);
        let block = 32 * split as u32 * GEMV_ROWS_PER_BLOCK;
        let cfg = LaunchConfig { grid_dim: ((n as u32).div_ceil(GEMV_ROWS_PER_BLOCK), 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
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

    /// Attention of one position: q from the stacked product `y` ([b, 1, (heads + 2 kv) · d],
    /// rotated and scaled by `qkv_store`) over the caches `kc`, `vc` ([b, kv, cap, d]) at
    /// positions 0 to `pos`; [b, 1, heads · d]. None when the kernel does not take the shapes.
    pub fn attend(&self, y: &Tensor, kc: &Tensor, vc: &Tensor, pos: &Tensor, heads: usize) -> Result<Option<Tensor>> {
        let (b, kv, cap, d) = kc.dims4()?;
        let takes = d % 32 == 0 && d <= 256 && kv > 0 && heads % kv == 0 && y.elem_count() == b * (heads + 2 * kv) * d && self.ours(&[y, kc, vc]) && vc.dims() == kc.dims();
        if !takes {
            return Ok(None);
        }
        let out = crate::memory::cuda_copy::uninit(&self.dev, self.dtype, vec![b, 1, heads * d])?;
        let stream = self.dev.cuda_stream();
        let (py, pk, pv, pp, po) = (self.ptr(y)?, self.ptr(kc)?, self.ptr(vc)?, self.ptr(pos)?, self.ptr(&out)?);
        let cfg = LaunchConfig { grid_dim: (heads as u32, b as u32, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 };
        let (heads, kv, d, cap) = (heads as i32, kv as i32, d as i32, cap as i32);
        let mut l = stream.launch_builder(&self.attend);
        l.arg(&py).arg(&pk).arg(&pv).arg(&pp).arg(&po).arg(&heads).arg(&kv).arg(&d).arg(&cap);
        // SAFETY: y, the caches and out are live contiguous tensors of the sizes checked above;
        // the kernel reads cache rows 0..=pos (pos < cap, the decoder's room) and writes out.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(out))
    }

    /// The greedy ids ([b, 1] u32) of logits [b, 1, vocab]; None for another dtype or layout.
    pub fn argmax(&self, logits: &Tensor) -> Result<Option<Tensor>> {
        let (b, one, vocab) = logits.dims3()?;
        if one != 1 || !self.ours(&[logits]) {
            return Ok(None);
        }
        let ids = crate::memory::cuda_copy::uninit(&self.dev, DType::U32, vec![b, 1])?;
        let stream = self.dev.cuda_stream();
        let (pl, pi) = (self.ptr(logits)?, self.ptr(&ids)?);
        let cfg = LaunchConfig { grid_dim: (b as u32, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
        let vocab = vocab as i32;
        let mut l = stream.launch_builder(&self.argmax);
        l.arg(&pl).arg(&pi).arg(&vocab);
        // SAFETY: logits holds b rows of vocab values, ids b u32: the kernel reads and writes within.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(ids))
    }

    /// Where `t` starts in device memory.
    fn ptr(&self, t: &Tensor) -> Result<u64> {
        crate::memory::cuda_copy::device_ptr(t, &self.dev.cuda_stream()).map(|(p, _)| p)
    }

    /// Whether every tensor is contiguous in the kernels' dtype.
    fn ours(&self, ts: &[&Tensor]) -> bool {
        ts.iter().all(|t| t.dtype() == self.dtype && t.is_contiguous())
    }
}
