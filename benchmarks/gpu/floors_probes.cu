// floors_probes.cu: CUDA C++ floor probes for benchmarks/floors_cuda.py (the same compiler and launch path as
// the backend's kernels, so a ratio compares like with like). Built by NVRTC like the kernels.
#include "kvcanary_common.cuh"

using namespace kvc;

// An empty kernel: the launch-bound floor.
extern "C" __global__ void kvc_probe_empty(long long unused) { (void)unused; }

// One serial mix3 chain, every operand in registers (the next step's inputs do not depend on the chain):
// the dependency floor of write's per-request loop.
extern "C" __global__ void kvc_probe_serial(unsigned long long* out, long long steps, long long seed) {
  u64 h = (u64)seed;
  u64 tok = (u64)seed * 3 + 1;
  u64 pos = (u64)seed * 5 + 7;
  for (i64 i = 0; i < steps; ++i) {
    h = mix3(h, tok, pos);
    tok += 0x9E3779B97F4A7C15ULL;
    pos += 1;
  }
  if (threadIdx.x == 0) out[0] = h;
}

// The same chain with each step's token and position loaded from memory inside the loop, as a plain loop
// over the request's tokens does (the compiler schedules the loads).
extern "C" __global__ void kvc_probe_serial_loads(unsigned long long* out, const long long* toks, const long long* poss,
                                                  long long steps) {
  u64 h = 1;
  for (i64 i = 0; i < steps; ++i) h = mix3(h, (u64)toks[i], (u64)poss[i]);
  if (threadIdx.x == 0) out[0] = h;
}

// The random gather of two 32-byte records per entry (16 B of indices in, 8 B out), one entry per thread, with
// 16-byte loads: what benchmarks/floors.py's Triton gather probe measures.
extern "C" __global__ void __launch_bounds__(256)
    kvc_probe_gather2(const unsigned char* buf, const long long* slots, const long long* prevs, long long* out,
                      long long n, long long stride) {
  const i64 e = (i64)blockIdx.x * 256 + threadIdx.x;
  if (e >= n) return;
  const unsigned char* a = buf + (i64)ld_nc(slots + e) * stride;
  const unsigned char* b = buf + (i64)ld_nc(prevs + e) * stride;
  const U64x2 a0 = ld_nc_na_v2(a), a1 = ld_nc_na_v2(a + 16), b0 = ld_nc_na_v2(b), b1 = ld_nc_na_v2(b + 16);
  out[e] = (i64)(a0.x ^ a0.y ^ a1.x ^ a1.y ^ b0.x ^ b0.y ^ b1.x ^ b1.y);
}

// The gather plus `chunks` 16-byte chunks of the slot's strip in each of `nsrc` (<= 2) sources of one slot per
// row: the memory pattern of verify with real-KV hashing, without the hashing.
extern "C" __global__ void __launch_bounds__(256)
    kvc_probe_gather_rkv(const unsigned char* buf, const long long* slots, const long long* prevs, long long* out,
                         long long n, long long stride, const unsigned char* src0, const unsigned char* src1,
                         long long src_stride, long long nsrc, long long chunks) {
  const i64 e = (i64)blockIdx.x * 256 + threadIdx.x;
  if (e >= n) return;
  const i64 s = (i64)ld_nc(slots + e);
  const unsigned char* a = buf + s * stride;
  const unsigned char* b = buf + (i64)ld_nc(prevs + e) * stride;
  const U64x2 a0 = ld_nc_na_v2(a), a1 = ld_nc_na_v2(a + 16), b0 = ld_nc_na_v2(b), b1 = ld_nc_na_v2(b + 16);
  u64 acc = a0.x ^ a0.y ^ a1.x ^ a1.y ^ b0.x ^ b0.y ^ b1.x ^ b1.y;
  for (i64 i = 0; i < nsrc; ++i) {
    const unsigned char* p = (i == 0 ? src0 : src1) + s * src_stride;
    for (i64 c = 0; c < chunks; ++c) {
      const U64x2 v = ld_nc_v2(p + 16 * c);
      acc ^= v.x ^ v.y;
    }
  }
  out[e] = (i64)acc;
}
