// Tiny random llama / qwen3 / gemma3 models: lockstep's forward (ref and cpu backends) against
// golden logits from Hugging Face transformers (oracle/gen_tiny_golden.py, golden/tiny/).
#include <cmath>
#include <fstream>
#include <string>

#include "engine/core/compare.h"
#include "engine/core/npy.h"
#include "engine/core/tolerances.h"
#include "engine/models/model.h"
#include "gtest/gtest.h"
#include "tests/support/golden_manifest.h"
#include "nlohmann/json.hpp"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/";

std::vector<int32_t> ReadPrompt(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).get<std::vector<int32_t>>();
}

struct Case {
  std::string arch;
  std::string backend;
};

// Readable test parameters in CTest/gtest output.
void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << "/" << c.backend; }

class TinyGolden : public ::testing::TestWithParam<Case> {};

TEST_P(TinyGolden, MatchesTransformers) {
  const Case& c = GetParam();
  auto model = models::Model::Load(kDir + c.arch + "/" + c.arch + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  auto be = backend::MakeBackend(c.backend, {2});
  ASSERT_TRUE(be.ok()) << be.status();
  const int64_t n_vocab = (*model)->config().n_vocab;
  int covered = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string p = kDir + c.arch + "/";
    std::vector<int32_t> ids = ReadPrompt(p + "prompt" + std::to_string(i) + ".json");
    auto golden = npy::Read(p + "logits" + std::to_string(i) + ".npy");
    ASSERT_TRUE(golden.ok()) << golden.status();
    ASSERT_EQ(golden->shape, (std::vector<int64_t>{static_cast<int64_t>(ids.size()), n_vocab}));
    auto result = models::PromptLogits(**model, **be, ids, /*all=*/true);
    ASSERT_TRUE(result.ok()) << result.status();
    const std::vector<float>& logits = *result;
    auto s = compare::Logits(logits.data(), golden->data.data(), static_cast<int64_t>(ids.size()),
                             n_vocab, tol::kGoldenDecisiveMargin);
    ASSERT_TRUE(s.ok());
    SCOPED_TRACE(compare::Describe(*s));
    EXPECT_EQ(s->nan_a + s->nan_b, 0);
    EXPECT_LE(s->nmse, tol::kTinyGoldenNmse);
    EXPECT_EQ(s->decisive_agree, s->decisive);
    EXPECT_LE(s->max_kl, tol::kTinyGoldenMaxKl);
    covered += static_cast<int>(ids.size());
  }
  std::printf("[ covered ] %s on %s: 3 prompts, %d positions x %lld vocab\n", c.arch.c_str(),
              c.backend.c_str(), covered, static_cast<long long>(n_vocab));
}

INSTANTIATE_TEST_SUITE_P(
    Archs, TinyGolden,
    ::testing::Values(Case{"llama", "ref"}, Case{"llama", "cpu"}, Case{"qwen3", "ref"},
                      Case{"qwen3", "cpu"}, Case{"gemma3", "ref"}, Case{"gemma3", "cpu"}),
    [](const auto& info) { return info.param.arch + "_" + info.param.backend; });

// Every file of golden/tiny hashes to its MANIFEST.json entry and nothing is unlisted.
TEST(TinyGoldenManifest, EveryFileMatchesItsSha256) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny";
  for (const std::string& f : ::lockstep::testing::CheckManifest(dir)) {
    ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace lockstep
