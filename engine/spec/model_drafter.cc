// Draft-model drafting: a smaller model with the target's vocabulary runs autoregressively on
// its own KV cache, which is rolled back to the longest prefix it shares with the context.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/spec/drafter.h"
#include "engine/spec/rejection.h"

namespace lockstep::spec {
namespace {

const gguf::Value* Tokens(const models::Model& m) { return m.file().Find("tokenizer.ggml.tokens"); }

class ModelDrafter : public Drafter {
 public:
  ModelDrafter(const models::Model& target, std::unique_ptr<models::Model> draft,
               backend::Backend& be)
      : n_vocab_(target.config().n_vocab), draft_(std::move(draft)), be_(be),
        cache_(draft_->config(), 0) {}

  std::string name() const override { return "draft-model"; }

  absl::StatusOr<Draft> Propose(const DraftRequest& req) override {
    Draft d;
    if (req.k <= 0 || req.context.empty()) return d;
    const int64_t len = static_cast<int64_t>(req.context.size());
    if (len + req.k > cache_.capacity) {
      // Grow geometrically; the new cache starts empty, so everything is re-fed once.
      cache_ = models::KvCache(draft_->config(), std::max<int64_t>(2 * (len + req.k), 256));
      fed_.clear();
    }
    // Keep the cached prefix the context still agrees with, but always re-feed the last token
    // so that its logits are fresh.
    int64_t keep = 0;
    while (keep < static_cast<int64_t>(fed_.size()) && keep < len - 1 && fed_[keep] == req.context[keep]) {
      ++keep;
    }
    cache_.n_past = keep;
    fed_.resize(keep);
    std::vector<int32_t> step(req.context.begin() + keep, req.context.end());
    std::vector<int32_t> history(req.context.begin(), req.context.end());
    std::vector<float> logits, raw;
    for (int i = 0; i < req.k; ++i) {
      models::BatchEntry e{&cache_, step};
      RETURN_IF_ERROR(models::Forward(*draft_, be_, std::span(&e, 1), false, &raw));
      fed_.insert(fed_.end(), step.begin(), step.end());
      // A trimmed head scores only its kept tokens; the others can never be proposed.
      const std::vector<int32_t>& ids = draft_->weights().output_ids;
      if (ids.empty()) {
        logits.swap(raw);
      } else {
        logits.assign(n_vocab_, -INFINITY);
        for (size_t r = 0; r < ids.size(); ++r) logits[ids[r]] = raw[r];
      }
      const uint64_t position = static_cast<uint64_t>(len + i);
      int32_t x;
      if (req.mode == SpecMode::kReject) {
        ASSIGN_OR_RETURN(std::vector<double> q, req.sampler->ProcessedDistribution(logits, history));
        x = SampleFromDistribution(q, req.seed, position, kStreamDraft);
        d.q.push_back(std::move(q));
      } else {
        // Greedy: the sampler's params are greedy. Coupled: the same Gumbel noise as the target.
        ASSIGN_OR_RETURN(sampling::SampledToken s,
                         req.sampler->Sample(logits, req.seed, static_cast<int64_t>(position), history));
        x = s.token;
      }
      if (x < 0) break;
      d.tokens.push_back(x);
      history.push_back(x);
      step.assign(1, x);
    }
    return d;
  }

 private:
  int64_t n_vocab_;
  std::unique_ptr<models::Model> draft_;
  backend::Backend& be_;
  models::KvCache cache_;
  std::vector<int32_t> fed_;  // tokens whose K/V are in cache_ (positions 0..n_past-1)
};

}  // namespace

absl::StatusOr<SpecMode> ParseSpecMode(const std::string& name) {
  if (name == "greedy") return SpecMode::kGreedy;
  if (name == "reject") return SpecMode::kReject;
  if (name == "coupled") return SpecMode::kCoupled;
  return absl::InvalidArgumentError(
      absl::StrCat("--spec-mode must be greedy, reject or coupled, got \"", name, "\""));
}

const char* SpecModeName(SpecMode m) {
  switch (m) {
    case SpecMode::kGreedy: return "greedy";
    case SpecMode::kReject: return "reject";
    case SpecMode::kCoupled: return "coupled";
  }
  return "?";
}

absl::Status CheckVocabIdentity(const models::Model& target, const models::Model& draft) {
  const gguf::Value* a = Tokens(target);
  const gguf::Value* b = Tokens(draft);
  if (a == nullptr || b == nullptr) {
    return absl::InvalidArgumentError(
        "target and draft must both carry tokenizer.ggml.tokens to check that they share a vocabulary");
  }
  if (a->arr.size() != b->arr.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the draft's vocabulary has ", b->arr.size(),
                                                   " tokens, the target's ", a->arr.size(),
                                                   "; a draft must share the target's tokenizer"));
  }
  for (size_t i = 0; i < a->arr.size(); ++i) {
    if (a->arr[i].str != b->arr[i].str) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the draft's token ", i, " is \"", b->arr[i].str, "\" but the target's is \"",
          a->arr[i].str, "\"; a draft must share the target's tokenizer"));
    }
  }
  if (draft.config().n_vocab != target.config().n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("the draft's embedding has ", draft.config().n_vocab,
                                                   " rows, the target's ", target.config().n_vocab));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Drafter>> MakeModelDrafter(const models::Model& target,
                                                          std::unique_ptr<models::Model> draft,
                                                          backend::Backend& be) {
  RETURN_IF_ERROR(CheckVocabIdentity(target, *draft));
  return std::unique_ptr<Drafter>(new ModelDrafter(target, std::move(draft), be));
}

}  // namespace lockstep::spec
