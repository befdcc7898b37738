// A small fixed-size thread pool for the CPU backend. A forward makes hundreds of op calls, so
// a call must cost far less than a thread wake: workers and the caller spin on an atomic for a
// short while (kSpin, 50 us) before they park on a condition
// variable. Parking costs a futex wake per call, which on a VM dominated small-model decode
// (docs/performance.md).
//
// Partitioning is static and visible: ParallelFor splits [0, n) into contiguous ranges, one per
// worker, and each range is run by exactly one thread. Kernels that want thread invariance make
// every output element's arithmetic independent of which range it fell into; the pool only
// decides who computes an element, never how.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep::core {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 runs everything inline and starts no thread;
  // 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Calls fn(begin, end) over a partition of [0, n) into at most size() contiguous ranges of at
  // least `grain` items (the last may be shorter), and returns when all have run. The caller
  // runs the first range. Not re-entrant: fn must not call ParallelFor on the same pool.
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t grain, Fn&& fn) {
    auto trampoline = [](void* ctx, int64_t begin, int64_t end) {
      (*static_cast<Fn*>(ctx))(begin, end);
    };
    Run(n, grain, trampoline, &fn);
  }

 private:
  using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);

  void Run(int64_t n, int64_t grain, RangeFn fn, void* ctx);
  void WorkerLoop(int worker);
  // The range of chunk `i` of the current job, [begin, end).
  void ChunkRange(int i, int64_t* begin, int64_t* end) const;

  int num_threads_;
  std::vector<std::thread> workers_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // workers wait here for a new generation
  std::condition_variable done_cv_;  // the caller waits here for pending_ == 0
  // Written under mu_ (so that a parked thread cannot miss a change), read by spinners without it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> pending_{0};  // chunks handed to workers and not yet finished
  // The current job, read by workers under mu_ after a generation change.
  RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;  // items per chunk
  int chunks_ = 0;
};

}  // namespace lockstep::core
