#include "engine/spec/speculative.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/spec/rejection.h"

namespace lockstep::spec {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

absl::StatusOr<SpecResult> GenerateSpeculative(
    const models::Model& target, backend::Backend& be, const tokenizer::Tokenizer& tok,
    Drafter& drafter, const std::vector<int32_t>& prompt, const sampling::SamplingParams& params,
    uint64_t seed, const SpecOptions& options,
    const std::function<void(std::string_view)>& on_text) {
  const models::Config& c = target.config();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (options.k < 1 || options.k > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--spec-k must be in [1, 64], got ", options.k));
  }
  if (options.mode == SpecMode::kGreedy && !params.greedy()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--spec-mode greedy needs temperature 0 (got ", params.temperature,
        "); use --spec-mode coupled or reject for sampled decoding"));
  }
  RETURN_IF_ERROR(params.ValidateForVocab(static_cast<int32_t>(c.n_vocab)));
  ASSIGN_OR_RETURN(sampling::Sampler sampler, sampling::Sampler::Create(params));
  sampling::SamplingParams stop_params = params;
  for (int32_t id : tok.eot_ids()) stop_params.stop_token_ids.push_back(id);
  sampling::StopConditions stop(stop_params);

  const int64_t capacity = static_cast<int64_t>(prompt.size()) + params.max_tokens + options.k + 1;
  models::KvCache cache(c, capacity);
  SpecResult out;
  runtime::GenerateResult& r = out.gen;
  SpecStats& st = out.stats;
  st.proposed_at.assign(options.k, 0);
  st.accepted_at.assign(options.k, 0);
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> history = prompt;  // prompt + emitted; what penalties and drafters see
  runtime::Utf8Stream utf8;
  std::vector<float> logits;

  // The target cache holds every token of `history` but the last ("pending"), whose logits
  // the next round needs. Prefill all of the prompt but its last token first.
  auto t0 = std::chrono::steady_clock::now();
  if (prompt.size() > 1) {
    models::BatchEntry e{&cache, std::span<const int32_t>(prompt).first(prompt.size() - 1)};
    RETURN_IF_ERROR(models::Forward(target, be, std::span(&e, 1), false, &logits));
  }
  bool prefill_timed = false;
  int k = options.k;
  bool done = false;
  while (!done) {
    ASSIGN_OR_RETURN(Draft draft, drafter.Propose({history, k, options.mode, &sampler, seed}));
    const int n_draft = static_cast<int>(draft.tokens.size());
    std::vector<int32_t> step;
    step.push_back(history.back());
    step.insert(step.end(), draft.tokens.begin(), draft.tokens.end());
    const int64_t base = cache.n_past;  // position of `pending`
    models::BatchEntry e{&cache, step};
    RETURN_IF_ERROR(models::Forward(target, be, std::span(&e, 1), true, &logits));
    ++st.target_forwards;
    ++st.rounds;
    if (!prefill_timed) {
      auto t1 = std::chrono::steady_clock::now();
      r.prefill_seconds = Seconds(t0, t1);
      t0 = t1;
      prefill_timed = true;
    }
    // Row i holds the target's logits for position base + 1 + i.
    int accepted = 0;
    std::vector<int32_t> emitted;
    for (int i = 0; i <= n_draft; ++i) {
      const std::span<const float> row(logits.data() + i * c.n_vocab, c.n_vocab);
      const int64_t position = base + 1 + i;
      int32_t token;
      bool is_draft_accepted = false;
      if (options.mode == SpecMode::kReject && i < n_draft) {
        ASSIGN_OR_RETURN(std::vector<double> p, sampler.ProcessedDistribution(row, history));
        const Verdict v = VerifyDraftToken(p, draft.q[i], draft.tokens[i], seed, position);
        token = v.token;
        is_draft_accepted = v.accepted;
      } else {
        // Greedy, coupled, and the bonus token of every mode: exactly plain decode's draw.
        ASSIGN_OR_RETURN(sampling::SampledToken s, sampler.Sample(row, seed, position, history));
        token = s.token;
        is_draft_accepted = i < n_draft && token == draft.tokens[i];
      }
      if (i < n_draft) {
        ++st.proposed_at[i];
        ++st.drafted;
      }
      emitted.push_back(token);
      history.push_back(token);
      if (is_draft_accepted) {
        ++st.accepted_at[i];
        ++st.accepted;
        ++accepted;
      }
      // Stream and check stop conditions token by token, exactly as plain decode does.
      r.tokens.push_back(token);
      ASSIGN_OR_RETURN(std::string_view raw, tok.TokenPiece(token));
      sampling::StopConditions::Step s = stop.OnToken(token, utf8.Push(raw));
      if (!s.emit.empty()) {
        r.text += s.emit;
        on_text(s.emit);
      }
      if (s.finish != sampling::FinishReason::kNone) {
        r.finish = s.finish;
        done = true;
        break;
      }
      if (!is_draft_accepted) break;
    }
    // Roll back: keep pending + the accepted drafts; the last emitted token becomes pending.
    cache.n_past = base + 1 + accepted;
    if (options.adaptive) {
      k = (accepted == n_draft) ? std::min(k + 1, options.k) : std::max(1, accepted + 1);
    }
  }
  if (r.finish == sampling::FinishReason::kMaxTokens) {
    const std::string rest = utf8.Flush();
    r.text += rest;
    if (!rest.empty()) on_text(rest);
  }
  r.decode_seconds = Seconds(t0, std::chrono::steady_clock::now());
  return out;
}

}  // namespace lockstep::spec
