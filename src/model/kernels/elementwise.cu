// The prefill's element-wise BF16 ops, 16 bytes (eight values) a thread. candle's kernels take one
// value a thread and work out its strided index: at 32k tokens on an H100 (3.35 TB/s) an add took 1.07
// ms (0.66 TB/s) and gate × up 2.98 ms (data/results/h100/2026-11-26-speed/development, layers.txt).
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
