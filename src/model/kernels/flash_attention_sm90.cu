// Prefill attention for compute 9.0a (H100, H200) with Hopper's warpgroup products, compiled after
// flash_attention.cu (its helpers: pack, cp_async16, rescale, store_tile). `wgmma.mma_async` takes a
// 64-row tile of a product per warpgroup (four warps) straight from shared memory and runs
// asynchronously, where `mma.sync` feeds each warp's 16 rows through registers; FlashAttention-3 is
// built on it. Measured against the four-warp `mma.sync` kernel on an H200 (32k tokens, 28 heads):
// 19.2 against 28.0 ms a layer (data/results/h200/2026-11-28-prefill-hopper); 14.8 with the softmax
// and copies of data/results/h200/2026-11-28-prefill-parity (ncu, run-1).

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format") for the 128-byte swizzle:
// the start, and the byte distances `lbo` and `sbo` between the layout's 8-row groups (see the
// operands below for which is which).
__device__ __forceinline__ unsigned long long gmma_desc(const void* p, unsigned lbo, unsigned sbo) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    return (unsigned long long)((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void gmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void gmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void gmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
// Keeps the compiler from moving reads or writes of an accumulator across a fence or a wait (the
// products write the registers asynchronously, which the compiler does not see).
__device__ __forceinline__ void pin(float (&d)[16][4]) {
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) asm volatile("" : "+f"(d[j][i])::"memory");
}
__device__ __forceinline__ void pin(unsigned (&a)[8][4]) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) asm volatile("" : "+r"(a[j][i])::"memory");
}
// d (+)= a · b for a 64×16 tile of a and a 16×128 tile of b, both in shared memory, K-major (rows
// of a and columns of b run along K); d's fragment j, i is PTX's m16n8 c layout of columns 8j.. of
// the warp's 16 rows, as `mma` gives.
__device__ __forceinline__ void gmma_ss(float (&d)[16][4], unsigned long long a, unsigned long long b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(a), "l"(b), "r"(acc));
}
// d += a · b with a's 64×16 tile in registers (each warp's 16 rows as `mma`'s a fragment) and b's
// 16×128 in shared memory N-major (rows of b contiguous: V as it lies, keys along K).
__device__ __forceinline__ void gmma_rs(float (&d)[16][4], const unsigned (&a)[4], unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// Rows r0.. of a head (rows of 128 dims) into a tile of shared memory, asynchronously, zeros at rows
// `last` and after, by thread p of THREADS. The layout is wgmma's 128-byte swizzle: two halves of 64
// dims, each ROWS rows of 128 bytes, a row's 16-byte chunk c stored at c XOR (row % 8). Thread p
// copies chunk p % 16 of rows THREADS / 16 apart (a multiple of 8: the same swizzle), so its offsets
// step by constants and the copies unroll: a loop from threadIdx.x executed 1.53 × 10⁹ instructions
// at 16k tokens, this 1.11 × 10⁹ (2026-11-28-prefill-parity/development). Each 8-thread phase writes
// distinct banks; unswizzled 8×8 tiles took 27.7 ms a layer, not 19.2 (2026-11-28-prefill-hopper).
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_swizzled(unsigned char* tile, const unsigned short* head, int r0, int last, int p) {
    constexpr int STEP = THREADS / 16;
    const int row = p >> 4, c = p & 15;
    unsigned char* dst = tile + (c >> 3) * ROWS * 128 + row * 128 + (((c & 7) ^ (row & 7)) << 4);
    // A row at `last` or after copies nothing, from a row that exists.
    const unsigned short* src = head + (long)min(r0 + row, last - 1) * D + c * 8;
#pragma unroll 4
    for (int i = 0; i < ROWS / STEP; i++) {
        const bool in = r0 + row + i * STEP < last;
        cp_async16(dst + i * STEP * 128, src + (in ? i * STEP * D : 0), in ? 16 : 0);
    }
}

// A tile's scores with the keys after each row masked: the rows' running maxima (log2 units) and
// sums updated (`rescale`), P = exp2(S · scale − m) left in `sc` and its row sums added to `l`; the
// caller rescales the output by `corr` once the products writing it are done. Only a tile on the
// diagonal is masked, in a branch of its own, so the others spend no instruction on it.
__device__ __forceinline__ void softmax_tile(float (&sc)[16][4], float (&m)[2], float (&l)[2], float (&corr)[2],
                                             int k0, int row0, int quad, bool edge, float scale) {
    if (edge) {
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (k0 + j * 8 + quad * 2 + (i & 1) > row0 + (i >> 1) * 8) sc[j][i] = NEG_INF;
    }
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) mx[i >> 1] = fmaxf(mx[i >> 1], sc[j][i]);
    rescale<2>(m, l, mx, corr, scale);
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            sc[j][i] = ex2(fmaf(sc[j][i], scale, -m[i >> 1]));
            l[i >> 1] += sc[j][i];
        }
}

// P (in `sc`) as BF16 a fragments of 16 keys each (two c fragments of 8 keys make one).
__device__ __forceinline__ void pack_p(unsigned (&pa)[8][4], const float (&sc)[16][4]) {
#pragma unroll
    for (int c = 0; c < 8; c++) {
        pa[c][0] = pack(sc[2 * c][0], sc[2 * c][1]);
        pa[c][1] = pack(sc[2 * c][2], sc[2 * c][3]);
        pa[c][2] = pack(sc[2 * c + 1][0], sc[2 * c + 1][1]);
        pa[c][3] = pack(sc[2 * c + 1][2], sc[2 * c + 1][3]);
    }
}

// mbarriers in shared memory (PTX "Parallel Synchronization and Communication Instructions: mbarrier").
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
    } while (!done);
}
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// The attention of `flash` (same arguments, same output) for D = 128 on compute 9.0a: a block of two
// warpgroups takes 128 queries (64 each) and a third copies keys and values, 128 at a time, into
// three buffers (FlashAttention-3's producer and ping-pong). Each filled buffer is announced by an
// mbarrier and released by both consumers through another, so no barrier of the whole block holds
// them together, and two named barriers let them issue their products in turn: one warpgroup's
// softmax runs while the other's products do. Scores are Q·Kᵀ from shared memory, the output P·V
// with P in registers; each warpgroup issues the next tile's scores with this tile's P·V and works
// out the next softmax while P·V runs. When every thread copied and one `__syncthreads` a tile
// guarded the buffers, ncu put 28 % of the warps' samples on the two waits for the products, both
// warpgroups waiting at once (2026-11-28-prefill-parity); this gives the same bits, 586 TFLOPS
// against 532-538 at 16k (2026-11-28-pingpong/development).
__device__ void flash_hopper(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                             const unsigned short* __restrict__ v, unsigned short* __restrict__ out, int s,
                             int heads, int kv, long hs, long bs, int offset, float scale_log2) {
    constexpr int D = 128, BR = 128, BC = 128, TILE = BC * D * 2;
    extern __shared__ __align__(128) unsigned short smem_[];
    // Q, then K and V of buffers 0, 1 and 2, from a 1024-byte boundary (the swizzle's period); then
    // the mbarriers: `full[b]` (buffer b filled) and `empty[b]` (both consumers done with it).
    unsigned char* smem = (unsigned char*)smem_ + ((1024 - ((unsigned)__cvta_generic_to_shared(smem_) & 1023)) & 1023);
    unsigned long long* full = (unsigned long long*)(smem + 7 * TILE);
    unsigned long long* empty = full + 3;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, quad = lane & 3, r0 = lane >> 2, wg = warp >> 2;
    const int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, bi = blockIdx.z;
    const int q0 = tile * BR, wq = q0 + warp * 16;
    const unsigned short* qh = q + ((long)bi * heads + h) * s * D;
    const unsigned short* kh = k + bi * bs + (long)(h / (heads / kv)) * hs;
    const unsigned short* vh = v + bi * bs + (long)(h / (heads / kv)) * hs;
    const int last = offset + min(q0 + BR, s);
    const int tiles = (last + BC - 1) / BC;
    auto kbuf = [&](int t) { return smem + TILE * (1 + 2 * (t % 3)); };
    if (threadIdx.x == 0) {
        for (int b = 0; b < 3; b++) { mbar_init(&full[b], 128); mbar_init(&empty[b], 256); }
    }
    if (wg < 2) {
        load_swizzled<D, BR, 256>(smem, qh, q0, s, threadIdx.x);
        cp_async_commit();
        cp_async_wait_group<0>();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (wg == 2) {
        // The producer warpgroup, with few registers (the consumers take them): tile t into buffer
        // t % 3 once both consumer warpgroups are done with tile t - 3; each thread's arrival on the
        // buffer's mbarrier comes when its copies are in (cp.async's own arrive-on), so it never
        // waits for a copy.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        const int p = threadIdx.x - 256;
        for (int t = 0; t < tiles; t++) {
            if (t >= 3) mbar_wait(&empty[t % 3], ((t / 3) - 1) & 1);
            load_swizzled<D, BC, 128>(kbuf(t), kh, t * BC, last, p);
            load_swizzled<D, BC, 128>(kbuf(t) + TILE, vh, t * BC, last, p);
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(&full[t % 3])) : "memory");
        }
        cp_async_wait_all();
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    // Q and K are K-major (rows run along the head dims): 8-row groups 1024 B apart (`sbo`; `lbo` is
    // unused); a step of 16 dims moves 32 B within a half, and a half is 128 rows × 128 B further.
    const unsigned long long qd = gmma_desc(smem + wg * 64 * 128, 16, 1024);
    auto kstep = [](int c) { return (unsigned long long)(((c >> 2) * 128 * 128 + (c & 3) * 32) >> 4); };
    const int row0 = offset + wq + r0;  // the position of the thread's first row
    float o[16][4], sc[16][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f}, corr[2];
    unsigned pa[8][4];
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[j][i] = 0.f;
    auto scores = [&](int t) {
        const unsigned long long kd = gmma_desc(kbuf(t), 16, 1024);
#pragma unroll
        for (int c = 0; c < D / 16; c++) gmma_ss(sc, qd + kstep(c), kd + kstep(c), c);
        gmma_commit();
    };
    // V is N-major for P·V (its rows, the keys, run along K): the two 64-dim halves 16 KB apart
    // (`lbo`), 8-key groups 1024 B (`sbo`); a step of 16 keys moves 2048 B.
    auto values = [&](int t) {
        const unsigned long long vd = gmma_desc(kbuf(t) + TILE, BC * 128, 1024);
#pragma unroll
        for (int c = 0; c < BC / 16; c++) gmma_rs(o, pa[c], vd + ((c * 2048) >> 4));
        gmma_commit();
    };
    // Warpgroup w issues its products after named barrier 1 + w, then lets the other issue: warpgroup 1
    // first lets warpgroup 0 go. Tile 0's softmax before the loop; then tile t's P·V beside tile
    // t + 1's scores.
    if (wg == 1) named_arrive(1);
    mbar_wait(&full[0], 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the producer's copies, seen by wgmma
    named_sync(1 + wg);
    gmma_fence();
    scores(0);
    named_arrive(2 - wg);
    gmma_wait<0>();
    pin(sc);
    softmax_tile(sc, m, l, corr, 0, row0, quad, BC - 1 > row0 - r0, scale_log2);
    pack_p(pa, sc);
    for (int t = 0; t + 1 < tiles; t++) {
        mbar_wait(&full[(t + 1) % 3], ((t + 1) / 3) & 1);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        pin(o);
        pin(pa);
        named_sync(1 + wg);
        gmma_fence();
        scores(t + 1);
        values(t);
        named_arrive(2 - wg);
        gmma_wait<1>();  // the scores are in; P·V may still run
        pin(sc);
        const int k0 = (t + 1) * BC;
        softmax_tile(sc, m, l, corr, k0, row0, quad, k0 + BC - 1 > row0 - r0, scale_log2);
        gmma_wait<0>();
        pin(o);
        mbar_arrive(&empty[t % 3]);  // this warpgroup is done with tile t's buffer
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[j][i] *= corr[i >> 1];
        pack_p(pa, sc);
    }
    pin(o);
    pin(pa);
    named_sync(1 + wg);
    gmma_fence();
    values(tiles - 1);
    // Warpgroup 1's last turn has no product of warpgroup 0 after it to release.
    if (wg == 0) named_arrive(2);
    gmma_wait<0>();
    pin(o);
    store_tile<D>(out, o, l, wq + r0, s, heads, h, bi, quad);
}

extern "C" __global__ void __launch_bounds__(384, 1) vram_lab_flash_bf16_d128_hopper(
    const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* out, int s, int heads,
    int kv, long hs, long bs, int offset, float scale_log2) {
    flash_hopper(q, k, v, out, s, heads, kv, hs, bs, offset, scale_log2);
}
