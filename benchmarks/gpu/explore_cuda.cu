// explore_cuda.cu: kernels for the cuda backend's tuning sweeps (explore_cuda.py): ways of walking write's chain
// over a tile, and a plain stream with the plan's memory traffic. The floors themselves live in floors_probes.cu.
#include "kvcanary_common.cuh"

using namespace kvc;

// ---- serial chains -----------------------------------------------------------------------------------------
// write's tile loop alone (one warp, n tokens): inputs a tile ahead, shuffles, select, store per lane.
extern "C" __global__ void x_chain_shfl(const long long* toks, const long long* poss, unsigned long long* out,
                                        long long n) {
  const int lane = threadIdx.x & 31;
  u64 running = kAnchorHash;
  u64 nt = (u64)toks[lane], np = (u64)poss[lane];
  for (i64 t0 = 0; t0 < n; t0 += 32) {
    const u64 mt = nt, mp = np;
    if (t0 + 32 < n) {
      nt = (u64)ld_nc(toks + t0 + 32 + lane);
      np = (u64)ld_nc(poss + t0 + 32 + lane);
    }
    u64 myh = running;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      const u64 tk = __shfl_sync(kFullMask, mt, k);
      const u64 pk = __shfl_sync(kFullMask, mp, k);
      myh = lane == k ? running : myh;
      running = mix3(running, tk, pk);
    }
    out[t0 + lane] = myh;
  }
}

// Stage this tile's inputs (nt, np) in shared memory, then load the next tile's into nt, np.
__device__ __forceinline__ void stage(u64* st, u64* sp, u64& nt, u64& np, const long long* toks,
                                      const long long* poss, i64 t0, i64 n, int lane) {
  st[lane] = nt;
  sp[lane] = np;
  __syncwarp();
  if (t0 + 32 < n) {
    nt = (u64)ld_nc(toks + t0 + 32 + lane);
    np = (u64)ld_nc(poss + t0 + 32 + lane);
  }
}

// The tile staged in shared memory (broadcast reads, no shuffles). kLane0: lane 0 alone walks the chain and hands
// each record's hash back through shared memory; else every lane walks it and keeps its own with a select.
template <bool kLane0>
__device__ __forceinline__ void chain_staged(const long long* toks, const long long* poss, unsigned long long* out,
                                             long long n) {
  __shared__ u64 st[2][32], sp[2][32], sh[32];
  const int lane = threadIdx.x & 31;
  u64 running = kAnchorHash;
  u64 nt = (u64)toks[lane], np = (u64)poss[lane];
  int b = 0;
  for (i64 t0 = 0; t0 < n; t0 += 32, b ^= 1) {
    stage(st[b], sp[b], nt, np, toks, poss, t0, n, lane);
    if (kLane0) {
      if (lane == 0) {
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          sh[k] = running;
          running = mix3(running, st[b][k], sp[b][k]);
        }
      }
      __syncwarp();
      out[t0 + lane] = sh[lane];
      __syncwarp();
    } else {
      u64 myh = running;
#pragma unroll
      for (int k = 0; k < 32; ++k) {
        myh = lane == k ? running : myh;
        running = mix3(running, st[b][k], sp[b][k]);
      }
      out[t0 + lane] = myh;
    }
  }
}

extern "C" __global__ void x_chain_smem(const long long* toks, const long long* poss, unsigned long long* out,
                                        long long n) {
  chain_staged<false>(toks, poss, out, n);
}

extern "C" __global__ void x_chain_lane0(const long long* toks, const long long* poss, unsigned long long* out,
                                         long long n) {
  chain_staged<true>(toks, poss, out, n);
}

// ---- streaming at the plan's size: read one int32 per entry, write four int64 per entry ----------------------
template <int U>
__device__ __forceinline__ void stream4(const int* in, long long* o0, long long* o1, long long* o2, long long* o3,
                                        long long n) {
  const i64 e0 = (i64)blockIdx.x * 256 * U + threadIdx.x;
  int v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + (i64)u * 256;
    v[u] = e < n ? in[e] : 0;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + (i64)u * 256;
    if (e < n) {
      o0[e] = v[u];
      o1[e] = v[u] + 1;
      o2[e] = e;
      o3[e] = v[u] - 1;
    }
  }
}

#define X_STREAM(U)                                                                                            \
  extern "C" __global__ void __launch_bounds__(256) x_stream4_u##U(const int* in, long long* o0, long long* o1, \
                                                                  long long* o2, long long* o3, long long n) {  \
    stream4<U>(in, o0, o1, o2, o3, n);                                                                          \
  }
X_STREAM(1)
X_STREAM(4)
