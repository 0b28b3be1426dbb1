// llama.cpp's arithmetic for a matrix-vector product over k-quant blocks (its `mmvq`): x quantized
// once per product to 8-bit blocks of 32 (a scale d and d·Σq per block), the weights' 4- or 6-bit
// values multiplied with x's bytes four at a time (dp4a), each block's scales applied once per 32
// or 16 products. ggml's layouts (ggml-common.h), QK_K = 256 values per block:
//   Q4_K, 144 B: f16 d, f16 dmin, 12 B of 6-bit scales and mins, 128 B of nibbles;
//   Q6_K, 210 B: 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales, f16 d.
// A Q6_K block is 210 bytes, so its fields are read 16 bits at a time.
#define Q4K 12
#define Q6K 14
__device__ __forceinline__ float h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ int dp4a(int a, int b, int c) { int r; asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ int ld32(const unsigned char* p) {
    const unsigned short* h = (const unsigned short*)p;
    return (int)((unsigned)__ldcs(h) | ((unsigned)__ldcs(h + 1) << 16));
}
__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float sumsq16(uint4 u, float acc, const unsigned short*) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float lo = __uint_as_float(w[j] << 16), hi = __uint_as_float(w[j] & 0xFFFF0000u);
        acc = fmaf(lo, lo, fmaf(hi, hi, acc));
    }
    return acc;
}
__device__ __forceinline__ float sumsq16(uint4 u, float acc, const float*) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) { const float v = __uint_as_float(w[j]); acc = fmaf(v, v, acc); }
    return acc;
}

// Block (c, b) quantizes values [256 c, 256 c + 256) of row b of x [B, k] (k a multiple of 256):
// xq [B, k] int8 and xd [B, k / 32] of (d, d·Σq), a warp per 32 values. With N, x is RMS-normed
// with the weight g first (in F32, before the rounding): each block sums the squares of the whole
// row itself (k values from L2), so no block waits on another.
template <typename T, bool N>
__device__ void quantize(const T* __restrict__ x, const T* __restrict__ g, float eps, signed char* __restrict__ xq,
                         float2* __restrict__ xd, int k) {
    __shared__ float sm[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    x += (long)blockIdx.y * k;
    xq += (long)blockIdx.y * k;
    xd += (long)blockIdx.y * (k / 32);
    float rs = 1.f;
    if (N) {
        // 16-byte loads (k · sizeof(T) is a multiple of 512), all of a thread's at once.
        float ss = 0.f;
        const uint4* x16 = (const uint4*)x;
        const int n16 = k / (16 / (int)sizeof(T));
#pragma unroll 4
        for (int i = threadIdx.x; i < n16; i += blockDim.x) ss = sumsq16(__ldg(x16 + i), ss, x);
        ss = warp_sum(ss);
        if (lane == 0) sm[warp] = ss;
        __syncthreads();
        if (warp == 0) {
            float v = warp_sum(lane < nw ? sm[lane] : 0.f);
            if (lane == 0) sm[0] = v;
        }
        __syncthreads();
        rs = rsqrtf(sm[0] / (float)k + eps);
    }
    const int i = blockIdx.x * 256 + threadIdx.x;
    float v = ld(x, i);
    if (N) v *= rs * ld(g, i);
    float a = warp_max(fabsf(v));
    float d = a / 127.f;
    int q = a == 0.f ? 0 : __float2int_rn(v / d);
    int s = warp_sum_int(q);
    xq[i] = (signed char)q;
    if (lane == 0) xd[i / 32] = make_float2(d, d * (float)s);
}

// Byte i of a Q4_K block's 12 bytes of scales, from its first 16 bytes held in registers.
__device__ __forceinline__ unsigned scale_byte(const uint4& h, int i) {
    const unsigned w = i < 4 ? h.y : (i < 8 ? h.z : h.w);
    return (w >> (8 * (i & 3))) & 0xFF;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K block (ggml's get_scale_min_k4).
__device__ __forceinline__ void scale_min(int j, const uint4& h, float& sc, float& m) {
    if (j < 4) {
        sc = scale_byte(h, j) & 63; m = scale_byte(h, j + 4) & 63;
    } else {
        sc = (scale_byte(h, j + 4) & 0xF) | ((scale_byte(h, j - 4) >> 6) << 4);
        m = (scale_byte(h, j + 4) >> 4) | ((scale_byte(h, j) >> 6) << 4);
    }
}

// One Q4_K block's share of a lane (its first 16 bytes h and 16 bytes q of nibbles: sub-blocks
// 2p and 2p + 1 at 16 positions) times the B rows of x, added to acc.
template <int B>
__device__ __forceinline__ void q4k_block(uint4 h, uint4 q, int blk, int pair, int half, const signed char* __restrict__ xq,
                                          const float2* __restrict__ xd, int k, float* acc) {
    const float d = h2f(h.x & 0xFFFF), dmin = h2f(h.x >> 16);
    float s0, m0, s1, m1;
    scale_min(2 * pair, h, s0, m0);
    scale_min(2 * pair + 1, h, s1, m1);
    const int lo[4] = {(int)(q.x & 0x0F0F0F0F), (int)(q.y & 0x0F0F0F0F), (int)(q.z & 0x0F0F0F0F), (int)(q.w & 0x0F0F0F0F)};
    const int hi[4] = {(int)((q.x >> 4) & 0x0F0F0F0F), (int)((q.y >> 4) & 0x0F0F0F0F), (int)((q.z >> 4) & 0x0F0F0F0F), (int)((q.w >> 4) & 0x0F0F0F0F)};
#pragma unroll
    for (int b = 0; b < B; b++) {
        const long at = (long)b * k + (long)blk * 256 + 64 * pair + 16 * half;
        const int4 xa = __ldg((const int4*)(xq + at));
        const int4 xb = __ldg((const int4*)(xq + at + 32));
        int da = dp4a(lo[0], xa.x, 0); da = dp4a(lo[1], xa.y, da); da = dp4a(lo[2], xa.z, da); da = dp4a(lo[3], xa.w, da);
        int db = dp4a(hi[0], xb.x, 0); db = dp4a(hi[1], xb.y, db); db = dp4a(hi[2], xb.z, db); db = dp4a(hi[3], xb.w, db);
        const float2 ya = __ldg(xd + (long)b * (k / 32) + blk * 8 + 2 * pair);
        const float2 yb = __ldg(xd + (long)b * (k / 32) + blk * 8 + 2 * pair + 1);
        float v = d * (s0 * ya.x * (float)da + s1 * yb.x * (float)db);
        // The mins weigh the sum of x over a whole sub-block: one lane of the two adds them.
        if (half == 0) v -= dmin * (m0 * ya.y + m1 * yb.y);
        acc[b] += v;
    }
}

// A lane's share of row `wr` (Q4_K, nb blocks) times x: eight lanes per block, four blocks per
// warp; two rounds' loads in flight at once.
template <int B>
__device__ __forceinline__ void dot_q4k(const unsigned char* __restrict__ wr, int nb, const signed char* __restrict__ xq,
                                         const float2* __restrict__ xd, int k, int lane, float* acc) {
    const int sub = lane & 7, pair = sub >> 1, half = sub & 1;
    const int stride = 4;
    for (int blk = lane >> 3; blk < nb; blk += 2 * stride) {
        const int blk2 = blk + stride;
        const unsigned char* b0 = wr + (long)blk * 144;
        const unsigned char* b1 = wr + (long)blk2 * 144;
        const uint4 h0 = __ldcs((const uint4*)b0), q0 = __ldcs((const uint4*)(b0 + 16 + 16 * sub));
        uint4 h1 = make_uint4(0, 0, 0, 0), q1 = h1;
        if (blk2 < nb) { h1 = __ldcs((const uint4*)b1); q1 = __ldcs((const uint4*)(b1 + 16 + 16 * sub)); }
        q4k_block<B>(h0, q0, blk, pair, half, xq, xd, k, acc);
        if (blk2 < nb) q4k_block<B>(h1, q1, blk2, pair, half, xq, xd, k, acc);
    }
}

// One Q6_K block's share of a lane: four positions of each of the four groups of 32 that share
// its bytes (ql0, ql1: low nibbles; qh: high pairs; sc: the four groups' scales).
template <int B>
__device__ __forceinline__ void q6k_block(int ql0, int ql1, int qh, const float s[4], float d, int blk, int nh, int t,
                                          const signed char* __restrict__ xq, const float2* __restrict__ xd, int k, float* acc) {
    const int q[4] = {(ql0 & 0x0F0F0F0F) | ((qh << 4) & 0x30303030), (ql1 & 0x0F0F0F0F) | ((qh << 2) & 0x30303030),
                      ((ql0 >> 4) & 0x0F0F0F0F) | (qh & 0x30303030), ((ql1 >> 4) & 0x0F0F0F0F) | ((qh >> 2) & 0x30303030)};
#pragma unroll
    for (int b = 0; b < B; b++) {
        float v = 0.f;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const long at = (long)b * k + (long)blk * 256 + 128 * nh + 32 * g + 4 * t;
            const int xv = __ldg((const int*)(xq + at));
            // (q - 32)·x as q·x - 32·Σx: the values are stored with an offset of 32.
            const int dot = dp4a(q[g], xv, 0) - dp4a(0x20202020, xv, 0);
            v += s[g] * __ldg(xd + (long)b * (k / 32) + blk * 8 + 4 * nh + g).x * (float)dot;
        }
        acc[b] += d * v;
    }
}

// The loads of one Q6_K block for a lane.
__device__ __forceinline__ void q6k_load(const unsigned char* bq, int nh, int t, int& ql0, int& ql1, int& qh, float s[4], float& d) {
    ql0 = ld32(bq + 64 * nh + 4 * t);
    ql1 = ld32(bq + 64 * nh + 32 + 4 * t);
    qh = ld32(bq + 128 + 32 * nh + 4 * t);
    const signed char* sc = (const signed char*)(bq + 192 + 8 * nh + t / 4);
#pragma unroll
    for (int g = 0; g < 4; g++) s[g] = (float)__ldcs(sc + 2 * g);
    d = h2f(__ldcs((const unsigned short*)(bq + 208)));
}

// The same for Q6_K: sixteen lanes per block (eight per half of 128 values), two blocks per warp.
template <int B>
__device__ __forceinline__ void dot_q6k(const unsigned char* __restrict__ wr, int nb, const signed char* __restrict__ xq,
                                         const float2* __restrict__ xd, int k, int lane, float* acc) {
    const int l16 = lane & 15, nh = l16 >> 3, t = l16 & 7;
    const int stride = 2;
    for (int blk = lane >> 4; blk < nb; blk += 2 * stride) {
        const int blk2 = blk + stride;
        int a0, a1, ah, c0 = 0, c1 = 0, ch = 0;
        float sa[4], sb[4] = {0.f, 0.f, 0.f, 0.f}, da, db = 0.f;
        q6k_load(wr + (long)blk * 210, nh, t, a0, a1, ah, sa, da);
        if (blk2 < nb) q6k_load(wr + (long)blk2 * 210, nh, t, c0, c1, ch, sb, db);
        q6k_block<B>(a0, a1, ah, sa, da, blk, nh, t, xq, xd, k, acc);
        if (blk2 < nb) q6k_block<B>(c0, c1, ch, sb, db, blk2, nh, t, xq, xd, k, acc);
    }
}

// y[b, n] = x[b, k] · wᵀ (+ bias) (+ res) with x given quantized (xq, xd), w up to three weights
// one under the other (rows [0, n0) of w0, the next n1 of w1, the rest of w2), each of its own
// type (Q4K or Q6K) and bias; with G = 2, y = silu(x·w0ᵀ) · (x·w1ᵀ). A warp per row: four warps
// per row for the long rows of the MLP's down projection were measured slower (`docs/speed.md`).
template <typename T, int B, int G>
__device__ void qgemv(const unsigned char* __restrict__ w0, const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
                      int t0, int t1, int t2, const T* __restrict__ b0, const T* __restrict__ b1, const T* __restrict__ b2, int n0, int n1,
                      const signed char* __restrict__ xq, const float2* __restrict__ xd, const T* __restrict__ res,
                      T* __restrict__ y, int n, int k) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const bool live = row < n;
    const int seg = G == 2 ? 0 : (row < n0 ? 0 : (row < n0 + n1 ? 1 : 2));
    const int local = row - (seg > 0 ? n0 : 0) - (seg > 1 ? n1 : 0);
    const int nb = k / 256;
    float acc[G][B];
#pragma unroll
    for (int r = 0; r < G; r++) {
#pragma unroll
        for (int b = 0; b < B; b++) acc[r][b] = 0.f;
        const unsigned char* base = G == 2 ? (r == 0 ? w0 : w1) : (seg == 0 ? w0 : (seg == 1 ? w1 : w2));
        const int type = G == 2 ? (r == 0 ? t0 : t1) : (seg == 0 ? t0 : (seg == 1 ? t1 : t2));
        const long row_bytes = (long)nb * (type == Q4K ? 144 : 210);
        if (!live) continue;
        if (type == Q4K) dot_q4k<B>(base + (long)local * row_bytes, nb, xq, xd, k, lane, acc[r]);
        else dot_q6k<B>(base + (long)local * row_bytes, nb, xq, xd, k, lane, acc[r]);
    }
#pragma unroll
    for (int b = 0; b < B; b++)
#pragma unroll
        for (int r = 0; r < G; r++) acc[r][b] = warp_sum(acc[r][b]);
    if (lane != 0 || !live) return;
    const T* bias = seg == 0 ? b0 : (seg == 1 ? b1 : b2);
#pragma unroll
    for (int b = 0; b < B; b++) {
        float v = acc[0][b];
        if (G == 2) {
            v = v / (1.f + __expf(-v)) * acc[G - 1][b];
        } else {
            if (bias) v += ld(bias, local);
            if (res) v += ld(res, (long)b * n + row);
        }
        st(y, (long)b * n + row, v);
    }
}

#define VRAM_LAB_QUANTIZE(DT, T) \
    extern "C" __global__ void vram_lab_q8_quantize_##DT(const T* x, const T* g, float eps, signed char* xq, float2* xd, int k) { \
        quantize<T, false>(x, g, eps, xq, xd, k); } \
    extern "C" __global__ void vram_lab_q8_quantize_norm_##DT(const T* x, const T* g, float eps, signed char* xq, float2* xd, int k) { \
        quantize<T, true>(x, g, eps, xq, xd, k); }
#define VRAM_LAB_QGEMV(NAME, T, B, G) \
    extern "C" __global__ void NAME(const unsigned char* w0, const unsigned char* w1, const unsigned char* w2, int t0, int t1, int t2, \
                                    const T* b0, const T* b1, const T* b2, int n0, int n1, const signed char* xq, const float2* xd, \
                                    const T* res, T* y, int n, int k) { \
        qgemv<T, B, G>(w0, w1, w2, t0, t1, t2, b0, b1, b2, n0, n1, xq, xd, res, y, n, k); }
