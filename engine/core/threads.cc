#include "engine/core/threads.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::core {
namespace {

// How long a waiting thread spins before it parks. Long enough to cover the gap between two ops
// of a decode step, short enough that on an oversubscribed machine (ctest -j, a server beside
// its clients) a spinner takes little from the thread it waits for.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void Relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpin has passed; true when done() became true.
template <typename Done>
bool SpinUntil(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    Relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = std::max(1, num_threads);
  workers_.reserve(num_threads_ - 1);
  for (int w = 1; w < num_threads_; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ChunkRange(int i, int64_t* begin, int64_t* end) const {
  *begin = i * chunk_;
  *end = std::min(n_, *begin + chunk_);
}

void ThreadPool::Run(int64_t n, int64_t grain, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (max_chunks <= 1) {
    fn(ctx, 0, n);
    return;
  }
  const int64_t chunk = (n + max_chunks - 1) / max_chunks;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    chunk_ = chunk;
    chunks_ = static_cast<int>((n + chunk - 1) / chunk);  // no empty trailing chunk
    pending_.store(chunks_ - 1);
    generation_.fetch_add(1);
  }
  work_cv_.notify_all();
  fn(ctx, 0, std::min(n, chunk));
  if (SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [this] { return pending_.load() == 0; });
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    SpinUntil([&] {
      return generation_.load(std::memory_order_acquire) != seen ||
             stop_.load(std::memory_order_relaxed);
    });
    std::unique_lock<std::mutex> lk(mu_);
    work_cv_.wait(lk, [&] { return stop_.load() || generation_.load() != seen; });
    if (stop_) return;
    seen = generation_.load();
    // A worker that wakes late may skip a generation in which it had no chunk: the caller only
    // starts the next job after every chunk of this one is done.
    if (worker >= chunks_) continue;
    int64_t begin, end;
    ChunkRange(worker, &begin, &end);
    RangeFn fn = fn_;
    void* ctx = ctx_;
    lk.unlock();
    fn(ctx, begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> g(mu_);  // the caller may be parked on done_cv_
      done_cv_.notify_one();
    }
  }
}

}  // namespace lockstep::core
