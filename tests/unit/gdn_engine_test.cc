// The engine on a hybrid Gated DeltaNet model (golden/families/qwen3_5, cpu backend): the
// recurrent-state lanes (engine/models/state_pool.h) keep docs/design.md §1 — a request served in
// a batch, with its prompt cut into chunks by a small step budget, preempted and recomputed, or
// decoded speculatively (a drafter that is right at two positions of three, its rejections
// rolled back by restoring the checkpointed state) yields the tokens it yields alone; the oracle of "alone" is a plain greedy
// loop over models::Runner (one token per step, no engine). The prefix cache and parked sessions,
// which do not hold recurrent state yet, are refused by name.
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/runtime/engine.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

struct Env {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<backend::Backend> be;
};

Env& Hybrid() {
  static Env* env = [] {
    auto* e = new Env;
    auto m = models::Model::Load(std::string(LOCKSTEP_SOURCE_DIR) +
                                 "/golden/families/qwen3_5/qwen3_5.gguf");
    EXPECT_TRUE(m.ok()) << m.status();
    e->model = std::move(*m);
    auto t = tokenizer::Tokenizer::FromGguf(e->model->file());
    EXPECT_TRUE(t.ok()) << t.status();
    e->tok = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
    auto be = backend::MakeBackend("cpu", {2});
    EXPECT_TRUE(be.ok());
    e->be = std::move(*be);
    return e;
  }();
  return *env;
}

// Greedy continuation of `prompt` by a bare runner: prefill, then one token per step.
std::vector<int32_t> GreedyByRunner(const std::vector<int32_t>& prompt, int n) {
  Env& e = Hybrid();
  models::RunnerOptions o;
  o.max_step_tokens = 256;
  o.max_logit_rows = 1;
  o.n_blocks = 16;
  o.n_state_slots = 1;
  auto r = models::Runner::Create(*e.model, *e.be, o);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> blocks(16);
  for (int i = 0; i < 16; ++i) blocks[i] = i;
  std::vector<int32_t> toks = prompt, out;
  std::vector<float> logits;
  int64_t at = 0;
  const int64_t V = e.model->config().n_vocab;
  for (int i = 0; i < n; ++i) {
    models::StepEntry s{std::span<const int32_t>(toks).subspan(at), at, blocks, 1};
    s.state_slot = 0;
    EXPECT_TRUE((*r)->Forward(std::span(&s, 1), &logits).ok());
    int32_t best = 0;
    for (int64_t v = 1; v < V; ++v) best = logits[v] > logits[best] ? static_cast<int32_t>(v) : best;
    at = static_cast<int64_t>(toks.size());
    toks.push_back(best);
    out.push_back(best);
  }
  return out;
}

// Proposes the known greedy continuation with every token at a position p % 3 == 2 replaced by
// a wrong one: rounds accept 0, 1 or 2 drafts and reject the next, so both the checkpoint restore
// and the fully-accepted path run.
class OracleDrafter final : public spec::Drafter {
 public:
  explicit OracleDrafter(std::vector<int32_t> truth) : truth_(std::move(truth)) {}
  std::string name() const override { return "oracle"; }
  absl::StatusOr<std::unique_ptr<spec::DraftState>> Start() override {
    return std::unique_ptr<spec::DraftState>(new State(truth_));
  }

 private:
  struct State final : spec::DraftState {
    explicit State(const std::vector<int32_t>& t) : truth(t) {}
    absl::StatusOr<spec::Draft> Propose(const spec::DraftRequest& r) override {
      spec::Draft d;
      for (int i = 0; i < r.k; ++i) {
        const size_t p = r.context.size() + i;
        if (p >= truth.size()) break;
        d.tokens.push_back(p % 3 == 2 ? (truth[p] + 1) % 300 : truth[p]);
      }
      return d;
    }
    const std::vector<int32_t>& truth;
  };
  std::vector<int32_t> truth_;
};

runtime::Request Greedy(std::vector<int32_t> prompt, int n, spec::Drafter* drafter = nullptr) {
  runtime::Request r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = n;
  r.ignore_eos = true;
  r.drafter = drafter;
  r.spec.k = 4;
  return r;
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 131 + i * 17 + (i % 5) * 29) % 300 + 1);
  return p;
}

runtime::EngineOptions Options(int64_t step_tokens, int64_t running) {
  runtime::EngineOptions o;
  o.ctx = 256;
  o.max_step_tokens = step_tokens;
  o.max_running = running;
  o.max_spec_k = 4;
  o.prefix_cache_bytes = 0;
  return o;
}

TEST(GdnEngine, BatchedChunkedPreemptedAndSpeculativeRequestsEqualThePlainGreedyLoop) {
  Env& e = Hybrid();
  constexpr int kGen = 24;
  const std::vector<std::vector<int32_t>> prompts = {Prompt(70, 1), Prompt(9, 2), Prompt(33, 3)};
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(GreedyByRunner(p, kGen));

  // A speculative request whose drafter knows the answer but lies at every third position.
  const std::vector<int32_t> rep = Prompt(40, 4);
  const std::vector<int32_t> rep_want = GreedyByRunner(rep, kGen);
  std::vector<int32_t> truth = rep;
  truth.insert(truth.end(), rep_want.begin(), rep_want.end());
  OracleDrafter oracle(truth);
  auto engine = runtime::Engine::Create(*e.model, *e.tok, *e.be, Options(13, 3));
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<int64_t> ids;
  for (const auto& p : prompts) ids.push_back(*(*engine)->Submit(Greedy(p, kGen)));
  ids.push_back(*(*engine)->Submit(Greedy(rep, kGen, &oracle)));
  std::vector<runtime::RequestResult> done;
  for (int step = 0; step < 2000 && !(*engine)->Idle(); ++step) {
    if (step == 9) EXPECT_TRUE((*engine)->Preempt(ids[0]));  // mid-prefill or decode: recompute
    auto r = (*engine)->Step();
    ASSERT_TRUE(r.ok()) << r.status();
    for (auto& d : *r) done.push_back(std::move(d));
  }
  ASSERT_EQ(done.size(), 4u);
  int64_t drafted = 0, accepted = 0;
  for (const runtime::RequestResult& d : done) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (d.id != ids[i]) continue;
      const std::vector<int32_t>& w = i < prompts.size() ? want[i] : rep_want;
      EXPECT_EQ(d.gen.tokens, w) << "request " << i;
      if (i == prompts.size()) {
        drafted = d.stats.drafted;
        accepted = d.stats.accepted;
      }
    }
  }
  std::printf("[ covered ] 4 requests, step budget 13, one preemption; spec drafted %lld, "
              "accepted %lld\n", static_cast<long long>(drafted), static_cast<long long>(accepted));
  EXPECT_GT(drafted, accepted) << "no rejected draft: the rollback was not exercised";
  EXPECT_GT(accepted, 0) << "no accepted draft: the checkpoint restore was not exercised";
}

TEST(GdnEngine, PrefixCacheAndSessionsAreRefusedByName) {
  Env& e = Hybrid();
  runtime::EngineOptions o = Options(64, 2);
  o.prefix_cache_bytes = 1 << 20;
  auto refused = runtime::Engine::Create(*e.model, *e.tok, *e.be, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("prefix"), std::string::npos)
      << refused.status();
  auto engine = runtime::Engine::Create(*e.model, *e.tok, *e.be, Options(64, 2));
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::Request r = Greedy(Prompt(5, 1), 3);
  r.session = "chat-1";
  auto id = (*engine)->Submit(std::move(r));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(std::string(id.status().message()).find("session"), std::string::npos) << id.status();
}

}  // namespace
}  // namespace lockstep
