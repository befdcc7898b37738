// models::KvPool / ReserveKv / TruncateKv directly. The copy-on-write path is checked here
// because no engine path reaches it today (ci/properties --mutants: a CoW mutant survives every
// property, since the prefix cache shares full blocks only), and a defensive path that nothing
// exercises is a bug waiting for the first caller that does.
#include <utility>
#include <vector>

#include "engine/models/kv_pool.h"
#include "gtest/gtest.h"

namespace lockstep::models {
namespace {

TEST(KvPool, ReserveCopiesASharedPartialBlockBeforeWritingIntoIt) {
  KvPool pool(8, 4);
  std::vector<std::pair<int32_t, int32_t>> copies;
  auto copy = [&](int32_t src, int32_t dst) {
    copies.emplace_back(src, dst);
    return absl::OkStatus();
  };
  SeqKv a;
  ASSERT_TRUE(ReserveKv(pool, a, 6, copy).ok());  // blocks for positions 0..5: 2 blocks
  a.n_tokens = 6;
  ASSERT_EQ(a.blocks.size(), 2u);
  EXPECT_TRUE(copies.empty());  // nothing shared yet
  // b shares a's blocks (as a resumed or forked sequence would), then writes position 6, which
  // lands in the shared, partially filled second block.
  SeqKv b = a;
  for (int32_t blk : b.blocks) pool.Ref(blk);
  ASSERT_TRUE(ReserveKv(pool, b, 7, copy).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, a.blocks[1]);          // the shared block is the source
  EXPECT_EQ(copies[0].second, b.blocks[1]);         // b's private copy is the destination
  EXPECT_NE(b.blocks[1], a.blocks[1]);
  EXPECT_EQ(b.blocks[0], a.blocks[0]);              // the full block stays shared
  EXPECT_EQ(pool.refcount(a.blocks[0]), 2);
  EXPECT_EQ(pool.refcount(a.blocks[1]), 1);
  EXPECT_EQ(pool.refcount(b.blocks[1]), 1);
  // A block boundary needs no copy: a fresh block is appended.
  SeqKv c = a;
  c.n_tokens = 4;
  c.blocks.resize(1);
  pool.Ref(c.blocks[0]);
  ASSERT_TRUE(ReserveKv(pool, c, 5, copy).ok());
  EXPECT_EQ(copies.size(), 1u);
  ReleaseKv(pool, a);
  ReleaseKv(pool, b);
  ReleaseKv(pool, c);
  EXPECT_EQ(pool.n_free(), pool.n_blocks());
}

TEST(KvPool, FailedCopyLeavesTheSequenceAndPoolAsTheyWere) {
  KvPool pool(4, 4);
  auto ok = [](int32_t, int32_t) { return absl::OkStatus(); };
  SeqKv a;
  ASSERT_TRUE(ReserveKv(pool, a, 3, ok).ok());
  a.n_tokens = 3;
  SeqKv b = a;
  pool.Ref(b.blocks[0]);
  const int64_t free_before = pool.n_free();
  auto broken = [](int32_t, int32_t) { return absl::InternalError("device fault"); };
  EXPECT_FALSE(ReserveKv(pool, b, 4, broken).ok());
  EXPECT_EQ(b.blocks, a.blocks);
  EXPECT_EQ(pool.n_free(), free_before);
  EXPECT_EQ(pool.refcount(a.blocks[0]), 2);
}

TEST(KvPool, TruncateReturnsWholeBlocksOnly) {
  KvPool pool(8, 4);
  auto ok = [](int32_t, int32_t) { return absl::OkStatus(); };
  SeqKv a;
  ASSERT_TRUE(ReserveKv(pool, a, 11, ok).ok());
  a.n_tokens = 11;
  TruncateKv(pool, a, 5);
  EXPECT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(a.n_tokens, 5);
  EXPECT_EQ(pool.n_free(), 6);
}

}  // namespace
}  // namespace lockstep::models
