#include "engine/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/spec/rejection.h"

namespace lockstep::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A rejection-sampled token's logprob and alternatives, from the law p it was verified under.
void ReportFromLaw(const std::vector<double>& p, int32_t token, int32_t top, TokenEvent* ev) {
  std::vector<double> logp(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    logp[i] = p[i] > 0 ? std::log(p[i]) : -std::numeric_limits<double>::infinity();
  }
  ev->logprob = logp[token];
  if (top > 0) ev->top_logprobs = sampling::TopLogprobs(logp, top);
}

}  // namespace

// One request's state: its tokens (prompt + generated; the last one is "pending" once prefill
// is done: sampled, not yet in the KV), its KV blocks, sampler, stop conditions, UTF-8 stream
// and drafter state.
struct Engine::Sequence {
  int64_t id = 0;
  Request req;
  sampling::Sampler sampler;
  sampling::StopConditions stop;
  Utf8Stream utf8;
  std::vector<int32_t> tokens;
  int64_t n_prompt = 0;
  models::SeqKv kv;               // kv.n_tokens == tokens whose K/V are cached
  int32_t lane = -1;              // hybrid models: its recurrent-state lane while running
  std::unique_ptr<spec::DraftState> draft_state;
  int k = 0;                      // the current draft length (adaptive)
  std::vector<int32_t> draft;     // this step's proposal
  spec::Draft draft_full;         // with q for reject mode
  RequestResult result;
  bool admitted_once = false;
  Clock::time_point t_start, t_first;
  bool has_first = false;

  Sequence(Request r, sampling::Sampler s, const sampling::SamplingParams& stop_params)
      : req(std::move(r)), sampler(std::move(s)), stop(stop_params) {}
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
};

absl::Status EngineOptions::Validate() const {
  auto positive = [](const char* name, int64_t v) -> absl::Status {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 1, got ", v));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive("max_step_tokens", max_step_tokens));
  RETURN_IF_ERROR(positive("max_running", max_running));
  RETURN_IF_ERROR(positive("--kv-block", block_size));
  if (ctx < 0) return absl::InvalidArgumentError(absl::StrCat("--ctx must be >= 0, got ", ctx));
  if (kv_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-mb must be >= 0, got ", kv_bytes));
  }
  if (max_spec_k < 1 || max_spec_k > 64) {
    return absl::InvalidArgumentError(absl::StrCat("max_spec_k must be in [1, 64], got ", max_spec_k));
  }
  if (max_step_tokens < max_spec_k + 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_step_tokens (", max_step_tokens,
                                                   ") must hold a verify row of K + 1 = ",
                                                   max_spec_k + 1, " tokens"));
  }
  return absl::OkStatus();
}

Engine::Engine(const models::Model& model, const tokenizer::Tokenizer& tok, backend::Backend& be,
               const EngineOptions& options)
    : model_(model), tok_(tok), be_(be), options_(options) {}

Engine::~Engine() {
  // Sequences and caches hand their blocks back before the pool goes.
  waiting_.clear();
  running_.clear();
  ClearCaches();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const models::Model& model,
                                                       const tokenizer::Tokenizer& tok,
                                                       backend::Backend& be,
                                                       const EngineOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  const models::Config& c = model.config();
  EngineOptions o = options;
  if (o.ctx == 0) o.ctx = c.n_ctx_train > 0 ? std::min<int64_t>(c.n_ctx_train, 8192) : 8192;
  if (c.n_ctx_train > 0 && o.ctx > c.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrCat("--ctx ", o.ctx,
                                                   " exceeds the model's context length ",
                                                   c.n_ctx_train));
  }
  RETURN_IF_ERROR(models::CheckKvFormats(c, o.k_format, o.v_format));
  const int64_t block_bytes = models::KvBlockBytes(c, o.k_format, o.v_format, o.block_size);
  if (o.kv_bytes == 0) {
    o.kv_bytes = std::min<int64_t>(int64_t{1} << 30,
                                   block_bytes * o.max_running * CeilDiv(o.ctx, o.block_size));
  }
  const int64_t n_blocks = o.kv_bytes / block_bytes;
  const int64_t need_one = CeilDiv(o.ctx, o.block_size);
  if (n_blocks < need_one) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the KV budget of ", o.kv_bytes, " bytes holds ", n_blocks, " blocks of ", o.block_size,
        " tokens (", block_bytes, " bytes each); one context of ", o.ctx, " tokens needs ",
        need_one, " blocks (", need_one * block_bytes, " bytes): raise --kv-mb or lower --ctx"));
  }
  const bool hybrid = c.gdn.present();
  if (hybrid && o.prefix_cache_bytes > 0) {
    // A cached prefix would need the recurrent state at its end too (docs/models.md).
    return absl::UnimplementedError(absl::StrCat(
        c.arch, " has recurrent (Gated DeltaNet) layers: the prefix cache does not hold their "
                "state yet; turn it off (prefix_cache_bytes / --prefix-cache-mb 0)"));
  }
  std::unique_ptr<Engine> e(new Engine(model, tok, be, o));
  models::RunnerOptions ro;
  ro.max_step_tokens = o.max_step_tokens;
  ro.max_logit_rows = std::min<int64_t>(o.max_step_tokens, o.max_running * (o.max_spec_k + 1));
  ro.k_format = o.k_format;
  ro.v_format = o.v_format;
  ro.block_size = o.block_size;
  ro.n_blocks = n_blocks;
  ro.split = o.pp_split;
  ro.link = o.pp_link;
  ro.micro_batches = o.pp_micro_batches;
  ro.timeout_ms = o.pp_timeout_ms;
  if (hybrid) {
    e->states_ = std::make_unique<models::StatePool>(o.max_running, o.max_spec_k);
    ro.n_state_slots = e->states_->n_slots();
  }
  ASSIGN_OR_RETURN(e->runner_, models::Runner::Create(model, be, ro));
  e->pool_ = std::make_unique<models::KvPool>(n_blocks, o.block_size);
  const uint64_t salt = (static_cast<uint64_t>(o.k_format) << 8) | static_cast<uint64_t>(o.v_format);
  e->prefix_ = std::make_unique<PrefixCache>(*e->pool_, o.prefix_cache_bytes / block_bytes, salt);
  return e;
}

absl::StatusOr<int64_t> Engine::Submit(Request r) {
  const models::Config& c = model_.config();
  if (r.prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  RETURN_IF_ERROR(r.params.ValidateForVocab(static_cast<int32_t>(c.n_vocab)));
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= c.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token #", i, " is ", r.prompt[i],
                                                     ", outside [0, ", c.n_vocab, ")"));
    }
  }
  if (r.drafter != nullptr) {
    RETURN_IF_ERROR(r.spec.Validate(r.params.greedy()));
    if (r.spec.k > options_.max_spec_k) {
      return absl::InvalidArgumentError(absl::StrCat("--spec-k ", r.spec.k,
                                                     " exceeds this engine's maximum K ",
                                                     options_.max_spec_k));
    }
  }
  if (states_ != nullptr && !r.session.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "request field session (\"", r.session, "\"): ", c.arch, " has recurrent layers, whose "
        "state parked sessions do not hold yet"));
  }
  // One rule for every mode: the prompt and every token it may generate fit the context.
  const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.params.max_tokens;
  if (need > options_.ctx) {
    return absl::OutOfRangeError(absl::StrCat("prompt (", r.prompt.size(), " tokens) + max_tokens (",
                                              r.params.max_tokens, ") = ", need,
                                              " exceeds the context length ", options_.ctx));
  }
  if (CeilDiv(need, options_.block_size) > pool_->n_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the request needs ", CeilDiv(need, options_.block_size), " KV blocks (", need,
        " tokens); the whole pool has ", pool_->n_blocks()));
  }
  ASSIGN_OR_RETURN(sampling::Sampler sampler, sampling::Sampler::Create(r.params));
  sampling::SamplingParams stop_params = r.params;
  if (!r.ignore_eos) {
    for (int32_t id : tok_.eot_ids()) stop_params.stop_token_ids.push_back(id);
  }
  auto s = std::make_unique<Sequence>(std::move(r), std::move(sampler), stop_params);
  s->id = next_id_++;
  s->tokens = s->req.prompt;
  s->n_prompt = static_cast<int64_t>(s->tokens.size());
  s->k = s->req.spec.k;
  s->result.id = s->id;
  s->result.gen.prompt_tokens = s->n_prompt;
  if (s->req.drafter != nullptr) {
    ASSIGN_OR_RETURN(s->draft_state, s->req.drafter->Start());
    s->result.stats.proposed_at.assign(s->req.spec.k, 0);
    s->result.stats.accepted_at.assign(s->req.spec.k, 0);
  }
  s->t_start = Clock::now();
  const int64_t id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

// First admission: take a parked session or cached prefix blocks, so only the rest is computed.
absl::Status Engine::Admit(Sequence& s) {
  if (s.admitted_once) return absl::OkStatus();
  s.admitted_once = true;
  const std::span<const int32_t> reusable(s.tokens.data(), s.tokens.size() - 1);
  if (!s.req.session.empty()) {
    auto it = sessions_.find(s.req.session);
    if (it != sessions_.end()) {
      Parked& p = it->second;
      if (p.tokens.size() <= reusable.size() &&
          std::equal(p.tokens.begin(), p.tokens.end(), reusable.begin())) {
        s.kv = std::move(p.kv);
        ++stats_.session_resumes;
      } else {
        models::ReleaseKv(*pool_, p.kv);  // the conversation changed: start it cold
      }
      sessions_.erase(it);
      if (s.kv.n_tokens > 0) return absl::OkStatus();
    }
  }
  std::vector<int32_t> hit = prefix_->Lookup(reusable);
  if (hit.empty()) {
    ++stats_.prefix_misses;
  } else {
    ++stats_.prefix_hits;
    stats_.prefix_hit_tokens += static_cast<int64_t>(hit.size()) * options_.block_size;
    s.kv.blocks = std::move(hit);
    s.kv.n_tokens = static_cast<int64_t>(s.kv.blocks.size()) * options_.block_size;
  }
  return absl::OkStatus();
}

bool Engine::EvictOneCached() {
  if (prefix_->EvictOne()) return true;
  // The least recently parked session.
  auto victim = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (victim == sessions_.end() || it->second.tick < victim->second.tick) victim = it;
  }
  if (victim == sessions_.end()) return false;
  models::ReleaseKv(*pool_, victim->second.kv);
  sessions_.erase(victim);
  return true;
}

void Engine::PreemptSeq(Sequence& s) {
  // Recompute later: the tokens stay (prompt + generated), the KV goes. The next prefill runs
  // over all of them, and by chunk invariance yields the same bits as the KV it replaces.
  models::ReleaseKv(*pool_, s.kv);
  ReleaseLane(s);  // the recompute starts from position 0, whose state is zeros
  s.admitted_once = false;
  ++s.result.preemptions;
  ++stats_.preemptions;
}

bool Engine::Preempt(int64_t id) {
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id != id) continue;
    PreemptSeq(**it);
    waiting_.push_front(std::move(*it));
    running_.erase(it);
    return true;
  }
  return false;
}

absl::Status Engine::ReserveOrMakeRoom(Sequence& s, int64_t n_total) {
  auto copy = [&](int32_t a, int32_t b) { return runner_->CopyBlock(a, b); };
  while (true) {
    const absl::Status st = models::ReserveKv(*pool_, s.kv, n_total, copy);
    if (!absl::IsResourceExhausted(st)) return st;
    if (EvictOneCached()) continue;
    // Preempt the most recently admitted running sequence admitted after s (those before it
    // are already planned into this step).
    if (running_.empty() || running_.back().get() == &s) return st;  // s does not fit now
    Preempt(running_.back()->id);
  }
}

void Engine::Cancel(int64_t id) {
  auto finish = [&](std::unique_ptr<Sequence>& s) {
    models::ReleaseKv(*pool_, s->kv);
    ReleaseLane(*s);
    s->result.cancelled = true;
    s->result.gen.tokens.assign(s->tokens.begin() + s->n_prompt, s->tokens.end());
    finished_.push_back(std::move(s->result));
  };
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == id) {
      finish(*it);
      waiting_.erase(it);
      return;
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id == id) {
      finish(*it);
      running_.erase(it);
      return;
    }
  }
}

void Engine::ParkSession(Sequence& s) {
  if (s.req.session.empty() || options_.max_sessions <= 0) return;
  auto old = sessions_.find(s.req.session);
  if (old != sessions_.end()) {
    models::ReleaseKv(*pool_, old->second.kv);
    sessions_.erase(old);
  }
  while (static_cast<int64_t>(sessions_.size()) >= options_.max_sessions) {
    auto victim = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.tick < victim->second.tick) victim = it;
    }
    models::ReleaseKv(*pool_, victim->second.kv);
    sessions_.erase(victim);
  }
  Parked p;
  p.tokens.assign(s.tokens.begin(), s.tokens.begin() + s.kv.n_tokens);
  p.kv = std::move(s.kv);
  s.kv = {};
  p.tick = ++tick_;
  sessions_.emplace(s.req.session, std::move(p));
}

void Engine::Finish(Sequence& s, std::vector<RequestResult>* out) {
  GenerateResult& g = s.result.gen;
  if (g.finish == sampling::FinishReason::kMaxTokens) {
    const std::string rest = s.utf8.Flush();
    g.text += rest;
    if (!rest.empty() && s.req.on_text) s.req.on_text(rest);
  }
  g.tokens.assign(s.tokens.begin() + s.n_prompt, s.tokens.end());
  const Clock::time_point now = Clock::now();
  g.decode_seconds = s.has_first ? Seconds(s.t_first, now) : 0.0;
  prefix_->Insert(std::span<const int32_t>(s.tokens.data(), s.kv.n_tokens), s.kv.blocks);
  ParkSession(s);
  models::ReleaseKv(*pool_, s.kv);
  ReleaseLane(s);
  s.draft_state.reset();
  out->push_back(std::move(s.result));
}

// Samples or verifies the rows of one sequence. logits: [1 + n_draft, n_vocab], row i for
// position base + 1 + i where base is the pending token's position. Appends what is emitted.
bool Engine::Logprobs(const Sequence& s) { return s.req.on_token && s.req.logprobs; }

bool Engine::BackendGreedy(const Sequence& s) const {
  return options_.backend_greedy && s.req.drafter == nullptr && !Logprobs(s) && !options_.on_step_logits &&
         sampling::PlainGreedy(s.req.params) && runner_->SupportsGreedy();
}

absl::Status Engine::Verify(Sequence& s, std::span<const float> logits, int n_draft,
                            std::span<const int32_t> greedy) {
  const int64_t n_vocab = model_.config().n_vocab;
  const int64_t base = static_cast<int64_t>(s.tokens.size()) - 1;
  spec::SpecStats& st = s.result.stats;
  GenerateResult& g = s.result.gen;
  if (s.req.drafter != nullptr) {
    ++st.rounds;
    ++st.target_forwards;
  }
  int accepted = 0;
  for (int i = 0; i <= n_draft; ++i) {
    const int64_t position = base + 1 + i;
    int32_t token;
    bool draft_accepted = false;
    TokenEvent ev;
    if (!greedy.empty()) {
      // Picked on the backend from this row (BackendGreedy: no drafter, so n_draft is 0):
      // PlainGreedyToken's token.
      token = greedy[i];
    } else if (s.req.spec.mode == spec::SpecMode::kReject && i < n_draft) {
      const std::span<const float> row = logits.subspan(i * n_vocab, n_vocab);
      ASSIGN_OR_RETURN(std::vector<double> p, s.sampler.ProcessedDistribution(row, s.tokens));
      const spec::Verdict v =
          spec::VerifyDraftToken(p, s.draft_full.q[i], s.draft[i], s.req.seed, position);
      token = v.token;
      draft_accepted = v.accepted;
      if (Logprobs(s)) ReportFromLaw(p, token, s.req.params.top_logprobs, &ev);
    } else {
      const std::span<const float> row = logits.subspan(i * n_vocab, n_vocab);
      // Plain decode, greedy, coupled, and every bonus token: exactly plain decode's draw.
      // The log-softmax over the vocabulary is only for a request that asked for logprobs: at
      // c = 64 on a 128k vocabulary it was most of the step's host time (docs/performance.md).
      ASSIGN_OR_RETURN(sampling::SampledToken t,
                       s.sampler.Sample(row, s.req.seed, position, s.tokens, Logprobs(s)));
      token = t.token;
      draft_accepted = i < n_draft && token == s.draft[i];
      ev.logprob = t.logprob;
      ev.top_logprobs = std::move(t.top_logprobs);
    }
    if (i < n_draft) {
      ++st.proposed_at[i];
      ++st.drafted;
    }
    s.tokens.push_back(token);
    if (draft_accepted) {
      ++st.accepted_at[i];
      ++st.accepted;
      ++accepted;
    }
    if (!s.has_first) {
      s.has_first = true;
      s.t_first = Clock::now();
      g.prefill_seconds = Seconds(s.t_start, s.t_first);
    }
    ASSIGN_OR_RETURN(std::string_view raw, tok_.TokenPiece(token));
    sampling::StopConditions::Step step = s.stop.OnToken(token, s.utf8.Push(raw));
    if (!step.emit.empty()) {
      g.text += step.emit;
      if (s.req.on_text) s.req.on_text(step.emit);
    }
    if (s.req.on_token) {
      ev.token = token;
      ev.position = position;
      ev.drafted = i < n_draft;
      ev.accepted = draft_accepted;
      ev.stops = step.finish == sampling::FinishReason::kStopToken;
      ev.text = step.emit;
      s.req.on_token(ev);
    }
    if (step.finish != sampling::FinishReason::kNone) {
      g.finish = step.finish;
      break;
    }
    if (!draft_accepted) break;
  }
  // Roll back: keep the pending token and the accepted drafts; the last emitted token is the
  // new pending one.
  models::TruncateKv(*pool_, s.kv, base + 1 + accepted);
  if (s.lane >= 0 && accepted < n_draft) {
    // The recurrent state ran over every draft token; the checkpoint after fed token `accepted`
    // (the pending token is fed token 0) is the state at the last kept position.
    RETURN_IF_ERROR(runner_->CopyState(states_->CheckpointSlot(s.lane, accepted),
                                       states_->StateSlot(s.lane)));
  }
  if (s.req.drafter != nullptr && s.req.spec.adaptive) {
    s.k = (accepted == n_draft) ? std::min(s.k + 1, s.req.spec.k) : std::max(1, accepted + 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RequestResult>> Engine::Step() {
  std::vector<RequestResult> out;
  // Admission: the running set grows from the head of the queue.
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running) {
    RETURN_IF_ERROR(Admit(*waiting_.front()));
    if (states_ != nullptr) {
      // max_running lanes: one is free whenever the running set has room.
      ASSIGN_OR_RETURN(waiting_.front()->lane, states_->Allocate());
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (running_.empty()) return out;

  // Plan: each running sequence feeds tokens[kv.n_tokens ..] (a prefill chunk, or the pending
  // token) plus, once only the pending token is left, a draft to verify.
  struct Planned {
    Sequence* s;
    int64_t start, n_feed;  // tokens[start, start + n_feed) are fed
    std::vector<int32_t> fed;
    int n_draft;
  };
  std::vector<Planned> plan;
  int64_t budget = options_.max_step_tokens;
  for (auto it = running_.begin(); it != running_.end() && budget > 0;) {
    Sequence& s = **it;
    const int64_t start = s.kv.n_tokens;
    const int64_t left = static_cast<int64_t>(s.tokens.size()) - start;
    int64_t n_feed = std::min(left, budget);
    s.draft.clear();
    s.draft_full = {};
    if (s.req.drafter != nullptr && left > 1) {
      // A speculative sequence prefills (or recomputes) everything but its pending token, so
      // that every token it emits comes out of a verify round whose draft does not depend on
      // the step budget, the neighbours or a preemption: rejection sampling's bytes depend on
      // the draft (its law does not), so the draft must be a function of the request alone.
      n_feed = std::min(left - 1, budget);
    } else if (s.req.drafter != nullptr) {
      // Never draft past max_tokens: the bonus token is the last one a round may add.
      const int64_t room = s.req.params.max_tokens - s.generated() - 1;
      const int k = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(s.k, room)));
      if (1 + k > budget) break;  // the whole round waits for the next step, never a shorter draft
      if (k > 0) {
        ASSIGN_OR_RETURN(s.draft_full, s.draft_state->Propose(
                                           {s.tokens, k, s.req.spec.mode, &s.sampler, s.req.seed}));
        s.draft = s.draft_full.tokens;
      }
    }
    const int64_t total = start + n_feed + static_cast<int64_t>(s.draft.size());
    const absl::Status reserved = ReserveOrMakeRoom(s, total);
    if (absl::IsResourceExhausted(reserved)) {
      // Not even s fits with everything else preempted: it waits at the head of the queue.
      Preempt(s.id);
      break;
    }
    RETURN_IF_ERROR(reserved);
    Planned p{&s, start, n_feed, {}, static_cast<int>(s.draft.size())};
    p.fed.assign(s.tokens.begin() + start, s.tokens.begin() + start + n_feed);
    p.fed.insert(p.fed.end(), s.draft.begin(), s.draft.end());
    budget -= static_cast<int64_t>(p.fed.size());
    plan.push_back(std::move(p));
    ++it;
  }
  if (plan.empty()) return out;

  std::vector<models::StepEntry> entries;
  std::vector<std::vector<int32_t>> checkpoints(plan.size());
  std::vector<std::vector<float>> hidden(plan.size());  // MTP drafters: the fed rows' hidden state
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    const bool reaches_end = p.start + p.n_feed == static_cast<int64_t>(p.s->tokens.size());
    entries.push_back({p.fed, p.start, p.s->kv.blocks, reaches_end ? 1 + p.n_draft : 0});
    entries.back().greedy = BackendGreedy(*p.s);
    if (p.s->draft_state != nullptr && p.s->draft_state->WantsHidden()) {
      entries.back().hidden = &hidden[i];
    }
    if (p.s->lane >= 0) {
      entries.back().state_slot = states_->StateSlot(p.s->lane);
      if (p.n_draft > 0) {
        // The state after each fed token but the last (which the live slot keeps).
        std::vector<int32_t>& c = checkpoints[i];
        c.assign(p.fed.size(), -1);
        for (int j = 0; j < p.n_draft; ++j) {
          c[p.fed.size() - 1 - p.n_draft + j] = states_->CheckpointSlot(p.s->lane, j);
        }
        entries.back().state_checkpoints = c;
      }
    }
  }
  std::vector<float> logits;
  std::vector<int32_t> greedy;
  RETURN_IF_ERROR(runner_->Forward(entries, &logits, nullptr, &greedy));
  if (options_.on_step_logits) options_.on_step_logits(logits);
  ++stats_.steps;

  const int64_t n_vocab = model_.config().n_vocab;
  int64_t row = 0, greedy_row = 0;  // into logits (rows of n_vocab) and greedy
  for (size_t i = 0; i < plan.size(); ++i) {
    Planned& p = plan[i];
    Sequence& s = *p.s;
    s.kv.n_tokens = p.start + static_cast<int64_t>(p.fed.size());
    s.result.prefill_computed += std::max<int64_t>(0, std::min(p.start + p.n_feed, s.n_prompt) - p.start);
    if (entries[i].hidden != nullptr) {
      RETURN_IF_ERROR(s.draft_state->ObserveHidden(p.start, hidden[i]));
    }
    const int64_t n_rows = entries[i].n_logits;
    if (n_rows == 0) continue;
    if (entries[i].greedy) {
      RETURN_IF_ERROR(Verify(s, {}, p.n_draft, std::span<const int32_t>(greedy).subspan(greedy_row, n_rows)));
      greedy_row += n_rows;
      continue;
    }
    RETURN_IF_ERROR(Verify(s, std::span<const float>(logits).subspan(row * n_vocab, n_rows * n_vocab),
                           p.n_draft));
    row += n_rows;
  }
  // Finished sequences leave the running set.
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->result.gen.finish != sampling::FinishReason::kNone) {
      Finish(**it, &out);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

absl::StatusOr<RequestResult> Engine::Run(Request r) {
  ASSIGN_OR_RETURN(const int64_t id, Submit(std::move(r)));
  while (true) {
    ASSIGN_OR_RETURN(std::vector<RequestResult> done, Step());
    std::optional<RequestResult> mine;
    for (RequestResult& d : done) {
      if (d.id == id) {
        mine = std::move(d);
      } else {
        finished_.push_back(std::move(d));
      }
    }
    if (mine) return std::move(*mine);
    for (auto it = finished_.begin(); it != finished_.end(); ++it) {
      if (it->id == id) {  // cancelled meanwhile
        RequestResult res = std::move(*it);
        finished_.erase(it);
        return res;
      }
    }
    if (Idle()) return absl::InternalError(absl::StrCat("request ", id, " vanished"));
  }
}

bool Engine::AllDecoding() const {
  if (!waiting_.empty()) return false;
  for (const auto& s : running_) {
    if (s->generated() < 1) return false;
  }
  return true;
}

std::vector<RequestResult> Engine::TakeFinished() {
  std::vector<RequestResult> out;
  out.swap(finished_);
  return out;
}

void Engine::ReleaseLane(Sequence& s) {
  if (states_ != nullptr && s.lane >= 0) states_->Free(s.lane);
  s.lane = -1;
}

void Engine::ClearCaches() {
  for (auto& [id, p] : sessions_) models::ReleaseKv(*pool_, p.kv);
  sessions_.clear();
  if (prefix_) prefix_->Clear();
}

}  // namespace lockstep::runtime
