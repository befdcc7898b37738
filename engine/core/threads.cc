#include "engine/core/threads.h"

#include <algorithm>

namespace lockstep::core {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = std::max(1, num_threads);
  workers_.reserve(num_threads_ - 1);
  for (int w = 1; w < num_threads_; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
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
    pending_ = chunks_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  fn(ctx, 0, std::min(n, chunk));
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [this] { return pending_ == 0; });
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    // A worker that wakes late may skip a generation in which it had no chunk: the caller only
    // starts the next job after every chunk of this one is done.
    if (worker >= chunks_) continue;
    int64_t begin, end;
    ChunkRange(worker, &begin, &end);
    RangeFn fn = fn_;
    void* ctx = ctx_;
    lk.unlock();
    fn(ctx, begin, end);
    lk.lock();
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace lockstep::core
