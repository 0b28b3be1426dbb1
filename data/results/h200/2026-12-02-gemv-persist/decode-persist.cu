#define NEG_INF __int_as_float(0xff800000)

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
                     T* __restrict__ y, int n, int k, int blk) {
    __shared__ float part_sums[16][G * B + B];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, part = warp % S;
    const int row = blk * ((blockDim.x >> 5) / S) + warp / S;
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

// A lane's share of a row of d values for `attend`: L = min(d / (values per 16-byte load), 32) lanes
// hold a row, EL = d / L consecutive values each (8 BF16 in one load; 4 or 8 F32 in one or two).
// `at` 16-byte aligned; values past EL are 0.
__device__ __forceinline__ void load_el(const unsigned short* at, int, float* f) {
    uint4 a = *(const uint4*)at;
    f[0] = lo(a.x); f[1] = hi(a.x); f[2] = lo(a.y); f[3] = hi(a.y);
    f[4] = lo(a.z); f[5] = hi(a.z); f[6] = lo(a.w); f[7] = hi(a.w);
}
__device__ __forceinline__ void load_el(const float* at, int el, float* f) {
    uint4 a = *(const uint4*)at;
    uint4 b = el == 8 ? *(const uint4*)(at + 4) : make_uint4(0, 0, 0, 0);
    f[0] = __uint_as_float(a.x); f[1] = __uint_as_float(a.y);
    f[2] = __uint_as_float(a.z); f[3] = __uint_as_float(a.w);
    f[4] = __uint_as_float(b.x); f[5] = __uint_as_float(b.y);
    f[6] = __uint_as_float(b.z); f[7] = __uint_as_float(b.w);
}

// The sum of v over the L lanes of a row (L a power of two, groups aligned to L lanes).
__device__ __forceinline__ float group_sum(float v, int L) {
    for (int off = L >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// A head's d values, rotated at position p, as lane li of its row's L lanes holds them (values
// li·EL .. li·EL + EL - 1): the partner of value j is j ± d/2, held by lane li ^ L/2. The table
// rows [positions, d / 2] start 16-byte aligned (the caller checks), as do the lane's values.
template <typename T>
__device__ __forceinline__ void rotated(const T* head, const T* cos_t, const T* sin_t, unsigned p, int d, int L, int EL,
                                        int li, float* f) {
    const int half = d / 2, j0 = li * EL, i0 = j0 < half ? j0 : j0 - half;
    float x[8], c[8], s[8];
    load_el(head + j0, EL, x);
    load_el(cos_t + (long)p * half + i0, EL, c);
    load_el(sin_t + (long)p * half + i0, EL, s);
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float other = __shfl_xor_sync(0xffffffffu, x[e], L >> 1);
        f[e] = j0 < half ? x[e] * c[e] - other * s[e] : x[e] * c[e] + other * s[e];
    }
}

// The value as the cache holds it (BF16 rounds), so this step sees the k and v later steps read.
__device__ __forceinline__ float as_stored(const unsigned short*, float f) {
    unsigned u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __uint_as_float(u & 0xFFFF0000u);
}
__device__ __forceinline__ float as_stored(const float*, float f) { return f; }

// Attention of one decoding position, with its rotary and cache store: block (h, 0, b) takes q, k and
// v of the position from the stacked product y [b, (heads + 2 kv) d] (not rotated), rotates q
// (scaled) and its KV head's k in registers, attends over the caches [b, kv, cap, d] at positions
// 0..pos[0]-1 and the position's own k and v, and writes its head of out [b, heads d]; the first
// block of each KV head's group stores k and v at row pos[0] (no block reads that row).
// A warp takes P = 32 / L positions side by side (its lanes read P whole rows, 16 bytes each), four
// such rounds of loads in flight; each row's L lanes keep a running max, sum and output over their
// positions. The rows of a warp merge by shuffles, the warps through shared memory. d in 32, 64,
// 128, 256 (L a power of two); at most 16 warps (the entry point is bounded to 512 threads:
// without the bound the registers of the position's own k and v made the launch fail). One lane a
// value, loaded two bytes at a time, took 17.2 us a layer of Qwen2.5-7B's step under ncu on an
// H200; this takes 11.7 (data/results/h200/2026-11-28-decode-kernels).
// With `part` (splits = gridDim.y > 1: a long cache), block (h, s, b) attends over the s-th of
// `splits` equal runs of the positions below pos (split 0 also the position itself and the store)
// and writes its running max, sum and unnormalised output, F32 [b, heads, splits, d + 2], for
// `attend_merge`: one block a head read the cache at a few SMs' bandwidth (16,384 positions of
// Qwen2.5-7B: 72 tok/s, 24 % of the read ceiling, data/results/h200/2026-11-28-layer-kernel/long).
template <typename T>
__device__ void attend(const T* __restrict__ y, const T* __restrict__ cos_t, const T* __restrict__ sin_t, T* __restrict__ kc,
                       T* __restrict__ vc, const unsigned* __restrict__ pos, T* __restrict__ out, float* __restrict__ part,
                       int heads, int kv, int d, int cap, float scale) {
    __shared__ float sm_m[16], sm_l[16], sm_acc[16 * 256];
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.x, split = blockIdx.y, splits = gridDim.y, bi = blockIdx.z, g = h / (heads / kv);
    const int per = 16 / (int)sizeof(T), L = d / per < 32 ? d / per : 32, EL = d / L, P = 32 / L;
    const int sub = lane / L, li = lane % L;
    const unsigned p = pos[0];
    // This block's run of positions [begin, n).
    const int per_split = ((int)p + splits - 1) / splits;
    const int begin = min(split * per_split, (int)p), n = min(begin + per_split, (int)p);
    const T* yb = y + (long)bi * (heads + 2 * kv) * d;
    const long head = ((long)bi * kv + g) * cap * d + li * EL;
    float qf[8], kn[8], vn[8], acc[8];
    rotated(yb + (long)h * d, cos_t, sin_t, p, d, L, EL, li, qf);
    // The position itself: k rotated, v as it is, both as the cache will hold them; the first row
    // of warp 0 starts its running sums with it.
    rotated(yb + (long)(heads + g) * d, cos_t, sin_t, p, d, L, EL, li, kn);
    load_el(yb + (long)(heads + kv + g) * d + li * EL, EL, vn);
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        qf[e] *= scale;
        kn[e] = as_stored(kc, kn[e]);
        dot = fmaf(qf[e], kn[e], dot);
    }
    const float own = group_sum(dot, L);
    const bool first = warp == 0 && sub == 0 && split == 0;
    float m = first ? own : NEG_INF, l = first ? 1.f : 0.f;
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = first ? vn[e] : 0.f;
    if (first && h % (heads / kv) == 0) {
        long row = head + (long)p * d;
#pragma unroll
        for (int e = 0; e < 8; e++) if (e < EL) { st(kc, row + e, kn[e]); st(vc, row + e, vn[e]); }
    }
    const int round = nw * P;
    for (int t0 = begin + warp * P; t0 < n; t0 += 4 * round) {
        // k and v of four positions per row loaded together, then used.
        float kf[4][8], vf[4][8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int t = t0 + sub + u * round;
            if (t < n) {
                load_el(kc + head + (long)t * d, EL, kf[u]);
                load_el(vc + head + (long)t * d, EL, vf[u]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) { kf[u][e] = 0.f; vf[u][e] = 0.f; }
            }
        }
        float s[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            float dt = 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) dt = fmaf(qf[e], kf[u][e], dt);
            s[u] = group_sum(dt, L);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (t0 + sub + u * round >= n) continue;
            float mn = fmaxf(m, s[u]);
            float c = __expf(m - mn), pr = __expf(s[u] - mn);
            l = l * c + pr;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = fmaf(pr, vf[u][e], acc[e] * c);
            m = mn;
        }
    }
    // The warp's P rows into its first (a row with no position has l = 0 and m = -inf).
    for (int off = L; off < 32; off <<= 1) {
        float mo = __shfl_xor_sync(0xffffffffu, m, off), lo_ = __shfl_xor_sync(0xffffffffu, l, off);
        float mn = fmaxf(m, mo);
        float c1 = l == 0.f ? 0.f : __expf(m - mn), c2 = lo_ == 0.f ? 0.f : __expf(mo - mn);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] = acc[e] * c1 + __shfl_xor_sync(0xffffffffu, acc[e], off) * c2;
        l = l * c1 + lo_ * c2;
        m = mn;
    }
    if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
    if (sub == 0) {
#pragma unroll
        for (int e = 0; e < 8; e++) if (e < EL) sm_acc[warp * d + li * EL + e] = acc[e];
    }
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
        if (splits == 1) {
            st(out, ((long)bi * heads + h) * d + j, o / sum);
        } else {
            // A run with no position keeps sum 0 (and max -inf): the merge skips it.
            float* mine = part + (((long)bi * heads + h) * splits + split) * (d + 2);
            mine[j] = o;
            if (j == 0) { mine[d] = mx; mine[d + 1] = sum; }
        }
    }
}

// The runs of `attend` merged: block (h, b), a thread a value of the head; out [b, heads d].
template <typename T>
__device__ void attend_merge(const float* __restrict__ part, T* __restrict__ out, int heads, int d, int splits) {
    const int h = blockIdx.x, bi = blockIdx.y;
    const float* runs = part + ((long)bi * heads + h) * splits * (d + 2);
    float mx = NEG_INF;
    for (int s = 0; s < splits; s++)
        if (runs[s * (d + 2) + d + 1] != 0.f) mx = fmaxf(mx, runs[s * (d + 2) + d]);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float sum = 0.f, o = 0.f;
        for (int s = 0; s < splits; s++) {
            const float* r = runs + s * (d + 2);
            if (r[d + 1] == 0.f) continue;
            float c = __expf(r[d] - mx);
            sum += r[d + 1] * c;
            o += r[j] * c;
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
    // One block reads the row, so the rounds of loads, not bandwidth, set its time: each thread
    // takes 16-byte runs (8 BF16 or 4 F32 values), four in flight, where the row starts aligned,
    // else one value a load, eight in flight. Each thread's indices rise, so a strict > keeps the
    // first of equal values.
    const int per = 16 / (int)sizeof(T);
    if (((unsigned long)row & 15) == 0) {
        const int runs = vocab / per;
        for (int r0 = threadIdx.x; r0 < runs; r0 += 4 * blockDim.x) {
            float v[4][8];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int r = r0 + u * blockDim.x;
                if (r < runs) load_el(row + (long)r * per, per, v[u]);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int r = r0 + u * blockDim.x;
                if (r >= runs) break;
#pragma unroll
                for (int e = 0; e < 8; e++) if (e < per && v[u][e] > best) { best = v[u][e]; at = r * per + e; }
            }
        }
        // The values past the last whole run.
        for (int j = runs * per + threadIdx.x; j < vocab; j += blockDim.x) {
            float x = ld(row, j);
            if (x > best || (x == best && j < at)) { best = x; at = j; }
        }
    } else {
        for (int j0 = threadIdx.x; j0 < vocab; j0 += 8 * blockDim.x) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; u++) { int j = j0 + u * blockDim.x; v[u] = j < vocab ? ld(row, j) : NEG_INF; }
#pragma unroll
            for (int u = 0; u < 8; u++) if (v[u] > best) { best = v[u]; at = j0 + u * blockDim.x; }
        }
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

// Entry points the launcher (decode.rs) instantiates: one per dtype for attend and argmax, and for
// gemv one per variant it launches (batch, weights per row, norm, split), named as it looks them up.
#define VRAM_LAB_GEMV(NAME, T, B, G, NORM, SPLIT) \
    extern "C" __global__ void NAME(const T* w0, const T* w1, const T* w2, const T* b0, const T* b1, const T* b2, int n0, int n1, \
                                    const T* x, const T* res, const T* g, float eps, T* y, int n, int k) { \
        gemv<T, B, G, NORM, SPLIT>(w0, w1, w2, b0, b1, b2, n0, n1, x, res, g, eps, y, n, k, blockIdx.x); }
// The same rows with a grid of the card's resident blocks: each block takes row groups blockIdx.x,
// + gridDim.x, ... in turn (one launch's blocks instead of n / rows-per-block).
#define VRAM_LAB_GEMV_P(NAME, T, B, G, NORM, SPLIT) \
    extern "C" __global__ void NAME(const T* w0, const T* w1, const T* w2, const T* b0, const T* b1, const T* b2, int n0, int n1, \
                                    const T* x, const T* res, const T* g, float eps, T* y, int n, int k) { \
        const int rpb = (blockDim.x >> 5) / SPLIT; \
        for (int blk = blockIdx.x; blk * rpb < n; blk += gridDim.x) { \
            gemv<T, B, G, NORM, SPLIT>(w0, w1, w2, b0, b1, b2, n0, n1, x, res, g, eps, y, n, k, blk); \
            __syncthreads(); \
        } }
#define VRAM_LAB_ATTEND_ARGMAX(DT, T) \
    extern "C" __global__ void __launch_bounds__(512) vram_lab_attend_##DT(const T* y, const T* cos_t, const T* sin_t, T* kc, T* vc, const unsigned* pos, T* out, \
                                                    float* part, int heads, int kv, int d, int cap, float scale) { \
        attend<T>(y, cos_t, sin_t, kc, vc, pos, out, part, heads, kv, d, cap, scale); } \
    extern "C" __global__ void vram_lab_attend_merge_##DT(const float* part, T* out, int heads, int d, int splits) { \
        attend_merge<T>(part, out, heads, d, splits); } \
    extern "C" __global__ void vram_lab_argmax_##DT(const T* logits, unsigned* ids, int vocab) { argmax<T>(logits, ids, vocab); }
