// MTP drafting: the target's own MTP / NextN block (engine/models/mtp.h) proposes the next tokens
// from the target's final hidden states (docs/speculative.md, "MTP heads").
//
// Row p of the block reads (t[p+1], H[p]), H the target's output-normed hidden state at p, and
// predicts t[p+2]. With a context of L tokens whose last one (pending) the target has not run
// yet, the block's KV holds rows 0..L-2 computed from the target's true H (the engine hands every
// fed row over: DraftState::ObserveHidden); row L-2 gives the first draft. Draft i > 1 chains the
// block on its own output: row L-2+i is (d_{i-1}, g of the previous row) — vLLM's MTP proposer
// with one MTP layer and llama.cpp's draft-mtp (common/speculative.cpp) do the same. Chained rows
// are dropped from the block's KV at the next proposal, which recomputes them from the target's
// hidden rows once verified.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/mtp.h"
#include "engine/spec/drafter.h"
#include "engine/spec/rejection.h"

namespace lockstep::spec {
namespace {

struct MtpShared {
  std::unique_ptr<models::MtpHead> head;
  std::unique_ptr<models::KvPool> pool;
};

class MtpDraftState : public DraftState {
 public:
  explicit MtpDraftState(MtpShared& shared) : s_(shared), d_(shared.head->n_embd()) {}
  ~MtpDraftState() override { models::ReleaseKv(*s_.pool, kv_); }

  bool WantsHidden() const override { return true; }
  absl::Status ObserveHidden(int64_t start, std::span<const float> rows) override {
    const int64_t n = static_cast<int64_t>(rows.size()) / d_;
    if (start < 0 || start > n_hidden_ || n * d_ != static_cast<int64_t>(rows.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MTP drafter: hidden rows for positions [", start, ", ", start + n, ") after rows [0, ",
          n_hidden_, ") (", rows.size(), " floats of ", d_, " per row)"));
    }
    if (start < base_) {  // rows before the kept window come again: a recompute from `start`
      base_ = start;
      hidden_.clear();
    }
    hidden_.resize((start - base_ + n) * d_);
    std::copy(rows.begin(), rows.end(), hidden_.begin() + (start - base_) * d_);
    n_hidden_ = start + n;
    // A rewritten row invalidates the block's rows from it on (a recompute after preemption).
    n_true_ = std::min(n_true_, start);
    return absl::OkStatus();
  }

  absl::StatusOr<Draft> Propose(const DraftRequest& req) override {
    Draft d;
    const int64_t L = static_cast<int64_t>(req.context.size());
    if (req.k <= 0 || L < 2) return d;  // no target hidden state before the second token
    if (n_hidden_ < L - 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MTP drafter: the context has ", L, " tokens but the target's hidden state is known "
          "for positions [0, ", n_hidden_, ") only; it needs [0, ", L - 1, ")"));
    }
    // Keep the rows whose token still agrees with the context, but always recompute row L-2:
    // its logits give the first draft.
    int64_t keep = 0;
    while (keep < n_true_ && keep < L - 2 && fed_[keep] == req.context[keep + 1]) ++keep;
    if (keep < base_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MTP drafter: the context changed at position ", keep + 1, " but the target's hidden "
          "rows before position ", base_, " were not handed over again"));
    }
    models::TruncateKv(*s_.pool, kv_, keep);
    fed_.resize(keep);
    n_true_ = keep;
    std::vector<int32_t> history(req.context.begin(), req.context.end());
    std::vector<float> logits, g;
    const int64_t max_step = s_.head->options().max_step_tokens;
    while (keep < L - 1) {
      const int64_t n = std::min<int64_t>(max_step, L - 1 - keep);
      ASSIGN_OR_RETURN(const bool room, Reserve(keep + n, req.mode));
      if (!room) return d;
      const models::MtpEntry e{std::span<const int32_t>(history).subspan(keep + 1, n),
                               std::span<const float>(hidden_).subspan((keep - base_) * d_,
                                                                       n * d_),
                               keep,
                               kv_.blocks, 1};
      RETURN_IF_ERROR(s_.head->Forward(e, &logits, &g));
      fed_.insert(fed_.end(), history.begin() + keep + 1, history.begin() + keep + 1 + n);
      keep += n;
      kv_.n_tokens = keep;
    }
    n_true_ = L - 1;
    // The block's KV holds rows [0, L-1): only row L-2 on may be fed again (host memory stays
    // O(rows per round), not O(context)).
    hidden_.erase(hidden_.begin(), hidden_.begin() + (L - 2 - base_) * d_);
    base_ = L - 2;
    for (int i = 0; i < req.k; ++i) {
      const uint64_t position = static_cast<uint64_t>(L + i);
      int32_t x;
      if (req.mode == SpecMode::kReject) {
        ASSIGN_OR_RETURN(std::vector<double> q, req.sampler->ProcessedDistribution(logits, history));
        x = SampleFromDistribution(q, req.seed, position, kStreamDraft);
        d.q.push_back(std::move(q));
      } else {
        // Greedy: the sampler's params are greedy. Coupled: the same Gumbel noise as the target.
        ASSIGN_OR_RETURN(sampling::SampledToken st,
                         req.sampler->Sample(logits, req.seed, static_cast<int64_t>(position),
                                             history));
        x = st.token;
      }
      if (x < 0) break;
      d.tokens.push_back(x);
      history.push_back(x);
      if (i + 1 == req.k) break;
      // The chained row: (x, g) at position L - 1 + i.
      const int64_t p = L - 1 + i;
      ASSIGN_OR_RETURN(const bool room, Reserve(p + 1, req.mode));
      if (!room) return d;
      const std::vector<float> g_prev = g;
      const models::MtpEntry e{std::span<const int32_t>(&history.back(), 1), g_prev, p, kv_.blocks,
                               1};
      RETURN_IF_ERROR(s_.head->Forward(e, &logits, &g));
      kv_.n_tokens = p + 1;
    }
    return d;
  }

 private:
  // Room in the block's pool for `n` positions. A full pool ends the draft early (false) in
  // greedy and coupled modes, whose output does not depend on the draft; rejection sampling's
  // bytes do, so there it is an error rather than a silent change of output under load.
  absl::StatusOr<bool> Reserve(int64_t n, SpecMode mode) {
    const absl::Status st = models::ReserveKv(
        *s_.pool, kv_, n, [&](int32_t a, int32_t b) { return s_.head->CopyBlock(a, b); });
    if (absl::IsResourceExhausted(st) && mode != SpecMode::kReject) return false;
    RETURN_IF_ERROR(st);
    return true;
  }

  MtpShared& s_;
  const int64_t d_;
  std::vector<float> hidden_;  // [n_hidden_ - base_, d] the target's H at positions base_..
  int64_t base_ = 0, n_hidden_ = 0;
  int64_t n_true_ = 0;         // the block's KV rows [0, n_true_) come from the target's H
  models::SeqKv kv_;
  std::vector<int32_t> fed_;   // fed_[p] = the token of row p (t[p+1]), rows [0, n_true_)
};

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(MtpShared shared) : s_(std::move(shared)) {}
  std::string name() const override { return "mtp"; }
  absl::StatusOr<std::unique_ptr<DraftState>> Start() override {
    return std::unique_ptr<DraftState>(new MtpDraftState(s_));
  }

 private:
  MtpShared s_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Drafter>> MakeMtpDrafter(const models::Model& target,
                                                        backend::Backend& be,
                                                        int64_t pool_tokens) {
  const models::Config& c = target.config();
  if (c.n_nextn < 1) {
    const gguf::Value* name = target.file().Find("general.name");
    return absl::FailedPreconditionError(absl::StrCat(
        "--draft self: the target model", name != nullptr ? absl::StrCat(" \"", name->str, "\"") : "",
        " (", c.arch, ") has no MTP block (no ", c.arch,
        ".nextn_predict_layers key, no blk.N.nextn.* tensors) to draft with"));
  }
  if (c.n_nextn != 1) {
    return absl::UnimplementedError(absl::StrCat(
        c.arch, ".nextn_predict_layers is ", c.n_nextn, "; the MTP drafter runs one MTP block"));
  }
  MtpShared s;
  models::MtpOptions o;
  o.max_step_tokens = 64;
  o.block_size = 16;
  o.n_blocks = std::max<int64_t>(1, (pool_tokens + o.block_size - 1) / o.block_size);
  ASSIGN_OR_RETURN(s.head, models::MtpHead::Create(target, be, o));
  s.pool = std::make_unique<models::KvPool>(o.n_blocks, o.block_size);
  return std::unique_ptr<Drafter>(new MtpDrafter(std::move(s)));
}

}  // namespace lockstep::spec
