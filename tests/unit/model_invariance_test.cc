// The cpu backend's forward is bitwise invariant to thread count, batch composition and prefill
// chunking (DESIGN.md §1), on the tiny golden models of every family.
#include <cstring>
#include <random>
#include <string>

#include "engine/models/model.h"
#include "gtest/gtest.h"
#include "oracle/make_backend.h"

namespace lockstep {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/";

std::vector<float> RunAlone(const models::Model& m, backend::Backend& be,
                            const std::vector<int32_t>& ids) {
  models::KvCache cache(m.config(), static_cast<int64_t>(ids.size()));
  models::BatchEntry e{&cache, ids};
  std::vector<float> logits;
  EXPECT_TRUE(models::Forward(m, be, std::span(&e, 1), true, &logits).ok());
  return logits;
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

  auto one = oracle::MakeBackend("cpu", 1);
  ASSERT_TRUE(one.ok());
  const std::vector<float> base = RunAlone(m, **one, ids);
  for (int threads : {2, 3, 5}) {
    auto be = oracle::MakeBackend("cpu", threads);
    ASSERT_TRUE(be.ok());
    EXPECT_TRUE(BitEqual(RunAlone(m, **be, ids), base)) << "threads " << threads;
  }

  // Chunked prefill: every split point, each chunk's logits equal the one-pass rows.
  const int64_t n_vocab = m.config().n_vocab;
  for (size_t split = 1; split < ids.size(); ++split) {
    models::KvCache cache(m.config(), static_cast<int64_t>(ids.size()));
    std::vector<float> all, part;
    for (auto [lo, hi] : {std::pair<size_t, size_t>{0, split}, {split, ids.size()}}) {
      models::BatchEntry e{&cache, std::span<const int32_t>(ids).subspan(lo, hi - lo)};
      ASSERT_TRUE(models::Forward(m, **one, std::span(&e, 1), true, &part).ok());
      all.insert(all.end(), part.begin(), part.end());
    }
    EXPECT_TRUE(BitEqual(all, base)) << "chunk split at " << split;
  }

  // Batch: the same request beside random neighbours (with history of random depth), any slot.
  for (int slot = 0; slot < 3; ++slot) {
    std::vector<models::KvCache> caches;
    std::vector<std::vector<int32_t>> prompts;
    caches.reserve(3);
    for (int s = 0; s < 3; ++s) {
      caches.emplace_back(m.config(), 64);
      if (s == slot) {
        prompts.push_back(ids);
        continue;
      }
      // Neighbour history first, so neighbours sit at other depths.
      std::vector<int32_t> hist = RandomIds(rng, 1 + rng() % 9, vocab);
      models::BatchEntry h{&caches[s], hist};
      std::vector<float> ignored;
      ASSERT_TRUE(models::Forward(m, **one, std::span(&h, 1), false, &ignored).ok());
      prompts.push_back(RandomIds(rng, 1 + rng() % 7, vocab));
    }
    std::vector<models::BatchEntry> batch;
    for (int s = 0; s < 3; ++s) batch.push_back({&caches[s], prompts[s]});
    std::vector<float> logits;
    ASSERT_TRUE(models::Forward(m, **one, batch, true, &logits).ok());
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
