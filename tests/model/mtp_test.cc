// MTP heads as drafters (docs/speculative.md, docs/models.md "MTP heads"), on the tiny qwen3_5 and
// qwen3_next (MoE MTP layer) with a seeded MTP block (golden/families/{qwen3_5,qwen3_next}_mtp:
// oracle/gen_mtp_golden.py, transformers 5.17's modules wired as vLLM / llama.cpp wire the block;
// GGUF by llama.cpp's converter with MTP):
//   - the loader keeps the nextn layer out of the trunk and binds it;
//   - the target's output-normed hidden rows (StepEntry::hidden) match transformers' H;
//   - the MTP block's logits on transformers' H, teacher-forced over 39 rows and chained K = 4
//     from three contexts, match the golden on ref and cpu (tiny-golden tolerances);
//   - the drafter (`--draft self`) proposes the golden's chained tokens;
//   - greedy and coupled output through runtime::Engine with the MTP drafter are byte-identical to
//     plain decoding, for K = 1, 2, 4, alone and batched with chunked prefills and a preemption;
//   - a file without an MTP block gives an error saying so;
//   - `lockstep run --draft self` prints its boot line and the text of plain decoding.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/compare.h"
#include "engine/core/npy.h"
#include "engine/core/tolerances.h"
#include "engine/models/model.h"
#include "engine/models/mtp.h"
#include "engine/models/runner.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_manifest.h"
#include "tests/support/run_command.h"

namespace lockstep {
namespace {

// golden/families/<family>_mtp/
std::string Dir(const std::string& family) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/golden/families/" + family + "_mtp/";
}

struct Golden {
  std::unique_ptr<models::Model> model;
  std::vector<int32_t> ids;
  struct Chain {
    int64_t context;
    std::vector<int32_t> tokens;
  };
  std::vector<Chain> chains;
  int64_t k = 0;
  npy::Array hidden, mtp_logits, chain_logits;
};

const Golden& G(const std::string& family = "qwen3_5") {
  static std::map<std::string, Golden*> cache;
  Golden*& g = cache[family];
  if (g != nullptr) return *g;
  g = new Golden;
  const std::string dir = Dir(family);
  auto m = models::Model::Load(dir + family + "_mtp.gguf");
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) g->model = std::move(*m);
  std::ifstream in(dir + "mtp.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  g->ids = j["tokens"].get<std::vector<int32_t>>();
  g->k = j["k"].get<int64_t>();
  for (const auto& c : j["chains"]) {
    g->chains.push_back({c["context"].get<int64_t>(), c["tokens"].get<std::vector<int32_t>>()});
  }
  for (auto [name, out] : {std::pair{"hidden.npy", &g->hidden},
                           {"mtp_logits.npy", &g->mtp_logits},
                           {"chain_logits.npy", &g->chain_logits}}) {
    auto a = npy::Read(dir + name);
    EXPECT_TRUE(a.ok()) << name;
    if (a.ok()) *out = *a;
  }
  return *g;
}

std::unique_ptr<backend::Backend> Make(const std::string& name) {
  auto be = backend::MakeBackend(name, {2});
  EXPECT_TRUE(be.ok()) << be.status();
  return std::move(*be);
}

void ExpectLogits(const float* ours, const float* golden, int64_t rows, int64_t n_vocab,
                  const std::string& what) {
  auto s = compare::Logits(ours, golden, rows, n_vocab, tol::kGoldenDecisiveMargin);
  ASSERT_TRUE(s.ok());
  SCOPED_TRACE(what + ": " + compare::Describe(*s));
  EXPECT_EQ(s->nan_a + s->nan_b, 0);
  EXPECT_LE(s->nmse, tol::kTinyGoldenNmse);
  EXPECT_EQ(s->decisive_agree, s->decisive);
  EXPECT_LE(s->max_kl, tol::kTinyGoldenMaxKl);
  std::printf("[ covered ] %s: %lld rows x %lld vocab, nmse %.3g, max KL %.3g\n", what.c_str(),
              static_cast<long long>(rows), static_cast<long long>(n_vocab), s->nmse, s->max_kl);
}

// sum (a - b)^2 / sum b^2
double Nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return num / den;
}

TEST(Mtp, GoldenManifestsHold) {
  for (const char* f : {"qwen3_5", "qwen3_next"}) {
    EXPECT_EQ(testing::CheckManifest(Dir(f)), std::vector<std::string>{}) << f;
  }
}

TEST(Mtp, LoaderKeepsTheNextnLayerOutOfTheTrunk) {
  for (const char* f : {"qwen3_5", "qwen3_next"}) {
    SCOPED_TRACE(f);
    const bool moe = std::string(f) == "qwen3_next";
    const models::Config& c = G(f).model->config();
    EXPECT_EQ(c.n_layer, 8);
    EXPECT_EQ(c.layers.size(), 8u);
    EXPECT_EQ(c.n_nextn, 1);
    EXPECT_EQ(c.nextn_layer.mixer, models::MixerKind::kGatedAttention);
    EXPECT_EQ(c.nextn_layer.ffn, moe ? models::FfnKind::kMoe : models::FfnKind::kDense);
    ASSERT_EQ(G(f).model->weights().nextn.size(), 1u);
    const models::NextnWeights& w = G(f).model->weights().nextn[0];
    EXPECT_EQ(w.eh_proj.cols, 2 * c.n_embd);
    EXPECT_EQ(w.eh_proj.rows, c.n_embd);
    EXPECT_TRUE(w.enorm.bound() && w.hnorm.bound() && w.shared_head_norm.bound());
    EXPECT_TRUE(w.layer.wq.bound());
    EXPECT_TRUE(moe ? w.layer.ffn_down_exps.bound() && w.layer.ffn_gate_inp_shexp.bound()
                    : w.layer.ffn_down.bound());
  }
}

// The target's hidden rows for every prompt token (one step), [N, d].
std::vector<float> TargetHidden(const Golden& g, backend::Backend& be,
                                const std::vector<int32_t>& ids) {
  models::RunnerOptions o;
  o.max_step_tokens = static_cast<int64_t>(ids.size());
  o.max_logit_rows = 1;
  o.n_blocks = 8;
  o.n_state_slots = 1;
  auto r = models::Runner::Create(*g.model, be, o);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> blocks = {3, 1, 4, 0, 2, 5, 7, 6};
  std::vector<float> logits, hidden;
  models::StepEntry e{ids, 0, blocks, 1};
  e.state_slot = 0;
  e.hidden = &hidden;
  EXPECT_TRUE((*r)->Forward(std::span(&e, 1), &logits).ok());
  return hidden;
}

// (family, backend)
class MtpBackends : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  const std::string family = std::get<0>(GetParam());
  const std::string backend = std::get<1>(GetParam());
  const std::string what = family + "/" + backend;
};

TEST_P(MtpBackends, TargetHiddenRowsMatchTransformers) {
  auto be = Make(backend);
  const Golden& g = G(family);
  const std::vector<float> h = TargetHidden(g, *be, g.ids);
  ASSERT_EQ(h.size(), g.hidden.data.size());
  const double nmse = Nmse(h, g.hidden.data);
  std::printf("[ covered ] %s target hidden: %zu rows, nmse %.3g\n", what.c_str(), g.ids.size(),
              nmse);
  EXPECT_LE(nmse, tol::kTinyGoldenNmse);
}

TEST_P(MtpBackends, DraftLogitsMatchTheGolden) {
  const Golden& g = G(family);
  auto be = Make(backend);
  models::MtpOptions o;
  o.max_step_tokens = 64;
  o.n_blocks = 8;
  auto head = models::MtpHead::Create(*g.model, *be, o);
  ASSERT_TRUE(head.ok()) << head.status();
  const int64_t N = static_cast<int64_t>(g.ids.size()), d = g.model->config().n_embd;
  const int64_t V = g.model->config().n_vocab;
  std::vector<int32_t> blocks = {5, 2, 7, 0, 1, 3, 4, 6};
  std::vector<float> logits, out_g;
  // Teacher-forced: rows (t[p+1], H[p]), p = 0..N-2, in one step, every row's logits.
  {
    const std::vector<int32_t> toks(g.ids.begin() + 1, g.ids.end());
    models::MtpEntry e{toks, std::span<const float>(g.hidden.data).first((N - 1) * d), 0, blocks,
                       N - 1};
    ASSERT_TRUE((*head)->Forward(e, &logits, &out_g).ok());
    ASSERT_EQ(g.mtp_logits.shape, (std::vector<int64_t>{N - 1, V}));
    ExpectLogits(logits.data(), g.mtp_logits.data.data(), N - 1, V, what + " teacher-forced");
  }
  // Chained from each context L: rows 0..L-2 (two steps, to cross a step boundary), then K - 1
  // rows of (the golden's draft token, the block's own g).
  ASSERT_EQ(g.chain_logits.shape,
            (std::vector<int64_t>{static_cast<int64_t>(g.chains.size()), g.k, V}));
  for (size_t ci = 0; ci < g.chains.size(); ++ci) {
    const int64_t L = g.chains[ci].context;
    std::vector<float> got;
    const std::vector<int32_t> toks(g.ids.begin() + 1, g.ids.begin() + L);
    const int64_t cut = (L - 1) / 2;
    for (auto [a, b] : {std::pair{int64_t{0}, cut}, {cut, L - 1}}) {
      models::MtpEntry e{std::span<const int32_t>(toks).subspan(a, b - a),
                         std::span<const float>(g.hidden.data).subspan(a * d, (b - a) * d), a,
                         blocks, 1};
      ASSERT_TRUE((*head)->Forward(e, &logits, &out_g).ok());
    }
    got.insert(got.end(), logits.begin(), logits.end());
    for (int64_t i = 1; i < g.k; ++i) {
      const std::vector<float> prev = out_g;
      const int32_t t = g.chains[ci].tokens[i - 1];
      models::MtpEntry e{std::span<const int32_t>(&t, 1), prev, L - 2 + i, blocks, 1};
      ASSERT_TRUE((*head)->Forward(e, &logits, &out_g).ok());
      got.insert(got.end(), logits.begin(), logits.end());
    }
    ExpectLogits(got.data(), g.chain_logits.data.data() + ci * g.k * V, g.k, V,
                 what + " chain from context " + std::to_string(L));
  }
}

TEST_P(MtpBackends, DrafterProposesTheGoldenChain) {
  const Golden& g = G(family);
  auto be = Make(backend);
  auto drafter = spec::MakeDrafter(*g.model, *be, "self", 256);
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  EXPECT_EQ((*drafter)->name(), "mtp");
  const std::vector<float> h = TargetHidden(g, *be, g.ids);
  const int64_t d = g.model->config().n_embd;
  sampling::SamplingParams p;
  p.temperature = 0.0f;
  auto sampler = sampling::Sampler::Create(p);
  ASSERT_TRUE(sampler.ok());
  // One state through the growing contexts (its KV is reused and its chained rows dropped), and
  // a fresh state per context.
  auto shared = (*drafter)->Start();
  ASSERT_TRUE(shared.ok());
  int64_t seen = 0;
  for (const Golden::Chain& c : g.chains) {
    auto fresh = (*drafter)->Start();
    ASSERT_TRUE(fresh.ok());
    ASSERT_TRUE((*fresh)->ObserveHidden(0, std::span(h).first((c.context - 1) * d)).ok());
    ASSERT_TRUE((*shared)->ObserveHidden(seen, std::span(h).subspan(seen * d, (c.context - 1 - seen) * d)).ok());
    seen = c.context - 1;
    const std::vector<int32_t> ctx(g.ids.begin(), g.ids.begin() + c.context);
    for (spec::DraftState* s : {fresh->get(), shared->get()}) {
      auto draft = s->Propose({ctx, static_cast<int>(g.k), spec::SpecMode::kGreedy, &*sampler, 0});
      ASSERT_TRUE(draft.ok()) << draft.status();
      EXPECT_EQ(draft->tokens, c.tokens) << "context " << c.context;
    }
  }
  std::printf("[ covered ] %s drafter: %zu contexts x K = %lld\n", what.c_str(),
              g.chains.size(), static_cast<long long>(g.k));
}

INSTANTIATE_TEST_SUITE_P(FamiliesOnRefAndCpu, MtpBackends,
                         ::testing::Combine(::testing::Values("qwen3_5", "qwen3_next"),
                                            ::testing::Values("ref", "cpu")));

// ---- through the engine ----

struct EngineEnv {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<spec::Drafter> drafter;
};

EngineEnv& Env(const std::string& family) {
  static std::map<std::string, EngineEnv*> cache;
  EngineEnv*& e = cache[family];
  if (e != nullptr) return *e;
  e = new EngineEnv;
  auto t = tokenizer::Tokenizer::FromGguf(G(family).model->file());
  EXPECT_TRUE(t.ok()) << t.status();
  e->tok = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
  e->be = Make("cpu");
  auto d = spec::MakeDrafter(*G(family).model, *e->be, "self", 2048);
  EXPECT_TRUE(d.ok()) << d.status();
  e->drafter = std::move(*d);
  return *e;
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 131 + i * 17 + (i % 5) * 29) % 300 + 1);
  return p;
}

runtime::Request Req(std::vector<int32_t> prompt, bool sampled, int k, spec::Drafter* drafter) {
  runtime::Request r;
  r.prompt = std::move(prompt);
  r.params.temperature = sampled ? 0.9f : 0.0f;
  r.params.max_tokens = 20;
  r.seed = 7;
  r.ignore_eos = true;
  r.drafter = drafter;
  r.spec.k = k;
  r.spec.mode = sampled ? spec::SpecMode::kCoupled : spec::SpecMode::kGreedy;
  return r;
}

// Runs the requests together (step budget `step_tokens`); results in submission order. With
// `preempt_at` >= 0, the first request is preempted (recomputed from position 0) at that step.
std::vector<runtime::RequestResult> RunAll(const std::string& family,
                                           std::vector<runtime::Request> reqs, int64_t step_tokens,
                                           int preempt_at = -1) {
  runtime::EngineOptions o;
  o.ctx = 256;
  o.max_step_tokens = step_tokens;
  o.max_running = 4;
  o.max_spec_k = 4;
  o.prefix_cache_bytes = 0;
  auto engine = runtime::Engine::Create(*G(family).model, *Env(family).tok, *Env(family).be, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<int64_t> ids;
  for (auto& r : reqs) ids.push_back(*(*engine)->Submit(std::move(r)));
  std::vector<runtime::RequestResult> out(ids.size());
  int64_t preempted = 0;
  for (int step = 0; step < 2000 && !(*engine)->Idle(); ++step) {
    if (step == preempt_at) preempted += (*engine)->Preempt(ids[0]);
    auto done = (*engine)->Step();
    EXPECT_TRUE(done.ok()) << done.status();
    if (!done.ok()) break;
    for (auto& d : *done) {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (d.id == ids[i]) out[i] = std::move(d);
      }
    }
  }
  if (preempt_at >= 0) EXPECT_EQ(preempted, 1) << "the preemption did not happen";
  return out;
}

class MtpEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpEngine, GreedyAndCoupledOutputEqualsPlainDecoding) {
  const std::string family = GetParam();
  spec::Drafter* mtp = Env(family).drafter.get();
  const std::vector<std::vector<int32_t>> prompts = {Prompt(30, 1), Prompt(7, 2), Prompt(45, 3)};
  int64_t drafted = 0, accepted = 0, cases = 0;
  for (bool sampled : {false, true}) {
    std::vector<runtime::Request> plain;
    for (const auto& p : prompts) plain.push_back(Req(p, sampled, 1, nullptr));
    const std::vector<runtime::RequestResult> want = RunAll(family, std::move(plain), 256);
    for (int k : {1, 2, 4}) {
      // Alone (one step of prefill), then all together with chunked prefills (budget 13).
      for (size_t i = 0; i < prompts.size(); ++i) {
        const auto got = RunAll(family, {Req(prompts[i], sampled, k, mtp)}, 256);
        EXPECT_EQ(got[0].gen.tokens, want[i].gen.tokens)
            << (sampled ? "coupled" : "greedy") << " K=" << k << " prompt " << i;
        drafted += got[0].stats.drafted;
        accepted += got[0].stats.accepted;
        ++cases;
      }
      std::vector<runtime::Request> batch;
      for (const auto& p : prompts) batch.push_back(Req(p, sampled, k, mtp));
      const auto got = RunAll(family, std::move(batch), 13, /*preempt_at=*/9);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got[i].gen.tokens, want[i].gen.tokens)
            << (sampled ? "coupled" : "greedy") << " batched K=" << k << " prompt " << i;
        drafted += got[i].stats.drafted;
        ++cases;
      }
    }
  }
  std::printf("[ covered ] %s: %lld spec runs (greedy + coupled, K = 1, 2, 4, alone and batched at "
              "step budget 13 with a preemption) equal plain decoding; drafted %lld, accepted %lld "
              "(alone)\n",
              family.c_str(), static_cast<long long>(cases), static_cast<long long>(drafted),
              static_cast<long long>(accepted));
  EXPECT_GT(drafted, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, MtpEngine, ::testing::Values("qwen3_5", "qwen3_next"));

TEST(MtpDrafter, AFileWithoutAnMtpBlockIsRefusedByName) {
  auto m = models::Model::Load(std::string(LOCKSTEP_SOURCE_DIR) +
                               "/golden/families/qwen3_5/qwen3_5.gguf");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().n_nextn, 0);
  auto be = Make("cpu");
  auto d = spec::MakeDrafter(**m, *be, "self");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("has no MTP block"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("qwen35.nextn_predict_layers"), std::string::npos)
      << d.status();
}

// `lockstep run --draft self` as a user runs it: the boot line, the same text as plain decoding
// (greedy and coupled), and the refusal of a file without an MTP block (exit 2, the sentence).
TEST(MtpCli, RunDraftSelfSaysSoAndPrintsThePlainText) {
  const std::string model = Dir("qwen3_5") + "qwen3_5_mtp.gguf";
  for (const char* sampling : {"--temp 0", "--temp 0.9 --seed 11"}) {
    const std::string args = "run --model " + model + " --prompt 'the quick brown fox' -n 16 " +
                             sampling + " --quiet";
    const testing::Ran plain = testing::RunLockstep(args);
    const testing::Ran spec = testing::RunLockstep(args + " --draft self --spec-k 3");
    EXPECT_EQ(plain.exit_code, 0) << plain.out;
    EXPECT_EQ(spec.exit_code, 0) << spec.out;
    EXPECT_FALSE(plain.out.empty());
    EXPECT_EQ(spec.out, plain.out) << sampling;
  }
  const testing::Ran boot =
      testing::RunLockstep("run --model " + model + " --prompt 'the quick' -n 4 --draft self");
  EXPECT_EQ(boot.exit_code, 0) << boot.out;
  EXPECT_NE(boot.out.find("drafter: the model drafts for itself with its MTP head (qwen35 "
                          "blk.8.nextn, 1 block), K = 4"),
            std::string::npos)
      << boot.out;
  EXPECT_NE(boot.out.find("speculative (mtp)"), std::string::npos) << boot.out;
  const std::string plain_file =
      std::string(LOCKSTEP_SOURCE_DIR) + "/golden/families/qwen3_5/qwen3_5.gguf";
  const testing::Ran none =
      testing::RunLockstep("run --model " + plain_file + " --prompt 'the quick' -n 4 --draft self");
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.out.find(plain_file + ": --draft self: the target model"), std::string::npos)
      << none.out;
  EXPECT_NE(none.out.find("has no MTP block"), std::string::npos) << none.out;
}

}  // namespace
}  // namespace lockstep
