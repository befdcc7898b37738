// The real models (SmolLM2-135M Q4_1, Gemma 3 270M Q4_K_M) against golden logits from
// transformers loading the same GGUF (oracle/gen_real_golden.py, golden/real/). The golden keeps,
// per position, the full row's log-sum-exp and the top-256 (id, logit) pairs.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/core/compare.h"
#include "engine/core/npy.h"
#include "engine/core/tolerances.h"
#include "engine/models/model.h"
#include "engine/store/model_store.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/golden_manifest.h"
#include "nlohmann/json.hpp"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/real/";

struct Case {
  std::string model;
  std::string backend;
  int prompts;  // how many of the golden's prompts to run (ref is slow)
  // transformers 5.17's GGUF tokenizer conversion for gemma3 (on the device that made the
  // golden) does not apply merges and adds no BOS: its ids are valid model input but no
  // tokenizer golden. Gemma's tokenizer is pinned by golden/tokenizer/ (transformers 5.24).
  bool check_tokens;
};

// Readable test parameters in CTest/gtest output.
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << c.backend; }

class RealGolden : public ::testing::TestWithParam<Case> {};

TEST_P(RealGolden, MatchesTransformers) {
  const Case& c = GetParam();
  const store::KnownModel* km = store::FindKnownModel(c.model);
  ASSERT_NE(km, nullptr);
  ASSERT_TRUE(store::IsCached(*km)) << store::CachedPath(*km)
                                      << " is missing: run `build/bin/lockstep pull " << c.model
                                      << "` (make test does)";
  std::ifstream in(kDir + c.model + ".json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  ASSERT_EQ(meta["model_sha256"], km->sha256) << "golden was made from another file";
  auto model = models::Model::Load(store::CachedPath(*km));
  ASSERT_TRUE(model.ok()) << model.status();
  auto tok = tokenizer::Tokenizer::FromGguf((*model)->file());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto be = backend::MakeBackend(c.backend, {0});
  ASSERT_TRUE(be.ok());
  const int64_t V = (*model)->config().n_vocab;
  int64_t positions = 0, decisive = 0;
  for (int i = 0; i < c.prompts; ++i) {
    const auto& p = meta["prompts"][i];
    const std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    // HF's tokenization of the prompt (with its BOS rule) is a second tokenizer golden.
    if (c.check_tokens) {
      EXPECT_EQ(tok->Encode(p["text"].get<std::string>(), tok->add_bos_default(), false), ids)
          << "prompt " << i;
    }
    auto g = npy::Read(kDir + c.model + ".p" + std::to_string(i) + ".npy");
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ(g->shape[0], static_cast<int64_t>(ids.size()));
    auto result = models::PromptLogits(**model, **be, ids, /*all=*/true);
    ASSERT_TRUE(result.ok()) << result.status();
    const std::vector<float>& logits = *result;
    for (size_t t = 0; t < ids.size() * V; ++t) {
      ASSERT_TRUE(std::isfinite(logits[t])) << "position " << t / V << " token " << t % V;
    }
    auto st = compare::TopKGolden(logits.data(), static_cast<int64_t>(ids.size()), V,
                                  g->data.data(), g->shape[1], tol::kGoldenDecisiveMargin);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_LE(st->max_lse_abs, tol::kRealGoldenLseAbs) << "position " << st->worst_lse_position;
    EXPECT_LE(st->max_abs, tol::kRealGoldenMaxAbs)
        << "position " << st->worst_abs_position << " token " << st->worst_abs_token;
    EXPECT_EQ(st->decisive_agree, st->decisive)
        << "first decisive flip at position " << st->first_decisive_flip;
    EXPECT_LE(st->nmse, tol::kRealGoldenNmse) << "prompt " << i;
    positions += st->positions;
    decisive += st->decisive;
    std::printf("[ golden ] %s %s prompt %d: %zu positions, top-%lld NMSE %.3g\n", c.model.c_str(),
                c.backend.c_str(), i, ids.size(), static_cast<long long>(st->k), st->nmse);
  }
  std::printf("[ covered ] %s on %s: %lld positions, %lld decisive\n", c.model.c_str(),
              c.backend.c_str(), static_cast<long long>(positions), static_cast<long long>(decisive));
}

INSTANTIATE_TEST_SUITE_P(Models, RealGolden,
                         ::testing::Values(Case{"smollm2-135m", "cpu", 3, true},
                                           Case{"smollm2-135m", "ref", 1, true},
                                           Case{"gemma3-270m", "cpu", 3, false},
                                           Case{"gemma3-270m", "ref", 1, false}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.backend;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

// Every file of golden/real hashes to its MANIFEST.json entry and nothing is unlisted.
TEST(RealGoldenManifest, EveryFileMatchesItsSha256) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/real";
  for (const std::string& f : ::lockstep::testing::CheckManifest(dir)) {
    ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace lockstep
