// One model's engine thread (docs/serving.md): it owns the runtime::Engine and is the only
// thread that calls it. HTTP handlers hand it requests and cancellations through a mailbox and
// read what each request produced from its Channel. There is one engine loop (Engine::Step);
// this thread only drives it.
//
// Admission is decided here, before the engine sees a request: each admitted sequence
// reserves the KV blocks its prompt + max_tokens can ever need, and the sum never exceeds the
// pool, so an admitted request is never preempted for lack of memory, never dropped and never
// out of memory; a request that does not fit now is refused (the server answers 429).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/server/metrics.h"

namespace lockstep::server {

struct TokenRecord {
  int32_t token = 0;
  double logprob = 0;
  std::vector<sampling::TokenLogprob> top;
  bool drafted = false, accepted = false, stops = false;
};

// What one engine request produced so far; filled by the engine thread, drained by a handler.
class Channel {
 public:
  struct Batch {
    std::string text;
    std::vector<TokenRecord> tokens;
    bool done = false;
    runtime::RequestResult result;  // when done
    std::string error;              // when done by an engine error
  };
  // Waits up to `timeout` for news, then takes everything pending.
  Batch Take(std::chrono::milliseconds timeout);
  bool done() const;

 private:
  friend class Worker;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Batch pending_;
  bool news_ = false;
  int64_t id_ = 0;      // the engine's id once submitted
  int64_t blocks_ = 0;  // reserved KV blocks
  int spec_k_ = 0;      // the K its speculative rounds draft with; 0 = plain decoding
  std::chrono::steady_clock::time_point t_submit_, t_last_;
  bool has_token_ = false;
};

class Worker {
 public:
  Worker(std::string model_name, std::unique_ptr<runtime::Engine> engine, int64_t max_seqs);
  ~Worker();  // stops the thread; requests still running are cancelled
  // Starts the engine thread, which reports to `metrics` (outlives the worker). `spec_k`: the
  // K of a model served with a draft (--spec-k), 0 without one; requests may draft with less
  // under load (generate.cc), and /metrics shows both.
  void Start(Metrics* metrics, int spec_k);

  // Reserves `blocks` KV blocks for each of `seqs` sequences. False when they do not fit now
  // (the sequence limit or the KV pool): the caller answers 429.
  bool TryReserve(int seqs, int64_t blocks_each);
  void Unreserve(int seqs, int64_t blocks_each);  // a reservation not submitted after all
  // Queues a reserved request (one of the sequences of TryReserve).
  std::shared_ptr<Channel> Submit(runtime::Request r, int64_t blocks);
  void Cancel(const std::shared_ptr<Channel>& c);

  int64_t in_flight() const;
  int64_t pool_blocks() const { return pool_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t ctx() const { return ctx_; }
  int64_t max_seqs() const { return max_seqs_; }

 private:
  void Loop();
  void Deliver(runtime::RequestResult r);
  void Publish();

  const std::string name_;
  std::unique_ptr<runtime::Engine> engine_;  // touched by the engine thread only (after start)
  const int64_t max_seqs_, pool_blocks_, block_size_, ctx_;
  Metrics* metrics_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t reserved_seqs_ = 0, reserved_blocks_ = 0;
  std::deque<std::pair<runtime::Request, std::shared_ptr<Channel>>> inbox_;
  std::vector<std::shared_ptr<Channel>> cancels_;
  std::thread thread_;
  // Engine thread only.
  std::map<int64_t, std::shared_ptr<Channel>> live_;
  std::vector<int64_t> drafted_at_, accepted_at_;
  int spec_k_ = 0;
  std::map<int, SpecByK> spec_by_k_;
};

}  // namespace lockstep::server
