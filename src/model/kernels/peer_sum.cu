// The one-shot sum of a tensor-parallel group over peer memory (vLLM's custom all-reduce, one-shot
// form): each rank writes its partial into its slot of every rank's buffer, marks its arrival in
// every rank's flags, waits for every rank's mark, then sums the slots in rank order (the same bits
// on every rank) and adds the residual. One block, one launch; a CUDA graph records it like any
// kernel. Layout of a rank's buffer (`model::parallel::peer`): arrival flags u64[64] at 0, the
// rank's sum counter u64 at 512, every rank's buffer address u64[64] at 1024, the slots from 4096:
// two sets (the counter's parity) of PEER_MAX_RANKS slots of PEER_CAP bytes. Two sets suffice: a
// rank reaches sum e + 2 (and rewrites set e's parity) only after every rank marked sum e + 1,
// which each does after it finished reading sum e.
#define PEER_MAX_RANKS 8
#define PEER_CAP 65536L
#define PEER_SLOTS 4096L
typedef unsigned long long u64;

__device__ __forceinline__ u64 ld_acquire(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Slots are read past L1 (another GPU wrote them).
__device__ __forceinline__ float ld_peer(const unsigned short* p, long i) {
    return __uint_as_float(((unsigned)__ldcg(p + i)) << 16);
}
__device__ __forceinline__ float ld_peer(const float* p, long i) { return __ldcg(p + i); }
// The value as the dtype holds it (a BF16 sum is rounded before the residual is added, as the
// sum's tensor would be).
__device__ __forceinline__ float held(const unsigned short*, float f) {
    unsigned u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __uint_as_float((u >> 16) << 16);
}
__device__ __forceinline__ float held(const float*, float f) { return f; }

template <typename T>
__device__ void peer_sum(const u64* table, int rank, int ranks, const T* x, const T* res, T* out, int n) {
    char* own = (char*)table[rank];
    u64* flags = (u64*)own;
    volatile u64* counter = (volatile u64*)(own + 512);
    __shared__ u64 epoch;
    if (threadIdx.x == 0) epoch = *counter + 1;
    __syncthreads();
    const u64 e = epoch;
    const long set = PEER_SLOTS + (long)(e & 1) * PEER_MAX_RANKS * PEER_CAP;
    // 1. This rank's partial into its slot of every rank's buffer, 16 bytes a store.
    const int vecs = n * (int)sizeof(T) / 16;
    for (int j = 0; j < ranks; j++) {
        char* slot = (char*)table[j] + set + rank * PEER_CAP;
        for (int i = threadIdx.x; i < vecs; i += blockDim.x) ((uint4*)slot)[i] = ((const uint4*)x)[i];
        for (int i = vecs * 16 / (int)sizeof(T) + threadIdx.x; i < n; i += blockDim.x) ((T*)slot)[i] = x[i];
    }
    // 2. Every thread's stores visible to every GPU before this rank's marks.
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x < ranks) st_release((u64*)table[threadIdx.x] + rank, e);
    // 3. Every rank's mark for this sum (a faster rank may already have marked the next).
    if (threadIdx.x < ranks) {
        while (ld_acquire(flags + threadIdx.x) < e) {
        }
    }
    __syncthreads();
    // 4. The slots summed in rank order, then the residual.
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float s = 0.f;
        for (int j = 0; j < ranks; j++) s += ld_peer((const T*)(own + set + j * PEER_CAP), i);
        s = held(out, s);
        if (res) s = s + ld(res, i);
        st(out, i, s);
    }
    __syncthreads();
    if (threadIdx.x == 0) *counter = e;
}

extern "C" __global__ void vram_lab_peer_sum_bf16(const u64* table, int rank, int ranks, const unsigned short* x,
                                                  const unsigned short* res, unsigned short* out, int n) {
    peer_sum(table, rank, ranks, x, res, out, n);
}
extern "C" __global__ void vram_lab_peer_sum_f32(const u64* table, int rank, int ranks, const float* x,
                                                 const float* res, float* out, int n) {
    peer_sum(table, rank, ranks, x, res, out, n);
}
