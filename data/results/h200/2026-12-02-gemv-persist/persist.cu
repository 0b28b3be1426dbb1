// The step's matrix-vector products with a grid of the card's resident blocks, each block taking
// row groups in turn (decode-persist.cu: src/model/kernels/decode.cu of f535b80 with decode-persist.patch,
// which gives gemv its row group and adds VRAM_LAB_GEMV_P; RUN.md says how), beside the plain launches of one block a row group: each
// product's 28 launches and the whole step in a CUDA graph, beside the read kernel's rate, after
// a check that both give the same bits. Values are random (speed does not depend on them).
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o persist persist.cu      (here; run: ./persist)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../../../../src/model/kernels/common.cuh"
#include "decode-persist.cu"
#include "../../../../src/memory/read.cu"
typedef unsigned short bf;
VRAM_LAB_GEMV(qkv_k, bf, 1, 1, true, 4)
VRAM_LAB_GEMV(o_k, bf, 1, 1, false, 4)
VRAM_LAB_GEMV(gu_k, bf, 1, 2, true, 1)
VRAM_LAB_GEMV(down_k, bf, 1, 1, false, 8)
VRAM_LAB_GEMV(head_k, bf, 1, 1, true, 1)
VRAM_LAB_GEMV_P(qkv_p, bf, 1, 1, true, 4)
VRAM_LAB_GEMV_P(o_p, bf, 1, 1, false, 4)
VRAM_LAB_GEMV_P(gu_p, bf, 1, 2, true, 1)
VRAM_LAB_GEMV_P(down_p, bf, 1, 1, false, 8)
// Blocks a launch of the persistent kernels takes: `mult` times what the card holds at once.
int grid_qkv, grid_o, grid_gu, grid_down; bool persist = false;
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
    if (persist) {
        if (what & QKV) qkv_p<<<grid_qkv, 32 * 4 * 2, 0, s>>>(w.q, w.k, w.v, w.bq, w.bk, w.bv, HEADS * D, KV * D, x0, nullptr, w.ln1, EPS, y, 4608, H);
        if (what & ATT) vram_lab_attend_bf16<<<dim3(HEADS, 1, 1), 512, 0, s>>>(y, cs, sn, w.kc, w.vc, pos, a, nullptr, HEADS, KV, D, CAP, SCALE);
        if (what & O) o_p<<<grid_o, 32 * 4 * 2, 0, s>>>(w.o, nullptr, nullptr, nullptr, nullptr, nullptr, H, 0, a, x0, nullptr, 0.f, x1, H, H);
        if (what & GU) gu_p<<<grid_gu, 32 * 1 * 2, 0, s>>>(w.g, w.u, nullptr, nullptr, nullptr, nullptr, I, I, x1, nullptr, w.ln2, EPS, m, I, H);
        if (what & DOWN) down_p<<<grid_down, 32 * 8 * 2, 0, s>>>(w.d, nullptr, nullptr, nullptr, nullptr, nullptr, H, 0, m, x1, nullptr, 0.f, x2, H, I);
        return;
    }
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
    // Bits: one step's layers (no head) both ways, x after the last layer compared.
    auto out_bits = [&](bool p) {
        persist = p;
        for (int l = 0; l < L; l++) layer(s, layers[l], ALL & ~HEAD);
        CK(cudaStreamSynchronize(s)); CK(cudaGetLastError());
        std::vector<bf> h(H + 4608 + I); CK(cudaMemcpy(h.data(), x2, H * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h.data() + H, y, 4608 * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h.data() + H + 4608, m, I * 2, cudaMemcpyDeviceToHost));
        return h;
    };
    int occ[4];
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[0], (const void*)qkv_p, 256, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[1], (const void*)o_p, 256, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[2], (const void*)gu_p, 64, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[3], (const void*)down_p, 512, 0));
    printf("resident blocks an SM: q|k|v %d, o %d, gate|up %d, down %d\n", occ[0], occ[1], occ[2], occ[3]);
    struct { const char* name; int what; } cases[] = {
        {"step", ALL}, {"q|k|v x28", QKV}, {"o x28", O}, {"gate|up x28", GU}, {"down x28", DOWN}};
    for (int mult : {1, 2}) {
        grid_qkv = sms * occ[0] * mult; grid_o = sms * occ[1] * mult; grid_gu = sms * occ[2] * mult; grid_down = sms * occ[3] * mult;
        std::vector<bf> ref = out_bits(false), got = out_bits(true);
        printf("persistent grids at %d x the resident blocks: bits of x, q|k|v and gate|up equal to the plain launches': %s\n", mult, ref == got ? "yes" : "NO");
    }
    for (int round = 0; round < 2; round++)
        for (int mult : {0, 1, 2}) {
            persist = mult > 0;
            grid_qkv = sms * occ[0] * mult; grid_o = sms * occ[1] * mult; grid_gu = sms * occ[2] * mult; grid_down = sms * occ[3] * mult;
            for (auto& c : cases) {
                float ms = time_graph(s, c.what, 20);
                double b = bytes(c.what);
                char name[64]; snprintf(name, sizeof name, "%s %s", c.name, mult == 0 ? "plain" : mult == 1 ? "persistent 1x" : "persistent 2x");
                printf("round %d | %-26s | %8.1f us | %8.1f MB | %6.0f GB/s | %5.1f %% of read | ideal %8.1f us\n", round, name, ms * 1e3, b / 1e6,
                       b / (ms * 1e6), 100.0 * b / (ms * 1e6) / best, b / best / 1e3);
            }
        }
    CK(cudaGetLastError());
    return 0;
}
