// Prompt-lookup drafting: no model, just the context. Cheap, and strong on repetitive output
// (code, quoting the prompt).
#include <algorithm>

#include "engine/spec/drafter.h"

namespace lockstep::spec {
namespace {

class NgramState : public DraftState {
 public:
  NgramState(int64_t n_vocab, int max_n, int min_n)
      : n_vocab_(n_vocab), max_n_(max_n), min_n_(min_n) {}

  absl::StatusOr<Draft> Propose(const DraftRequest& req) override {
    Draft d;
    const auto& ctx = req.context;
    const int64_t len = static_cast<int64_t>(ctx.size());
    for (int n = max_n_; n >= min_n_ && d.tokens.empty(); --n) {
      if (len <= n) continue;
      // Most recent earlier occurrence of ctx[len-n, len).
      for (int64_t start = len - n - 1; start >= 0; --start) {
        if (!std::equal(ctx.begin() + start, ctx.begin() + start + n, ctx.end() - n)) continue;
        for (int64_t j = start + n; j < len && static_cast<int>(d.tokens.size()) < req.k; ++j) {
          d.tokens.push_back(ctx[j]);
        }
        break;
      }
    }
    if (req.mode == SpecMode::kReject) {
      // A deterministic proposal: its law is one-hot on the proposed token.
      for (int32_t t : d.tokens) {
        d.q.emplace_back(n_vocab_, 0.0);
        d.q.back()[t] = 1.0;
      }
    }
    return d;
  }

 private:
  int64_t n_vocab_;
  int max_n_, min_n_;
};

// Stateless between rounds: every sequence gets a fresh NgramState.
class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t n_vocab, int max_n, int min_n)
      : n_vocab_(n_vocab), max_n_(max_n), min_n_(min_n) {}
  std::string name() const override { return "ngram"; }
  absl::StatusOr<std::unique_ptr<DraftState>> Start() override {
    return std::unique_ptr<DraftState>(new NgramState(n_vocab_, max_n_, min_n_));
  }

 private:
  int64_t n_vocab_;
  int max_n_, min_n_;
};

}  // namespace

std::unique_ptr<Drafter> MakeNgramDrafter(int64_t n_vocab, int max_n, int min_n) {
  return std::make_unique<NgramDrafter>(n_vocab, max_n, min_n);
}

}  // namespace lockstep::spec
