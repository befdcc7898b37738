// compare::TopKGolden (the compact-golden comparison of golden/real and `compare --golden-topk`)
// on hand-built rows whose log-sum-exp, errors and flips are worked out by hand below.
#include <cmath>
#include <vector>

#include "engine/core/compare.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Vocabulary 4, K = 2. Position 0: logits {0, ln 3, 0, 0} -> lse = ln(1 + 3 + 1 + 1) = ln 6,
// top-2 ids 1 (ln 3), then 0 (0). Position 1: logits {2, 0, 0, 0}: lse = ln(e^2 + 3).
std::vector<float> Ours() {
  return {0.f, std::log(3.f), 0.f, 0.f, 2.f, 0.f, 0.f, 0.f};
}

std::vector<float> Golden() {
  return {std::log(6.f),          1.f, 0.f, std::log(3.f), 0.f,  //
          std::log(std::exp(2.f) + 3.f), 0.f, 3.f, 2.f, 0.f};
}

TEST(CompareTopK, ExactRowsAgreeEverywhere) {
  const auto ours = Ours(), golden = Golden();
  auto s = compare::TopKGolden(ours.data(), 2, 4, golden.data(), 5, 1e-3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->k, 2);
  EXPECT_LT(s->max_lse_abs, 1e-6);
  EXPECT_LT(s->max_abs, 1e-6);
  EXPECT_LT(s->nmse, 1e-12);
  EXPECT_EQ(s->top1_agree, 2);
  EXPECT_EQ(s->decisive, 2);  // gaps ln 3 and 2
  EXPECT_EQ(s->decisive_agree, 2);
  EXPECT_EQ(s->first_decisive_flip, -1);
}

TEST(CompareTopK, ErrorsAreLocatedAndFlipsFound) {
  auto ours = Ours();
  const auto golden = Golden();
  ours[4 + 3] = 2.5f;  // position 1, token 3 now beats token 0: a decisive flip, lse moves
  auto s = compare::TopKGolden(ours.data(), 2, 4, golden.data(), 5, 1e-3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->first_decisive_flip, 1);
  EXPECT_EQ(s->decisive_agree, 1);
  EXPECT_EQ(s->worst_lse_position, 1);
  // lse(2, 0, 0, 2.5) - lse(2, 0, 0, 0), by hand.
  const double want = std::log(std::exp(2.0) + 2 + std::exp(2.5)) - std::log(std::exp(2.0) + 3);
  EXPECT_NEAR(s->max_lse_abs, want, 1e-5);
  // Position 1's golden top-2 is {id 0: 2, id 3: 0}, so token 3's error 2.5 is the max_abs.
  EXPECT_NEAR(s->max_abs, 2.5, 1e-6);
  EXPECT_EQ(s->worst_abs_position, 1);
  EXPECT_EQ(s->worst_abs_token, 3);
}

TEST(CompareTopK, BadGoldensAreRefusedWithTheirPosition) {
  const auto ours = Ours();
  auto golden = Golden();
  golden[5 + 2] = 7.f;  // position 1's second id is outside the 4-token vocabulary
  auto s = compare::TopKGolden(ours.data(), 2, 4, golden.data(), 5, 1e-3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("position 1 entry 1"), std::string::npos) << s.status();
  golden[5 + 2] = 2.5f;  // not an integer id
  EXPECT_FALSE(compare::TopKGolden(ours.data(), 2, 4, golden.data(), 5, 1e-3).ok());
  EXPECT_FALSE(compare::TopKGolden(ours.data(), 2, 4, golden.data(), 4, 1e-3).ok());  // even width
}

TEST(CompareTopK, NonFiniteLogitsAreCounted) {
  auto ours = Ours();
  const auto golden = Golden();
  ours[2] = NAN;
  auto s = compare::TopKGolden(ours.data(), 2, 4, golden.data(), 5, 1e-3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->non_finite, 1);
}

}  // namespace
}  // namespace lockstep
