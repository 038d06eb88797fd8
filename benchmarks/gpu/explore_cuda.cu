// explore_cuda.cu: kernels for the cuda backend's tuning sweeps (explore_cuda.py): ways of walking write's chain
// over a tile. The floors themselves (the plan's plain stream among them) live in floors_probes.cu.
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
