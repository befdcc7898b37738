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

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<Draft> Propose(const DraftRequest& req) = 0;
};

// A smaller model sharing the target's tokenizer (vocab identity is checked: the same token
// strings in the same order, or a trimmed draft whose id map points into it).
absl::StatusOr<std::unique_ptr<Drafter>> MakeModelDrafter(const models::Model& target,
                                                          std::unique_ptr<models::Model> draft,
                                                          backend::Backend& be);

// Prompt lookup: the tokens that followed the most recent earlier occurrence of the context's
// last n-gram (n from max_n down to min_n).
std::unique_ptr<Drafter> MakeNgramDrafter(int64_t n_vocab, int max_n = 3, int min_n = 1);

// Checks that `draft` can draft for `target`: same tokenizer.ggml.tokens (same strings, same
// order). The error names the first differing id.
absl::Status CheckVocabIdentity(const models::Model& target, const models::Model& draft);

}  // namespace lockstep::spec
