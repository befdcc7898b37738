// The KV formats (engine/quant/kv_format.h) and their row codecs (quant.h EncodeKvRow /
// DecodeKvRow): E4M3 decoding of all 256 bytes against the format's definition, encoding against
// an independent nearest-value search (ties to even, saturation at 448) over every midpoint and
// many random floats, and every format's rows against the quant layer's Quantize / Dequantize.
//
// Seed: LOCKSTEP_SEED=<n> replays a run; without it a fresh seed is drawn and printed.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/quant/fp.h"
#include "engine/quant/kv_format.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using quant::E4m3ToFp32;
using quant::Fp32ToE4m3;
using quant::KvFormat;
using testing::TestRng;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// E4M3FN by its definition (OCP FP8): bias 7, no infinities, S.1111.111 is NaN, subnormals
// man * 2^-9. Computed in double with ldexp, independently of the bit tricks under test.
double E4m3Definition(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 7;
  if (exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? std::ldexp(man, -9) : std::ldexp(8 + man, exp - 10);
  return sign ? -mag : mag;
}

// The byte nearest to x among all finite E4M3 values, ties to the even code (the code's low bit
// is the mantissa's), |x| beyond 448 saturating to +-448, NaN to 0x7F with x's sign. A linear
// scan over the 127 non-negative finite codes, which increase with their value.
uint8_t E4m3Nearest(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(double{x});
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_err = a;
  for (int c = 1; c <= 0x7E; ++c) {
    const double err = std::fabs(E4m3Definition(static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

TEST(E4m3, DecodesAll256BytesByTheDefinition) {
  for (int b = 0; b < 256; ++b) {
    const float got = E4m3ToFp32(static_cast<uint8_t>(b));
    const double want = E4m3Definition(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << "byte " << b;
    } else {
      EXPECT_EQ(Bits(got), Bits(static_cast<float>(want))) << "byte " << b << ": " << got
                                                           << " vs " << want;
    }
  }
}

TEST(E4m3, EveryByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    EXPECT_EQ(Fp32ToE4m3(E4m3ToFp32(byte)), byte) << "byte " << b;  // NaN bytes: sign | 0x7F
  }
}

TEST(E4m3, RoundsToNearestEvenAtEveryMidpointAndItsNeighbours) {
  int64_t checked = 0;
  for (int c = 0; c < 0x7E; ++c) {  // consecutive finite codes c, c + 1 (values increase)
    const double lo = E4m3Definition(static_cast<uint8_t>(c));
    const double hi = E4m3Definition(static_cast<uint8_t>(c + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: few mantissa bits
    ASSERT_EQ(double{mid}, (lo + hi) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      for (float sx : {x, -x}) {
        EXPECT_EQ(Fp32ToE4m3(sx), E4m3Nearest(sx))
            << absl::StrFormat("x = %.9g (0x%08x), between codes %d and %d", sx, Bits(sx), c,
                               c + 1);
        ++checked;
      }
    }
  }
  // Saturation (448 is code 0x7E) and specials.
  for (float x : {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e6f, 3e38f,
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(Fp32ToE4m3(x), 0x7E) << x;
    EXPECT_EQ(Fp32ToE4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(Fp32ToE4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(Fp32ToE4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(Fp32ToE4m3(0.0f), 0x00);
  EXPECT_EQ(Fp32ToE4m3(-0.0f), 0x80);
  EXPECT_EQ(Fp32ToE4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  std::printf("[ covered  ] %lld midpoint and neighbour values\n", static_cast<long long>(checked));
}

TEST(E4m3, RoundsRandomFloatsAsTheNearestValueSearch) {
  std::mt19937_64 rng = TestRng();
  std::uniform_real_distribution<double> log_mag(-16.0, 10.0);  // 2^-16 .. 2^10: every range
  std::uniform_int_distribution<uint32_t> any_bits;
  int64_t checked = 0;
  for (int i = 0; i < 200000; ++i) {
    float x;
    if (i % 4 == 0) {
      x = std::bit_cast<float>(any_bits(rng));  // any float at all, NaN and Inf included
    } else {
      x = static_cast<float>(std::exp2(log_mag(rng))) * (rng() & 1 ? -1.0f : 1.0f);
    }
    const uint8_t got = Fp32ToE4m3(x), want = E4m3Nearest(x);
    if (got != want) {
      ADD_FAILURE() << absl::StrFormat("x = %.9g (0x%08x): got 0x%02x, nearest 0x%02x", x,
                                       Bits(x), got, want);
      break;
    }
    ++checked;
  }
  std::printf("[ covered  ] %lld random floats\n", static_cast<long long>(checked));
}

std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(KvRow, EveryFormatMatchesTheQuantLayer) {
  std::mt19937_64 rng = TestRng();
  for (int fi = 0; fi < quant::kKvFormatCount; ++fi) {
    const auto f = static_cast<KvFormat>(fi);
    const std::string name = quant::KvFormatName(f);
    for (int64_t n : {32, 64, 96, 576}) {
      std::vector<float> src = Uniform(rng, n, -6.0f, 6.0f);
      src[0] = 0.0f;
      src[1] = -0.0f;
      const int64_t row_bytes = quant::KvRowBytes(f, n);
      std::vector<uint8_t> row(row_bytes + 8, 0xAB);  // the bytes past the row stay untouched
      ASSERT_TRUE(quant::EncodeKvRow(f, src.data(), n, row.data()).ok()) << name;
      for (int64_t i = row_bytes; i < row_bytes + 8; ++i) ASSERT_EQ(row[i], 0xAB) << name;
      std::vector<float> dec(n, std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(quant::DecodeKvRow(f, row.data(), n, dec.data()).ok()) << name;
      if (f == KvFormat::kFp8E4M3) {
        ASSERT_EQ(row_bytes, n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(row[i], Fp32ToE4m3(src[i])) << name << " element " << i;
          ASSERT_EQ(Bits(dec[i]), Bits(E4m3ToFp32(row[i]))) << name << " element " << i;
          // Half an ulp of a 3-bit mantissa (2^-4 relative), or of the subnormal step 2^-9.
          ASSERT_LE(std::fabs(dec[i] - src[i]), std::max(std::ldexp(std::fabs(src[i]), -4),
                                                         std::ldexp(1.0f, -10)))
              << name << " element " << i;
        }
        continue;
      }
      // The block formats are exactly the quant layer's rows of their ggml type.
      const quant::Type type = quant::KvFormatBlockType(f);
      const quant::TypeTraits tr = quant::Traits(type);
      ASSERT_EQ(row_bytes, n / tr.block_size * tr.type_size) << name;
      std::vector<uint8_t> want(row_bytes);
      ASSERT_TRUE(quant::Quantize(type, src.data(), n, want.data()).ok());
      ASSERT_EQ(0, std::memcmp(want.data(), row.data(), row_bytes)) << name << " n=" << n;
      std::vector<float> want_dec(n);
      ASSERT_TRUE(quant::Dequantize(type, want.data(), n, want_dec.data()).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(want_dec[i]), Bits(dec[i])) << name << " element " << i;
      }
      if (f == KvFormat::kF32) {
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(Bits(src[i]), Bits(dec[i])) << name;
      }
    }
  }
}

TEST(KvRow, RejectsPartialBlocksAndUnknownFormats) {
  float src[48] = {};
  uint8_t dst[256];
  for (KvFormat f : {KvFormat::kQ8_0, KvFormat::kQ5_1, KvFormat::kQ4_0}) {
    const absl::Status s = quant::EncodeKvRow(f, src, 48, dst);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(quant::KvFormatName(f)), std::string_view::npos) << s;
    EXPECT_FALSE(quant::DecodeKvRow(f, dst, 48, src).ok());
  }
  EXPECT_FALSE(quant::EncodeKvRow(static_cast<KvFormat>(99), src, 32, dst).ok());
  EXPECT_TRUE(quant::EncodeKvRow(KvFormat::kFp8E4M3, src, 3, dst).ok());
}

TEST(KvRow, ParseKvFormatNamesEveryFormat) {
  for (int fi = 0; fi < quant::kKvFormatCount; ++fi) {
    const auto f = static_cast<KvFormat>(fi);
    auto parsed = quant::ParseKvFormat(quant::KvFormatName(f));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, f);
  }
  auto bad = quant::ParseKvFormat("q4_1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("f32, f16, bf16, q8_0, q5_1, q4_0, fp8"),
            std::string_view::npos)
      << bad.status();
}

}  // namespace
}  // namespace lockstep
