// launch.cpp: one kernel source (KVC_EMU_SOURCE, entry KVC_EMU_ENTRY) as a host shared library.
//
// Build (tests/backends/cuda/_emu.py does it): g++ -std=c++20 -pthread -shared -fPIC -DKVC_HOST_EMULATION
//   -include kvc_emu.h -I backends/cuda/kernels -DKVC_EMU_SOURCE='"verify.cu"' -DKVC_EMU_ENTRY=kvc_verify ...
// kvc_emu_launch(grid, block, shared bytes, args, nargs) runs the kernel with the 8-byte arguments the Python
// packer produced (pointers are host addresses of CPU tensors), after checking their count.
#include KVC_EMU_SOURCE

#include <cstddef>
#include <type_traits>
#include <utility>

thread_local kvc_emu_dim3 threadIdx;
thread_local kvc_emu_dim3 blockIdx;
kvc_emu_dim3 blockDim;
kvc_emu_dim3 gridDim;
KvcEmuBlock* kvc_emu_block = nullptr;
std::atomic<int> kvc_emu_faults{0};
std::atomic<uintptr_t> kvc_emu_first_fault{0};
unsigned char* kvc_emu_dyn_smem = nullptr;

void kvc_emu_run(unsigned gx, unsigned gy, unsigned bx, size_t shmem, const std::function<void()>& body) {
  gridDim = kvc_emu_dim3{gx, gy, 1};
  blockDim = kvc_emu_dim3{bx, 1, 1};
  std::vector<unsigned char> smem(shmem + 16);
  for (unsigned y = 0; y < gy; ++y) {
    for (unsigned x = 0; x < gx; ++x) {
      std::memset(smem.data(), 0xA5, smem.size());  // dynamic shared memory starts as garbage
      kvc_emu_dyn_smem = smem.data();
      KvcEmuBlock block((int)bx);
      kvc_emu_block = &block;
      std::vector<std::thread> threads;
      threads.reserve(bx);
      for (unsigned t = 0; t < bx; ++t) {
        threads.emplace_back([&, t, x, y] {
          threadIdx = kvc_emu_dim3{t, 0, 0};
          blockIdx = kvc_emu_dim3{x, y, 0};
          body();
          block.warps[t / 32]->bar.arrive_and_drop();  // an exited thread stops counting at barriers
          block.bar.arrive_and_drop();
        });
      }
      for (std::thread& th : threads) th.join();
      kvc_emu_block = nullptr;
    }
  }
}

namespace {

template <typename T>
T from_arg(long long v) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<T>(static_cast<intptr_t>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename... Ts, size_t... I>
void call(void (*f)(Ts...), const long long* a, std::index_sequence<I...>) {
  f(from_arg<Ts>(a[I])...);
}

template <typename... Ts>
constexpr int arity(void (*)(Ts...)) {
  return (int)sizeof...(Ts);
}

template <typename... Ts>
constexpr bool all_8_bytes(void (*)(Ts...)) {
  return ((sizeof(Ts) == 8) && ...);
}

static_assert(all_8_bytes(&KVC_EMU_ENTRY), "every kernel parameter must be 8 bytes (the host passes intptr_t)");

}  // namespace

extern "C" int kvc_emu_nparams() { return arity(&KVC_EMU_ENTRY); }

extern "C" long long kvc_emu_first_fault_address() { return (long long)kvc_emu_first_fault.load(); }

// Returns the number of misaligned vector accesses (0: clean), or -1 when nargs is not the kernel's arity.
extern "C" int kvc_emu_launch(unsigned gx, unsigned gy, unsigned bx, unsigned long long shmem, const long long* args,
                              int nargs) {
  if (nargs != arity(&KVC_EMU_ENTRY)) return -1;
  kvc_emu_faults.store(0);
  kvc_emu_first_fault.store(0);
  kvc_emu_run(gx, gy, bx, (size_t)shmem, [args] {
    auto* f = &KVC_EMU_ENTRY;
    call(f, args, std::make_index_sequence<arity(&KVC_EMU_ENTRY)>{});
  });
  return kvc_emu_faults.load();
}
