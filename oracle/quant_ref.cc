// Reference dequantizers: one function per format giving element i's scale, offset and level,
// each located from the index alone (no unpacking loops shared with the engine's decoders).
#include "oracle/quant_ref.h"

#include <cmath>
#include <array>
#include <cstring>
#include <limits>

namespace lockstep::oracle {
namespace {

using quant::Type;

// ggml's code books: IQ4_NL's non-linear 4-bit levels, and E2M1 values doubled (0, 0.5, 1, 1.5,
// 2, 3, 4, 6 times 2, codes 8-15 negative) as ggml stores MXFP4 and NVFP4.
constexpr int kIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1, 13, 25, 38, 53, 69, 89, 113};
constexpr int kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

template <int Lo, int Hi>
constexpr std::array<int, Hi - Lo + 1> IntRange() {
  std::array<int, Hi - Lo + 1> a{};
  for (int i = 0; i <= Hi - Lo; ++i) a[i] = Lo + i;
  return a;
}
constexpr auto kInt8 = IntRange<-128, 127>();
constexpr auto kU2 = IntRange<0, 3>();
constexpr auto kS3 = IntRange<-4, 3>();
constexpr auto kU4 = IntRange<0, 15>();
constexpr auto kU5 = IntRange<0, 31>();
constexpr auto kS6 = IntRange<-32, 31>();

template <size_t N>
ElementRef Element(double scale, double offset, double super_scale, int level,
                   const std::array<int, N>& levels) {
  return {scale, offset, super_scale, level, levels.data(), static_cast<int>(N)};
}
ElementRef Element(double scale, double super_scale, int code, const int (&book)[16]) {
  return {scale, 0.0, super_scale, book[code], book, 16};
}

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
double F16(const uint8_t* p) { return Fp16Ref(U16(p)); }
int I8(uint8_t b) { return b < 128 ? b : b - 256; }

// Byte offsets and sizes below are ggml's struct layouts (little-endian, no padding).

// Q8_1 [36 B]: d f16 @0, s f16 @2 (= d * sum of codes; not needed to decode), qs int8[32] @4.
ElementRef Q8_1(const uint8_t* b, int i) {
  const double d = F16(b);
  return Element(d, 0, d, I8(b[4 + i]), kInt8);
}

// Q8_K [292 B]: d f32 @0, qs int8[256] @4, bsums int16[16] @260 (sums of 16 codes; not needed).
ElementRef Q8_K(const uint8_t* b, int i) {
  float d;
  memcpy(&d, b, 4);
  return Element(d, 0, d, I8(b[4 + i]), kInt8);
}

// Q2_K [84 B]: scales[16] @0 (sub-block of 16: low nibble scale, high nibble min), qs[64] @16,
// d f16 @80, dmin f16 @82. Element i = 128h + 32g + l has its 2-bit code in bits 2g of qs[32h + l].
// value = d * scale * code - dmin * min.
ElementRef Q2_K(const uint8_t* b, int i) {
  const double d = F16(b + 80), dmin = F16(b + 82);
  const int h = i / 128, g = (i % 128) / 32, l = i % 32;
  const int code = (b[16 + 32 * h + l] >> (2 * g)) & 3;
  const int sc = b[i / 16] & 0xF, mn = b[i / 16] >> 4;
  return Element(d * sc, dmin * mn, d, code, kU2);
}

// Q3_K [110 B]: hmask[32] @0, qs[64] @32, scales[12] @96, d f16 @108. Element i = 128h + 32g + l:
// low 2 bits as Q2_K, high bit = bit (4h + g) of hmask[l]; code = low + 4*high - 4 in [-4, 3].
// Sub-block k (of 16) scale: 6 bits, stored +32: low nibble in scales[k] (k < 8) or the high
// nibble of scales[k - 8]; top 2 bits at bit 2*(k/4) of scales[8 + k%4].
ElementRef Q3_K(const uint8_t* b, int i) {
  const uint8_t* sc = b + 96;
  const double d = F16(b + 108);
  const int h = i / 128, g = (i % 128) / 32, l = i % 32, k = i / 16;
  const int low = (b[32 + 32 * h + l] >> (2 * g)) & 3;
  const int high = (b[l] >> (4 * h + g)) & 1;
  const int s_lo = k < 8 ? (sc[k] & 0xF) : (sc[k - 8] >> 4);
  const int s_hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
  return Element(d * ((s_lo | (s_hi << 4)) - 32), 0, d, low + 4 * high - 4, kS3);
}

// Q4_K / Q5_K scales[12]: 6-bit scale and min of sub-block j (of 32). j < 4: scale = low 6 bits
// of byte j, min = low 6 bits of byte j + 4. j >= 4: low nibbles from byte j + 4 (scale low,
// min high), top 2 bits from the top bits of byte j - 4 (scale) and byte j (min).
void ScaleMinK(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K [144 B]: d f16 @0, dmin f16 @2, scales[12] @4, qs[128] @16. Element i = 64c + r: code in
// qs[32c + r%32], low nibble for r < 32, high for r >= 32. value = d * scale * code - dmin * min.
ElementRef Q4_K(const uint8_t* b, int i) {
  const double d = F16(b), dmin = F16(b + 2);
  const int c = i / 64, r = i % 64;
  const uint8_t q = b[16 + 32 * c + r % 32];
  int sc, mn;
  ScaleMinK(b + 4, i / 32, &sc, &mn);
  return Element(d * sc, dmin * mn, d, r < 32 ? (q & 0xF) : (q >> 4), kU4);
}

// Q5_K [176 B]: d f16 @0, dmin f16 @2, scales[12] @4, qh[32] @16, qs[128] @48. Low 4 bits as
// Q4_K; bit 4 of element 64c + r is bit (2c + (r >= 32)) of qh[r % 32].
ElementRef Q5_K(const uint8_t* b, int i) {
  const double d = F16(b), dmin = F16(b + 2);
  const int c = i / 64, r = i % 64;
  const uint8_t q = b[48 + 32 * c + r % 32];
  const int low = r < 32 ? (q & 0xF) : (q >> 4);
  const int high = (b[16 + r % 32] >> (2 * c + (r >= 32 ? 1 : 0))) & 1;
  int sc, mn;
  ScaleMinK(b + 4, i / 32, &sc, &mn);
  return Element(d * sc, dmin * mn, d, low + 16 * high, kU5);
}

// Q6_K [210 B]: ql[128] @0, qh[64] @128, scales int8[16] @192, d f16 @208. Element
// i = 128h + 32g + l: low nibble from ql[64h + l + 32*(g%2)] (low nibble for g < 2, high for
// g >= 2), top 2 bits at bits 2g of qh[32h + l]; code - 32 in [-32, 31]; scale of sub-block i/16.
ElementRef Q6_K(const uint8_t* b, int i) {
  const double d = F16(b + 208);
  const int h = i / 128, g = (i % 128) / 32, l = i % 32;
  const uint8_t lq = b[64 * h + l + 32 * (g % 2)];
  const int low = g < 2 ? (lq & 0xF) : (lq >> 4);
  const int high = (b[128 + 32 * h + l] >> (2 * g)) & 3;
  return Element(d * I8(b[192 + i / 16]), 0, d, (low | (high << 4)) - 32, kS6);
}

// IQ4_NL [18 B]: d f16 @0, qs[16] @2; element j < 16 in the low nibble of qs[j], j >= 16 in the
// high nibble of qs[j - 16]. value = d * kIQ4NL[code].
ElementRef IQ4_NL(const uint8_t* b, int j) {
  const double d = F16(b);
  return Element(d, d, j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4), kIQ4NL);
}

// IQ4_XS [136 B]: d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8. Sub-block k (of 32):
// 6-bit scale stored +32, low nibble in scales_l[k/2] (low nibble for even k), top 2 bits at bit
// 2k of scales_h. Codes as IQ4_NL within each 16-byte slice qs[16k ..].
ElementRef IQ4_XS(const uint8_t* b, int i) {
  const double d = F16(b);
  const int scales_h = U16(b + 2);
  const int k = i / 32, j = i % 32;
  const int ls = ((b[4 + k / 2] >> (4 * (k % 2))) & 0xF) | (((scales_h >> (2 * k)) & 3) << 4);
  const uint8_t q = b[8 + 16 * k + j % 16];
  return Element(d * (ls - 32), d, j < 16 ? (q & 0xF) : (q >> 4), kIQ4NL);
}

// NVFP4 [36 B]: d[4] UE4M3 @0 (one per sub-block of 16), qs[32] @4. Sub-block s, element j:
// code in qs[8s + j%8], low nibble for j < 8. value = Ue4m3Half(d[s]) * kE2M1x2[code].
ElementRef NVFP4(const uint8_t* b, int i) {
  const int s = i / 16, j = i % 16;
  const uint8_t q = b[4 + 8 * s + j % 8];
  const double d = Ue4m3HalfRef(b[s]);
  return Element(d, d, j < 8 ? (q & 0xF) : (q >> 4), kE2M1x2);
}

struct Format {
  Type type;
  int block_size, block_bytes;
  ElementRef (*element)(const uint8_t*, int);
};

constexpr Format kFormats[] = {
    {Type::Q8_1, 32, 36, Q8_1},     {Type::Q8_K, 256, 292, Q8_K},   {Type::Q2_K, 256, 84, Q2_K},
    {Type::Q3_K, 256, 110, Q3_K},   {Type::Q4_K, 256, 144, Q4_K},   {Type::Q5_K, 256, 176, Q5_K},
    {Type::Q6_K, 256, 210, Q6_K},   {Type::IQ4_NL, 32, 18, IQ4_NL}, {Type::IQ4_XS, 256, 136, IQ4_XS},
    {Type::NVFP4, 64, 36, NVFP4},
};

const Format* Find(Type type) {
  for (const Format& f : kFormats) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

}  // namespace

double Fp16Ref(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), -24);
  } else if (exp == 31) {
    v = man == 0 ? std::numeric_limits<double>::infinity()
                 : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(1.0 + man / 1024.0, exp - 15);
  }
  return sign ? -v : v;
}

double Ue4m3HalfRef(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0;
  const int exp = (x >> 3) & 0xF, man = x & 0x7;
  const double raw = exp == 0 ? std::ldexp(static_cast<double>(man), -9)
                              : std::ldexp(1.0 + man / 8.0, exp - 7);
  return raw * 0.5;
}

bool HasDequantizeRef(quant::Type type) { return Find(type) != nullptr; }

std::vector<double> DequantizeRef(quant::Type type, const uint8_t* blocks, int64_t n) {
  const Format* f = Find(type);
  if (f == nullptr || n <= 0 || n % f->block_size != 0) return {};
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t ib = 0; ib < n / f->block_size; ++ib) {
    for (int i = 0; i < f->block_size; ++i) {
      const ElementRef e = f->element(blocks + ib * f->block_bytes, i);
      out[ib * f->block_size + i] = e.scale * e.level - e.offset;
    }
  }
  return out;
}

ElementRef DecodeElementRef(quant::Type type, const uint8_t* block, int i) {
  const Format* f = Find(type);
  return f == nullptr ? ElementRef{} : f->element(block, i);
}

}  // namespace lockstep::oracle
