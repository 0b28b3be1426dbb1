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

// Programmatic dependent launch (compute 9.0, `launch.rs`): PDL_WAIT waits until the kernel before
// has finished and its writes are visible; PDL_LAUNCH, once every block of this kernel has passed
// it, lets the next kernel's blocks start. Every thread passes PDL_WAIT before it reads anything an
// earlier kernel wrote, writes anything, or returns; PDL_LAUNCH follows it, so at most two kernels
// overlap and a block never holds its SM waiting behind a chain of them. The launcher defines
// VRAM_LAB_PDL only for a process that asked for dependent launches, so the plain step's PTX is
// the one it was before them (no wait, no L2 prefetch).
#if defined(VRAM_LAB_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
// What a block fetches into L2 before its wait: data no kernel of the step writes (weights).
#define PDL_PREFETCH(p) asm volatile("prefetch.global.L2 [%0];" ::"l"(p))
#else
#define PDL_LAUNCH()
#define PDL_WAIT()
#define PDL_PREFETCH(p)
#endif
