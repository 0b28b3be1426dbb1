// How close can a decoding step that launches its products one after another come to the read
// kernel's rate, if every product read its bytes exactly as the read kernel does? The step of
// Qwen2.5-7B (BF16) is replaced by the lab's read kernel (src/memory/read.cu) over the same bytes,
// one launch per product in the step's order (per layer q|k|v 33.0 MB, o 25.7, gate|up 271.6, down
// 135.8; then the head 1,090), each chain captured in a CUDA graph and replayed 20 times (median),
// beside one launch over all the bytes. Variants: the lab's real attention kernel between q|k|v and
// o (a 256-position cache at position 160, as the step's probe has it); and the chain with
// programmatic dependent launch, each read releasing the next at entry, which no real product
// could do (the next needs the last's output): the overlap's upper bound.
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o chain chain.cu      (here, in this folder; run: ./chain)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../../../../src/model/kernels/common.cuh"
#include "../../../../src/model/kernels/decode.cu"
#include "../../../../src/memory/read.cu"
typedef unsigned short bf;
VRAM_LAB_ATTEND_ARGMAX(bf16, bf)
#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { printf("%s: %s (line %d)\n", #x, cudaGetErrorString(err_), __LINE__); exit(1);} } while (0)
// The read kernel (read.cu's loop), releasing its dependent launch at entry.
extern "C" __global__ void read_pdl(const uint4* __restrict__ p, unsigned long long n, unsigned int* out) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int acc = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = __ldcs(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}
const int H = 3584, I = 18944, HEADS = 28, KV = 4, D = 128, L = 28, V = 152064, CAP = 256, POS = 160;
const float SCALE = 0.08838834764831845f;
const size_t SEG[4] = {4608ull * H * 2, (size_t)H * H * 2, 2ull * I * H * 2, (size_t)H * I * 2};
const size_t HEAD = (size_t)V * H * 2;
uint4* buf; unsigned* sink; int sms;
bf *y, *a, *cs, *sn, *kc, *vc; unsigned* pos;
enum { PLAIN, ATTN, PDL };
void launch_read(cudaStream_t s, size_t off, size_t bytes, int per, bool pdl) {
    const uint4* p = buf + off / 16; unsigned long long n = bytes / 16;
    if (!pdl) { vram_lab_read<<<sms * per, 256, 0, s>>>(p, n, sink); return; }
    cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(sms * per); cfg.blockDim = dim3(256); cfg.stream = s;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, read_pdl, p, n, sink));
}
void chain(cudaStream_t s, int mode, int per) {
    size_t off = 0;
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 4; k++) {
            launch_read(s, off, SEG[k], per, mode == PDL);
            off += SEG[k];
            if (k == 0 && mode == ATTN) vram_lab_attend_bf16<<<HEADS, 512, 0, s>>>(y, cs, sn, kc, vc, pos, a, nullptr, HEADS, KV, D, CAP, SCALE);
        }
    launch_read(s, off, HEAD, per, mode == PDL);
}
size_t total() { return L * (SEG[0] + SEG[1] + SEG[2] + SEG[3]) + HEAD; }
float time_graph(cudaStream_t s, int mode, int per, bool one) {
    cudaGraph_t g; cudaGraphExec_t e;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (one) launch_read(s, 0, total(), per, false); else chain(s, mode, per);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&e, g, 0));
    cudaEvent_t a0, a1; cudaEventCreate(&a0); cudaEventCreate(&a1);
    std::vector<float> t;
    for (int r = 0; r < 22; r++) {
        cudaEventRecord(a0, s); CK(cudaGraphLaunch(e, s)); cudaEventRecord(a1, s); CK(cudaEventSynchronize(a1));
        float ms; cudaEventElapsedTime(&ms, a0, a1); if (r >= 2) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    cudaGraphExecDestroy(e); cudaGraphDestroy(g);
    return t[t.size() / 2];
}
int main() {
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    CK(cudaMalloc(&buf, total())); CK(cudaMemset(buf, 0, total())); CK(cudaMalloc(&sink, 4));
    CK(cudaMalloc(&y, 4608 * 2)); CK(cudaMemset(y, 0, 4608 * 2)); CK(cudaMalloc(&a, H * 2));
    CK(cudaMalloc(&cs, CAP * D)); CK(cudaMemset(cs, 0, CAP * D)); CK(cudaMalloc(&sn, CAP * D)); CK(cudaMemset(sn, 0, CAP * D));
    CK(cudaMalloc(&kc, KV * CAP * D * 2)); CK(cudaMemset(kc, 0, KV * CAP * D * 2)); CK(cudaMalloc(&vc, KV * CAP * D * 2)); CK(cudaMemset(vc, 0, KV * CAP * D * 2));
    CK(cudaMalloc(&pos, 4)); unsigned p = POS; CK(cudaMemcpy(pos, &p, 4, cudaMemcpyHostToDevice));
    // The read kernel's ceiling as the lab measures it: its best grid over 4 GiB.
    double ceiling = 0;
    for (int per : {4, 8, 16, 32}) {
        cudaEvent_t a0, a1; cudaEventCreate(&a0); cudaEventCreate(&a1);
        for (int r = 0; r < 4; r++) {
            cudaEventRecord(a0, s); vram_lab_read<<<sms * per, 256, 0, s>>>(buf, (4ull << 30) / 16, sink); cudaEventRecord(a1, s); CK(cudaEventSynchronize(a1));
            float ms; cudaEventElapsedTime(&ms, a0, a1); if (r) ceiling = std::max(ceiling, (4ull << 30) / (ms * 1e6));
        }
    }
    printf("read kernel over 4 GiB (the ceiling): %.0f GB/s; the step's bytes %.1f MB, at that rate %.1f us\n", ceiling, total() / 1e6, total() / ceiling / 1e3);
    const char* names[] = {"113 reads", "113 reads + 28 attentions", "113 reads, dependent launch"};
    for (int round = 0; round < 2; round++)
        for (int per : {4, 8, 16, 32}) {
            float one = time_graph(s, PLAIN, per, true);
            printf("round %d | %2d blocks an SM | %-30s | %8.1f us | %5.1f %% of the ceiling\n", round, per, "one read of all", one * 1e3,
                   100.0 * total() / (one * 1e6) / ceiling);
            for (int mode : {PLAIN, ATTN, PDL}) {
                float ms = time_graph(s, mode, per, false);
                printf("round %d | %2d blocks an SM | %-30s | %8.1f us | %5.1f %% of the ceiling\n", round, per, names[mode], ms * 1e3,
                       100.0 * total() / (ms * 1e6) / ceiling);
            }
        }
    CK(cudaGetLastError());
    return 0;
}
