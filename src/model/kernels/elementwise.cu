// The prefill's element-wise BF16 ops, 16 bytes (eight values) a thread. candle's kernels take one
// value a thread and work out its strided index: at 32k tokens on an H100 (3.35 TB/s) an add took 1.03
// ms (0.69 TB/s) and gate × up 2.87 ms (data/results/h100/2026-11-26-speed/development, layers.txt:
// a row's total over the 28 layers, its µs column being scaled by 28/27).
// Each result is the one correctly rounded BF16 of the exact sum or product — `fma.rn` with 1 or
// −0 (CUDA's own spelling of a BF16 add or multiply below 9.0) — so it is candle's, bit for bit, on
// every capability. The launcher checks lengths (a multiple of 8) and 16-byte alignment.

__device__ __forceinline__ unsigned fma2(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
#define ONE2 0x3F803F80u
#define NEG_ZERO2 0x80008000u

// out = a + b over n8 runs of eight values.
extern "C" __global__ void vram_lab_add_bf16(const uint4* a, const uint4* b, uint4* out, long n8) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        const uint4 x = a[i], y = b[i];
        out[i] = make_uint4(fma2(x.x, ONE2, y.x), fma2(x.y, ONE2, y.y), fma2(x.z, ONE2, y.z), fma2(x.w, ONE2, y.w));
    }
}

// out = a · b.
extern "C" __global__ void vram_lab_mul_bf16(const uint4* a, const uint4* b, uint4* out, long n8) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        const uint4 x = a[i], y = b[i];
        out[i] = make_uint4(fma2(x.x, y.x, NEG_ZERO2), fma2(x.y, y.y, NEG_ZERO2), fma2(x.z, y.z, NEG_ZERO2),
                            fma2(x.w, y.w, NEG_ZERO2));
    }
}

// out = silu(x) = x / (1 + e^−x), in F32 and rounded once, as candle's usilu_bf16 (the same
// expression, compiled without fast math by nvcc there and NVRTC here: the same bits). candle's
// launch asks one thread a value while each thread takes eight, so seven blocks in eight start
// and find nothing to do: 1.58 ms a layer at 32k tokens on an H200 (1.6 TB/s), here 0.62
// (data/results/h200/2026-11-28-prefill-parity, run-1 and run-2's layers/layers.txt).
__device__ __forceinline__ unsigned silu2(unsigned v) {
    const float lo = __uint_as_float(v << 16), hi = __uint_as_float(v & 0xFFFF0000u);
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi / (1.0f + expf(-hi))), "f"(lo / (1.0f + expf(-lo))));
    return r;
}
extern "C" __global__ void vram_lab_silu_bf16(const uint4* x, uint4* out, long n8) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        const uint4 v = x[i];
        out[i] = make_uint4(silu2(v.x), silu2(v.y), silu2(v.z), silu2(v.w));
    }
}

// out = x + bias for x [rows, cols] and bias [cols] (cols8 runs of eight a row).
extern "C" __global__ void vram_lab_bias_add_bf16(const uint4* x, const uint4* bias, uint4* out, long n8, int cols8) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        const uint4 v = x[i], c = bias[i % cols8];
        out[i] = make_uint4(fma2(v.x, ONE2, c.x), fma2(v.y, ONE2, c.y), fma2(v.z, ONE2, c.z), fma2(v.w, ONE2, c.w));
    }
}

// [b, s, n, d] → [b, n, s, d] (d8 runs of eight a row): each thread writes one run of the output.
extern "C" __global__ void vram_lab_heads_first_bf16(const uint4* x, uint4* out, long n8, int s, int n, int d8) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n8; i += (long)gridDim.x * blockDim.x) {
        const int c = i % d8;
        const long row = i / d8;  // (batch · n + head) · s + position
        const int pos = row % s;
        const long bh = row / s, head = bh % n, bi = bh / n;
        out[i] = x[((bi * s + pos) * n + head) * d8 + c];
    }
}

// RMS norm of BF16 rows [rows, cols] by a BF16 weight, with candle's bits (candle-kernels' reduce.cu,
// `rmsnorm`, cols >= 1024: a block of 1024 threads a row, two-byte loads, the row read twice; on an
// H100 at 32k tokens 0.43 ms a norm for 0.47 GB, 1.1 TB/s, data/results/h100/2026-11-26-speed/
// development, layers.txt; this kernel 0.17-0.18 ms on an H200, 2026-11-28-prefill-parity).
// A block of 256 threads reads its row once, 16 bytes a thread, into shared memory, and adds it
// up in candle's order: candle's thread t of 1024 adds x² over columns t, t + 1024, ... (an `fma`,
// as nvcc contracts `tmp += x * x`); each warp folds its 32 sums by xor shuffles 16, 8, 4, 2, 1,
// and warp w's sum goes to slot w, whose 32 fold the same way. Thread r here holds candle's
// threads r + 256 k (k < 4): warp r / 32 holds candle's warps r / 32 + 8 k, lane for lane, so the
// same shuffles fold them. Then x · rsqrt(mean + eps) · w, rounded once.
__device__ __forceinline__ float bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
extern "C" __global__ void __launch_bounds__(256) vram_lab_rms_norm_bf16(const uint4* x, const uint4* w, uint4* out,
                                                                        long rows, int cols, int eps_bits) {
    const float eps = __int_as_float(eps_bits);  // passed as its bits, beside the other int arguments
    extern __shared__ uint4 piece[];  // the row, cols / 8 pieces of eight values
    __shared__ float slot[32];
    const unsigned short* row = (const unsigned short*)piece;
    const int c8 = cols / 8, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint4* xr = x + r * c8;
        for (int i = threadIdx.x; i < c8; i += 256) piece[i] = xr[i];
        __syncthreads();
        float sum[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            sum[k] = 0.f;
            for (int col = threadIdx.x + 256 * k; col < cols; col += 1024) {
                const float v = bf16_to_f32(row[col]);
                sum[k] += v * v;
            }
#pragma unroll
            for (int mask = 16; mask > 0; mask >>= 1) sum[k] += __shfl_xor_sync(0xffffffffu, sum[k], mask, 32);
            if (lane == 0) slot[warp + 8 * k] = sum[k];
        }
        __syncthreads();
        float total = slot[lane];
#pragma unroll
        for (int mask = 16; mask > 0; mask >>= 1) total += __shfl_xor_sync(0xffffffffu, total, mask, 32);
        const float scale = rsqrtf(total / cols + eps);
        uint4* o = out + r * c8;
        for (int i = threadIdx.x; i < c8; i += 256) {
            const uint4 v = piece[i], a = w[i];
            const unsigned short *vs = (const unsigned short*)&v, *as = (const unsigned short*)&a;
            uint4 y;
            unsigned short* ys = (unsigned short*)&y;
#pragma unroll
            for (int j = 0; j < 8; j++) ys[j] = f32_to_bf16(scale * bf16_to_f32(vs[j]) * bf16_to_f32(as[j]));
            o[i] = y;
        }
        __syncthreads();  // the row and the slots are free for the next row
    }
}
