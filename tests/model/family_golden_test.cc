// Tiny random models of the newer families (golden/families/<family>/, oracle/gen_family_golden.py):
// the GGUF written by llama.cpp's convert_hf_to_gguf.py, the logits by transformers' eager float32
// forward. lockstep's forward on ref and cpu must match (tolerances of the tiny goldens,
// engine/core/tolerances.h) on every position of three prompts and on a teacher-forced decode,
// one token per step through the paged KV cache (docs/models.md).
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/compare.h"
#include "engine/core/npy.h"
#include "engine/core/tolerances.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/models/stage_link.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_manifest.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/families/";

// The families with a golden from oracle/gen_family_golden.py (qwen3_next and qwen3_5 have theirs in
// gdn_golden_test.cc).
const char* const kFamilies[] = {"qwen3_moe", "qwen3_5_moe", "gemma4_text"};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct Case {
  std::string family;
  std::string backend;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.family << "/" << c.backend; }

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* f : kFamilies) {
    for (const char* b : {"ref", "cpu"}) cases.push_back({f, b});
  }
  return cases;
}

// Holds `logits` [rows, n_vocab] to `golden` as the tiny goldens do; `what` names the rows.
void ExpectMatches(const std::vector<float>& logits, const npy::Array& golden, int64_t rows,
                   int64_t n_vocab, const std::string& what) {
  ASSERT_EQ(golden.shape, (std::vector<int64_t>{rows, n_vocab})) << what;
  ASSERT_EQ(static_cast<int64_t>(logits.size()), rows * n_vocab) << what;
  auto s = compare::Logits(logits.data(), golden.data.data(), rows, n_vocab,
                           tol::kGoldenDecisiveMargin);
  ASSERT_TRUE(s.ok()) << what;
  SCOPED_TRACE(what + ": " + compare::Describe(*s));
  std::printf("[ compare ] %s: nmse %.3g, max KL %.3g, decisive argmax %lld/%lld\n", what.c_str(),
              s->nmse, s->max_kl, static_cast<long long>(s->decisive_agree),
              static_cast<long long>(s->decisive));
  EXPECT_EQ(s->nan_a + s->nan_b, 0);
  EXPECT_LE(s->nmse, tol::kTinyGoldenNmse);
  EXPECT_EQ(s->decisive_agree, s->decisive);
  EXPECT_LE(s->max_kl, tol::kTinyGoldenMaxKl);
}

// Gemma 4: the layer kinds, per-layer head dims, RoPE bases, the KV-shared layers' sources, the
// double-wide FFNs, the per-layer inputs and the softcap, as transformers' config has them.
void ExpectGemma4Config(const models::Config& cfg, const nlohmann::json& hf) {
  const auto types = hf.at("layer_types").get<std::vector<std::string>>();
  const nlohmann::json& plc = hf.at("per_layer_config");
  const nlohmann::json& rope = hf.at("rope_parameters");
  const int64_t n_shared = hf.at("num_kv_shared_layers").get<int64_t>();
  const int64_t first_shared = cfg.n_layer - n_shared;
  EXPECT_EQ(cfg.n_embd_per_layer, hf.at("hidden_size_per_layer_input").get<int64_t>());
  EXPECT_EQ(cfg.final_softcap, hf.at("final_logit_softcapping").get<float>());
  EXPECT_EQ(cfg.attn_scale, 1.0f);
  for (int64_t il = 0; il < cfg.n_layer; ++il) {
    SCOPED_TRACE("layer " + std::to_string(il));
    const models::LayerConfig& l = cfg.layers[il];
    const bool sliding = types[il] == "sliding_attention";
    const std::string key = std::to_string(il);
    const int64_t hd = plc.contains(key) ? plc.at(key).at("head_dim").get<int64_t>()
                                         : hf.at("head_dim").get<int64_t>();
    EXPECT_EQ(l.sliding, sliding);
    EXPECT_EQ(cfg.Dims(il).head_dim, hd);
    EXPECT_EQ(l.rope_base, rope.at(types[il]).at("rope_theta").get<float>());
    EXPECT_EQ(l.rope_freqs, !sliding);  // proportional RoPE on full layers
    if (sliding) {
      EXPECT_EQ(l.window, hf.at("sliding_window").get<int64_t>());
    }
    const bool wide = hf.at("use_double_wide_mlp").get<bool>() && il >= first_shared;
    EXPECT_EQ(cfg.Dims(il).n_ff, hf.at("intermediate_size").get<int64_t>() * (wide ? 2 : 1));
    int64_t src = -1;  // transformers: the last layer of the same type before the shared ones
    if (il >= first_shared) {
      for (int64_t j = first_shared - 1; j >= 0 && src < 0; --j) {
        if (types[j] == types[il]) src = j;
      }
    }
    EXPECT_EQ(l.kv_source, src);
  }
}

class FamilyGolden : public ::testing::TestWithParam<Case> {};

// The hyperparameters lockstep read from the converter's GGUF are transformers' config.
TEST_P(FamilyGolden, ConfigIsTransformers) {
  const Case& c = GetParam();
  const std::string d = kDir + c.family + "/";
  auto model = models::Model::Load(d + c.family + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const nlohmann::json meta = ReadJson(d + "meta.json");
  const nlohmann::json& hf = meta.at("config");
  const models::Config& cfg = (*model)->config();
  EXPECT_EQ(cfg.arch, meta.at("general.architecture").get<std::string>());
  EXPECT_EQ(cfg.n_layer, hf.at("num_hidden_layers").get<int64_t>());
  EXPECT_EQ(cfg.n_embd, hf.at("hidden_size").get<int64_t>());
  EXPECT_EQ(cfg.n_vocab, hf.at("vocab_size").get<int64_t>());
  EXPECT_EQ(cfg.n_head, hf.at("num_attention_heads").get<int64_t>());
  EXPECT_EQ(cfg.n_kv_head, hf.at("num_key_value_heads").get<int64_t>());
  if (cfg.arch == "gemma4") ExpectGemma4Config(cfg, hf);
  if (cfg.HasMoe()) {
    // transformers 5 serializes Qwen3Moe's num_experts as num_local_experts (the full config,
    // use_diff=False); Qwen3_5Moe keeps num_experts.
    const char* n_key = hf.contains("num_local_experts") ? "num_local_experts" : "num_experts";
    ASSERT_TRUE(hf.contains(n_key)) << "meta.json config lacks num_local_experts / num_experts";
    EXPECT_EQ(cfg.moe.n_expert, hf.at(n_key).get<int64_t>());
    EXPECT_EQ(cfg.moe.n_expert_used, hf.at("num_experts_per_tok").get<int64_t>());
    EXPECT_EQ(cfg.moe.n_ff_exp, hf.at("moe_intermediate_size").get<int64_t>());
    // Qwen3_5Moe has no norm_topk_prob: its router renormalizes unconditionally.
    EXPECT_EQ(cfg.moe.norm_topk, hf.value("norm_topk_prob", true));
    EXPECT_EQ(cfg.moe.n_ff_shexp, hf.value("shared_expert_intermediate_size", int64_t{0}));
    EXPECT_EQ(cfg.moe.shared_gate, hf.contains("shared_expert_intermediate_size"));
    for (int64_t il = 0; il < cfg.n_layer; ++il) {
      EXPECT_EQ(cfg.layers[il].ffn == models::FfnKind::kMoe,
                (il + 1) % hf.value("decoder_sparse_step", 1) == 0)
          << "layer " << il;
    }
  }
}

// Every position of three prompts, one step each.
TEST_P(FamilyGolden, PromptLogitsMatchTransformers) {
  const Case& c = GetParam();
  const std::string d = kDir + c.family + "/";
  auto model = models::Model::Load(d + c.family + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  auto be = backend::MakeBackend(c.backend, {2});
  ASSERT_TRUE(be.ok()) << be.status();
  const int64_t n_vocab = (*model)->config().n_vocab;
  int covered = 0;
  for (int i = 0; i < 3; ++i) {
    const auto ids = ReadJson(d + "prompt" + std::to_string(i) + ".json").get<std::vector<int32_t>>();
    auto golden = npy::Read(d + "logits" + std::to_string(i) + ".npy");
    ASSERT_TRUE(golden.ok()) << golden.status();
    auto logits = models::PromptLogits(**model, **be, ids, /*all=*/true);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const int64_t T = static_cast<int64_t>(ids.size());
    ExpectMatches(*logits, *golden, T, n_vocab, "prompt " + std::to_string(i));
    covered += static_cast<int>(T);
  }
  std::printf("[ covered ] %s on %s: 3 prompts, %d positions x %lld vocab\n", c.family.c_str(),
              c.backend.c_str(), covered, static_cast<long long>(n_vocab));
}

// The prompt as one prefill step, then each continuation token as its own step through the paged
// KV cache (block size 4, so the decode crosses blocks), against transformers' cached decode.
TEST_P(FamilyGolden, TeacherForcedDecodeMatchesTransformers) {
  const Case& c = GetParam();
  const std::string d = kDir + c.family + "/";
  auto model = models::Model::Load(d + c.family + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  auto be = backend::MakeBackend(c.backend, {2});
  ASSERT_TRUE(be.ok()) << be.status();
  const nlohmann::json run = ReadJson(d + "decode.json");
  const auto prompt = run.at("prompt").get<std::vector<int32_t>>();
  const auto cont = run.at("continuation").get<std::vector<int32_t>>();
  auto golden = npy::Read(d + "decode_logits.npy");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const int64_t n_vocab = (*model)->config().n_vocab;
  const int64_t n_tokens = static_cast<int64_t>(prompt.size() + cont.size());
  models::RunnerOptions o;
  o.max_step_tokens = static_cast<int64_t>(prompt.size());
  o.max_logit_rows = 1;
  o.block_size = 4;
  o.n_blocks = (n_tokens + o.block_size - 1) / o.block_size;
  bool hybrid = false;  // Gated DeltaNet layers keep a recurrent state per sequence
  for (const models::LayerConfig& l : (*model)->config().layers) {
    hybrid = hybrid || l.mixer == models::MixerKind::kGatedDeltaNet;
  }
  if (hybrid) o.n_state_slots = 1;
  auto runner = models::Runner::Create(**model, **be, o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  // Blocks in reverse order, so that a position-to-slot mistake cannot pass by accident.
  std::vector<int32_t> blocks(o.n_blocks);
  for (int64_t b = 0; b < o.n_blocks; ++b) blocks[b] = static_cast<int32_t>(o.n_blocks - 1 - b);
  std::vector<float> step, all;
  models::StepEntry prefill{prompt, 0, blocks, 1};
  if (hybrid) prefill.state_slot = 0;
  ASSERT_TRUE((*runner)->Forward(std::span(&prefill, 1), &step).ok());
  for (size_t i = 0; i < cont.size(); ++i) {
    models::StepEntry e{std::span(&cont[i], 1), static_cast<int64_t>(prompt.size() + i), blocks, 1};
    if (hybrid) e.state_slot = 0;
    const absl::Status s = (*runner)->Forward(std::span(&e, 1), &step);
    ASSERT_TRUE(s.ok()) << s;
    all.insert(all.end(), step.begin(), step.end());
  }
  ExpectMatches(all, *golden, static_cast<int64_t>(cont.size()), n_vocab, "decode steps");
  std::printf("[ covered ] %s on %s: prefill %zu + %zu decode steps\n", c.family.c_str(),
              c.backend.c_str(), prompt.size(), cont.size());
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGolden, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           return info.param.family + "_" + info.param.backend;
                         });

// Pipeline stages do not carry gemma4's per-layer inputs or its shared KV: a split is refused by
// name rather than computed wrong.
TEST(FamilyGoldenGemma4, PipelineSplitIsRefusedByName) {
  auto model = models::Model::Load(kDir + "gemma4_text/gemma4_text.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  auto be = backend::MakeBackend("cpu", {1});
  ASSERT_TRUE(be.ok()) << be.status();
  auto stage_be = backend::MakeBackend("cpu", {1});
  ASSERT_TRUE(stage_be.ok()) << stage_be.status();
  models::LocalStageLinks links(2);
  std::thread stage([&] { (void)models::RunStage(**model, **stage_be, links.rank(1)); });
  const std::vector<int32_t> ids = {1, 2, 3};
  auto logits = models::PromptLogits(**model, **be, ids, false, nullptr, quant::KvFormat::kF32,
                                     quant::KvFormat::kF32, {0, 3, 6}, &links.rank(0));
  links.Close();
  stage.join();
  ASSERT_FALSE(logits.ok());
  EXPECT_NE(logits.status().message().find("per-layer inputs"), std::string_view::npos)
      << logits.status();
}

// Every file of every family's golden hashes to its MANIFEST.json entry; nothing is unlisted.
TEST(FamilyGoldenManifest, EveryFileMatchesItsSha256) {
  for (const char* f : kFamilies) {
    for (const std::string& fail : ::lockstep::testing::CheckManifest(kDir + f)) {
      ADD_FAILURE() << f << ": " << fail;
    }
  }
}

}  // namespace
}  // namespace lockstep
