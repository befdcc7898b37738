// Philox4x32 against Random123's published known-answer vectors, and the keying of the sampling
// noise: (seed, position, token) -> bits, independent of the order draws are made in.
#include "engine/sampling/philox.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "engine/sampling/law_stats.h"
#include "gtest/gtest.h"

namespace lockstep::sampling {
namespace {

struct Kat {
  int rounds;
  PhiloxCounter ctr;
  PhiloxKey key;
  PhiloxCounter expected;
};

// Random123 tests/kat_vectors (github.com/DEShawResearch/random123), the philox4x32 lines:
// name rounds ctr[4] key[2] expected[4].
constexpr Kat kKats[] = {
    {7,
     {0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {7,
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {7,
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
    {10,
     {0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {10,
     {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {10,
     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

// The generator is constexpr, so the default 10-round answer is also checked at compile time.
static_assert(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                         {0xa4093822, 0x299f31d0}) ==
              PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});

TEST(Philox, KnownAnswerVectors) {
  for (const Kat& k : kKats) {
    const PhiloxCounter got = Philox4x32(k.ctr, k.key, k.rounds);
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(got[w], k.expected[w]) << "philox4x32-" << k.rounds << " ctr " << std::hex
                                       << k.ctr[0] << " key " << k.key[0] << " word " << w;
    }
  }
}

TEST(Philox, NoiseBitsLayoutIsTokenStreamPositionUnderSeedKey) {
  const uint64_t seed = 0x0123456789abcdefULL;
  const uint64_t position = 0xfedcba9876543210ULL;
  const uint32_t token = 151935;
  const PhiloxCounter block =
      Philox4x32({token, 7u, 0x76543210u, 0xfedcba98u}, {0x89abcdefu, 0x01234567u});
  EXPECT_EQ(NoiseBits(seed, position, token, 7), block[0]);
  EXPECT_EQ(NoiseBits(seed, position, token),
            Philox4x32({token, 0u, 0x76543210u, 0xfedcba98u}, {0x89abcdefu, 0x01234567u})[0]);
}

TEST(Philox, EveryKeyWordChangesTheDraw) {
  // Seed high/low, position high/low, token and stream each land in their own word, so moving
  // any one of them gives a different block (no aliasing between fields).
  const uint32_t base = NoiseBits(1, 1, 1, 0);
  EXPECT_NE(NoiseBits(1ULL | (1ULL << 32), 1, 1, 0), base);
  EXPECT_NE(NoiseBits(2, 1, 1, 0), base);
  EXPECT_NE(NoiseBits(1, 1ULL | (1ULL << 32), 1, 0), base);
  EXPECT_NE(NoiseBits(1, 2, 1, 0), base);
  EXPECT_NE(NoiseBits(1, 1, 2, 0), base);
  EXPECT_NE(NoiseBits(1, 1, 1, 1), base);
}

TEST(Philox, OpenUniformEndpointsAreExactAndInterior) {
  EXPECT_EQ(BitsToOpenUniform(0u), 0x1p-33);
  EXPECT_EQ(BitsToOpenUniform(0xffffffffu), 1.0 - 0x1p-33);
  EXPECT_GT(BitsToOpenUniform(0u), 0.0);
  EXPECT_LT(BitsToOpenUniform(0xffffffffu), 1.0);
  EXPECT_EQ(BitsToOpenUniform(0x80000000u), 0.5 + 0x1p-33);
  // The Gumbel transform is finite at both ends: -log(-log(2^-33)) and -log(-log(1 - 2^-33)).
  EXPECT_TRUE(std::isfinite(-std::log(-std::log(BitsToOpenUniform(0u)))));
  EXPECT_TRUE(std::isfinite(-std::log(-std::log(BitsToOpenUniform(0xffffffffu)))));
}

TEST(Philox, NoiseDoesNotDependOnCallOrder) {
  // A grid of (seed, position, token) drawn in nested order, then again in a shuffled order
  // (as a batch, a chunked prefill or a speculative verifier would visit them): bit-identical.
  const uint64_t shuffle_seed = 20240611;
  std::printf("shuffle seed %llu\n", static_cast<unsigned long long>(shuffle_seed));
  std::vector<std::tuple<uint64_t, uint64_t, uint32_t>> keys;
  for (uint64_t seed : {0ULL, 1ULL, 0xdeadbeefcafef00dULL}) {
    for (uint64_t pos = 0; pos < 40; ++pos) {
      for (uint32_t tok = 0; tok < 50; ++tok) keys.emplace_back(seed, pos * 977 + 3, tok * 3001);
    }
  }
  std::vector<double> in_order;
  for (const auto& [s, p, t] : keys) in_order.push_back(GumbelNoise(s, p, t));

  std::vector<size_t> perm(keys.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::mt19937_64 rng(shuffle_seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i : perm) {
    const auto& [s, p, t] = keys[i];
    const double g = GumbelNoise(s, p, t);
    ASSERT_EQ(std::memcmp(&g, &in_order[i], sizeof g), 0)
        << "seed " << s << " pos " << p << " token " << t;
  }
}

TEST(Philox, NoiseBitsAreUniformAcrossPositionsAndTokens) {
  // Top 4 bits of 2^20 draws (seed 42, positions 0..1023, tokens 0..1023) into 16 cells,
  // G-test against uniform. Deterministic; the threshold matches the law tests (p >= 1e-6).
  std::vector<int64_t> cells(16, 0);
  for (uint64_t pos = 0; pos < 1024; ++pos) {
    for (uint32_t tok = 0; tok < 1024; ++tok) ++cells[NoiseBits(42, pos, tok) >> 28];
  }
  const std::vector<double> uniform(16, 1.0 / 16);
  const GTestResult r = GTest(cells, uniform);
  std::printf("seed 42: G = %.3f, df = %lld, p = %.3g\n", r.g, static_cast<long long>(r.df),
              r.p_value);
  EXPECT_GE(r.p_value, 1e-6);
}

TEST(Philox, GumbelMeanAndVarianceMatchTheStandardGumbel) {
  // Standard Gumbel: mean = Euler-Mascheroni 0.5772..., variance = pi^2 / 6. With n = 2^20 draws
  // the standard error of the mean is 1.28 / 1024 = 1.25e-3; 6 of them is the tolerance.
  const double euler_gamma = 0.57721566490153286;
  const double variance = M_PI * M_PI / 6.0;
  double sum = 0.0, sum_sq = 0.0;
  const int n = 1 << 20;
  for (int i = 0; i < n; ++i) {
    const double g = GumbelNoise(7, static_cast<uint64_t>(i) >> 6, static_cast<uint32_t>(i & 63));
    sum += g;
    sum_sq += g * g;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  std::printf("seed 7: mean %.5f (expect %.5f), variance %.5f (expect %.5f)\n", mean, euler_gamma,
              var, variance);
  EXPECT_NEAR(mean, euler_gamma, 6 * std::sqrt(variance / n));
  // sd of the sample variance = sigma^2 sqrt((kurtosis - 1) / n) = 1.645 * sqrt(4.4 / 2^20)
  // = 3.4e-3 (Gumbel kurtosis 5.4); the tolerance is 6 of them.
  EXPECT_NEAR(var, variance, 0.02);
}

}  // namespace
}  // namespace lockstep::sampling
