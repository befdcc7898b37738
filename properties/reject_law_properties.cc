// Property 3d: `reject` mode is distribution-exact END TO END (DESIGN.md §1, "spec decode,
// sampled"; docs/speculative.md; docs/properties.md, "The end-to-end law of reject mode").
//
// Requests run through the real speculative loop — runtime::Engine::Step with a draft MODEL
// drafter (spec::MakeModelDrafter), K = 1..8 fixed or adaptive, many requests batched together —
// and the law of the emitted token SEQUENCES is compared with the law the target alone defines:
//
//   P(x_1 .. x_m) = prod_t p(x_t | prompt, x_<t),   p = Sampler::ProcessedDistribution of the
//   target's logits row (the law plain sampling draws from), m = where generation stops.
//
// The oracle enumerates that tree exactly: one target forward per node (props::ForwardOne, a
// path that shares no code with the speculative loop), children = the tokens p keeps, a leaf
// where a stop condition ends the sequence. The stop rules are written here from their
// definitions (docs/sampling.md), not taken from sampling::StopConditions: a stop token ends the
// sequence (kept in `tokens`, not in the text), a stop string ends it at the first token after
// which the decoded text contains it (the text is cut before it), else max_tokens. No verifier
// formula appears: the oracle never sees q.
//
// The models are made here: a 2-layer llama with an 11-token vocabulary ("a".."h", "ab", "cd",
// end-of-text) and seeded weights (models::SynthRow), and as the drafter the same model with its
// last block's output projections scaled by 0.8, so q is correlated with p but differs from it,
// both in the weights of the kept tokens and in which tokens are kept. Sampling keeps at most 2
// tokens (top_k 2, min_p 0.3: a position is often deterministic), with a presence penalty so that
// p depends on the history, a stop string "bc" that completes across token boundaries (inside a
// round too) and end-of-text as the eos token; max_tokens 9 so that a first round of K = 8 ends
// on its bonus token.
//
// Test: a G-test of the engine's sequence counts against the exact law, alpha = 1e-4 (the seeds
// are fixed, so the verdict replays). Power: under an alternative law p1 at total-variation
// distance tv from p0, G is asymptotically noncentral chi-square(df, lambda) with
// lambda = n sum (p1 - p0)^2 / p0 >= 4 n tv^2 (Cauchy-Schwarz, sum p0 = 1), so
//   n = lambda_99(df, alpha) / (4 tv^2),   tv = 0.005 minus the mass of pooled categories,
// where lambda_99 is the noncentrality at which P[G >= critical] = 0.99, computed below from the
// Poisson mixture of central chi-squares. n follows df, which follows the tree; it is printed.
// A sequence the target gives probability 0 fails the test outright (p-value 0), and so does an
// output whose text or finish reason is not the leaf's.
//
// For alpha 1e-4 and this configuration's 58 sequences: df 57, critical G 105.48, lambda_99 96.30,
// n = 963031 requests. The engine runs on the ref backend, two engines on two threads, 64
// requests to a batch; request i has seed i and K = 1 + i mod 8 (adaptive on alternate blocks).
//
// LOCKSTEP_REJECT_LAW_DRAWS=N runs N requests instead (ci/properties --mutants: a caught mutant
// is caught with fewer); the test then says that the power statement does not apply.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/gguf/gguf.h"
#include "engine/models/synth.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/law_stats.h"
#include "engine/sampling/sampler.h"
#include "properties/property_support.h"

namespace lockstep::props {
namespace {

// --- The models --------------------------------------------------------------------------------

const std::vector<std::string>& Vocab() {
  static const std::vector<std::string> v = {"a", "b", "c", "d", "e", "f", "g", "h", "ab", "cd",
                                             "<|endoftext|>"};
  return v;
}
constexpr int32_t kEos = 10;  // CONTROL, the tokenizer's eos: an end-of-turn id the engine stops on

// A llama GGUF with `layers` blocks of the law-test shape; every weight is SynthRow(seed, name,
// row), the last block's attn_output and ffn_down scaled by `late_scale` (1 for the target).
absl::StatusOr<std::string> LawModelBytes(int64_t layers, float late_scale) {
  using gguf::Value;
  using gguf::ValueType;
  constexpr int64_t kEmbd = 16, kFf = 32, kHeads = 2, kKvHeads = 1, kHeadDim = kEmbd / kHeads;
  constexpr uint64_t kSeed = 7;
  const int64_t vocab = static_cast<int64_t>(Vocab().size());
  std::vector<Value> tokens, types;
  for (int32_t i = 0; i < vocab; ++i) {
    tokens.push_back(Value::String(Vocab()[i]));
    types.push_back(Value::I32(i == kEos ? 3 : 1));  // CONTROL : NORMAL
  }
  const std::vector<gguf::KeyValue> md = {
      {"general.architecture", Value::String("llama")},
      {"general.name", Value::String("reject-law")},
      {"llama.context_length", Value::U32(64)},
      {"llama.embedding_length", Value::U32(kEmbd)},
      {"llama.block_count", Value::U32(static_cast<uint32_t>(layers))},
      {"llama.feed_forward_length", Value::U32(kFf)},
      {"llama.attention.head_count", Value::U32(kHeads)},
      {"llama.attention.head_count_kv", Value::U32(kKvHeads)},
      {"llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5f)},
      {"llama.rope.freq_base", Value::F32(10000.0f)},
      {"llama.rope.dimension_count", Value::U32(kHeadDim)},
      {"tokenizer.ggml.model", Value::String("gpt2")},
      {"tokenizer.ggml.pre", Value::String("gpt2")},
      {"tokenizer.ggml.tokens", Value::Array(ValueType::STRING, std::move(tokens))},
      {"tokenizer.ggml.token_type", Value::Array(ValueType::INT32, std::move(types))},
      {"tokenizer.ggml.merges", Value::Array(ValueType::STRING, {})},
      {"tokenizer.ggml.bos_token_id", Value::U32(kEos)},
      {"tokenizer.ggml.eos_token_id", Value::U32(kEos)},
  };
  std::vector<models::SynthTensor> ts = {{"token_embd.weight", {kEmbd, vocab}, quant::Type::F32, 0, 1}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    const auto w = [&](const char* name, int64_t cols, int64_t rows, float scale = 1.0f) {
      ts.push_back({b + name, {cols, rows}, quant::Type::F32, 0, 0.3f * scale});
    };
    const float out_scale = l == layers - 1 ? late_scale : 1.0f;
    ts.push_back({b + "attn_norm.weight", {kEmbd}, quant::Type::F32, 1, 0});
    w("attn_q.weight", kEmbd, kHeads * kHeadDim);
    w("attn_k.weight", kEmbd, kKvHeads * kHeadDim);
    w("attn_v.weight", kEmbd, kKvHeads * kHeadDim);
    w("attn_output.weight", kHeads * kHeadDim, kEmbd, out_scale);
    ts.push_back({b + "ffn_norm.weight", {kEmbd}, quant::Type::F32, 1, 0});
    w("ffn_gate.weight", kEmbd, kFf);
    w("ffn_up.weight", kEmbd, kFf);
    w("ffn_down.weight", kFf, kEmbd, out_scale);
  }
  ts.push_back({"output_norm.weight", {kEmbd}, quant::Type::F32, 1, 0});
  std::vector<std::string> data;
  std::vector<gguf::WriteTensor> wt;
  data.reserve(ts.size());
  for (const models::SynthTensor& t : ts) {
    const int64_t cols = t.shape[0], rows = t.shape.size() > 1 ? t.shape[1] : 1;
    std::vector<float> v(cols * rows);
    for (int64_t r = 0; r < rows; ++r) {
      models::SynthRow(kSeed, t, r, std::span<float>(v).subspan(r * cols, cols));
    }
    data.emplace_back(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    wt.push_back({t.name, t.shape, quant::Type::F32, data.back()});
  }
  return gguf::Serialize(md, wt);
}

struct LawModels {
  std::string target_bytes, draft_bytes;  // the Models below view these
  std::unique_ptr<models::Model> target;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

absl::StatusOr<std::unique_ptr<models::Model>> ModelFrom(const std::string& bytes) {
  auto file = gguf::File::FromBytes(bytes);
  if (!file.ok()) return file.status();
  return models::Model::FromFile(*std::move(file));
}

// Built once per process; an error names what failed.
absl::StatusOr<const LawModels*> Models() {
  static const absl::StatusOr<const LawModels*> built = []() -> absl::StatusOr<const LawModels*> {
    auto m = std::make_unique<LawModels>();
    ASSIGN_OR_RETURN(m->target_bytes, LawModelBytes(2, 1.0f));
    ASSIGN_OR_RETURN(m->draft_bytes, LawModelBytes(2, 0.8f));
    ASSIGN_OR_RETURN(m->target, ModelFrom(m->target_bytes));
    ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromGguf(m->target->file()));
    m->tok = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
    return m.release();
  }();
  return built;
}

// --- The law of one configuration --------------------------------------------------------------

struct LawConfig {
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
  std::string stop;  // the one stop string (also in params.stop)
};

LawConfig TheConfig() {
  LawConfig c;
  c.prompt = {0};  // "a"
  c.params.temperature = 1.0f;
  c.params.top_k = 2;
  c.params.min_p = 0.3f;
  c.params.presence_penalty = 0.5f;
  c.params.max_tokens = 9;
  c.stop = "bc";
  c.params.stop = {c.stop};
  return c;
}

struct Leaf {
  std::vector<int32_t> tokens;
  double prob = 0;
  sampling::FinishReason finish = sampling::FinishReason::kNone;
  std::string text;  // what the engine must stream
};

// Depth-first over the target's sampling tree (see the header comment).
absl::Status Enumerate(const models::Model& target, backend::Backend& be, const LawConfig& c,
                       const sampling::Sampler& sampler, std::vector<int32_t>& gen,
                       const std::string& text, double prob, std::vector<Leaf>* leaves) {
  std::vector<int32_t> ctx = c.prompt;
  ctx.insert(ctx.end(), gen.begin(), gen.end());
  SeqCache cache(target, be);
  const std::vector<float> row = ForwardOne(cache, ctx, /*all_logits=*/false);
  ASSIGN_OR_RETURN(const std::vector<double> p, sampler.ProcessedDistribution(row, ctx));
  for (int32_t t = 0; t < static_cast<int32_t>(p.size()); ++t) {
    if (!(p[t] > 0)) continue;
    gen.push_back(t);
    Leaf leaf{gen, prob * p[t], sampling::FinishReason::kNone, text};
    if (t == kEos) {
      leaf.finish = sampling::FinishReason::kStopToken;
    } else {
      leaf.text += Vocab()[t];
      const size_t at = leaf.text.find(c.stop);
      if (at != std::string::npos) {
        leaf.finish = sampling::FinishReason::kStopString;
        leaf.text.resize(at);
      } else if (static_cast<int>(gen.size()) == c.params.max_tokens) {
        leaf.finish = sampling::FinishReason::kMaxTokens;
      }
    }
    if (leaf.finish != sampling::FinishReason::kNone) {
      leaves->push_back(std::move(leaf));
    } else {
      RETURN_IF_ERROR(Enumerate(target, be, c, sampler, gen, leaf.text, leaf.prob, leaves));
    }
    gen.pop_back();
  }
  return absl::OkStatus();
}

// --- Power ---------------------------------------------------------------------------------------

// P[X >= x] for X ~ noncentral chi-square(df, lambda): the Poisson(lambda / 2) mixture of central
// chi-squares with df + 2j degrees of freedom.
double NoncentralChiSquareSurvival(double x, int64_t df, double lambda) {
  const double h = lambda / 2;
  const int64_t last = static_cast<int64_t>(h + 12 * std::sqrt(h) + 40);
  double sum = 0;
  for (int64_t j = 0; j <= last; ++j) {
    const double w = std::exp(-h + (j > 0 ? j * std::log(h) : 0.0) - std::lgamma(j + 1.0));
    sum += w * sampling::ChiSquareSurvival(x, df + 2 * j);
  }
  return sum;
}

// Bisection on [lo, hi] for where the monotone f crosses target.
template <typename F>
double Solve(F f, double target, double lo, double hi, bool increasing) {
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    ((f(mid) < target) == increasing ? lo : hi) = mid;
  }
  return hi;
}

constexpr double kAlpha = 1e-4;
constexpr double kPower = 0.99;
constexpr double kTv = 0.005;

struct Plan {
  int64_t df = 0;
  double pooled = 0;  // mass of the categories pooled into one (E < 5 at n)
  double tv = 0;      // kTv - pooled: what the G-test must see
  double critical = 0, lambda = 0;
  int64_t n = 0;
};

// The category of each leaf: its own, or the pooled one when n * prob < 5 (the chi-square
// approximation needs E >= ~5). Pooling can hide at most the pooled mass of a deviation.
// n follows from the power target (iterating from n_guess), or is `fixed_n` when that is > 0.
Plan PlanFor(const std::vector<Leaf>& leaves, int64_t n_guess, int64_t fixed_n,
             std::vector<int>* category) {
  Plan plan;
  int64_t n = fixed_n > 0 ? fixed_n : n_guess;
  for (int iter = 0; iter < 8; ++iter) {
    category->assign(leaves.size(), -1);
    int next = 0;
    plan.pooled = 0;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (static_cast<double>(n) * leaves[i].prob >= 5) {
        (*category)[i] = next++;
      } else {
        plan.pooled += leaves[i].prob;
      }
    }
    for (int& cat : *category) {
      if (cat < 0) cat = next;
    }
    const int64_t categories = next + (plan.pooled > 0 ? 1 : 0);
    plan.df = categories - 1;
    plan.tv = kTv - plan.pooled;
    plan.critical = Solve([&](double x) { return sampling::ChiSquareSurvival(x, plan.df); },
                          kAlpha, 0, 5000, false);
    plan.lambda = Solve(
        [&](double l) { return NoncentralChiSquareSurvival(plan.critical, plan.df, l); }, kPower,
        0, 5000, true);
    const int64_t need = static_cast<int64_t>(std::ceil(plan.lambda / (4 * plan.tv * plan.tv)));
    if (fixed_n > 0 || need == n) break;
    n = need;
  }
  plan.n = n;
  return plan;
}

// --- Running the engine --------------------------------------------------------------------------

// Wraps the draft model's drafter to record each round's proposal, so that the test can say which
// rounds ran: K = 8 rounds, bonus tokens, stops on an accepted draft with drafts left after it.
struct Round {
  size_t context = 0;  // tokens before the round (prompt + generated)
  std::vector<int32_t> draft;
};
using RoundLog = std::map<int64_t, std::vector<Round>>;  // by the order Start() was called

class RecordingState : public spec::DraftState {
 public:
  RecordingState(std::unique_ptr<spec::DraftState> inner, std::vector<Round>* log)
      : inner_(std::move(inner)), log_(log) {}
  absl::StatusOr<spec::Draft> Propose(const spec::DraftRequest& req) override {
    absl::StatusOr<spec::Draft> d = inner_->Propose(req);
    if (d.ok()) log_->push_back({req.context.size(), d->tokens});
    return d;
  }

 private:
  std::unique_ptr<spec::DraftState> inner_;
  std::vector<Round>* log_;
};

class RecordingDrafter : public spec::Drafter {
 public:
  RecordingDrafter(std::unique_ptr<spec::Drafter> inner, RoundLog* log)
      : inner_(std::move(inner)), log_(log) {}
  std::string name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<spec::DraftState>> Start() override {
    auto s = inner_->Start();
    if (!s.ok()) return s.status();
    return std::unique_ptr<spec::DraftState>(new RecordingState(*std::move(s), &(*log_)[started_++]));
  }

 private:
  std::unique_ptr<spec::Drafter> inner_;
  RoundLog* log_;
  int64_t started_ = 0;
};

struct Coverage {
  int64_t rounds = 0, k8_rounds = 0, bonus = 0, multi_accept = 0;
  int64_t stop_on_draft_inside = 0, stop_on_residual = 0, stop_on_bonus = 0;
  std::map<sampling::FinishReason, int64_t> finish;
  int64_t Finished(sampling::FinishReason f) const {
    auto it = finish.find(f);
    return it == finish.end() ? 0 : it->second;
  }
  void Add(const Coverage& o) {
    rounds += o.rounds, k8_rounds += o.k8_rounds, bonus += o.bonus, multi_accept += o.multi_accept;
    stop_on_draft_inside += o.stop_on_draft_inside, stop_on_residual += o.stop_on_residual;
    stop_on_bonus += o.stop_on_bonus;
    for (const auto& [f, n] : o.finish) finish[f] += n;
  }
};

// Classifies each recorded round of one finished request against its final tokens.
void CountRounds(const std::vector<Round>& rounds, const std::vector<int32_t>& all,
                 sampling::FinishReason finish, Coverage* cov) {
  ++cov->finish[finish];
  for (const Round& r : rounds) {
    ++cov->rounds;
    const size_t k = r.draft.size();
    if (k == 8) ++cov->k8_rounds;
    size_t accepted = 0;
    while (accepted < k && r.context + accepted < all.size() &&
           all[r.context + accepted] == r.draft[accepted]) {
      ++accepted;
    }
    if (accepted >= 2) ++cov->multi_accept;
    const size_t last = all.size() - 1;  // index of the final token
    if (accepted == k && r.context + k <= last) ++cov->bonus;
    if (&r != &rounds.back() || finish == sampling::FinishReason::kMaxTokens) continue;
    // The request stopped (eos or stop string) in this round.
    if (last < r.context + accepted) {
      if (last + 1 < r.context + k) ++cov->stop_on_draft_inside;  // else on the round's last draft
    } else if (last == r.context + k) {
      ++cov->stop_on_bonus;
    } else {
      ++cov->stop_on_residual;
    }
  }
}

struct Tally {
  std::map<std::vector<int32_t>, int64_t> counts;  // emitted sequence -> requests
  Coverage cov;
  std::string failure;  // the first non-law failure (engine error, text or finish mismatch)
};

const char* FinishName(sampling::FinishReason f) {
  switch (f) {
    case sampling::FinishReason::kNone: return "none";
    case sampling::FinishReason::kStopToken: return "stop-token";
    case sampling::FinishReason::kStopString: return "stop-string";
    case sampling::FinishReason::kMaxTokens: return "length";
  }
  return "?";
}

constexpr int kMaxRunning = 64;

// Runs requests [first, n) step `stride` on one engine with its own backend and drafter.
void Worker(const LawConfig& c, const std::map<std::vector<int32_t>, const Leaf*>& leaf_of,
            int64_t first, int64_t stride, int64_t n, std::atomic<bool>* stop, Tally* tally) {
  const LawModels& m = **Models();
  auto fail = [&](std::string why) {
    if (tally->failure.empty()) tally->failure = std::move(why);
    stop->store(true);
  };
  auto be = backend::MakeBackend("ref", {1});
  if (!be.ok()) return fail(be.status().ToString());
  auto draft_model = ModelFrom(m.draft_bytes);
  if (!draft_model.ok()) return fail(draft_model.status().ToString());
  auto inner = spec::MakeModelDrafter(*m.target, *std::move(draft_model), **be, kMaxRunning * 32);
  if (!inner.ok()) return fail(inner.status().ToString());
  RoundLog log;
  RecordingDrafter drafter(*std::move(inner), &log);
  runtime::EngineOptions o;
  o.ctx = 32;
  o.block_size = 4;
  o.max_running = kMaxRunning;
  o.max_spec_k = 8;
  o.max_step_tokens = kMaxRunning * 9;
  auto engine = runtime::Engine::Create(*m.target, *m.tok, **be, o);
  if (!engine.ok()) return fail(engine.status().ToString());
  int64_t next = first, submitted = 0;
  std::map<int64_t, int64_t> index_of;  // engine request id -> request index
  while (!stop->load()) {
    while (next < n && (*engine)->running() + (*engine)->waiting() < 2 * kMaxRunning) {
      // Request i: seed i, K = 1 + i % 8, adaptive on every other block of 8. Its output is a
      // function of (i, the config) alone, whatever engine or batch it lands in.
      runtime::Request r;
      r.prompt = c.prompt;
      r.params = c.params;
      r.seed = static_cast<uint64_t>(next);
      r.drafter = &drafter;
      r.spec.mode = spec::SpecMode::kReject;
      r.spec.k = 1 + static_cast<int>(next % 8);
      r.spec.adaptive = (next / 8) % 2 == 1;
      auto id = (*engine)->Submit(std::move(r));
      if (!id.ok()) return fail(absl::StrCat("request ", next, ": ", id.status().ToString()));
      index_of[*id] = next;
      ++submitted;
      next += stride;
    }
    if ((*engine)->Idle()) break;
    auto done = (*engine)->Step();
    if (!done.ok()) return fail(done.status().ToString());
    for (const runtime::RequestResult& res : *done) {
      const int64_t i = index_of[res.id];
      index_of.erase(res.id);
      const std::vector<int32_t>& toks = res.gen.tokens;
      std::vector<int32_t> all = c.prompt;
      all.insert(all.end(), toks.begin(), toks.end());
      // Start() order == submission order on this engine: request ids are 1, 2, ...
      auto rounds = log.find(res.id - 1);
      CountRounds(rounds == log.end() ? std::vector<Round>{} : rounds->second, all, res.gen.finish,
                  &tally->cov);
      if (rounds != log.end()) log.erase(rounds);
      ++tally->counts[toks];
      auto leaf = leaf_of.find(toks);
      if (leaf == leaf_of.end()) {
        return fail(absl::StrCat("request ", i, " (seed ", i, ", K ", 1 + i % 8,
                                 ") emitted [", absl::StrJoin(toks, " "),
                                 "], a sequence the target's law gives probability 0"));
      }
      if (res.gen.text != leaf->second->text || res.gen.finish != leaf->second->finish) {
        return fail(absl::StrCat("request ", i, " emitted [", absl::StrJoin(toks, " "), "] with text \"",
                                 res.gen.text, "\" finish ", FinishName(res.gen.finish),
                                 "; the stop rules give \"", leaf->second->text, "\" finish ",
                                 FinishName(leaf->second->finish)));
      }
    }
  }
}

int64_t EnvDraws() {
  const char* v = std::getenv("LOCKSTEP_REJECT_LAW_DRAWS");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < 1) {
    ADD_FAILURE() << "LOCKSTEP_REJECT_LAW_DRAWS=" << v << " is not a positive integer";
    return -1;
  }
  return n;
}

TEST(RejectLaw, EngineEmitsTargetSequenceLaw) {
  const double t0 = NowSeconds();
  const absl::StatusOr<const LawModels*> models = Models();
  ASSERT_TRUE(models.ok()) << models.status();
  const LawModels& m = **models;
  const LawConfig c = TheConfig();
  const absl::StatusOr<sampling::Sampler> sampler = sampling::Sampler::Create(c.params);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  auto oracle_be = backend::MakeBackend("ref", {1});
  ASSERT_TRUE(oracle_be.ok()) << oracle_be.status();
  std::vector<Leaf> leaves;
  std::vector<int32_t> gen;
  const absl::Status enumerated = Enumerate(*m.target, **oracle_be, c, *sampler, gen, "", 1.0, &leaves);
  ASSERT_TRUE(enumerated.ok()) << enumerated;
  double total = 0;
  std::map<sampling::FinishReason, double> mass;
  std::map<std::vector<int32_t>, const Leaf*> leaf_of;
  for (const Leaf& l : leaves) {
    total += l.prob;
    mass[l.finish] += l.prob;
    leaf_of[l.tokens] = &l;
  }
  ASSERT_NEAR(total, 1.0, 1e-12) << "the enumerated leaves do not carry the whole law";
  std::vector<int> category;
  Plan plan = PlanFor(leaves, 1000000, 0, &category);
  std::printf("[ law ] %zu sequences (eos %.3f, stop string %.3f, max_tokens %.3f); G-test df %lld, "
              "alpha %g: critical G %.2f; power %.2f at TV %.4f (%.4f minus pooled mass %.2g) needs "
              "noncentrality %.2f -> %lld requests\n",
              leaves.size(), mass[sampling::FinishReason::kStopToken],
              mass[sampling::FinishReason::kStopString], mass[sampling::FinishReason::kMaxTokens],
              static_cast<long long>(plan.df), kAlpha, plan.critical, kPower, plan.tv, kTv,
              plan.pooled, plan.lambda, static_cast<long long>(plan.n));
  ASSERT_GT(plan.tv, 0.004) << "too much mass pooled";
  int64_t n = plan.n;
  if (const int64_t env = EnvDraws(); env != 0) {
    if (env < 0) return;
    n = env;
    plan = PlanFor(leaves, 0, n, &category);
    std::printf("[ law ] LOCKSTEP_REJECT_LAW_DRAWS=%lld: the power statement above does not apply\n",
                static_cast<long long>(n));
  }

  const int workers = 2;
  std::vector<Tally> tallies(workers);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back(Worker, std::cref(c), std::cref(leaf_of), w, workers, n, &stop, &tallies[w]);
  }
  for (std::thread& t : threads) t.join();
  Tally all;
  for (const Tally& t : tallies) {
    for (const auto& [seq, k] : t.counts) all.counts[seq] += k;
    all.cov.Add(t.cov);
    if (all.failure.empty()) all.failure = t.failure;
  }
  ASSERT_TRUE(all.failure.empty()) << all.failure;

  // Observed and expected per category; the last category takes sequences outside the tree.
  const int n_cat = plan.df + 1;
  std::vector<int64_t> observed(n_cat + 1, 0);
  std::vector<double> expected(n_cat + 1, 0.0);
  int64_t got = 0;
  for (size_t i = 0; i < leaves.size(); ++i) expected[category[i]] += leaves[i].prob;
  for (const auto& [seq, k] : all.counts) {
    auto it = leaf_of.find(seq);
    observed[it == leaf_of.end() ? n_cat : category[it->second - leaves.data()]] += k;
    got += k;
  }
  ASSERT_EQ(got, n) << "requests lost";
  const sampling::GTestResult g = sampling::GTest(observed, expected);
  double tv = 0;
  for (int i = 0; i <= n_cat; ++i) tv += std::fabs(static_cast<double>(observed[i]) / n - expected[i]);
  const Coverage& cov = all.cov;
  std::printf("[ law ] %lld requests in %.1f s: G %.2f df %lld p-value %.3g, min E %.1f, empirical "
              "TV %.4f\n"
              "    rounds %lld: K = 8 %lld, >= 2 drafts accepted %lld, bonus token %lld; stops "
              "(eos or stop string) on an accepted draft with drafts left %lld, on a residual %lld, "
              "on a bonus %lld; finish stop-token %lld, stop-string %lld, length %lld\n",
              static_cast<long long>(n), NowSeconds() - t0, g.g, static_cast<long long>(g.df),
              g.p_value, g.min_expected, tv / 2, static_cast<long long>(cov.rounds),
              static_cast<long long>(cov.k8_rounds), static_cast<long long>(cov.multi_accept),
              static_cast<long long>(cov.bonus), static_cast<long long>(cov.stop_on_draft_inside),
              static_cast<long long>(cov.stop_on_residual), static_cast<long long>(cov.stop_on_bonus),
              static_cast<long long>(cov.Finished(sampling::FinishReason::kStopToken)),
              static_cast<long long>(cov.Finished(sampling::FinishReason::kStopString)),
              static_cast<long long>(cov.Finished(sampling::FinishReason::kMaxTokens)));
  EXPECT_GE(g.p_value, kAlpha) << "the emitted sequences do not follow the target's law";
  // What the run must have covered, or "green" would be green over less than it claims.
  EXPECT_GT(cov.k8_rounds, 0);
  EXPECT_GT(cov.bonus, 0);
  EXPECT_GT(cov.multi_accept, 0);
  EXPECT_GT(cov.stop_on_draft_inside, 0);
  EXPECT_GT(cov.stop_on_residual, 0);
  EXPECT_GT(cov.stop_on_bonus, 0);
}

}  // namespace
}  // namespace lockstep::props
