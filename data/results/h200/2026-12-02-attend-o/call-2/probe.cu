// The attention and the o product of a decoding step of Qwen2.5-7B (BF16) as two launches, as
// main launches them, beside `attend_o`, one grid for both (src/model/kernels/decode.cu), in
// several register budgets: 28 launches captured in a CUDA graph and replayed, and the whole step
// either way, beside the bytes read and the read kernel's rate. First the fused grid's outputs are
// checked bit for bit against the two launches'. Values are random (speed does not depend on them).
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o ao probe.cu      (here, in this folder; run: ./ao)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../../../../../src/model/kernels/common.cuh"
#include "decode.cu"
#include "../../../../../src/memory/read.cu"
typedef unsigned short bf;
VRAM_LAB_GEMV(qkv_k, bf, 1, 1, true, 4)
VRAM_LAB_GEMV(o_k, bf, 1, 1, false, 4)
VRAM_LAB_GEMV(gu_k, bf, 1, 2, true, 1)
VRAM_LAB_GEMV(down_k, bf, 1, 1, false, 8)
VRAM_LAB_GEMV(head_k, bf, 1, 1, true, 1)
VRAM_LAB_ATTEND_ARGMAX(bf16, bf)
// attend_o with R rounds of k and v in flight per row and a launch bound of M blocks an SM.
#define AO(NAME, R, M) AOW(NAME, R, M, 1)
#define AOW(NAME, R, M, W) extern "C" __global__ void __launch_bounds__(256, M) NAME(const bf* y, const bf* cos_t, const bf* sin_t, bf* kc, bf* vc, \
    const unsigned* pos, bf* a, int heads, int kv, int d, int cap, float scale, const bf* wo, const bf* res, bf* out, int n, int k, unsigned* sync) { \
    attend_o<bf, 1, 4, R, W>(y, cos_t, sin_t, kc, vc, pos, a, heads, kv, d, cap, scale, wo, res, out, n, k, sync); }
AO(ao_r2_m4, 2, 4)
AOW(ao_w_r4, 4, 1, 2)
AOW(ao_w_r2, 2, 1, 2)
AOW(ao_w_r2_m4, 2, 4, 2)
AOW(ao_w_r1_m5, 1, 5, 2)
// The attention alone in 256 threads, R rounds (as the fused grid's attention blocks run it).
#define AT(NAME, R) extern "C" __global__ void __launch_bounds__(256) NAME(const bf* y, const bf* cos_t, const bf* sin_t, bf* kc, bf* vc, \
    const unsigned* pos, bf* out, int heads, int kv, int d, int cap, float scale) { \
    attend<bf, R>(y, cos_t, sin_t, kc, vc, pos, out, nullptr, heads, kv, d, cap, scale, blockIdx.x, 0, 1, 0); }
AT(at256_r4, 4)
AT(at256_r2, 2)
typedef void (*ao_fn)(const bf*, const bf*, const bf*, bf*, bf*, const unsigned*, bf*, int, int, int, int, float, const bf*, const bf*, bf*, int, int, unsigned*);
struct { const char* name; ao_fn f; } aos[] = {{"R2 bound 4", ao_r2_m4}, {"wait first R4", ao_w_r4}, {"wait first R2", ao_w_r2},
    {"wait first R2 bound 4", ao_w_r2_m4}, {"wait first R1 bound 5", ao_w_r1_m5}};
ao_fn fused = nullptr;
unsigned* syncbuf;
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
enum { QKV = 1, ATT = 2, O = 4, GU = 8, DOWN = 16, HEAD = 32, ALL = 63, FUSED = 64, AT4 = 128, AT2 = 256 };
void layer(cudaStream_t s, const Layer& w, int what) {
    if (what & QKV) qkv_k<<<blocks(4608), 32 * 4 * 2, 0, s>>>(w.q, w.k, w.v, w.bq, w.bk, w.bv, HEADS * D, KV * D, x0, nullptr, w.ln1, EPS, y, 4608, H);
    if (what & FUSED) {
        fused<<<HEADS + blocks(H), 256, 0, s>>>(y, cs, sn, w.kc, w.vc, pos, a, HEADS, KV, D, CAP, SCALE, w.o, x0, x1, H, H, syncbuf);
        what &= ~(ATT | O);
    }
    if (what & AT4) at256_r4<<<HEADS, 256, 0, s>>>(y, cs, sn, w.kc, w.vc, pos, a, HEADS, KV, D, CAP, SCALE);
    if (what & AT2) at256_r2<<<HEADS, 256, 0, s>>>(y, cs, sn, w.kc, w.vc, pos, a, HEADS, KV, D, CAP, SCALE);
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
    if (what & (ATT | FUSED | AT4 | AT2)) b += L * (2.0 * KV * POS * D * 2);
    if (what & (O | FUSED)) b += L * ((double)H * H * 2);
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
    CK(cudaMalloc(&syncbuf, 16)); CK(cudaMemset(syncbuf, 0, 16));
    // Bits: the two launches, then each fused grid three times (the counters must come back to 0),
    // layer 0's attention output and x after o compared.
    std::vector<bf> a_ref(H), x_ref(H), a_f(H), x_f(H);
    layer(s, layers[0], ATT | O); CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(a_ref.data(), a, H * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(x_ref.data(), x1, H * 2, cudaMemcpyDeviceToHost));
    for (auto& v : aos) {
        fused = v.f;
        cudaFuncAttributes at; CK(cudaFuncGetAttributes(&at, (const void*)v.f));
        int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void*)v.f, 256, 0));
        int same = 1;
        for (int r = 0; r < 3; r++) {
            CK(cudaMemset(a, 0, H * 2)); CK(cudaMemset(x1, 0, H * 2));
            layer(s, layers[0], FUSED); CK(cudaStreamSynchronize(s)); CK(cudaGetLastError());
            CK(cudaMemcpy(a_f.data(), a, H * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(x_f.data(), x1, H * 2, cudaMemcpyDeviceToHost));
            same &= a_f == a_ref && x_f == x_ref;
        }
        unsigned sy[4]; CK(cudaMemcpy(sy, syncbuf, 16, cudaMemcpyDeviceToHost));
        printf("fused %-11s | %3d registers, %4zu bytes spilled, %d blocks an SM | bits equal to the two launches' (3 runs): %s | counters after: %u %u\n",
               v.name, at.numRegs, at.localSizeBytes, occ, same ? "yes" : "NO", sy[0], sy[1]);
    }
    {
        cudaFuncAttributes at; CK(cudaFuncGetAttributes(&at, (const void*)o_k));
        int occ = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, (const void*)o_k, 256, 0));
        printf("o alone     | %3d registers, %d blocks an SM\n", at.numRegs, occ);
    }
    struct { const char* name; int what; } cases[] = {
        {"step", ALL}, {"attention x28", ATT}, {"o x28", O}, {"attention+o x28", ATT | O},
        {"attention 256 thr R4 x28", AT4}, {"attention 256 thr R2 x28", AT2}};
    for (int round = 0; round < 2; round++) {
        for (auto& c : cases) {
            float ms = time_graph(s, c.what, 20);
            double b = bytes(c.what);
            printf("round %d | %-30s | %8.1f us | %8.1f MB | %6.0f GB/s | %5.1f %% of read | ideal %8.1f us\n", round, c.name, ms * 1e3, b / 1e6,
                   b / (ms * 1e6), 100.0 * b / (ms * 1e6) / best, b / best / 1e3);
        }
        for (auto& v : aos) {
            fused = v.f;
            for (int what : {(int)FUSED, (int)(ALL | FUSED)}) {
                float ms = time_graph(s, what, 20);
                double b = bytes(what);
                char name[64]; snprintf(name, sizeof name, "%s %s", what == FUSED ? "fused x28" : "step fused", v.name);
                printf("round %d | %-30s | %8.1f us | %8.1f MB | %6.0f GB/s | %5.1f %% of read | ideal %8.1f us\n", round, name, ms * 1e3, b / 1e6,
                       b / (ms * 1e6), 100.0 * b / (ms * 1e6) / best, b / best / 1e3);
            }
        }
    }
    CK(cudaGetLastError());
    return 0;
}
