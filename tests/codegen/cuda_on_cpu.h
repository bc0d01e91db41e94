// Just enough of CUDA to run fastcomp's kernels on the CPU, for tests on machines without a GPU: every
// thread of a block is a std::thread that runs the blocks one after another (so __shared__ can be a static), and the warp
// intrinsics the emitted code uses (__shfl_sync, __shfl_xor_sync, __syncwarp) and __syncthreads are barriers.
// Slow (a thread per CUDA thread) and only as exact as the host's libm, but it runs the emitted C text itself:
// index arithmetic, shared-memory layout, warp reductions, masks. The prelude's half conversions are inline
// PTX: cpu_launch.py puts the host functions below in their place.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
// Dynamic shared memory (the emitted prelude's macro, defined here first): a static array as large as any kernel asks.
#define FC_DYNAMIC_SHARED_FLOATS(name) alignas(16) static float name[256 * 1024 / sizeof(float)]
// A gather's out-of-range index ends the CUDA context; here, the process.
inline void __trap() { std::abort(); }

struct fc_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local fc_dim3 threadIdx, blockIdx;
inline fc_dim3 blockDim, gridDim;

// CUDA's min/max take mixed integer types (an idx_t and an int); std::min does not.
template <typename A, typename B>
inline auto min(A a, B b) -> std::common_type_t<A, B> { return a < b ? a : b; }
template <typename A, typename B>
inline auto max(A a, B b) -> std::common_type_t<A, B> { return a < b ? b : a; }

namespace fc_cpu {

// A reusable barrier for `count` threads. Waiters yield rather than sleep: a warp's lanes meet at every
// shuffle, and waking sleeping threads through a condition variable made that several times slower.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    const long generation = generation_.load(std::memory_order_acquire);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
      waiting_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == generation) std::this_thread::yield();
  }

 private:
  const int count_;
  std::atomic<int> waiting_{0};
  std::atomic<long> generation_{0};
};

// One warp's exchange slots and barrier; a shuffle writes the lane's value, waits, reads its source, waits.
struct Warp {
  explicit Warp(int lanes) : barrier(lanes) {}
  Barrier barrier;
  uint64_t slots[32] = {};
};

inline thread_local Warp* current_warp = nullptr;
inline Barrier* current_block = nullptr;

template <typename T>
T exchange(T value, int source_lane) {
  static_assert(sizeof(T) <= 8, "shuffles move 4 or 8 bytes");
  Warp& w = *current_warp;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  w.slots[threadIdx.x & 31] = bits;
  w.barrier.wait();
  const uint64_t got = w.slots[source_lane & 31];
  w.barrier.wait();
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

// A kernel argument from a void*: converts to whatever pointer type the parameter has (the program declares its
// own int64_t and friends, which need not be the host's).
struct Pointer {
  void* p;
  template <typename T>
  operator T*() const { return static_cast<T*>(p); }
};

// Runs `kernel()` (the kernel called with its arguments) for every thread of every block of the grid: one host
// thread per thread of a block, which runs the blocks one after another (a barrier between them, so that the
// next block's __shared__ statics start after this block is done with them).
template <typename Kernel>
void launch(unsigned grid, unsigned block, Kernel kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  Barrier block_barrier(static_cast<int>(block));
  current_block = &block_barrier;
  std::vector<Warp*> warps;
  for (unsigned w = 0; w < (block + 31) / 32; ++w)
    warps.push_back(new Warp(static_cast<int>(std::min(32u, block - 32 * w))));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      threadIdx = {t, 0, 0};
      current_warp = warps[t / 32];
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        kernel();
        block_barrier.wait();
      }
    });
  for (auto& th : threads) th.join();
  for (Warp* w : warps) delete w;
}

}  // namespace fc_cpu

inline void __syncthreads() { fc_cpu::current_block->wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { fc_cpu::current_warp->barrier.wait(); }
template <typename T>
T __shfl_sync(unsigned, T value, int lane) { return fc_cpu::exchange(value, lane); }
template <typename T>
T __shfl_xor_sync(unsigned, T value, int mask) { return fc_cpu::exchange(value, int(threadIdx.x & 31) ^ mask); }

// The half conversions the prelude writes as PTX (cpu_launch.py puts these calls in place of its asm): widening
// is exact, narrowing rounds to nearest even, as cvt.rn does.
namespace fc_cpu {
inline float f16_to_f32(unsigned short bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}
inline unsigned short f32_to_f16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  unsigned short bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
inline float bf16_to_f32(unsigned short bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned short f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40);  // a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<unsigned short>(u >> 16);
}
}  // namespace fc_cpu

inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; std::memcpy(&x, &f, 4); return x; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
