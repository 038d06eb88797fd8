// kvc_emu.h: run kvcanary's CUDA kernel sources on the CPU, for tests on machines without a GPU.
//
// Force-included (g++ -include) before a kernel source compiled with -DKVC_HOST_EMULATION. Every CUDA thread
// of a block is a std::thread; blocks run one after another. __syncthreads / __syncwarp are std::barriers,
// warp votes and shuffles exchange through per-warp slots between two barrier phases, atomics are GCC
// atomics. A thread that returns drops out of its barriers (as an exited CUDA thread stops counting).
// Vector loads and stores are checked for alignment; run under AddressSanitizer for bounds.
#pragma once

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static

struct kvc_emu_dim3 {
  unsigned int x = 1, y = 1, z = 1;
};

extern thread_local kvc_emu_dim3 threadIdx;
extern thread_local kvc_emu_dim3 blockIdx;
extern kvc_emu_dim3 blockDim;
extern kvc_emu_dim3 gridDim;

// ---- memory accesses ----------------------------------------------------------------------------------------
// Vector accesses must be aligned (as on the GPU); bounds are checked by AddressSanitizer when the test runs
// the emulation under it (the library is built with -fsanitize=address then).
extern std::atomic<int> kvc_emu_faults;
extern std::atomic<uintptr_t> kvc_emu_first_fault;

inline void kvc_emu_fault(const void* p) {
  if (kvc_emu_faults.fetch_add(1) == 0) kvc_emu_first_fault.store((uintptr_t)p);
}

inline unsigned long long kvc_emu_load(const void* p, int align) {
  if (align && ((uintptr_t)p % (uintptr_t)align) != 0) kvc_emu_fault(p);
  unsigned long long v;
  __atomic_load((const unsigned long long*)p, &v, __ATOMIC_RELAXED);
  return v;
}

inline void kvc_emu_store(void* p, unsigned long long v, int align) {
  if (align && ((uintptr_t)p % (uintptr_t)align) != 0) kvc_emu_fault(p);
  __atomic_store((unsigned long long*)p, &v, __ATOMIC_RELAXED);
}

// ---- block and warp synchronization -------------------------------------------------------------------------
struct KvcEmuWarp {
  explicit KvcEmuWarp(int n) : bar(n) {}
  std::barrier<> bar;
  unsigned long long slot[32];
};

struct KvcEmuBlock {
  explicit KvcEmuBlock(int n) : bar(n) {
    for (int w = 0; w < (n + 31) / 32; ++w) warps.emplace_back(std::make_unique<KvcEmuWarp>(n - 32 * w < 32 ? n - 32 * w : 32));
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<KvcEmuWarp>> warps;
  int flag_count = 0;
  std::mutex mu;
};

extern KvcEmuBlock* kvc_emu_block;

inline KvcEmuWarp& kvc_emu_warp() { return *kvc_emu_block->warps[threadIdx.x / 32]; }
inline unsigned kvc_emu_lane() { return threadIdx.x % 32; }

inline void __syncthreads() { kvc_emu_block->bar.arrive_and_wait(); }
inline int __syncthreads_or(int pred) {
  {
    std::lock_guard<std::mutex> g(kvc_emu_block->mu);
    if (pred) kvc_emu_block->flag_count++;
  }
  kvc_emu_block->bar.arrive_and_wait();
  const int any = kvc_emu_block->flag_count > 0;
  kvc_emu_block->bar.arrive_and_wait();
  if (threadIdx.x == 0) kvc_emu_block->flag_count = 0;
  kvc_emu_block->bar.arrive_and_wait();
  return any;
}
inline void __syncwarp(unsigned = 0xffffffffu) { kvc_emu_warp().bar.arrive_and_wait(); }

template <typename T>
inline T kvc_emu_exchange(T v, int (*src_of)(int, int), int arg) {
  KvcEmuWarp& w = kvc_emu_warp();
  const int lane = (int)kvc_emu_lane();
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  w.slot[lane] = bits;
  w.bar.arrive_and_wait();
  const int src = src_of(lane, arg);
  const unsigned long long got = w.slot[src];
  w.bar.arrive_and_wait();
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

inline int kvc_emu_src_idx(int, int src) { return src & 31; }
inline int kvc_emu_src_up(int lane, int d) { return lane >= d ? lane - d : lane; }
inline int kvc_emu_src_xor(int lane, int m) { return (lane ^ m) & 31; }

template <typename T>
inline T __shfl_sync(unsigned, T v, int src) { return kvc_emu_exchange<T>(v, kvc_emu_src_idx, src); }
template <typename T>
inline T __shfl_up_sync(unsigned, T v, unsigned d) { return kvc_emu_exchange<T>(v, kvc_emu_src_up, (int)d); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int m) { return kvc_emu_exchange<T>(v, kvc_emu_src_xor, m); }

inline unsigned __ballot_sync(unsigned, int pred) {
  KvcEmuWarp& w = kvc_emu_warp();
  const int lane = (int)kvc_emu_lane();
  w.slot[lane] = pred ? 1 : 0;
  w.bar.arrive_and_wait();
  unsigned m = 0;
  for (int i = 0; i < 32; ++i) m |= (w.slot[i] ? 1u : 0u) << i;
  w.bar.arrive_and_wait();
  return m;
}

inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

// ---- launching ------------------------------------------------------------------------------------------------
// Runs body() on every thread of every block, one block after another.
void kvc_emu_run(unsigned gx, unsigned gy, unsigned bx, size_t shmem, const std::function<void()>& body);
extern unsigned char* kvc_emu_dyn_smem;

#define KVC_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(kvc_emu_dyn_smem)
