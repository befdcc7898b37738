// Decode steps of the real models against transformers (oracle/gen_decode_golden.py,
// golden/decode/). transformers greedy-generated 160 tokens and the golden keeps its
// teacher-forced logits at the last prompt position and at every generated position (log-sum-exp
// + top-256, golden/real's compact form). Here the same ids go through lockstep's decode path:
// models::Runner over a paged KV pool with a scrambled block table, the prompt in one step, then
// one generated token per step, the cpu backend. Gemma 3's prompt starts with BOS and is longer
// than its 512-token sliding window. Bounds: tolerances.h kRealGolden* (the same float32
// comparison as real_golden_test, at more positions). docs/testing.md.
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/compare.h"
#include "engine/core/npy.h"
#include "engine/core/tolerances.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/store/model_store.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/engine_decode.h"
#include "tests/support/golden_manifest.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/decode/";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class DecodeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGolden, MatchesTransformers) {
  const std::string name = GetParam();
  for (const std::string& f : testing::CheckManifest(kDir)) ADD_FAILURE() << f;
  const store::KnownModel* km = store::FindKnownModel(name);
  ASSERT_NE(km, nullptr);
  ASSERT_TRUE(store::IsCached(*km)) << store::CachedPath(*km) << " is missing: run "
                                    << "`build/bin/lockstep pull " << name << "` (make test does)";
  const nlohmann::json meta = nlohmann::json::parse(ReadFile(kDir + name + ".json"));
  ASSERT_EQ(meta["model_sha256"], km->sha256) << "golden was made from another file";
  const auto prompt = meta["prompt_ids"].get<std::vector<int32_t>>();
  const auto generated = meta["generated_ids"].get<std::vector<int32_t>>();
  const int64_t P = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(meta["first_position"].get<int64_t>(), P - 1);
  ASSERT_GE(generated.size(), 128u) << "the golden must cover >= 128 decode steps";
  auto g = npy::Read(kDir + name + ".npy");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->shape[0], static_cast<int64_t>(generated.size()) + 1);

  auto model = models::Model::Load(store::CachedPath(*km));
  ASSERT_TRUE(model.ok()) << model.status();
  const models::Config& cfg = (*model)->config();
  auto tok = tokenizer::Tokenizer::FromGguf((*model)->file());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // The prompt transformers ran is the one lockstep would run: BOS first exactly when the
  // model's tokenizer adds one, and (where the golden has the text) lockstep's own ids.
  EXPECT_EQ(!prompt.empty() && prompt[0] == tok->bos_id(), tok->add_bos_default()) << name;
  if (meta["prompt_text"].is_string()) {
    EXPECT_EQ(tok->Encode(meta["prompt_text"].get<std::string>(), tok->add_bos_default(), false),
              prompt);
  } else {
    // Gemma's prompt is the head of golden/tokenizer's long paragraph (gen_decode_golden.py):
    // lockstep's own encoding of that text, BOS included, starts with the same ids.
    const nlohmann::json tj = nlohmann::json::parse(
        ReadFile(std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tokenizer/" + name + ".json"));
    std::string text;
    for (const auto& c : tj["cases"]) {
      const std::string t = c["text"].get<std::string>();
      if (t.rfind("The history of computing is a story of abstractions", 0) == 0) text = t;
    }
    ASSERT_FALSE(text.empty()) << "golden/tokenizer/" << name << ".json lost its long paragraph";
    std::vector<int32_t> ours = tok->Encode(text, tok->add_bos_default(), false);
    ASSERT_GE(ours.size(), prompt.size());
    ours.resize(prompt.size());
    EXPECT_EQ(ours, prompt);
  }
  int64_t window = 0;
  for (const models::LayerConfig& l : cfg.layers) window = std::max(window, l.window);
  if (window > 0) {
    EXPECT_GT(P, window) << "the prompt must outrun the sliding window";
    EXPECT_EQ(meta["config"]["sliding_window"].get<int64_t>(), window);
  }

  auto be = backend::MakeBackend("cpu", {0});
  ASSERT_TRUE(be.ok()) << be.status();
  auto decoded = testing_support::EngineDecode(**model, **be, prompt, generated,
                                               static_cast<int64_t>(generated.size()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const int64_t V = cfg.n_vocab, rows = g->shape[0];
  auto st = compare::TopKGolden(decoded->logits.data(), rows, V, g->data.data(), g->shape[1],
                                tol::kGoldenDecisiveMargin);
  ASSERT_TRUE(st.ok()) << st.status();
  SCOPED_TRACE(compare::Describe(*st));
  EXPECT_EQ(st->non_finite, 0);
  EXPECT_LE(st->max_lse_abs, tol::kRealGoldenLseAbs) << "row " << st->worst_lse_position;
  EXPECT_LE(st->max_abs, tol::kRealGoldenMaxAbs)
      << "row " << st->worst_abs_position << " token " << st->worst_abs_token;
  EXPECT_LE(st->nmse, tol::kRealGoldenNmse);
  EXPECT_EQ(st->decisive_agree, st->decisive)
      << "first decisive flip at row " << st->first_decisive_flip << " (position "
      << P - 1 + st->first_decisive_flip << ")";
  std::printf("[ golden ] %s decode: prompt %lld tokens%s, %zu decode steps (positions %lld..%lld),"
              " top-%lld NMSE %.3g, max |d| %.3g, max |d lse| %.3g, top-1 %lld/%lld decisive\n",
              name.c_str(), static_cast<long long>(P), prompt[0] == tok->bos_id() ? " (BOS)" : "",
              generated.size(), static_cast<long long>(P - 1),
              static_cast<long long>(P - 1 + rows - 1), static_cast<long long>(st->k), st->nmse,
              st->max_abs, st->max_lse_abs, static_cast<long long>(st->decisive_agree),
              static_cast<long long>(st->decisive));
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeGolden, ::testing::Values("smollm2-135m", "gemma3-270m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace lockstep
