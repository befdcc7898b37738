// Round trip of the quantizers gguf-py cannot check bit for bit (Q8_1, Q2_K..Q6_K, Q8_K, IQ4_NL,
// IQ4_XS, NVFP4): seeded inputs from seven distributions -> quant::Quantize -> quant::Dequantize,
// with the engine's decoding held bit-exact to the scalar reference (oracle/quant_ref.h) and the
// error held to the bounds stated (with their derivations) in docs/quantize-bounds.md:
//   1. nearest level: each element decodes to the level of its sub-block nearest to x, up to the
//      rounding of the scale its code was chosen against (`code_rho`);
//   2. amax bound: |x - x^| <= c * A + floor, A the amax of the group the top-level scale spans;
//   3. RMS bound (continuous distributions): rms(x - x^) <= rms_c * rms over groups of A;
//   4. all-zero -> all-zero, finite input -> finite output, and idempotence where it holds.
// Replay: LOCKSTEP_SEED=<seed printed in the log>.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "gtest/gtest.h"
#include "oracle/quant_ref.h"

namespace lockstep {
namespace {

using quant::Type;

constexpr double kF16HalfUlpSub = 0x1p-25;  // f16 round to nearest: absolute error, subnormals

// One quantizer's stated bounds. The derivations are in docs/quantize-bounds.md; in short, with
// A the amax of the group, s* the largest sub-block scale and "units" the levels' spacing:
struct Case {
  Type type;
  int group;         // elements whose amax A the top-level scale is computed from
  double c, floor;   // |x - x^| <= c * A + floor
  double rms_c;      // rms(x - x^) <= rms_c * sqrt(mean A^2), continuous inputs
  double code_rho;   // relative rounding between the scale codes were chosen for and the stored one
  double large;      // magnitude of the +-large distribution the format can represent
  std::vector<std::pair<int, int>> fixed_bytes;  // [begin, end) byte ranges of a block that
                                                 // Quantize(Dequantize(q)) reproduces exactly
};

// The f16 super-scale of a tiny block is subnormal and rounds by up to 2^-25 absolute: that moves
// each decoded level by |level| * |sub-scale| * 2^-25, which is the `floor` of each f16 format.
constexpr double kSub = kF16HalfUlpSub;
// RMS bounds for the searched formats: an error bounded by cA that is spread evenly has RMS
// cA/sqrt(3); for the plain rounding formats (Q8_*) it is the uniform-rounding RMS h/sqrt(3), h
// the half step, with 10% for sampling spread and the f16 rounding of d.
const double kInvSqrt3 = 1 / std::sqrt(3.0);

const Case kCases[] = {
    // Q8_1: d = A/127 in f32 picks the codes, stored as f16 D: |x - D q| <= d/2 + 127 |d - D|,
    // |d - D| <= d 2^-11 (normal) or 2^-25 (subnormal). d and qs are a fixed point; s is not
    // (s = f16(d * sum q) uses the unrounded d).
    {Type::Q8_1, 32, (0.5 + 127 * 0x1p-11 + 0x1p-14) / 127, 128 * kSub, 1.1 * 0.5 / 127 * kInvSqrt3,
     0x1p-11, 1e4, {{0, 2}, {4, 36}}},
    // Q8_K: f32 d = max/-127, nearest codes: |x - d q| <= |d|/2 plus f32 rounding. No fixed
    // bytes: d = 1/(-127/max) can move by an ulp, and when decoded codes +127 and -127 tie for the
    // largest magnitude the first one sets the sign, so every code and d can flip sign.
    {Type::Q8_K, 256, (0.5 + 0x1p-14) / 127, 0, 1.1 * 0.5 / 127 * kInvSqrt3, 0x1p-22, 1e4, {}},
    // Q2_K: affine 2-bit codes per 16; span R <= 2A; trial steps R/2.5..R/4, so s* <= 0.8A and
    // the fit can fall short of the span by one step (R/4 <= 0.5A); 4-bit sub-scale and sub-min
    // rounding moves the top level by 3 s*/30 + A/30: c = 0.5 + 0.08 + 0.034 -> 0.62.
    {Type::Q2_K, 256, 0.62, (3 * 15 + 15) * kSub, 0.62 * kInvSqrt3, 0, 1e4, {}},
    // Q3_K: symmetric [-4, 3] per 16; the extreme lands on 4..4.5 units, the opposite-sign extreme
    // clamps at 3: (4.5 - 3)/4.5 = 0.333, plus 6-bit sub-scale rounding 4 s*/64 <= A/64: 0.35.
    {Type::Q3_K, 256, 0.35, 4 * 32 * kSub, 0.35 * kInvSqrt3, 0, 1e4, {}},
    // Q4_K: affine 4-bit per 32; trial steps R/14..R/16 (s* <= 2A/14); short fit R/16 <= 0.125A;
    // 6-bit rounding of scale and min: 15 s*/126 + A/126 = 0.025A: c = 0.15.
    {Type::Q4_K, 256, 0.15, (15 * 63 + 63) * kSub, 0.15 * kInvSqrt3, 0, 1e4, {}},
    // Q5_K: affine 5-bit per 32; trial steps R/30.5..R/32 (s* <= 2A/30.5); short fit R/32 <=
    // 0.0625A; 6-bit rounding 31 s*/126 + A/126 = 0.024A: c = 0.087.
    {Type::Q5_K, 256, 0.087, (31 * 63 + 63) * kSub, 0.087 * kInvSqrt3, 0, 1e4, {}},
    // Q6_K: symmetric [-32, 31] per 16; the extreme lands on 31.1..32.9 units, the opposite-sign
    // extreme clamps at 31: 1.9/32.9 = 0.058, plus int8 sub-scale rounding 32 s*/256 <= 0.004A.
    {Type::Q6_K, 256, 0.062, 32 * 128 * kSub, 0.062 * kInvSqrt3, 0, 1e4, {}},
    // IQ4_NL: code book [-127, 113]; A lands on 120..134 units (trials -127 +- 7); half the widest
    // gap is 12 units (<= 0.1A); the opposite-sign extreme clamps at 113: 21/134 = 0.157; 0.01 for
    // the least-squares refit leaving the trial range: c = 0.17.
    {Type::IQ4_NL, 32, 0.17, 127 * kSub, 0.17 * kInvSqrt3, 0x1p-11, 1e4, {}},
    // IQ4_XS: IQ4_NL per 32 plus 6-bit sub-scales against s*: 127 units * s*/64 <= 0.0165A: 0.19.
    {Type::IQ4_XS, 256, 0.19, 127 * 32 * kSub, 0.19 * kInvSqrt3, 0x1p-11, 1e4, {}},
    // NVFP4: UE4M3 scale s ~ A/6 (3-bit mantissa: |s/(A/6) - 1| <= 1/16); E2M1 levels {0, .5, 1,
    // 1.5, 2, 3, 4, 6} * s: widest gap 2s (4..6) -> c = (1/6)(17/16); subnormal scales are
    // multiples of 2^-10 (decoded), so floor = 6 * 2^-10. Needs A < 6 * 248: ggml's UE4M3
    // rounding saturates to 448 from 248, so +-large stays at 1000 here. A fixed point: the
    // largest element decodes to 6 s exactly, so amax/6 re-encodes to the same byte.
    {Type::NVFP4, 16, (1.0 / 6) * (17.0 / 16), 6 * 0x1p-10, (1.0 / 6) * (17.0 / 16) * kInvSqrt3, 0,
     1000, {{0, 36}}},
};

enum class Dist { kNormal, kUniform, kHeavy, kZero, kEqual, kTiny, kLarge };
constexpr Dist kDists[] = {Dist::kNormal, Dist::kUniform, Dist::kHeavy, Dist::kZero,
                           Dist::kEqual,  Dist::kTiny,    Dist::kLarge};
const char* Name(Dist d) {
  switch (d) {
    case Dist::kNormal: return "normal(0,1)";
    case Dist::kUniform: return "uniform(-1,1)";
    case Dist::kHeavy: return "normal, 2% outliers x30";
    case Dist::kZero: return "all-zero";
    case Dist::kEqual: return "all-equal per group";
    case Dist::kTiny: return "normal x 1e-4";
    case Dist::kLarge: return "+-large";
  }
  return "?";
}
bool Continuous(Dist d) { return d == Dist::kNormal || d == Dist::kUniform || d == Dist::kHeavy; }

uint64_t Seed() {
  const char* env = std::getenv("LOCKSTEP_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 0x5eed2024ull;
}

// x: [n], n a multiple of `group`.
std::vector<float> Generate(Dist dist, int64_t n, int group, double large, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (dist) {
      case Dist::kNormal: v = normal(rng); break;
      case Dist::kUniform: v = 2 * unit(rng) - 1; break;
      case Dist::kHeavy: v = normal(rng) * (unit(rng) < 0.02 ? 30 : 1); break;
      case Dist::kZero: v = 0; break;
      case Dist::kEqual: v = (i / group) % 2 == 0 ? 0.7 : -2.5; break;
      case Dist::kTiny: v = 1e-4 * normal(rng); break;
      case Dist::kLarge: v = (unit(rng) < 0.5 ? -1 : 1) * large * (0.5 + 0.5 * unit(rng)); break;
    }
    x[static_cast<size_t>(i)] = static_cast<float>(v);
  }
  return x;
}

struct Stats {
  double worst_c = 0;      // max over groups of (max err - floor) / A
  double worst_near = 0;   // max excess over the nearest level, in units of the element's step
  double sum_err2 = 0, sum_a2 = 0;
  int64_t groups = 0;
};

void RoundTrip(const Case& cs, Dist dist, uint64_t seed) {
  const quant::TypeTraits t = quant::Traits(cs.type);
  const int64_t n = 64 * 256;  // 64 super-blocks' worth of elements for every type
  const int64_t n_blocks = n / t.block_size;
  SCOPED_TRACE(std::string(t.name) + " / " + Name(dist) + " / seed " + std::to_string(seed));
  const std::vector<float> x = Generate(dist, n, cs.group, cs.large, seed);

  std::vector<uint8_t> q(static_cast<size_t>(n_blocks * t.type_size));
  ASSERT_TRUE(quant::Quantize(cs.type, x.data(), n, q.data()).ok());
  std::vector<float> y(static_cast<size_t>(n), std::nanf(""));  // poisoned
  ASSERT_TRUE(quant::Dequantize(cs.type, q.data(), n, y.data()).ok());
  const std::vector<double> ref = oracle::DequantizeRef(cs.type, q.data(), n);
  ASSERT_EQ(ref.size(), y.size());

  Stats st;
  int failures = 0;
  for (int64_t g = 0; g < n / cs.group; ++g) {
    double amax = 0, max_err = 0;
    for (int64_t i = g * cs.group; i < (g + 1) * cs.group; ++i) amax = std::max(amax, std::fabs(double{x[i]}));
    for (int64_t i = g * cs.group; i < (g + 1) * cs.group; ++i) {
      // Engine == reference bit for bit (both finite: finite input must give finite output).
      ASSERT_TRUE(std::isfinite(y[i]) && std::isfinite(ref[i])) << "element " << i;
      ASSERT_EQ(y[i], static_cast<float>(ref[i])) << "engine vs reference, element " << i;
      const double err = std::fabs(double{x[i]} - y[i]);
      max_err = std::max(max_err, err);
      if (dist == Dist::kZero) {
        ASSERT_EQ(y[i], 0.0f) << "element " << i;
      }

      // Nearest level, up to the rounding between the scale the code was chosen against and the
      // stored one (both sides of the comparison can move by max|level| * that difference).
      const int64_t ib = i / t.block_size;
      const oracle::ElementRef e = oracle::DecodeElementRef(
          cs.type, q.data() + ib * t.type_size, static_cast<int>(i % t.block_size));
      double nearest = INFINITY, max_level = 0;
      for (int k = 0; k < e.n_levels; ++k) {
        nearest = std::min(nearest, std::fabs(double{x[i]} - (e.scale * e.levels[k] - e.offset)));
        max_level = std::max(max_level, std::fabs(static_cast<double>(e.levels[k])));
      }
      const double mult = e.super_scale != 0 ? std::fabs(e.scale / e.super_scale) : 0;
      const double slack =
          2 * max_level * mult *
              std::max(cs.code_rho * std::fabs(e.super_scale), cs.code_rho > 0 ? kF16HalfUlpSub : 0) +
          0x1p-20 * (std::fabs(double{x[i]}) + max_level * std::fabs(e.scale) + std::fabs(e.offset));
      if (err > nearest + slack) {
        if (++failures <= 5) {
          ADD_FAILURE() << "element " << i << ": x = " << x[i] << " -> " << y[i]
                        << ", nearest level is " << nearest << " away (slack " << slack << ")";
        }
      }
      if (e.scale != 0) st.worst_near = std::max(st.worst_near, (err - nearest) / std::fabs(e.scale));
    }
    const double bound = cs.c * amax + cs.floor;
    if (max_err > bound && ++failures <= 5) {
      ADD_FAILURE() << "group " << g << ": max |x - x^| = " << max_err << " > " << cs.c << " * A ("
                    << amax << ") + " << cs.floor;
    }
    if (amax > 0) st.worst_c = std::max(st.worst_c, (max_err - cs.floor) / amax);
    for (int64_t i = g * cs.group; i < (g + 1) * cs.group; ++i) {
      st.sum_err2 += (double{x[i]} - y[i]) * (double{x[i]} - y[i]);
    }
    st.sum_a2 += amax * amax * cs.group;
    ++st.groups;
  }
  EXPECT_EQ(failures, 0);
  const double rms_ratio = st.sum_a2 > 0 ? std::sqrt(st.sum_err2 / st.sum_a2) : 0;
  if (Continuous(dist)) {
    EXPECT_LE(rms_ratio, cs.rms_c) << "RMS error / RMS group amax";
  }

  // Idempotence: quantizing the decoded values reproduces the bytes in `fixed_bytes` of every
  // block (where the algorithm makes them a fixed point); whole-block fixed points are counted.
  std::vector<uint8_t> q2(q.size());
  ASSERT_TRUE(quant::Quantize(cs.type, y.data(), n, q2.data()).ok());
  int64_t fixed = 0;
  for (int64_t ib = 0; ib < n_blocks; ++ib) {
    const auto block = q.begin() + ib * t.type_size, block2 = q2.begin() + ib * t.type_size;
    fixed += std::equal(block, block + t.type_size, block2);
    for (const auto& [b, e] : cs.fixed_bytes) {
      EXPECT_TRUE(std::equal(block + b, block + e, block2 + b))
          << "block " << ib << " bytes [" << b << ", " << e << ") are not a fixed point";
    }
  }
  printf("  %-7s %-24s blocks %5" PRId64 "  max err/A %.5f (bound %.5f)  rms/A %.5f (bound %.5f)"
         "  worst over nearest %.3f step  fixed points %" PRId64 "/%" PRId64 "\n",
         t.name, Name(dist), n_blocks, st.worst_c, cs.c, rms_ratio, cs.rms_c, st.worst_near, fixed,
         n_blocks);
}

class QuantizeRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(QuantizeRoundTrip, AllDistributions) {
  const Case& cs = kCases[GetParam()];
  const uint64_t seed = Seed();
  printf("seed %" PRIu64 " (replay with LOCKSTEP_SEED=%" PRIu64 ")\n", seed, seed);
  for (size_t d = 0; d < std::size(kDists); ++d) {
    RoundTrip(cs, kDists[d], seed + 1000 * static_cast<uint64_t>(cs.type) + d);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeRoundTrip, ::testing::Range<size_t>(0, std::size(kCases)),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(quant::Traits(kCases[info.param].type).name);
                         });

}  // namespace
}  // namespace lockstep
