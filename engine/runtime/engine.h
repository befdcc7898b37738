// The engine: one loop for every way of running a request (docs/runtime.md).
//
// Engine::Step() asks the scheduler for work, forms one ragged batch mixing prefill chunks,
// decode rows and speculative verify rows, runs one forward (models::Runner) over the paged KV
// pool, then samples or verifies and streams. Plain decoding is speculative decoding with no
// drafter; speculative rollback is a block-table truncation. The CLI, the server and pipeline
// stages drive this same Step.
//
// Invariance (docs/design.md §1): a request's tokens and bytes do not depend on what else is in
// the step, how its prompt was chunked, whether it was preempted and recomputed, or whether its
// prefix came from the prefix cache or a parked session — because every row's forward is
// bitwise independent of its neighbours (the backend's reduction-order contract) and every
// sampled token is keyed by (seed, position) alone.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/kv_pool.h"
#include "engine/models/runner.h"
#include "engine/models/state_pool.h"
#include "engine/runtime/generate.h"
#include "engine/runtime/prefix_cache.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"

namespace lockstep::runtime {

struct EngineOptions {
  int64_t ctx = 0;                 // context length; 0 = the model's n_ctx_train (capped at 8192)
  int64_t max_step_tokens = 256;   // token budget of one step (prefill chunks are cut to it)
  int64_t max_running = 16;        // sequences in the running set at most
  int64_t kv_bytes = 0;            // KV pool budget; 0 = enough for max_running full contexts,
                                   // capped at 1 GiB
  int64_t block_size = 16;         // tokens per KV block
  quant::KvFormat k_format = quant::KvFormat::kF32;
  quant::KvFormat v_format = quant::KvFormat::kF32;
  int64_t prefix_cache_bytes = 0;  // full blocks kept for reuse (LRU); 0 = no prefix cache
  int64_t max_sessions = 64;       // parked sessions (LRU); 0 = no sessions
  int max_spec_k = 16;             // the largest K a request may ask for (sizes the logits rows)
  // Pipeline stages (docs/pipeline.md): the layer boundaries and the link to the other stages
  // (empty / null: unsplit). This engine is stage 0; the runner carries each step down the chain.
  std::vector<int64_t> pp_split;
  models::StageLink* pp_link = nullptr;
  int64_t pp_micro_batches = 2;
  int64_t pp_timeout_ms = 120000;
  // Called with every step's logits rows as the runner returned them (ci/pp-gate compares them
  // bit for bit between split and unsplit runs).
  std::function<void(std::span<const float>)> on_step_logits;
  // Plain greedy rows get their token picked on the backend (Engine::BackendGreedy; the same
  // token). false: every row comes to the host and the sampler picks there (`lockstep bench
  // --host-greedy`, to measure what the backend pick saves; docs/performance.md).
  bool backend_greedy = true;
  absl::Status Validate() const;   // names the offending field
};

// One sampled token as the server reports it (docs/serving.md): its logprob in the law it was
// drawn from, the alternatives asked for, and whether the drafter proposed it. `text` is what
// the stop conditions let out at this token (may be empty); `stops` marks the token that
// finished the request by a stop id (not emitted).
struct TokenEvent {
  int32_t token = 0;
  int64_t position = 0;
  double logprob = 0.0;
  std::vector<sampling::TokenLogprob> top_logprobs;
  bool drafted = false;   // the drafter proposed a token at this position
  bool accepted = false;  // ... and it is this one
  bool stops = false;
  std::string_view text;
};

struct Request {
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
  uint64_t seed = 0;
  spec::Drafter* drafter = nullptr;  // null: plain decoding
  spec::SpecOptions spec;
  std::string session;               // park under this id when done; resume a parked one
  bool ignore_eos = false;           // the tokenizer's end-of-turn ids do not stop it (benchmarks)
  std::function<void(std::string_view)> on_text;  // streamed text (may be empty)
  std::function<void(const TokenEvent&)> on_token;  // every sampled token, after on_text
  // on_token's events carry the token's logprob and params.top_logprobs alternatives. False: they
  // carry 0 and none, and the engine skips the log-softmax over the vocabulary (and a plain
  // greedy request may have its token picked on the backend, BackendGreedy).
  bool logprobs = false;
};

struct RequestResult {
  int64_t id = 0;
  GenerateResult gen;
  spec::SpecStats stats;
  bool cancelled = false;
  int64_t prefill_computed = 0;  // prompt tokens this request ran through the model
  int64_t preemptions = 0;
};

struct EngineStats {
  int64_t steps = 0, prefix_hits = 0, prefix_misses = 0, prefix_hit_tokens = 0;
  int64_t preemptions = 0, session_resumes = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const models::Model& model,
                                                        const tokenizer::Tokenizer& tok,
                                                        backend::Backend& be,
                                                        const EngineOptions& options);
  ~Engine();

  // Validates and queues a request; returns its id. A request that could never fit (prompt +
  // max_tokens beyond the context, or more KV blocks than the whole pool) is refused here with
  // both numbers; one that can fit later waits.
  absl::StatusOr<int64_t> Submit(Request r);
  // Ends a request now, freeing its blocks; it finishes with `cancelled`. Unknown ids: no-op.
  void Cancel(int64_t id);
  // Frees a running request's blocks and requeues it for recompute, as the scheduler does when
  // the pool runs dry (exposed for the property tests). Returns false if it is not running.
  bool Preempt(int64_t id);

  // One step. Returns the requests that finished in it.
  absl::StatusOr<std::vector<RequestResult>> Step();
  bool Idle() const { return waiting_.empty() && running_.empty(); }
  // Every queued request is running and past its prefill (benchmarks time decode from here).
  bool AllDecoding() const;

  // Submit + Step until it finishes (other queued requests advance too; their results are kept
  // for TakeFinished).
  absl::StatusOr<RequestResult> Run(Request r);
  std::vector<RequestResult> TakeFinished();

  const EngineOptions& options() const { return options_; }
  int64_t ctx() const { return options_.ctx; }
  const models::KvPool& pool() const { return *pool_; }
  const EngineStats& stats() const { return stats_; }
  // One line per pipeline stage (host, backend, layers) when split; empty otherwise.
  const std::vector<std::string>& stage_lines() const { return runner_->stage_lines(); }
  // A split engine: the transport's round trip through every stage for `floats` values.
  absl::StatusOr<double> ChainRoundTrip(int64_t floats, int reps) {
    return runner_->ChainRoundTrip(floats, reps);
  }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  // Drops every parked session and cached prefix (their blocks go back to the pool).
  void ClearCaches();

 private:
  struct Sequence;
  Engine(const models::Model& model, const tokenizer::Tokenizer& tok, backend::Backend& be,
         const EngineOptions& options);

  absl::Status Admit(Sequence& s);
  absl::Status ReserveOrMakeRoom(Sequence& s, int64_t n_total);
  bool EvictOneCached();
  void PreemptSeq(Sequence& s);
  // `greedy` (when the entry asked the backend for its greedy tokens, BackendGreedy) holds the
  // rows' tokens instead of `logits`.
  absl::Status Verify(Sequence& s, std::span<const float> logits, int n_draft,
                      std::span<const int32_t> greedy = {});
  // Whether s's rows may come back as greedy tokens picked on the backend (models::StepEntry::
  // greedy): plain greedy parameters (sampling::PlainGreedy), no drafter, no logprobs asked for
  // (Request::logprobs), nobody reading the step's logits (on_step_logits), and a runner that
  // supports it. The token is the one the host sampler would pick from the same row.
  bool BackendGreedy(const Sequence& s) const;
  // Whether s's on_token reports logprobs (Request::logprobs with an on_token).
  static bool Logprobs(const Sequence& s);
  void Finish(Sequence& s, std::vector<RequestResult>* out);
  void ParkSession(Sequence& s);

  const models::Model& model_;
  const tokenizer::Tokenizer& tok_;
  backend::Backend& be_;
  EngineOptions options_;
  std::unique_ptr<models::Runner> runner_;
  std::unique_ptr<models::KvPool> pool_;
  // Hybrid (Gated DeltaNet) models: a recurrent-state lane per running sequence, with K
  // checkpoint slots for speculative rollback (state_pool.h). Null for attention-only models.
  std::unique_ptr<models::StatePool> states_;
  // Hands a sequence's state lane back (no-op without one).
  void ReleaseLane(Sequence& s);
  std::unique_ptr<PrefixCache> prefix_;
  struct Parked {
    models::SeqKv kv;
    std::vector<int32_t> tokens;  // the tokens whose KV the blocks hold
    uint64_t tick = 0;
  };
  absl::flat_hash_map<std::string, Parked> sessions_;
  uint64_t tick_ = 0;
  int64_t next_id_ = 1;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::list<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<RequestResult> finished_;
  EngineStats stats_;
};

}  // namespace lockstep::runtime
