// fp.h conversions, exhaustively where the domain allows: every f16 and bf16 pattern, every
// E8M0 and UE4M3 byte, and every f32 from below the f16 rounding-to-zero boundary to above its
// overflow boundary. References are written independently (double arithmetic, rint's nearest-even),
// and numpy's own outputs come from golden/quant/F16.bin and BF16.bin (oracle/gen_quant_golden.py:
// all 65536 f16 -> f32, and ~29k f32 -> f16 rounding cases: ties, boundaries, NaN payloads).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/quant/fp.h"
#include "gtest/gtest.h"

namespace lockstep::quant {
namespace {

bool IsNanBits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// f16 bits -> f32 bits without bit tricks: value = man * 2^(exp - 25) (+ implicit bit).
uint32_t RefFp16ToFp32Bits(uint16_t h) {
  const uint32_t sign = (uint32_t)(h >> 15) << 31;
  const int exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 31) return sign | 0x7F800000u | ((uint32_t)man << 13);  // Inf, NaN keeps payload
  const double v = exp == 0 ? std::ldexp((double)man, -24) : std::ldexp((double)(man + 1024), exp - 25);
  return sign | FloatBits((float)v);  // exact: every f16 is a f32
}

// f32 -> f16 bits by value: scale to units of the target ulp and rint (nearest-even).
uint16_t RefFp32ToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  if (IsNanBits(u)) {  // numpy: top 10 payload bits, not quieted, never collapsing to Inf
    const uint16_t p = (uint16_t)((u & 0x7FFFFFu) >> 13);
    return (uint16_t)(sign | 0x7C00u | (p == 0 ? 1 : p));
  }
  const double v = std::fabs((double)f);
  if (v >= 65520.0) return (uint16_t)(sign | 0x7C00u);
  if (v < std::ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)std::rint(std::ldexp(v, 24)));
  int e;
  std::frexp(v, &e);  // v in [2^(e-1), 2^e)
  int E = e - 1;
  double q = std::rint(std::ldexp(v, 10 - E));  // in [1024, 2048]
  if (q == 2048.0) {
    q = 1024.0;
    ++E;
  }
  return (uint16_t)(sign | ((E + 15) << 10) | ((int)q - 1024));
}

// f32 -> bf16 by value: the nearer of the two truncation neighbours, ties to the even one.
uint16_t RefFp32ToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if (IsNanBits(u)) return (uint16_t)((u >> 16) | 0x40);
  const uint32_t lo = u >> 16, hi = lo + 1;  // hi may be Inf: treat Inf as 2^128 here
  auto value = [](uint32_t b) {
    if ((b & 0x7FFFu) == 0x7F80u) return std::ldexp((b & 0x8000u) ? -1.0 : 1.0, 128);
    return (double)BitsFloat(b << 16);
  };
  const double x = f, dl = std::fabs(x - value(lo)), dh = std::fabs(value(hi) - x);
  if (dl < dh || (dl == dh && (lo & 1u) == 0)) return (uint16_t)lo;
  return (uint16_t)hi;
}

std::string ReadGolden(const std::string& name) {
  std::ifstream f(std::string(LOCKSTEP_SOURCE_DIR) + "/golden/quant/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Sections of an element-type golden (F16/BF16: block_size 1, type_size 2).
struct ElementGolden {
  uint32_t n_deq = 0, n_q = 0;
  const char *deq_in = nullptr, *deq_out = nullptr, *q_in = nullptr, *q_out = nullptr;
};
bool ParseElementGolden(const std::string& b, ElementGolden* g) {
  if (b.size() < 32 || b.compare(0, 4, "LSQG") != 0) return false;
  memcpy(&g->n_deq, b.data() + 20, 4);
  memcpy(&g->n_q, b.data() + 24, 4);
  if (b.size() != 32 + (size_t)g->n_deq * 6 + (size_t)g->n_q * 6) return false;
  g->deq_in = b.data() + 32;
  g->deq_out = g->deq_in + 2 * (size_t)g->n_deq;
  g->q_in = g->deq_out + 4 * (size_t)g->n_deq;
  g->q_out = g->q_in + 4 * (size_t)g->n_q;
  return true;
}

TEST(QuantFp, Fp16ToFp32AllPatterns) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t got = FloatBits(Fp16ToFp32((uint16_t)h));
    if (got != RefFp16ToFp32Bits((uint16_t)h) && ++bad <= 5) {
      ADD_FAILURE() << "f16 0x" << std::hex << h << " -> 0x" << got;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(QuantFp, Fp16ToFp32MatchesNumpyAllPatterns) {
  const std::string b = ReadGolden("F16.bin");
  ElementGolden g;
  ASSERT_TRUE(ParseElementGolden(b, &g)) << "golden/quant/F16.bin";
  ASSERT_EQ(g.n_deq, 65536u);
  int bad = 0;
  for (uint32_t i = 0; i < g.n_deq; ++i) {
    uint16_t h;
    uint32_t want;
    memcpy(&h, g.deq_in + 2 * i, 2);
    memcpy(&want, g.deq_out + 4 * i, 4);
    if (FloatBits(Fp16ToFp32(h)) != want && ++bad <= 5) ADD_FAILURE() << "f16 0x" << std::hex << h;
  }
  EXPECT_EQ(bad, 0);
  printf("[quant fp] f16 -> f32: 65536 patterns vs numpy, bit-exact incl. NaN payloads\n");
}

TEST(QuantFp, Fp32ToFp16MatchesNumpyCases) {
  const std::string b = ReadGolden("F16.bin");
  ElementGolden g;
  ASSERT_TRUE(ParseElementGolden(b, &g));
  ASSERT_GT(g.n_q, 20000u);
  int bad = 0;
  for (uint32_t i = 0; i < g.n_q; ++i) {
    float f;
    uint16_t want;
    memcpy(&f, g.q_in + 4 * i, 4);
    memcpy(&want, g.q_out + 2 * i, 2);
    const uint16_t got = Fp32ToFp16(f);
    if (got != want && ++bad <= 5) {
      ADD_FAILURE() << "f32 0x" << std::hex << FloatBits(f) << ": numpy 0x" << want << " got 0x" << got;
    }
  }
  EXPECT_EQ(bad, 0);
  printf("[quant fp] f32 -> f16: %u numpy cases (ties, boundaries, NaN payloads, random bits)\n", g.n_q);
}

// Every 7th f32 (all rounding positions mod 7) whose exponent field is 100..144 (values from 2^-27, below the round-to-zero
// boundary 2^-25, to 2^17, above the overflow boundary 65520), both signs; plus every NaN
// payload on a stride, and Inf.
TEST(QuantFp, Fp32ToFp16SweepAgainstReference) {
  int64_t checked = 0, bad = 0;
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t u = 100u << 23; u < (145u << 23); u += 7) {
      const float f = BitsFloat(u | (sign << 31));
      ++checked;
      if (Fp32ToFp16(f) != RefFp32ToFp16(f) && ++bad <= 5) {
        ADD_FAILURE() << "f32 0x" << std::hex << FloatBits(f) << ": ref 0x" << RefFp32ToFp16(f)
                      << " got 0x" << Fp32ToFp16(f);
      }
    }
  }
  const uint32_t others[] = {0u, 1u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u};
  for (uint32_t u : others) {
    for (uint32_t s : {0u, 0x80000000u}) {
      ++checked;
      if (Fp32ToFp16(BitsFloat(u | s)) != RefFp32ToFp16(BitsFloat(u | s))) ++bad;
    }
  }
  for (uint32_t p = 1; p <= 0x7FFFFFu; p += 97) {
    ++checked;
    if (Fp32ToFp16(BitsFloat(0xFF800000u | p)) != RefFp32ToFp16(BitsFloat(0xFF800000u | p))) ++bad;
  }
  EXPECT_EQ(bad, 0);
  printf("[quant fp] f32 -> f16: %lld values swept against the rint reference\n", (long long)checked);
}

TEST(QuantFp, Bf16BothWays) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(FloatBits(Bf16ToFp32((uint16_t)h)), h << 16);
  }
  int64_t bad = 0, checked = 0;
  // Every 61st f32 pattern (covers every exponent, sign and rounding position), then numpy's.
  for (uint64_t u = 0; u < (1ull << 32); u += 61) {
    const float f = BitsFloat((uint32_t)u);
    ++checked;
    if (Fp32ToBf16(f) != RefFp32ToBf16(f) && ++bad <= 5) {
      ADD_FAILURE() << "f32 0x" << std::hex << u << ": ref 0x" << RefFp32ToBf16(f) << " got 0x"
                    << Fp32ToBf16(f);
    }
  }
  EXPECT_EQ(bad, 0);
  const std::string b = ReadGolden("BF16.bin");
  ElementGolden g;
  ASSERT_TRUE(ParseElementGolden(b, &g)) << "golden/quant/BF16.bin";
  for (uint32_t i = 0; i < g.n_q; ++i) {
    float f;
    uint16_t want;
    memcpy(&f, g.q_in + 4 * i, 4);
    memcpy(&want, g.q_out + 2 * i, 2);
    EXPECT_EQ(Fp32ToBf16(f), want) << "f32 0x" << std::hex << FloatBits(f);
  }
  printf("[quant fp] bf16: 65536 decodes, %lld encodes vs reference, %u vs the package\n",
         (long long)checked, g.n_q);
}

TEST(QuantFp, E8M0AndUe4m3AllBytes) {
  for (int e = 0; e < 256; ++e) {
    // ggml's "half" E8M0: 2^(e - 128), finite for e = 255 (no NaN code).
    EXPECT_EQ(FloatBits(E8M0ToFp32Half((uint8_t)e)), FloatBits((float)std::ldexp(1.0, e - 128))) << e;
  }
  for (int x = 0; x < 256; ++x) {
    const int e = (x >> 3) & 0xF, m = x & 7;
    double want = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    want *= 0.5;
    if (x == 0x7F) want = 0.0;  // E4M3's NaN code decodes to 0, as gguf-py does
    EXPECT_EQ(FloatBits(Ue4m3ToFp32Half((uint8_t)x)), FloatBits((float)want)) << x;
  }
}

TEST(QuantFp, RoundedMulIsNotFused) {
  // a * b = 1 + 2^-22 + 2^-46 exactly; rounded first it is 1 + 2^-22, so the sum is 0. A fused
  // multiply-add would leave 2^-46.
  volatile float a = 1.0f + std::ldexp(1.0f, -23), c = -(1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(RoundedAdd(RoundedMul(a, a), c), 0.0f);
  EXPECT_EQ(RoundedSub(RoundedMul(a, a), -c), 0.0f);
}

}  // namespace
}  // namespace lockstep::quant
