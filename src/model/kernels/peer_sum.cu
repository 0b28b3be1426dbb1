// The sum across tensor-parallel ranks in one kernel, reading the other GPUs' memory directly (the
// one-shot all-reduce of vLLM's and TensorRT-LLM's custom all-reduce): each rank copies its part
// into its own staging buffer, tells every rank so by a flag it writes into their memory, waits for
// their flags, then adds every rank's buffer in rank order (so all ranks hold the same bits). NCCL
// takes 8-9 us a sum at two H200s (data/results/h200x4/2026-11-27-tp-scaling), a decode step's
// hidden state is 10-16 KB: the time is latency, and one kernel has the least of it.
//
// Each rank's block of memory (`peer.rs` lays it out): two halves of staging data, used in turn by
// successive sums, then the flags [PEER_BLOCKS][PEER_RANKS] the ranks write into, the counters (one
// per block: how many sums it has done) and the table of every rank's buffer and flags. Every sum
// runs PEER_BLOCKS blocks, each on its own share of the vectors with its own flags, so all blocks'
// counters stay equal and a sum's half is the same for all its blocks. A rank writes a half again
// two sums later, after every rank's block has arrived at the sum between: by then each has read it.

#define PEER_RANKS 8
#define PEER_BLOCKS 16

__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
    asm volatile("st.global.release.sys.b32 [%1], %0;" ::"r"(v), "l"(p) : "memory");
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.global.acquire.sys.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Another GPU's staging data, read past this SM's L1 (written by that GPU during this kernel).
__device__ __forceinline__ uint4 load_peer(const uint4* p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

// out = sum over ranks of x (rounded to T), + res when given (rounded again: the same two roundings
// as NCCL's sum followed by the residual's add). `nvec` 16-byte vectors; `half_vecs` vectors a half.
// `table`: [PEER_RANKS] staging buffers then [PEER_RANKS] flag arrays, as this rank addresses them.
// A flag not seen within `timeout_ns` (a rank that never came) sets `failed` and the sum goes on
// with what is there, so no GPU waits forever; a later sum on this rank then waits no more.
template <typename T>
__device__ void peer_sum(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ out,
                         const unsigned long long* __restrict__ table, unsigned* counters, unsigned* failed,
                         int rank, int ranks, int nvec, long half_vecs, unsigned long long timeout_ns) {
    constexpr int E = 16 / sizeof(T);
    __shared__ unsigned epoch_sm;
    const int b = blockIdx.x;
    if (threadIdx.x == 0) epoch_sm = counters[b] + 1;
    __syncthreads();
    const unsigned epoch = epoch_sm;
    const long half = (epoch & 1u) ? half_vecs : 0;
    const int per = (nvec + PEER_BLOCKS - 1) / PEER_BLOCKS;
    const int lo = b * per, hi = min(nvec, lo + per);
    uint4* mine = (uint4*)table[rank] + half;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = ((const uint4*)x)[i];
    __syncthreads();
    if (threadIdx.x < ranks) {
        // Thread r tells rank r this block's share is in place, then waits for rank r's.
        __threadfence_system();
        store_release((unsigned*)table[PEER_RANKS + threadIdx.x] + b * PEER_RANKS + rank, epoch);
        const unsigned* flag = (const unsigned*)table[PEER_RANKS + rank] + b * PEER_RANKS + threadIdx.x;
        if (*(volatile unsigned*)failed == 0) {
            const unsigned long long start = now_ns();
            while ((int)(load_acquire(flag) - epoch) < 0) {
                if (now_ns() - start > timeout_ns) { atomicExch(failed, 1u); break; }
            }
        }
    }
    __syncthreads();
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float acc[E];
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = 0.f;
        for (int r = 0; r < ranks; r++) {
            uint4 v = load_peer((const uint4*)table[r] + half + i);
            const T* t = (const T*)&v;
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] += ld(t, e);
        }
        uint4 o;
        T* ot = (T*)&o;
#pragma unroll
        for (int e = 0; e < E; e++) st(ot, e, acc[e]);
        if (res) {
            uint4 rv = ((const uint4*)res)[i];
            const T* rt = (const T*)&rv;
#pragma unroll
            for (int e = 0; e < E; e++) st(ot, e, ld(rt, e) + ld((const T*)ot, e));
        }
        ((uint4*)out)[i] = o;
    }
    if (threadIdx.x == 0) counters[b] = epoch;
}

extern "C" __global__ void __launch_bounds__(512) vram_lab_peer_sum_bf16(const unsigned short* x, const unsigned short* res,
        unsigned short* out, const unsigned long long* table, unsigned* counters, unsigned* failed, int rank, int ranks,
        int nvec, long half_vecs, unsigned long long timeout_ns) {
    peer_sum(x, res, out, table, counters, failed, rank, ranks, nvec, half_vecs, timeout_ns);
}
extern "C" __global__ void __launch_bounds__(512) vram_lab_peer_sum_f32(const float* x, const float* res, float* out,
        const unsigned long long* table, unsigned* counters, unsigned* failed, int rank, int ranks, int nvec,
        long half_vecs, unsigned long long timeout_ns) {
    peer_sum(x, res, out, table, counters, failed, rank, ranks, nvec, half_vecs, timeout_ns);
}
