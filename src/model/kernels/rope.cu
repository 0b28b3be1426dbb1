// Rotary embedding of x [b, heads, t, d] (contiguous, BF16) with cos, sin [tc, d/2] or
// [b, tc, d/2] (tc >= t; the first t rows are used): y1 = x1·c − x2·s, y2 = x1·s + x2·c, one
// thread per pair (i, i + d/2). Each product is rounded to BF16, then their difference or sum, as
// PyTorch's eager `q·cos + rotate_half(q)·sin` and candle's CPU kernel round, and with the same
// PTX for every compute capability. candle's CUDA kernel rounds one product fewer when built for
// 9.0 (data/results/cpu/2026-11-27-bf16-rounding). A product of two BF16 values is exact in F32; the
// difference of two BF16 values is exact in F32 unless one is below 2^-16 of the other, where both roundings
// give the larger one: each `st` is the one correct BF16 rounding.
// Thread idx's place for `per` units a row of x [b, heads, t, ·]: its unit in the row, its row and
// its unit in the cos/sin table ([tc, per] or [b, tc, per]); false past the last.
__device__ __forceinline__ bool place(long idx, int per, int b, int heads, int t, int tc, int per_batch, int& u,
                                      long& row, long& cs) {
    if (idx >= (long)b * heads * t * per) return false;
    u = idx % per;
    row = idx / per;  // (batch · heads + head) · t + position
    const long bi = row / ((long)heads * t);
    cs = ((per_batch ? bi * tc : 0) + row % t) * per + u;
    return true;
}
// x1 (first half) and x2 (its partner) rotated by c, s into y1 and y2.
__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, unsigned short* y1, unsigned short* y2) {
    unsigned short p[4];
    st(p, 0, x1 * c);
    st(p, 1, x2 * s);
    st(p, 2, x1 * s);
    st(p, 3, x2 * c);
    st(y1, 0, ld(p, 0) - ld(p, 1));
    st(y2, 0, ld(p, 2) + ld(p, 3));
}
extern "C" __global__ void vram_lab_rope_bf16(const unsigned short* x, const unsigned short* cos_t,
                                              const unsigned short* sin_t, unsigned short* y, int b, int heads,
                                              int t, int d, int tc, int per_batch) {
    const int half = d / 2;
    int i;
    long row, cs;
    if (!place(blockIdx.x * (long)blockDim.x + threadIdx.x, half, b, heads, t, tc, per_batch, i, row, cs)) return;
    rotate(ld(x, row * d + i), ld(x, row * d + i + half), ld(cos_t, cs), ld(sin_t, cs), y + row * d + i,
           y + row * d + i + half);
}

// The same, eight pairs a thread (d a multiple of 16, every start on 16 bytes): the halves of a row,
// cos and sin read and written 16 bytes at a time, each value computed as above. One pair a thread
// moved 0.47 GB in 0.42 ms for q at 32k tokens on an H200 (1.1 TB/s), eight 0.15 ms
// (data/results/h200/2026-11-28-prefill-parity, run-1 and run-3's layers/layers.txt).
extern "C" __global__ void vram_lab_rope8_bf16(const uint4* x, const uint4* cos_t, const uint4* sin_t, uint4* y, int b,
                                               int heads, int t, int d, int tc, int per_batch) {
    const int h8 = d / 16;  // runs of eight pairs a row
    int j;
    long row, cs;
    if (!place(blockIdx.x * (long)blockDim.x + threadIdx.x, h8, b, heads, t, tc, per_batch, j, row, cs)) return;
    const uint4 cv = cos_t[cs], sv = sin_t[cs], av = x[row * 2 * h8 + j], bv = x[row * 2 * h8 + h8 + j];
    const unsigned short *c = (const unsigned short*)&cv, *s = (const unsigned short*)&sv;
    const unsigned short *x1 = (const unsigned short*)&av, *x2 = (const unsigned short*)&bv;
    uint4 o1, o2;
    unsigned short *y1 = (unsigned short*)&o1, *y2 = (unsigned short*)&o2;
#pragma unroll
    for (int k = 0; k < 8; k++) rotate(ld(x1, k), ld(x2, k), ld(c, k), ld(s, k), y1 + k, y2 + k);
    y[row * 2 * h8 + j] = o1;
    y[row * 2 * h8 + h8 + j] = o2;
}
