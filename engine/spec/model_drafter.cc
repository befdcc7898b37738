// Draft-model drafting: a smaller model with the target's vocabulary runs autoregressively on
// its own paged KV (one pool shared by the sequences it drafts for), rolled back to the longest
// prefix it shares with the context. Its runner returns full-vocabulary logits, so a trimmed
// head (FR-Spec) can only propose its kept tokens.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/spec/drafter.h"
#include "engine/spec/rejection.h"

namespace lockstep::spec {
namespace {

const gguf::Value* Tokens(const models::Model& m) { return m.file().Find("tokenizer.ggml.tokens"); }

// What every sequence's drafting state shares: the draft model on its runner and one KV pool.
struct DraftShared {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<models::Runner> runner;
  std::unique_ptr<models::KvPool> pool;
};

class ModelDraftState : public DraftState {
 public:
  explicit ModelDraftState(DraftShared& shared) : s_(shared) {}
  ~ModelDraftState() override { models::ReleaseKv(*s_.pool, kv_); }

  absl::StatusOr<Draft> Propose(const DraftRequest& req) override {
    Draft d;
    if (req.k <= 0 || req.context.empty()) return d;
    const int64_t len = static_cast<int64_t>(req.context.size());
    // Keep the cached prefix the context still agrees with, but always re-feed the last token
    // so that its logits are fresh.
    int64_t keep = 0;
    while (keep < static_cast<int64_t>(fed_.size()) && keep < len - 1 &&
           fed_[keep] == req.context[keep]) {
      ++keep;
    }
    models::TruncateKv(*s_.pool, kv_, keep);
    fed_.resize(keep);
    std::vector<int32_t> history(req.context.begin(), req.context.end());
    std::vector<float> logits;
    const int64_t max_step = s_.runner->options().max_step_tokens;
    for (int i = 0; i < req.k; ++i) {
      // Feed history[fed_.size(), len + i) in chunks of at most max_step tokens.
      while (static_cast<int64_t>(fed_.size()) < static_cast<int64_t>(history.size())) {
        const int64_t start = static_cast<int64_t>(fed_.size());
        const int64_t n = std::min<int64_t>(max_step, static_cast<int64_t>(history.size()) - start);
        const absl::Status reserved = models::ReserveKv(
            *s_.pool, kv_, start + n,
            [&](int32_t a, int32_t b) { return s_.runner->CopyBlock(a, b); });
        // A full draft pool ends this draft early in greedy and coupled modes, whose output
        // does not depend on the draft. Rejection sampling's bytes do, so there it is an error
        // rather than a silent change of output under load.
        if (absl::IsResourceExhausted(reserved) && req.mode != SpecMode::kReject) return d;
        RETURN_IF_ERROR(reserved);
        const bool last = start + n == static_cast<int64_t>(history.size());
        models::StepEntry e{std::span<const int32_t>(history).subspan(start, n), start, kv_.blocks,
                            last ? 1 : 0};
        RETURN_IF_ERROR(s_.runner->Forward(std::span(&e, 1), &logits));
        kv_.n_tokens = start + n;
        fed_.insert(fed_.end(), history.begin() + start, history.begin() + start + n);
      }
      const uint64_t position = static_cast<uint64_t>(len + i);
      int32_t x;
      if (req.mode == SpecMode::kReject) {
        ASSIGN_OR_RETURN(std::vector<double> q, req.sampler->ProcessedDistribution(logits, history));
        x = SampleFromDistribution(q, req.seed, position, kStreamDraft);
        d.q.push_back(std::move(q));
      } else {
        // Greedy: the sampler's params are greedy. Coupled: the same Gumbel noise as the target.
        ASSIGN_OR_RETURN(sampling::SampledToken st,
                         req.sampler->Sample(logits, req.seed, static_cast<int64_t>(position), history));
        x = st.token;
      }
      if (x < 0) break;
      d.tokens.push_back(x);
      history.push_back(x);
    }
    return d;
  }

 private:
  DraftShared& s_;
  models::SeqKv kv_;
  std::vector<int32_t> fed_;  // tokens whose K/V are in kv_ (positions 0..kv_.n_tokens-1)
};

class ModelDrafter : public Drafter {
 public:
  explicit ModelDrafter(DraftShared shared) : s_(std::move(shared)) {}
  std::string name() const override { return "draft-model"; }
  absl::StatusOr<std::unique_ptr<DraftState>> Start() override {
    return std::unique_ptr<DraftState>(new ModelDraftState(s_));
  }

 private:
  DraftShared s_;
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
                                                          backend::Backend& be,
                                                          int64_t pool_tokens) {
  RETURN_IF_ERROR(CheckVocabIdentity(target, *draft));
  DraftShared s;
  models::RunnerOptions o;
  o.max_step_tokens = 128;
  o.max_logit_rows = 1;
  o.block_size = 16;
  o.n_blocks = std::max<int64_t>(1, (pool_tokens + o.block_size - 1) / o.block_size);
  ASSIGN_OR_RETURN(s.runner, models::Runner::Create(*draft, be, o));
  s.pool = std::make_unique<models::KvPool>(o.n_blocks, o.block_size);
  s.model = std::move(draft);
  return std::unique_ptr<Drafter>(new ModelDrafter(std::move(s)));
}

absl::Status SpecOptions::Validate(bool greedy_params) const {
  if (k < 1 || k > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--spec-k must be in [1, 64], got ", k));
  }
  if (mode == SpecMode::kGreedy && !greedy_params) {
    return absl::InvalidArgumentError(
        "--spec-mode greedy needs temperature 0; use --spec-mode coupled or reject for sampled "
        "decoding");
  }
  return absl::OkStatus();
}

SpecMode DefaultSpecMode(bool greedy_params) {
  return greedy_params ? SpecMode::kGreedy : SpecMode::kCoupled;
}

}  // namespace lockstep::spec

namespace lockstep::spec {

absl::StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const models::Model& target,
                                                     backend::Backend& be, const std::string& draft,
                                                     int64_t pool_tokens) {
  if (draft == "ngram") return MakeNgramDrafter(target.config().n_vocab);
  if (draft == "self") return MakeMtpDrafter(target, be, pool_tokens);
  auto model = models::Model::Load(draft);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("draft model ", draft, ": ", model.status().message()));
  }
  return MakeModelDrafter(target, std::move(*model), be, pool_tokens);
}

}  // namespace lockstep::spec
