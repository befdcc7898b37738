// Drafters propose the next tokens of a sequence; the target verifies them (speculative.h).
// A drafter never changes what is emitted — only how many target forwards it takes.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/sampling/sampler.h"

namespace lockstep::spec {

enum class SpecMode {
  kGreedy,   // accept while draft == target argmax; output == plain greedy, byte for byte
  kReject,   // Leviathan/Chen rejection sampling; emitted law == target law (not the same bytes)
  kCoupled,  // draft and target share position-keyed Gumbel noise; output == plain sampled decode
};
absl::StatusOr<SpecMode> ParseSpecMode(const std::string& name);
const char* SpecModeName(SpecMode m);

struct DraftRequest {
  std::span<const int32_t> context;  // prompt + every emitted token so far
  int k = 0;                         // propose at most k tokens
  SpecMode mode = SpecMode::kGreedy;
  const sampling::Sampler* sampler = nullptr;  // the target's params, applied to the draft too
  uint64_t seed = 0;
};

struct Draft {
  std::vector<int32_t> tokens;
  // kReject only: the law each token was drawn from, [tokens.size()][n_vocab] (target vocab).
  std::vector<std::vector<double>> q;
};

// One sequence's drafting state (a draft model's KV, say). Destroying it frees what it holds.
class DraftState {
 public:
  virtual ~DraftState() = default;
  virtual absl::StatusOr<Draft> Propose(const DraftRequest& req) = 0;
  // Drafters that read the target's hidden state (MTP heads) answer true; the engine then asks
  // the runner for the output-normed final hidden rows of every token it feeds the sequence
  // (StepEntry::hidden) and hands them over after each step: rows [n, n_embd] for positions
  // [start, start + n). Rows of rejected draft positions come too; a later step overwrites them.
  virtual bool WantsHidden() const { return false; }
  virtual absl::Status ObserveHidden(int64_t /*start*/, std::span<const float> /*rows*/) {
    return absl::OkStatus();
  }
};

// A drafter serves many sequences; each gets its own state from Start().
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<std::unique_ptr<DraftState>> Start() = 0;
};

struct SpecOptions {
  SpecMode mode = SpecMode::kGreedy;
  int k = 4;              // draft length (fixed), or the maximum when adaptive
  bool adaptive = false;  // K per round: +1 after a fully accepted round, -1 after an early miss
  absl::Status Validate(bool greedy_params) const;  // k in [1, 64]; greedy mode needs temp 0
};

// The mode a run uses when none is named: greedy at temperature 0, else coupled (both give
// plain decoding's bytes; docs/speculative.md).
SpecMode DefaultSpecMode(bool greedy_params);

struct SpecStats {
  int64_t rounds = 0, drafted = 0, accepted = 0, target_forwards = 0;
  std::vector<int64_t> proposed_at, accepted_at;  // per draft position i (0-based)
  double mean_accepted_length() const {  // tokens emitted per target forward
    return target_forwards > 0 ? static_cast<double>(accepted + rounds) / target_forwards : 0;
  }
  // Sums `o` into this (per-position counters grow to the longer of the two).
  void Add(const SpecStats& o) {
    rounds += o.rounds;
    drafted += o.drafted;
    accepted += o.accepted;
    target_forwards += o.target_forwards;
    if (proposed_at.size() < o.proposed_at.size()) {
      proposed_at.resize(o.proposed_at.size());
      accepted_at.resize(o.proposed_at.size());
    }
    for (size_t i = 0; i < o.proposed_at.size(); ++i) {
      proposed_at[i] += o.proposed_at[i];
      accepted_at[i] += o.accepted_at[i];
    }
  }
};

// A smaller model sharing the target's tokenizer (vocab identity is checked: the same token
// strings in the same order, or a trimmed draft whose id map points into it). It runs on `be`
// with its own paged KV pool of `pool_tokens` tokens shared by the sequences it drafts for.
absl::StatusOr<std::unique_ptr<Drafter>> MakeModelDrafter(const models::Model& target,
                                                          std::unique_ptr<models::Model> draft,
                                                          backend::Backend& be,
                                                          int64_t pool_tokens = 8192);

// The target's own MTP / NextN block (engine/models/mtp.h) drafting for it, with its own paged
// KV pool of `pool_tokens` positions shared by the sequences it drafts for. A draft of K tokens
// chains the block on its own output (vLLM's MTP proposer, llama.cpp's draft-mtp). An error
// naming the file when the target has no MTP block.
absl::StatusOr<std::unique_ptr<Drafter>> MakeMtpDrafter(const models::Model& target,
                                                        backend::Backend& be,
                                                        int64_t pool_tokens = 8192);

// `draft` is "ngram" (prompt lookup), "self" (the target's MTP block: MakeMtpDrafter) or the
// path of a draft model's GGUF file. Errors name the file and what does not fit the target
// (vocabulary, architecture).
absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const models::Model& target,
                                                     backend::Backend& be, const std::string& draft,
                                                     int64_t pool_tokens = 8192);

// Prompt lookup: the tokens that followed the most recent earlier occurrence of the context's
// last n-gram (n from max_n down to min_n).
std::unique_ptr<Drafter> MakeNgramDrafter(int64_t n_vocab, int max_n = 3, int min_n = 1);

// Checks that `draft` can draft for `target`: same tokenizer.ggml.tokens (same strings, same
// order). The error names the first differing id.
absl::Status CheckVocabIdentity(const models::Model& target, const models::Model& draft);

}  // namespace lockstep::spec
