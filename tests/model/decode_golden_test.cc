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
#include "tests/support/golden_manifest.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/decode/";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The prompt in one step (its last row's logits kept), then one token of `fed` per step:
// logits [fed.size() + 1, V] for positions P-1 .. P-1+fed.size(). Block b of the sequence is
// pool block 7b mod n, so the block table is not an identity map.
absl::StatusOr<std::vector<float>> DecodeFed(const models::Model& model, backend::Backend& be,
                                             const std::vector<int32_t>& prompt,
                                             const std::vector<int32_t>& fed) {
  const int64_t P = static_cast<int64_t>(prompt.size()), n = static_cast<int64_t>(fed.size());
  models::RunnerOptions o;
  o.max_step_tokens = P;
  o.max_logit_rows = 1;
  o.block_size = 16;
  o.n_blocks = (P + n + 15) / 16 + 3;
  if (o.n_blocks % 7 == 0) ++o.n_blocks;
  auto runner = models::Runner::Create(model, be, o);
  if (!runner.ok()) return runner.status();
  std::vector<int32_t> blocks(o.n_blocks), tokens = prompt;
  for (int64_t b = 0; b < o.n_blocks; ++b) blocks[b] = static_cast<int32_t>(b * 7 % o.n_blocks);
  tokens.insert(tokens.end(), fed.begin(), fed.end());
  std::vector<float> all, row;
  for (int64_t s = 0; s <= n; ++s) {
    const int64_t start = s == 0 ? 0 : P + s - 1, len = s == 0 ? P : 1;
    models::StepEntry e{std::span<const int32_t>(tokens).subspan(start, len), start,
                        std::span<const int32_t>(blocks).first((start + len + 15) / 16), 1};
    if (absl::Status st = (*runner)->Forward(std::span(&e, 1), &row); !st.ok()) return st;
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
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
  auto logits = DecodeFed(**model, **be, prompt, generated);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int64_t V = cfg.n_vocab, rows = g->shape[0];
  auto st = compare::TopKGolden(logits->data(), rows, V, g->data.data(), g->shape[1],
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
