// The cpu backend's forward is bitwise invariant to thread count, batch composition and prefill
// chunking (DESIGN.md §1), on the tiny golden models of every family.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "engine/models/model.h"
#include "gtest/gtest.h"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/";

std::vector<float> RunAlone(const models::Model& m, backend::Backend& be,
                            const std::vector<int32_t>& ids) {
  auto logits = models::PromptLogits(m, be, ids, /*all=*/true);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : std::vector<float>{};
}

// A runner over a pool of 64 blocks of 4 tokens, blocks handed out in a shuffled order so that
// block tables are fragmented.
std::unique_ptr<models::Runner> MakeRunner(const models::Model& m, backend::Backend& be) {
  models::RunnerOptions o;
  o.max_step_tokens = 64;
  o.max_logit_rows = 64;
  o.block_size = 4;
  o.n_blocks = 64;
  auto r = models::Runner::Create(m, be, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(*r);
}

std::vector<int32_t> Blocks(std::vector<int32_t>& free, int n) {
  std::vector<int32_t> out(free.end() - n, free.end());
  free.resize(free.size() - n);
  return out;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<int32_t> RandomIds(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

class Invariance : public ::testing::TestWithParam<std::string> {};

TEST_P(Invariance, ThreadsBatchChunks) {
  auto model = models::Model::Load(kDir + GetParam() + "/" + GetParam() + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const models::Model& m = **model;
  const int vocab = static_cast<int>(m.config().n_vocab);
  const uint32_t seed = 1234;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  const std::vector<int32_t> ids = RandomIds(rng, 11, vocab);

  auto one = backend::MakeBackend("cpu", {1});
  ASSERT_TRUE(one.ok());
  const std::vector<float> base = RunAlone(m, **one, ids);
  for (int threads : {2, 3, 5}) {
    auto be = backend::MakeBackend("cpu", {threads});
    ASSERT_TRUE(be.ok());
    EXPECT_TRUE(BitEqual(RunAlone(m, **be, ids), base)) << "threads " << threads;
  }

  // Chunked prefill: every split point, each chunk's logits equal the one-pass rows.
  const int64_t n_vocab = m.config().n_vocab;
  std::unique_ptr<models::Runner> runner = MakeRunner(m, **one);
  std::vector<int32_t> free(64);
  for (int b = 0; b < 64; ++b) free[b] = b;
  std::shuffle(free.begin(), free.end(), rng);
  for (size_t split = 1; split < ids.size(); ++split) {
    const std::vector<int32_t> blocks = Blocks(free, 3);
    std::vector<float> all, part;
    for (auto [lo, hi] : {std::pair<size_t, size_t>{0, split}, {split, ids.size()}}) {
      models::StepEntry e{std::span<const int32_t>(ids).subspan(lo, hi - lo),
                          static_cast<int64_t>(lo), blocks, static_cast<int64_t>(hi - lo)};
      ASSERT_TRUE(runner->Forward(std::span(&e, 1), &part).ok());
      all.insert(all.end(), part.begin(), part.end());
    }
    EXPECT_TRUE(BitEqual(all, base)) << "chunk split at " << split;
    free.insert(free.begin(), blocks.begin(), blocks.end());
  }

  // Batch: the same request beside random neighbours (with history of random depth), any slot.
  for (int slot = 0; slot < 3; ++slot) {
    std::vector<std::vector<int32_t>> prompts, tables;
    std::vector<int64_t> starts;
    for (int s = 0; s < 3; ++s) {
      tables.push_back(Blocks(free, 5));
      if (s == slot) {
        prompts.push_back(ids);
        starts.push_back(0);
        continue;
      }
      // Neighbour history first, so neighbours sit at other depths.
      std::vector<int32_t> hist = RandomIds(rng, 1 + rng() % 9, vocab);
      models::StepEntry h{hist, 0, tables.back(), 0};
      std::vector<float> ignored;
      ASSERT_TRUE(runner->Forward(std::span(&h, 1), &ignored).ok());
      starts.push_back(static_cast<int64_t>(hist.size()));
      prompts.push_back(RandomIds(rng, 1 + rng() % 7, vocab));
    }
    std::vector<models::StepEntry> batch;
    for (int s = 0; s < 3; ++s) {
      batch.push_back({prompts[s], starts[s], tables[s], static_cast<int64_t>(prompts[s].size())});
    }
    std::vector<float> logits;
    ASSERT_TRUE(runner->Forward(batch, &logits).ok());
    for (const auto& t : tables) free.insert(free.begin(), t.begin(), t.end());
    int64_t row = 0;
    for (int s = 0; s < slot; ++s) row += static_cast<int64_t>(prompts[s].size());
    std::vector<float> mine(logits.begin() + row * n_vocab,
                            logits.begin() + (row + static_cast<int64_t>(ids.size())) * n_vocab);
    EXPECT_TRUE(BitEqual(mine, base)) << "slot " << slot;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, Invariance, ::testing::Values("llama", "qwen3", "gemma3"));

}  // namespace
}  // namespace lockstep
