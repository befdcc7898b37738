// Hand-worked blocks for the formats without an external decoding oracle (Q8_1, Q8_K) and a few
// per K-quant, IQ4 and NVFP4: bytes built field by field, expected values worked out by hand in
// the comments. Each block is decoded by the scalar reference (oracle/quant_ref.h) and by the
// engine (quant::Dequantize); both must give exactly the hand-worked values, NaN never passing.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "gtest/gtest.h"
#include "oracle/quant_ref.h"

namespace lockstep {
namespace {

using quant::Type;

void PutU16(std::vector<uint8_t>& b, int off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xFF);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}

// Decodes `bytes` (whole blocks of `type`) with both decoders and compares every element with
// `want` exactly: the reference in double, the engine in float (every value here is a float).
void ExpectDecodes(Type type, const std::vector<uint8_t>& bytes, const std::vector<double>& want) {
  const quant::TypeTraits t = quant::Traits(type);
  const int64_t n = static_cast<int64_t>(want.size());
  ASSERT_EQ(bytes.size(), static_cast<size_t>(n / t.block_size * t.type_size)) << t.name;

  const std::vector<double> ref = oracle::DequantizeRef(type, bytes.data(), n);
  ASSERT_EQ(ref.size(), want.size()) << t.name;
  std::vector<float> eng(static_cast<size_t>(n), std::nanf(""));  // poisoned: unwritten fails
  ASSERT_TRUE(quant::Dequantize(type, bytes.data(), n, eng.data()).ok()) << t.name;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(ref[i], want[i]) << t.name << " oracle element " << i;
    EXPECT_EQ(eng[i], static_cast<float>(want[i])) << t.name << " engine element " << i;
  }
}

TEST(QuantRef, Q8_1) {
  // Block 0: d = 0x3C00 (1.0), s = 0x4000 (2.0, not used to decode); qs[0..5] = 1, -2, 3, -4,
  // 127, -128 -> the same values; rest 0.
  // Block 1: d = 0x3800 (0.5); qs[0] = 5 -> 2.5, qs[1] = -3 -> -1.5, qs[31] = -1 -> -0.5.
  // Block 2: d = 0x0001 (smallest subnormal, 2^-24); qs[0] = 64 -> 2^-18.
  std::vector<uint8_t> b(3 * 36, 0);
  std::vector<double> want(96, 0.0);
  PutU16(b, 0, 0x3C00);
  PutU16(b, 2, 0x4000);
  const int8_t q0[6] = {1, -2, 3, -4, 127, -128};
  for (int i = 0; i < 6; ++i) {
    b[4 + i] = static_cast<uint8_t>(q0[i]);
    want[i] = q0[i];
  }
  PutU16(b, 36, 0x3800);
  b[36 + 4] = 5;
  b[36 + 5] = static_cast<uint8_t>(-3);
  b[36 + 4 + 31] = static_cast<uint8_t>(-1);
  want[32] = 2.5;
  want[33] = -1.5;
  want[63] = -0.5;
  PutU16(b, 72, 0x0001);
  b[72 + 4] = 64;
  want[64] = std::ldexp(1.0, -18);
  ExpectDecodes(Type::Q8_1, b, want);
}

TEST(QuantRef, Q8_K) {
  // d = 0.25f (f32 bits 0x3E800000 at byte 0); qs[0] = -127 -> -31.75, qs[100] = 1 -> 0.25,
  // qs[255] = 4 -> 1.0; bsums (bytes 260..291) hold anything: they do not enter the values.
  // Block 1: d = -1.5f (0xBFC00000): qs[0] = 2 -> -3.0.
  std::vector<uint8_t> b(2 * 292, 0);
  std::vector<double> want(512, 0.0);
  const uint32_t d0 = 0x3E800000u, d1 = 0xBFC00000u;
  memcpy(&b[0], &d0, 4);
  b[4 + 0] = static_cast<uint8_t>(-127);
  b[4 + 100] = 1;
  b[4 + 255] = 4;
  b[260] = 0x7F;  // a bsum that disagrees with the codes: still ignored by decoding
  want[0] = -31.75;
  want[100] = 0.25;
  want[255] = 1.0;
  memcpy(&b[292], &d1, 4);
  b[292 + 4] = 2;
  want[256] = -3.0;
  ExpectDecodes(Type::Q8_K, b, want);
}

TEST(QuantRef, Q2_K) {
  // d = 0x3C00 (1.0) @80, dmin = 0x3800 (0.5) @82; value = d*scale*code - dmin*min.
  // scales[0] = 0x21: scale 1, min 2 -> elements 0..15 = code - 1.
  // scales[2] = 0x03: scale 3, min 0 -> 32..47 = 3*code.
  // scales[4] = 0x12: scale 2, min 1 -> 64..79 = 2*code - 0.5.
  // scales[6] = 0xF1: scale 1, min 15 -> 96..111 = code - 7.5.
  // scales[8] = 0x05: scale 5, min 0 -> 128..143 = 5*code.
  // qs[0] (@16) = 0xE4 = 0b11'10'01'00: codes of elements 0, 32, 64, 96 = 0, 1, 2, 3
  //   -> -1, 3, 3.5, -4.5. qs[32] (@48) = 0x03: element 128 code 3 -> 15.
  std::vector<uint8_t> b(84, 0);
  std::vector<double> want(256, 0.0);
  b[0] = 0x21;
  b[2] = 0x03;
  b[4] = 0x12;
  b[6] = 0xF1;
  b[8] = 0x05;
  b[16] = 0xE4;
  b[48] = 0x03;
  PutU16(b, 80, 0x3C00);
  PutU16(b, 82, 0x3800);
  for (int i = 0; i < 16; ++i) want[i] = -1.0;
  for (int i = 64; i < 80; ++i) want[i] = -0.5;
  for (int i = 96; i < 112; ++i) want[i] = -7.5;
  want[0] = -1.0;
  want[32] = 3.0;
  want[64] = 3.5;
  want[96] = -4.5;
  want[128] = 15.0;
  ExpectDecodes(Type::Q2_K, b, want);
}

TEST(QuantRef, Q3_K) {
  // d = 0x3C00 (1.0) @108. value = d * (scale6 - 32) * (low2 + 4*hbit - 4).
  // All-zero scale bytes mean scale6 = 0 -> -32, and all-zero codes mean -4: such elements
  // decode to (-32) * (-4) = 128.
  // Sub-block 0: scale6 = 34 = 0b10'0010: low nibble 2 in scales[0] (@96), top bits 2 in bits
  //   0-1 of scales[8] (@104) -> scale 2.
  //   Element 0: qs[0] (@32) = 0x01 -> low 1; hmask[0] (@0) = 0x01 -> hbit 1: code 1 -> 2.
  //   Elements 1..15: code -4 -> -8.
  // Sub-block 9 (elements 144..159): low nibble in the high nibble of scales[1] (@97) = 0xF0 ->
  //   15; top bits at bits 4-5 of scales[9] (@105) = 0x30 -> 3: scale6 = 63 -> 31.
  //   (scales[1]'s low nibble is sub-block 1's: 0, and its top bits, bits 0-1 of scales[9], are
  //   0: sub-block 1 stays -32.)
  //   Element 144 = 128 + 16: low 2 bits of qs[32 + 16] (@80) = 0x02 -> 2; hbit = bit 4 of
  //   hmask[16] = 0x10 -> 1: code 2 -> 62. Elements 145..159: code -4 -> -124.
  std::vector<uint8_t> b(110, 0);
  std::vector<double> want(256, 128.0);
  b[0] = 0x01;
  b[16] = 0x10;
  b[32] = 0x01;
  b[80] = 0x02;
  b[96] = 0x02;
  b[97] = 0xF0;
  b[104] = 0x02;
  b[105] = 0x30;
  PutU16(b, 108, 0x3C00);
  for (int i = 0; i < 16; ++i) want[i] = -8.0;
  want[0] = 2.0;
  for (int i = 144; i < 160; ++i) want[i] = -124.0;
  want[144] = 62.0;
  ExpectDecodes(Type::Q3_K, b, want);
}

TEST(QuantRef, Q4_K) {
  // d = dmin = 0x3C00 (1.0) @0/@2; scales[12] @4; qs @16. value = d*sc*code - dmin*m.
  // Sub-block 0: scales[0] = 3 (sc), scales[4] = 1 (m). qs[0] = 0xA7: element 0 = low nibble 7
  //   -> 3*7 - 1 = 20; elements 1..31 code 0 -> -1. Element 32 (sub-block 1) = high nibble 10
  //   with sc = m = 0 -> 0.
  // Sub-block 5: sc = 37 = 0b10'0101, m = 18 = 0b01'0010: low nibbles in scales[9] = 0x25, top
  //   bits of sc in bits 6-7 of scales[1] = 0x80, top bits of m in bits 6-7 of scales[5] = 0x40
  //   (sub-block 1's own 6-bit values, the low bits of those bytes, stay 0).
  //   Element 160 = 64*2 + 32: high nibble of qs[64] = 0x40 -> 4: 37*4 - 18 = 130; elements
  //   161..191: code 0 -> -18.
  std::vector<uint8_t> b(144, 0);
  std::vector<double> want(256, 0.0);
  PutU16(b, 0, 0x3C00);
  PutU16(b, 2, 0x3C00);
  b[4 + 0] = 3;
  b[4 + 4] = 1;
  b[4 + 1] = 0x80;
  b[4 + 5] = 0x40;
  b[4 + 9] = 0x25;
  b[16 + 0] = 0xA7;
  b[16 + 64] = 0x40;
  for (int i = 0; i < 32; ++i) want[i] = -1.0;
  want[0] = 20.0;
  for (int i = 160; i < 192; ++i) want[i] = -18.0;
  want[160] = 130.0;
  ExpectDecodes(Type::Q4_K, b, want);
}

TEST(QuantRef, Q5_K) {
  // d = 0x3800 (0.5) @0, dmin = 0 @2; scales @4, qh @16, qs @48. value = d*sc*(low + 16*hbit).
  // Sub-block 0: sc = scales[0] = 2. Element 0: low nibble of qs[0] = 3, hbit = bit 0 of qh[0]
  //   = 1 -> code 19 -> 0.5*2*19 = 19.
  // Sub-block 1: sc = scales[1] = 4. Element 33: high nibble of qs[1] = 15, hbit = bit 1 of
  //   qh[1] = 1 -> code 31 -> 0.5*4*31 = 62.
  // Sub-block 7: sc = low nibble of scales[11] = 1 | top bits (bits 6-7 of scales[3] = 1) << 4
  //   = 17 (scales[3]'s low 6 bits, sub-block 3's sc, stay 0). Element 255 = 64*3 + 63: high
  //   nibble of qs[127] = 2, hbit = bit 7 of qh[31] = 1 -> code 18 -> 0.5*17*18 = 153.
  std::vector<uint8_t> b(176, 0);
  std::vector<double> want(256, 0.0);
  PutU16(b, 0, 0x3800);
  b[4 + 0] = 2;
  b[4 + 1] = 4;
  b[4 + 3] = 0x40;
  b[4 + 11] = 0x01;
  b[16 + 0] = 0x01;
  b[16 + 1] = 0x02;
  b[16 + 31] = 0x80;
  b[48 + 0] = 0x03;
  b[48 + 1] = 0xF0;
  b[48 + 127] = 0x20;
  want[0] = 19.0;
  want[33] = 62.0;
  want[255] = 153.0;
  ExpectDecodes(Type::Q5_K, b, want);
}

TEST(QuantRef, Q6_K) {
  // ql @0, qh @128, scales int8 @192, d = 0x3C00 (1.0) @208. value = d*sc*(code6 - 32); zero
  // bytes give code6 0 -> -32.
  // scales[0] = 1: elements 0..15 default -32. Element 0: low nibble of ql[0] = 5, bits 0-1 of
  //   qh[0] = 2 -> code6 37 -> 5.
  // scales[15] = -2: elements 240..255 default (-2)*(-32) = 64. Element 240 = 128 + 96 + 16:
  //   high nibble of ql[64 + 32 + 16] (ql[112] = 0xF0) = 15, bits 6-7 of qh[32 + 16] (qh[48] =
  //   0xC0) = 3 -> code6 63 -> 31 -> -62.
  // Every other sub-block has sc 0 -> 0.
  std::vector<uint8_t> b(210, 0);
  std::vector<double> want(256, 0.0);
  b[0] = 0x05;
  b[112] = 0xF0;
  b[128 + 0] = 0x02;
  b[128 + 48] = 0xC0;
  b[192 + 0] = 1;
  b[192 + 15] = static_cast<uint8_t>(-2);
  PutU16(b, 208, 0x3C00);
  for (int i = 0; i < 16; ++i) want[i] = -32.0;
  want[0] = 5.0;
  for (int i = 240; i < 256; ++i) want[i] = 64.0;
  want[240] = -62.0;
  ExpectDecodes(Type::Q6_K, b, want);
}

TEST(QuantRef, IQ4_NL) {
  // Block 0: d = 0x3C00 (1.0); value = d * kValuesIQ4NL[code]; zero codes -> -127.
  //   qs[0] = 0xF0: element 0 code 0 -> -127, element 16 code 15 -> 113.
  //   qs[15] = 0x78: element 15 code 8 -> 1, element 31 code 7 -> -10.
  // Block 1: d = 0xBC00 (-1.0): qs[0] = 0x0B: element 0 code 11 (38) -> -38, element 16 code 0
  //   -> 127; other codes 0 -> 127.
  std::vector<uint8_t> b(2 * 18, 0);
  std::vector<double> want(64, -127.0);
  PutU16(b, 0, 0x3C00);
  b[2 + 0] = 0xF0;
  b[2 + 15] = 0x78;
  want[16] = 113.0;
  want[15] = 1.0;
  want[31] = -10.0;
  PutU16(b, 18, 0xBC00);
  b[18 + 2] = 0x0B;
  for (int i = 32; i < 64; ++i) want[i] = 127.0;
  want[32] = -38.0;
  ExpectDecodes(Type::IQ4_NL, b, want);
}

TEST(QuantRef, IQ4_XS) {
  // d = 0x3C00 (1.0) @0, scales_h @2, scales_l[4] @4, qs @8. Sub-block k scale = d*(ls - 32),
  // ls = low nibble (scales_l[k/2], high nibble for odd k) | (bits 2k of scales_h) << 4.
  // scales_h = 0xC002: sub-block 0 top bits 2, sub-block 7 top bits 3, others 0.
  // scales_l[0] = 0x01: sub-block 0 ls = 1 | 32 = 33 -> 1; sub-block 1 ls = 0 -> -32.
  // scales_l[3] = 0xF0: sub-block 7 ls = 15 | 48 = 63 -> 31; sub-block 6 ls = 0 -> -32.
  // Zero codes are -127: sub-block 0 default -127, sub-blocks 1..6 default 4064, 7 -3937.
  // Element 0: low nibble of qs[0] = 15 -> 113. Element 32: low nibble of qs[16] = 8 -> 1 ->
  // -32.
  std::vector<uint8_t> b(136, 0);
  std::vector<double> want(256, 4064.0);
  PutU16(b, 0, 0x3C00);
  PutU16(b, 2, 0xC002);
  b[4 + 0] = 0x01;
  b[4 + 3] = 0xF0;
  b[8 + 0] = 0x0F;
  b[8 + 16] = 0x08;
  for (int i = 0; i < 32; ++i) want[i] = -127.0;
  for (int i = 224; i < 256; ++i) want[i] = -3937.0;
  want[0] = 113.0;
  want[32] = -32.0;
  ExpectDecodes(Type::IQ4_XS, b, want);
}

TEST(QuantRef, NVFP4) {
  // d[4] @0 (UE4M3, decoded times 1/2), qs @4. value = scale * doubled E2M1 code value.
  // d[0] = 0x38: exp 7, man 0 -> 1.0 -> scale 0.5. qs[0] = 0x97: element 0 code 7 (12) -> 6.0,
  //   element 8 code 9 (-1) -> -0.5.
  // d[1] = 0x01: subnormal 1 * 2^-9 -> scale 2^-10. qs[8] = 0x06: element 16 code 6 (8) -> 2^-7.
  // d[2] = 0x7F: E4M3's NaN, decoded as 0 -> elements 32..47 are 0 whatever their codes
  //   (qs[16] = 0x77).
  // d[3] = 0x7E: exp 15, man 6 -> 448 -> scale 224. qs[24] = 0x0F: element 48 code 15 (-12) ->
  //   -2688.
  std::vector<uint8_t> b(36, 0);
  std::vector<double> want(64, 0.0);
  b[0] = 0x38;
  b[1] = 0x01;
  b[2] = 0x7F;
  b[3] = 0x7E;
  b[4 + 0] = 0x97;
  b[4 + 8] = 0x06;
  b[4 + 16] = 0x77;
  b[4 + 24] = 0x0F;
  want[0] = 6.0;
  want[8] = -0.5;
  want[16] = std::ldexp(1.0, -7);
  want[48] = -2688.0;
  ExpectDecodes(Type::NVFP4, b, want);
}

TEST(QuantRef, ScalarFormats) {
  EXPECT_EQ(oracle::Fp16Ref(0x3C00), 1.0);
  EXPECT_EQ(oracle::Fp16Ref(0xC000), -2.0);
  EXPECT_EQ(oracle::Fp16Ref(0x7BFF), 65504.0);
  EXPECT_EQ(oracle::Fp16Ref(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(oracle::Fp16Ref(0x0400), std::ldexp(1.0, -14));
  EXPECT_TRUE(std::isinf(oracle::Fp16Ref(0x7C00)));
  EXPECT_TRUE(std::isnan(oracle::Fp16Ref(0x7E00)));
  // UE4M3 (x 1/2): 0x08 = 2^-6 -> 2^-7; 0x07 = 7 * 2^-9 -> 7 * 2^-10; 0x77 = 1.875 * 2^7 = 240
  // -> 120; 0x00 and 0x7F -> 0.
  EXPECT_EQ(oracle::Ue4m3HalfRef(0x08), std::ldexp(1.0, -7));
  EXPECT_EQ(oracle::Ue4m3HalfRef(0x07), 7 * std::ldexp(1.0, -10));
  EXPECT_EQ(oracle::Ue4m3HalfRef(0x77), 120.0);
  EXPECT_EQ(oracle::Ue4m3HalfRef(0x00), 0.0);
  EXPECT_EQ(oracle::Ue4m3HalfRef(0x7F), 0.0);
}

TEST(QuantRef, CoversExactlyTheListedTypes) {
  const Type covered[] = {Type::Q8_1, Type::Q8_K, Type::Q2_K, Type::Q3_K, Type::Q4_K,
                          Type::Q5_K, Type::Q6_K, Type::IQ4_NL, Type::IQ4_XS, Type::NVFP4};
  for (Type t : covered) EXPECT_TRUE(oracle::HasDequantizeRef(t)) << quant::Traits(t).name;
  EXPECT_FALSE(oracle::HasDequantizeRef(Type::Q4_0));
  const uint8_t block[36] = {};
  EXPECT_TRUE(oracle::DequantizeRef(Type::Q8_1, block, 31).empty());  // not a whole block
  EXPECT_TRUE(oracle::DequantizeRef(Type::Q4_0, block, 32).empty());  // not covered
}

}  // namespace
}  // namespace lockstep
