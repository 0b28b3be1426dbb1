// What the lab's decoding kernels share (prepended to `decode.cu` and `quant_gemv.cu` by their
// launchers): BF16 handled as raw 16-bit patterns (no header needed), widened to F32 and rounded to
// nearest even once on the way out; F32 as it is; a warp's sum.
__device__ __forceinline__ float ld(const unsigned short* p, long i) { return __uint_as_float(((unsigned)p[i]) << 16); }
__device__ __forceinline__ void st(unsigned short* p, long i, float f) {
    unsigned u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    p[i] = (unsigned short)(u >> 16);
}
__device__ __forceinline__ float ld(const float* p, long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, long i, float f) { p[i] = f; }
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The first bytes of the product after this kernel, pulled into L2 with no register waiting on them:
// up to three weights (n bytes each from p), thread `who` of `threads` taking every threads-th line.
// The step's attention reads under a megabyte and small products end in a tail of idle SMs, so the
// memory is idle there; the next product's first loads then hit L2 (CUTLASS's Hopper GEMM with L2
// weight prefetch does this while it waits on the previous kernel).
#ifndef VRAM_LAB_PREFETCH_STRIDE
#define VRAM_LAB_PREFETCH_STRIDE 128
#endif
struct Prefetch {
    const char* p[3];
    long n[3];
};
__device__ __forceinline__ void prefetch_l2(const Prefetch& f, long who, long threads) {
#pragma unroll
    for (int r = 0; r < 3; r++)
        for (long i = who * VRAM_LAB_PREFETCH_STRIDE; i < f.n[r]; i += threads * VRAM_LAB_PREFETCH_STRIDE)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(f.p[r] + i));
}
