// The step's attention with the first round of the cache's k and v asked for before q and k are
// rotated (decode-hoist.cu: f535b80's src/model/kernels/decode.cu with decode-hoist.patch) beside
// f535b80's (decode-base.cu, built with -DBASE; RUN.md says how both are made): 28
// launches of Qwen2.5-7B's layer shape captured in a CUDA graph at each cache position of the
// bench's steps (32-160), and the whole step at position 96 (their mean), beside the read kernel's
// rate. Each binary prints a hash of the attention's output and of the caches it wrote at each
// position, so the two builds' bits can be compared. Values are random (speed does not depend on them).
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o attn attn.cu
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -DBASE -o attn-base attn.cu      (here; run: ./attn, ./attn-base)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../../../../src/model/kernels/common.cuh"
#ifdef BASE
#include "decode-base.cu"
#else
#include "decode-hoist.cu"
#endif
#include "../../../../src/memory/read.cu"
typedef unsigned short bf;
VRAM_LAB_GEMV(qkv_k, bf, 1, 1, true, 4)
VRAM_LAB_GEMV(o_k, bf, 1, 1, false, 4)
VRAM_LAB_GEMV(gu_k, bf, 1, 2, true, 1)
VRAM_LAB_GEMV(down_k, bf, 1, 1, false, 8)
VRAM_LAB_GEMV(head_k, bf, 1, 1, true, 1)
VRAM_LAB_ATTEND_ARGMAX(bf16, bf)
#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { printf("%s: %s (line %d)\n", #x, cudaGetErrorString(err_), __LINE__); exit(1);} } while (0)
__global__ void fill(bf* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        float f = ((h & 0xffff) / 65536.f - 0.5f) * 0.05f;
        unsigned u = __float_as_uint(f); p[i] = (bf)(u >> 16);
    }
}
static bf* alloc(size_t n, unsigned seed) { bf* p; CK(cudaMalloc(&p, n * 2)); fill<<<1024, 256>>>(p, n, seed); return p; }
const int H = 3584, I = 18944, HEADS = 28, KV = 4, D = 128, L = 28, V = 152064, CAP = 256, POS = 160;
struct Layer { bf *q, *k, *v, *bq, *bk, *bv, *o, *g, *u, *d, *ln1, *ln2, *kc, *vc; };
std::vector<Layer> layers;
bf *x0, *x1, *x2, *y, *a, *m, *head, *fnorm, *cs, *sn, *logits; unsigned *pos, *ids;
const float EPS = 1e-6f, SCALE = 0.08838834764831845f;
static int blocks(int n) { return (n + 1) / 2; }
enum { QKV = 1, ATT = 2, O = 4, GU = 8, DOWN = 16, HEAD = 32, ALL = 63 };
void layer(cudaStream_t s, const Layer& w, int what) {
    if (what & QKV) qkv_k<<<blocks(4608), 32 * 4 * 2, 0, s>>>(w.q, w.k, w.v, w.bq, w.bk, w.bv, HEADS * D, KV * D, x0, nullptr, w.ln1, EPS, y, 4608, H);
    if (what & ATT) vram_lab_attend_bf16<<<dim3(HEADS, 1, 1), 512, 0, s>>>(y, cs, sn, w.kc, w.vc, pos, a, nullptr, HEADS, KV, D, CAP, SCALE);
    if (what & O) o_k<<<blocks(H), 32 * 4 * 2, 0, s>>>(w.o, nullptr, nullptr, nullptr, nullptr, nullptr, H, 0, a, x0, nullptr, 0.f, x1, H, H);
    if (what & GU) gu_k<<<blocks(I), 32 * 1 * 2, 0, s>>>(w.g, w.u, nullptr, nullptr, nullptr, nullptr, I, I, x1, nullptr, w.ln2, EPS, m, I, H);
    if (what & DOWN) down_k<<<blocks(H), 32 * 8 * 2, 0, s>>>(w.d, nullptr, nullptr, nullptr, nullptr, nullptr, H, 0, m, x1, nullptr, 0.f, x2, H, I);
}
void step(cudaStream_t s, int what) {
    for (int l = 0; l < L; l++) layer(s, layers[l], what);
    if (what & HEAD) {
        head_k<<<blocks(V), 64, 0, s>>>(head, nullptr, nullptr, nullptr, nullptr, nullptr, V, 0, x2, nullptr, fnorm, EPS, logits, V, H);
        vram_lab_argmax_bf16<<<1, 1024, 0, s>>>(logits, ids, V);
    }
}
double bytes(int what) {
    double b = 0;
    if (what & QKV) b += L * (4608.0 * H * 2);
    if (what & ATT) b += L * (2.0 * KV * POS * D * 2);
    if (what & O) b += L * ((double)H * H * 2);
    if (what & GU) b += L * (2.0 * I * H * 2);
    if (what & DOWN) b += L * ((double)H * I * 2);
    if (what & HEAD) b += (double)V * H * 2;
    return b;
}
float time_graph(cudaStream_t s, int what, int reps) {
    cudaGraph_t g; cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    step(s, what);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    cudaEvent_t a0, a1; cudaEventCreate(&a0); cudaEventCreate(&a1);
    std::vector<float> t;
    for (int r = 0; r < reps + 2; r++) {
        cudaEventRecord(a0, s); CK(cudaGraphLaunch(e, s)); cudaEventRecord(a1, s); CK(cudaEventSynchronize(a1));
        float ms; cudaEventElapsedTime(&ms, a0, a1); if (r >= 2) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    cudaGraphExecDestroy(e); cudaGraphDestroy(g);
    return t[t.size() / 2];
}
float *partbuf;

// 28 attentions of a layer's shape with its positions split into `splits` runs (and the merge), as
// decode.rs launches them over a long cache.
float time_split(cudaStream_t s, int splits, int reps) {
    cudaGraph_t g; cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < L; l++) {
        const Layer& w = layers[l];
        vram_lab_attend_bf16<<<dim3(HEADS, splits, 1), 512, 0, s>>>(y, cs, sn, w.kc, w.vc, pos, a, splits > 1 ? partbuf : nullptr, HEADS, KV, D, CAP, SCALE);
        if (splits > 1) vram_lab_attend_merge_bf16<<<dim3(HEADS, 1, 1), D, 0, s>>>(partbuf, a, HEADS, D, splits);
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    cudaEvent_t a0, a1; cudaEventCreate(&a0); cudaEventCreate(&a1);
    std::vector<float> t;
    for (int r = 0; r < reps + 2; r++) {
        cudaEventRecord(a0, s); CK(cudaGraphLaunch(e, s)); cudaEventRecord(a1, s); CK(cudaEventSynchronize(a1));
        float ms; cudaEventElapsedTime(&ms, a0, a1); if (r >= 2) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    cudaGraphExecDestroy(e); cudaGraphDestroy(g);
    return t[t.size() / 2];
}
int main() {
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    unsigned seed = 1;
    for (int l = 0; l < L; l++) {
        Layer w;
        w.q = alloc((size_t)HEADS * D * H, seed++); w.k = alloc((size_t)KV * D * H, seed++); w.v = alloc((size_t)KV * D * H, seed++);
        w.bq = alloc(HEADS * D, seed++); w.bk = alloc(KV * D, seed++); w.bv = alloc(KV * D, seed++);
        w.o = alloc((size_t)H * H, seed++); w.g = alloc((size_t)I * H, seed++); w.u = alloc((size_t)I * H, seed++);
        w.d = alloc((size_t)H * I, seed++); w.ln1 = alloc(H, seed++); w.ln2 = alloc(H, seed++);
        w.kc = alloc((size_t)KV * CAP * D, seed++); w.vc = alloc((size_t)KV * CAP * D, seed++);
        layers.push_back(w);
    }
    x0 = alloc(H, 7); x1 = alloc(H, 8); x2 = alloc(H, 9); y = alloc(4608, 10); a = alloc(H, 11); m = alloc(I, 12);
    head = alloc((size_t)V * H, 13); fnorm = alloc(H, 14); cs = alloc(CAP * D / 2, 15); sn = alloc(CAP * D / 2, 16); logits = alloc(V, 17);
    CK(cudaMalloc(&pos, 4)); unsigned p = POS; CK(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice)); CK(cudaMalloc(&ids, 4));
    CK(cudaDeviceSynchronize());
    // The read kernel's rate over 4 GiB (as `vram-lab` measures its ceiling), a few grids, the best.
    size_t rb = (size_t)4 << 30; uint4* buf; CK(cudaMalloc(&buf, rb)); CK(cudaMemset(buf, 0, rb)); unsigned* out; CK(cudaMalloc(&out, 4));
    double best = 0;
    for (int per : {4, 8, 16, 32}) {
        cudaEvent_t a0, a1; cudaEventCreate(&a0); cudaEventCreate(&a1);
        for (int r = 0; r < 4; r++) {
            cudaEventRecord(a0, s); vram_lab_read<<<sms * per, 256, 0, s>>>(buf, rb / 16, out); cudaEventRecord(a1, s); CK(cudaEventSynchronize(a1));
            float ms; cudaEventElapsedTime(&ms, a0, a1); if (r) best = std::max(best, rb / (ms * 1e6));
        }
    }
    printf("read kernel: %.0f GB/s\n", best);
    cudaFree(buf);
    auto hash = [](const void* dptr, size_t bytes) {
        std::vector<unsigned char> h(bytes); CK(cudaMemcpy(h.data(), dptr, bytes, cudaMemcpyDeviceToHost));
        unsigned long long x = 1469598103934665603ull; for (unsigned char c : h) { x ^= c; x *= 1099511628211ull; } return x;
    };
    for (unsigned p : {32u, 64u, 96u, 128u, 160u}) {
        CK(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(a, 0, H * 2));
        layer(s, layers[0], ATT); CK(cudaStreamSynchronize(s)); CK(cudaGetLastError());
        printf("bits at position %3u | attention out %016llx | k cache %016llx | v cache %016llx\n", p, hash(a, H * 2),
               hash(layers[0].kc, (size_t)KV * CAP * D * 2), hash(layers[0].vc, (size_t)KV * CAP * D * 2));
    }
    for (int round = 0; round < 3; round++) {
        for (unsigned p : {32u, 64u, 96u, 128u, 160u}) {
            CK(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice));
            printf("round %d | attention x28 at position %3u | %8.1f us\n", round, p, time_graph(s, ATT, 20) * 1e3);
        }
        unsigned p = 96; CK(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice));
        float ms = time_graph(s, ALL, 20);
        double b = bytes(ALL);
        printf("round %d | step at position 96 | %8.1f us | %5.1f %% of read | %6.1f tok/s\n", round, ms * 1e3, 100.0 * b / (ms * 1e6) / best, 1e3 / ms);
    }
    CK(cudaGetLastError());
    return 0;
}
