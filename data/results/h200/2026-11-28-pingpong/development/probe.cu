// The Hopper prefill attention beside its producer-warp, ping-pong variant (pp_), timed on one GPU,
// outputs compared bit for bit with main's kernel.
//   nvcc -O3 -lineinfo -gencode arch=compute_90a,code=sm_90a -o pp probe.cu
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cmath>
#include <cuda_runtime.h>
#include "../../src/model/kernels/flash_attention.cu"
#include "../../src/model/kernels/flash_attention_sm90.cu"
namespace pp {
#include "pp_sm90.cu"
}
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
static unsigned short bf(float x) { unsigned u; memcpy(&u, &x, 4); return (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
static float fb(unsigned short h) { unsigned u = (unsigned)h << 16; float x; memcpy(&x, &u, 4); return x; }
typedef void (*K)(const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, int, int, int, long, long, int, float);
struct V { const char* name; K k; int threads; int smem; };
int run(int heads, int kv, int s, int offset, int reps) {
    const int D = 128, t = offset + s;
    size_t nq = (size_t)heads * s * D, nk = (size_t)kv * t * D;
    std::vector<unsigned short> hq(nq), hk(nk), hv(nk);
    srand(1);
    for (auto& x : hq) x = bf((rand() / (float)RAND_MAX - 0.5f) * 4);
    for (auto& x : hk) x = bf((rand() / (float)RAND_MAX - 0.5f) * 4);
    for (auto& x : hv) x = bf((rand() / (float)RAND_MAX - 0.5f) * 2);
    unsigned short *q, *k, *v, *ref, *out;
    CK(cudaMalloc(&q, nq * 2)); CK(cudaMalloc(&k, nk * 2)); CK(cudaMalloc(&v, nk * 2));
    CK(cudaMalloc(&ref, nq * 2)); CK(cudaMalloc(&out, nq * 2));
    CK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
    long hs = (long)t * D, bs = (long)kv * t * D;
    float sl = 1.4426950408889634f / sqrtf((float)D);
    int hop_sm = 7 * 128 * D * 2 + 1024;
    V vs[] = {{"hopper", vram_lab_flash_bf16_d128_hopper, 256, hop_sm},
              {"pp_hopper", pp::pp_vram_lab_flash_bf16_d128_hopper, 384, hop_sm + 64},
              {"hopper", vram_lab_flash_bf16_d128_hopper, 256, hop_sm},
              {"pp_hopper", pp::pp_vram_lab_flash_bf16_d128_hopper, 384, hop_sm + 64}};
    dim3 grid((s + 127) / 128, heads, 1);
    double pairs = 0; for (int i = 0; i < s; i++) pairs += offset + i + 1;
    double fl = 4.0 * D * pairs * heads;
    std::vector<unsigned short> r1(nq), r2(nq);
    int bad_any = 0;
    for (int w = 0; w < 4; w++) {
        CK(cudaFuncSetAttribute(vs[w].k, cudaFuncAttributeMaxDynamicSharedMemorySize, vs[w].smem));
        unsigned short* dst = w == 0 ? ref : out;
        CK(cudaMemset(dst, 0, nq * 2));
        cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
        for (int r = 0; r < reps + 1; r++) {
            if (r == (reps ? 1 : 0)) cudaEventRecord(a);
            vs[w].k<<<grid, vs[w].threads, vs[w].smem>>>(q, k, v, dst, s, heads, kv, hs, bs, offset, sl);
        }
        cudaEventRecord(b); CK(cudaEventSynchronize(b)); CK(cudaGetLastError());
        float ms; cudaEventElapsedTime(&ms, a, b); if (reps) ms /= reps;
        size_t same = 0; double worst = 0;
        if (w > 0) {
            CK(cudaMemcpy(r1.data(), ref, nq * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(r2.data(), out, nq * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < nq; i++) { same += r1[i] == r2[i]; double d = fabs(fb(r1[i]) - fb(r2[i])); if (!(d <= 1e9)) d = 1e9; worst = fmax(worst, d); }
        }
        printf("heads %d kv %d s %d offset %d %-9s %8.3f ms %6.1f TFLOPS", heads, kv, s, offset, vs[w].name, ms, reps ? fl / ms / 1e9 : 0.0);
        if (w > 0) printf("  vs hopper: same bits %zu of %zu, max|diff| %.4g", same, nq, worst);
        printf("\n");
        bad_any += w > 0 && same != nq;
    }
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(ref); cudaFree(out);
    return bad_any;
}
int main(int argc, char** argv) {
    int fails = 0;
    fails += run(8, 2, 700, 0, 0);
    fails += run(8, 2, 300, 900, 0);
    fails += run(28, 4, 1000, 37, 0);
    fails += run(28, 4, 100, 0, 0);
    for (int round = 0; round < 2; round++) {
        fails += run(28, 4, 16384, 0, 3);
        fails += run(28, 4, 32768, 0, 3);
    }
    printf("%s\n", fails ? "DIFFERENT BITS" : "all the same bits");
    return fails != 0;
}
