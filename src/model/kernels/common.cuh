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
