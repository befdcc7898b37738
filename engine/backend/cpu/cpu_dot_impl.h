// Fused decode-and-dot matmul kernels, written once with GCC vector extensions and compiled per
// instruction set: cpu_dot_base.cc and cpu_dot_avx2.cc include this file after defining
// LOCKSTEP_DOT_NS and LOCKSTEP_DOT_AVX2 (1: AVX2 + F16C intrinsics, after `#pragma GCC target`;
// 0: SSE4.1 only). Everything here lives in that namespace, so the two copies never meet at
// link time.
//
// Shape of the work: one weight row against NT <= 4 activation rows. A block (or a 32-element
// sub-block of a 256-block) is decoded into four 8-float registers w[0..3] = elements
// c..c+31, and immediately accumulated: lanes 0-7 of the dot live in acc[t][0], lanes 8-15 in
// acc[t][1], so element c + k goes to lane (c + k) % 16 in increasing c, as DotFixed does.
// Decoders repeat decode.h's operations in the same order (e.g. Q4_1: (d * q) + m, both rounded)
// on 8 elements at a time; element-wise IEEE vector ops are the scalar ops, bit for bit.
//
// The including file must first include <cstdint>, <cstring>, <utility>, <cstdio>, <cstdlib>,
// <immintrin.h>, "engine/quant/decode.h" and "engine/backend/cpu/cpu_dot_kernels.h": helpers defined
// before a target pragma keep the baseline target, so their out-of-line copies are safe to share.

namespace lockstep::backend::cpu::LOCKSTEP_DOT_NS {
namespace {

using F8 = float __attribute__((vector_size(32)));
using I32x8 = int32_t __attribute__((vector_size(32)));
using U8x16 = uint8_t __attribute__((vector_size(16)));
using U16x8 = uint16_t __attribute__((vector_size(16)));

// Activation rows handled per pass over a weight row: 4 x 2 accumulators + 4 decoded registers
// fit the 16 AVX registers; a larger T re-decodes the row (then in L1) once per 4 rows.
constexpr int kMaxRowsPerPass = 4;
// Weight rows interleaved when one activation row is left (decode, T = 1): see DotRows. Measured
// 1-4 in LAB.md: 4 is ~2x faster than 1; more spill accumulators.
constexpr int kRowsAtT1 = 4;
// Spans of weight rows (see DotRows) prefetched ahead of the one being decoded (LAB.md: 1.5-2.5x
// on weights larger than the caches; 1 and 4 spans were slower).
constexpr int kPrefetchSpans = 2;

inline F8 LoadF8(const float* p) {
  F8 v;
  memcpy(&v, p, sizeof(v));
  return v;
}
inline U8x16 LoadU8x16(const uint8_t* p) {
  U8x16 v;
  memcpy(&v, p, sizeof(v));
  return v;
}
// An f16 block scale. vcvtph2ps is exact like Fp16ToFp32 and differs only in quieting a
// signalling NaN; every scale enters a product or sum, which quiets it in the reference too.
inline float LoadF16(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
#if LOCKSTEP_DOT_AVX2
  return _cvtsh_ss(h);
#else
  return quant::Fp16ToFp32(h);
#endif
}
// Broadcast without arithmetic ({} + s would turn -0 into +0).
inline F8 Splat(float s) { return F8{s, s, s, s, s, s, s, s}; }
inline I32x8 SplatI(int32_t s) { return I32x8{s, s, s, s, s, s, s, s}; }

// a * b rounded to binary32 before any add that follows: if the build enables FMA (a -march
// above the preset's x86-64-v2), the empty asm keeps GCC from contracting it into an FMA.
inline F8 Mul(const F8& a, const F8& b) {
  F8 p = a * b;
#if defined(__FMA__)
  __asm__("" : "+x"(p));
#endif
  return p;
}

inline F8 I32ToF8(const I32x8& v) { return __builtin_convertvector(v, F8); }

// Bytes 8H..8H+7 of v zero-extended to int32. Written with the pmovzx intrinsics: GCC lowers
// __builtin_convertvector from 8-byte vectors one element at a time (LAB.md, step 1).
template <int H>
inline I32x8 U8ToI32(U8x16 v) {
  __m128i m = (__m128i)v;
  if constexpr (H == 1) m = _mm_unpackhi_epi64(m, m);
#if LOCKSTEP_DOT_AVX2
  return (I32x8)_mm256_cvtepu8_epi32(m);
#else
  const __m128i lo = _mm_cvtepu8_epi32(m), hi = _mm_cvtepu8_epi32(_mm_srli_si128(m, 4));
  I32x8 r;
  memcpy(&r, &lo, 16);
  memcpy(reinterpret_cast<char*>(&r) + 16, &hi, 16);
  return r;
#endif
}
template <int H>
inline F8 U8ToF8(U8x16 v) { return I32ToF8(U8ToI32<H>(v)); }

// The 8 bytes at p widened to int32 (zero- or sign-extended): on AVX2 one vpmovzxbd/vpmovsxbd
// with a memory operand, fewer shuffle ops than load + widen + unpack (LAB.md, step 3).
template <bool kSigned>
inline I32x8 Widen8(const uint8_t* p) {
#if LOCKSTEP_DOT_AVX2
  __m128i m;
  memcpy(&m, p, 8);  // upper half unused
  return (I32x8)(kSigned ? _mm256_cvtepi8_epi32(m) : _mm256_cvtepu8_epi32(m));
#else
  __m128i m0, m1;
  memcpy(&m0, p, 4);
  memcpy(&m1, p + 4, 4);
  const __m128i lo = kSigned ? _mm_cvtepi8_epi32(m0) : _mm_cvtepu8_epi32(m0);
  const __m128i hi = kSigned ? _mm_cvtepi8_epi32(m1) : _mm_cvtepu8_epi32(m1);
  I32x8 r;
  memcpy(&r, &lo, 16);
  memcpy(reinterpret_cast<char*>(&r) + 16, &hi, 16);
  return r;
#endif
}

// Calls f.template operator()<S>() for S = 0..N-1, unrolled (S picks shifts and offsets).
template <int N, typename F>
inline __attribute__((always_inline)) void Unroll(F&& f) {
  [&]<int... S>(std::integer_sequence<int, S...>) {
    (f.template operator()<S>(), ...);
  }(std::make_integer_sequence<int, N>{});
}

// ---- Codecs: kBlock elements in kBytes bytes, decoded 32 at a time by Sub<S> (S < kBlock/32)
// into w[0..3] = elements 32S + 0..7, 8..15, 16..23, 24..31 of the block.

// Raw floats; a "block" is 32 consecutive elements, the row's last partial one is the driver's.
struct CodecF32 {
  static constexpr int kBlock = 32, kBytes = 128;
  static constexpr bool kIsFloat = true;
  const uint8_t* b;
  explicit CodecF32(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    for (int k = 0; k < 4; ++k) memcpy(&w[k], b + 32 * k, 32);
  }
};

struct CodecF16 {
  static constexpr int kBlock = 32, kBytes = 64;
  static constexpr bool kIsFloat = true;
  const uint8_t* b;
  explicit CodecF16(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
#if LOCKSTEP_DOT_AVX2
    // vcvtph2ps is exact like Fp16ToFp32; it only quiets a signalling NaN, which the product
    // with x quiets in the reference too.
    for (int k = 0; k < 4; ++k) {
      __m128i h;
      memcpy(&h, b + 16 * k, 16);
      w[k] = (F8)_mm256_cvtph_ps(h);
    }
#else
    float f[32];
    for (int l = 0; l < 32; ++l) f[l] = LoadF16(b + 2 * l);
    for (int k = 0; k < 4; ++k) w[k] = LoadF8(f + 8 * k);
#endif
  }
};

struct CodecBF16 {
  static constexpr int kBlock = 32, kBytes = 64;
  static constexpr bool kIsFloat = true;
  const uint8_t* b;
  explicit CodecBF16(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    for (int k = 0; k < 4; ++k) {
      U16x8 h;
      memcpy(&h, b + 16 * k, 16);
      w[k] = (F8)(__builtin_convertvector(h, I32x8) << 16);  // the bits of Bf16ToFp32
    }
  }
};

// value = d * (nibble - 8); elements 0-15 low nibbles of qs[0..15], 16-31 high nibbles.
struct CodecQ4_0 {
  static constexpr int kBlock = 32, kBytes = 18;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  explicit CodecQ4_0(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    const F8 d = Splat(LoadF16(b));
    const I32x8 q0 = Widen8<false>(b + 2), q1 = Widen8<false>(b + 10);  // qs[0..7], qs[8..15]
    w[0] = Mul(d, I32ToF8((q0 & 0xF) - 8));
    w[1] = Mul(d, I32ToF8((q1 & 0xF) - 8));
    w[2] = Mul(d, I32ToF8((q0 >> 4) - 8));
    w[3] = Mul(d, I32ToF8((q1 >> 4) - 8));
  }
};

// value = (d * nibble) + m.
struct CodecQ4_1 {
  static constexpr int kBlock = 32, kBytes = 20;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  explicit CodecQ4_1(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    const F8 d = Splat(LoadF16(b)), m = Splat(LoadF16(b + 2));
    const I32x8 q0 = Widen8<false>(b + 4), q1 = Widen8<false>(b + 12);  // qs[0..7], qs[8..15]
    w[0] = Mul(d, I32ToF8(q0 & 0xF)) + m;
    w[1] = Mul(d, I32ToF8(q1 & 0xF)) + m;
    w[2] = Mul(d, I32ToF8(q0 >> 4)) + m;
    w[3] = Mul(d, I32ToF8(q1 >> 4)) + m;
  }
};

// Fifth bits of elements e..e+7 of a Q5 block: bit e + k of qh, as 0 or 16 per lane. AVX2 has
// per-lane shifts (vpsrlvd); SSE4.1 tests each lane's bit with a mask instead.
inline I32x8 Q5HighBits(uint32_t qh, int e) {
#if LOCKSTEP_DOT_AVX2
  using U32x8 = uint32_t __attribute__((vector_size(32)));
  const U32x8 shift = {0, 1, 2, 3, 4, 5, 6, 7};
  const U32x8 v = {qh, qh, qh, qh, qh, qh, qh, qh};
  return (I32x8)(((v >> (shift + (uint32_t)e)) & 1u) << 4);
#else
  const I32x8 bit = {1, 2, 4, 8, 16, 32, 64, 128};
  return ((SplatI((int32_t)((qh >> e) & 0xFF)) & bit) != 0) & 16;
#endif
}

// value = d * (q - 16), q = nibble | fifth bit << 4.
struct CodecQ5_0 {
  static constexpr int kBlock = 32, kBytes = 22;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  explicit CodecQ5_0(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    const F8 d = Splat(LoadF16(b));
    const uint32_t qh = quant::LoadQh(b + 2);
    const I32x8 q0 = Widen8<false>(b + 6), q1 = Widen8<false>(b + 14);  // qs[0..7], qs[8..15]
    w[0] = Mul(d, I32ToF8(((q0 & 0xF) | Q5HighBits(qh, 0)) - 16));
    w[1] = Mul(d, I32ToF8(((q1 & 0xF) | Q5HighBits(qh, 8)) - 16));
    w[2] = Mul(d, I32ToF8(((q0 >> 4) | Q5HighBits(qh, 16)) - 16));
    w[3] = Mul(d, I32ToF8(((q1 >> 4) | Q5HighBits(qh, 24)) - 16));
  }
};

// value = (d * q) + m, q = nibble | fifth bit << 4.
struct CodecQ5_1 {
  static constexpr int kBlock = 32, kBytes = 24;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  explicit CodecQ5_1(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    const F8 d = Splat(LoadF16(b)), m = Splat(LoadF16(b + 2));
    const uint32_t qh = quant::LoadQh(b + 4);
    const I32x8 q0 = Widen8<false>(b + 8), q1 = Widen8<false>(b + 16);  // qs[0..7], qs[8..15]
    w[0] = Mul(d, I32ToF8((q0 & 0xF) | Q5HighBits(qh, 0))) + m;
    w[1] = Mul(d, I32ToF8((q1 & 0xF) | Q5HighBits(qh, 8))) + m;
    w[2] = Mul(d, I32ToF8((q0 >> 4) | Q5HighBits(qh, 16))) + m;
    w[3] = Mul(d, I32ToF8((q1 >> 4) | Q5HighBits(qh, 24))) + m;
  }
};

// value = q * d (decode.h's operand order).
struct CodecQ8_0 {
  static constexpr int kBlock = 32, kBytes = 34;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  explicit CodecQ8_0(const uint8_t* p) : b(p) {}
  template <int S>
  void Sub(F8* w) const {
    const F8 d = Splat(LoadF16(b));
    for (int k = 0; k < 4; ++k) w[k] = Mul(I32ToF8(Widen8<true>(b + 2 + 8 * k)), d);
  }
};

// Sub-block S (32 elements): value = (d * sc) * q - (dmin * m); q = nibble S % 2 of
// qs[32 * (S / 2) + l].
struct CodecQ4_K {
  static constexpr int kBlock = 256, kBytes = 144;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  float d, dmin;
  explicit CodecQ4_K(const uint8_t* p) : b(p), d(LoadF16(p)), dmin(LoadF16(p + 2)) {}
  template <int S>
  void Sub(F8* w) const {
    int sc, m;
    quant::ScaleMinK4(b + 4, S, &sc, &m);
    const F8 dl = Splat(quant::RoundedMul(d, (float)sc));
    const F8 ml = Splat(quant::RoundedMul(dmin, (float)m));
    const uint8_t* qs = b + 16 + 32 * (S / 2);
    for (int k = 0; k < 4; ++k) {
      w[k] = Mul(dl, I32ToF8((Widen8<false>(qs + 8 * k) >> (4 * (S % 2))) & 0xF)) - ml;
    }
  }
};

// As Q4_K with a fifth bit: bit S of qh[l].
struct CodecQ5_K {
  static constexpr int kBlock = 256, kBytes = 176;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  float d, dmin;
  explicit CodecQ5_K(const uint8_t* p) : b(p), d(LoadF16(p)), dmin(LoadF16(p + 2)) {}
  template <int S>
  void Sub(F8* w) const {
    int sc, m;
    quant::ScaleMinK4(b + 4, S, &sc, &m);
    const F8 dl = Splat(quant::RoundedMul(d, (float)sc));
    const F8 ml = Splat(quant::RoundedMul(dmin, (float)m));
    const uint8_t* qs = b + 48 + 32 * (S / 2);
    const U8x16 q0 = ((LoadU8x16(qs) >> (4 * (S % 2))) & 0xF) |
                     (((LoadU8x16(b + 16) >> S) & 1) << 4);
    const U8x16 q1 = ((LoadU8x16(qs + 16) >> (4 * (S % 2))) & 0xF) |
                     (((LoadU8x16(b + 32) >> S) & 1) << 4);
    w[0] = Mul(dl, U8ToF8<0>(q0)) - ml;
    w[1] = Mul(dl, U8ToF8<1>(q0)) - ml;
    w[2] = Mul(dl, U8ToF8<0>(q1)) - ml;
    w[3] = Mul(dl, U8ToF8<1>(q1)) - ml;
  }
};

// Sub-block S = 4j + t: value = (d * scale) * (q - 32), scale per 16 elements; q's low nibble is
// nibble t / 2 of ql[64j + 32(t % 2) + l], its high two bits are bits 2t, 2t+1 of qh[32j + l].
struct CodecQ6_K {
  static constexpr int kBlock = 256, kBytes = 210;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  float d;
  explicit CodecQ6_K(const uint8_t* p) : b(p), d(LoadF16(p + 208)) {}
  template <int S>
  void Sub(F8* w) const {
    constexpr int j = S / 4, t = S % 4;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const F8 dl0 = Splat(quant::RoundedMul(d, (float)scales[2 * S]));
    const F8 dl1 = Splat(quant::RoundedMul(d, (float)scales[2 * S + 1]));
    const uint8_t* ql = b + 64 * j + 32 * (t % 2);
    const uint8_t* qh = b + 128 + 32 * j;
    const U8x16 q0 = ((LoadU8x16(ql) >> (4 * (t / 2))) & 0xF) |
                     (((LoadU8x16(qh) >> (2 * t)) & 3) << 4);
    const U8x16 q1 = ((LoadU8x16(ql + 16) >> (4 * (t / 2))) & 0xF) |
                     (((LoadU8x16(qh + 16) >> (2 * t)) & 3) << 4);
    w[0] = Mul(dl0, I32ToF8(U8ToI32<0>(q0) - 32));
    w[1] = Mul(dl0, I32ToF8(U8ToI32<1>(q0) - 32));
    w[2] = Mul(dl1, I32ToF8(U8ToI32<0>(q1) - 32));
    w[3] = Mul(dl1, I32ToF8(U8ToI32<1>(q1) - 32));
  }
};

// Sub-block S = 4j + s: value = (d * sc) * q - (dmin * m) with (sc, m) per 16 elements;
// q = bits 2s, 2s+1 of qs[32j + l].
struct CodecQ2_K {
  static constexpr int kBlock = 256, kBytes = 84;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  float d, dmin;
  explicit CodecQ2_K(const uint8_t* p) : b(p), d(LoadF16(p + 80)), dmin(LoadF16(p + 82)) {}
  template <int S>
  void Sub(F8* w) const {
    constexpr int j = S / 4, s = S % 4;
    const uint8_t sc0 = b[2 * S], sc1 = b[2 * S + 1];
    const F8 dl0 = Splat(quant::RoundedMul(d, (float)(sc0 & 0xF)));
    const F8 ml0 = Splat(quant::RoundedMul(dmin, (float)(sc0 >> 4)));
    const F8 dl1 = Splat(quant::RoundedMul(d, (float)(sc1 & 0xF)));
    const F8 ml1 = Splat(quant::RoundedMul(dmin, (float)(sc1 >> 4)));
    const uint8_t* qs = b + 16 + 32 * j;
    const U8x16 q0 = (LoadU8x16(qs) >> (2 * s)) & 3;
    const U8x16 q1 = (LoadU8x16(qs + 16) >> (2 * s)) & 3;
    w[0] = Mul(dl0, U8ToF8<0>(q0)) - ml0;
    w[1] = Mul(dl0, U8ToF8<1>(q0)) - ml0;
    w[2] = Mul(dl1, U8ToF8<0>(q1)) - ml1;
    w[3] = Mul(dl1, U8ToF8<1>(q1)) - ml1;
  }
};

// Sub-block S = 4j + s: value = (d * scale) * q, q = (bits 2s, 2s+1 of qs[32j + l]) - 4 unless
// bit S of hmask[l] is set; signed 6-bit scale per 16 elements.
struct CodecQ3_K {
  static constexpr int kBlock = 256, kBytes = 110;
  static constexpr bool kIsFloat = false;
  const uint8_t* b;
  float d;
  explicit CodecQ3_K(const uint8_t* p) : b(p), d(LoadF16(p + 108)) {}
  template <int S>
  void Sub(F8* w) const {
    constexpr int j = S / 4, s = S % 4;
    const F8 dl0 = Splat(quant::RoundedMul(d, (float)quant::ScaleQ3_K(b + 96, 2 * S)));
    const F8 dl1 = Splat(quant::RoundedMul(d, (float)quant::ScaleQ3_K(b + 96, 2 * S + 1)));
    const uint8_t* qs = b + 32 + 32 * j;
    // low + 4 * high in 0..7; the value's q is that minus 4.
    const U8x16 q0 = ((LoadU8x16(qs) >> (2 * s)) & 3) | (((LoadU8x16(b) >> S) & 1) << 2);
    const U8x16 q1 = ((LoadU8x16(qs + 16) >> (2 * s)) & 3) | (((LoadU8x16(b + 16) >> S) & 1) << 2);
    w[0] = Mul(dl0, I32ToF8(U8ToI32<0>(q0) - 4));
    w[1] = Mul(dl0, I32ToF8(U8ToI32<1>(q0) - 4));
    w[2] = Mul(dl1, I32ToF8(U8ToI32<0>(q1) - 4));
    w[3] = Mul(dl1, I32ToF8(U8ToI32<1>(q1) - 4));
  }
};

// Any other type with a codec: the whole block decoded by the shared scalar decoder into a
// buffer, then loaded (IQ4_NL/XS, MXFP4, NVFP4, Q8_1, Q8_K: not used by the shipped models).
template <quant::Type kType>
struct CodecGeneric {
  static constexpr int kBlock = (int)quant::Traits(kType).block_size;
  static constexpr int kBytes = (int)quant::Traits(kType).type_size;
  static constexpr bool kIsFloat = false;
  static_assert(kBlock % 32 == 0);
  alignas(32) float f[kBlock];
  explicit CodecGeneric(const uint8_t* p) {
    alignas(16) unsigned char blk[kBytes];  // decode.h wants a naturally aligned block
    memcpy(blk, p, kBytes);
    quant::DecodeBlock((uint32_t)kType, blk, 0, f);
  }
  template <int S>
  void Sub(F8* w) const {
    for (int k = 0; k < 4; ++k) w[k] = LoadF8(f + 32 * S + 8 * k);
  }
};

// ---- Driver

// DotFixed's final tree: lane[l] += lane[l + 8], then + 4, + 2, + 1. lo = lanes 0-7, hi = 8-15.
inline float CombineLanes(const F8& lo, const F8& hi) {
  const F8 s = lo + hi;
  float lane[8];
  memcpy(lane, &s, sizeof(lane));
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
  return lane[0] + lane[1];
}

// Columns [c0, cols) of a float-type row (fewer than 32): the 16-element group as DotFixed's
// vector loop, then the last < 16 elements one lane each (untouched lanes get no +0 added).
template <int NT>
void FloatTail(quant::Type type, const uint8_t* row, int64_t c0, int64_t cols, const float* x,
               int64_t ldx, F8 (*acc)[2]) {
  alignas(32) float wv[32];
  const int64_t n = cols - c0;
  for (int64_t k = 0; k < n; ++k) quant::DecodeBlock((uint32_t)type, row, c0 + k, &wv[k]);
  int64_t k = 0;
  if (n >= 16) {
    for (int t = 0; t < NT; ++t) {
      acc[t][0] += Mul(LoadF8(wv), LoadF8(x + t * ldx + c0));
      acc[t][1] += Mul(LoadF8(wv + 8), LoadF8(x + t * ldx + c0 + 8));
    }
    k = 16;
  }
  if (k == n) return;
  for (int t = 0; t < NT; ++t) {
    float lane[16];
    memcpy(lane, &acc[t][0], 32);
    memcpy(lane + 8, &acc[t][1], 32);
    for (int64_t l = 0; k + l < n; ++l) {
      lane[l] += quant::RoundedMul(wv[k + l], x[t * ldx + c0 + k + l]);
    }
    memcpy(&acc[t][0], lane, 32);
    memcpy(&acc[t][1], lane + 8, 32);
  }
}

// y[i * ldr + t * ldy] = DotFixed(decoded row i, x + t * ldx, cols) for i < NR, t < NT.
// Each lane's sum is a chain of dependent adds (its order is the contract), so one row at T = 1
// waits on add latency; NR rows side by side give the core NR independent chains.
template <class C, int NR, int NT>
void DotRows(const uint8_t* row, int64_t row_bytes, int64_t cols, const float* x, int64_t ldx,
             float* y, int64_t ldr, int64_t ldy, quant::Type type) {
  F8 acc[NR][NT][2] = {};
  const int64_t nb = cols / C::kBlock;
  // The NR rows are one contiguous span; while it is consumed, the span kPrefetchSpans ahead is
  // fetched at the same pace (the hardware prefetcher alone leaves a decode loop waiting on DRAM).
  // Addresses as integers: the span ahead may lie past the weight's end (a prefetch never
  // faults), where pointer arithmetic would be undefined.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(row) + kPrefetchSpans * NR * row_bytes;
  constexpr int kStepBytes = NR * C::kBytes;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float* xb = x + ib * C::kBlock;
    for (int k = 0; k < kStepBytes; k += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(ahead + ib * kStepBytes + k));
    }
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      const C c(row + i * row_bytes + ib * C::kBytes);
      Unroll<C::kBlock / 32>([&]<int S>() {
        F8 w[4];
        c.template Sub<S>(w);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const float* xt = xb + t * ldx + 32 * S;
          acc[i][t][0] += Mul(w[0], LoadF8(xt));
          acc[i][t][1] += Mul(w[1], LoadF8(xt + 8));
          acc[i][t][0] += Mul(w[2], LoadF8(xt + 16));
          acc[i][t][1] += Mul(w[3], LoadF8(xt + 24));
        }
      });
    }
  }
  for (int i = 0; i < NR; ++i) {
    if constexpr (C::kIsFloat) {
      if (nb * C::kBlock < cols) {
        FloatTail<NT>(type, row + i * row_bytes, nb * C::kBlock, cols, x, ldx, acc[i]);
      }
    }
    for (int t = 0; t < NT; ++t) y[i * ldr + t * ldy] = CombineLanes(acc[i][t][0], acc[i][t][1]);
  }
}

// Activation rows [t, t + NT) against weight rows [row_begin, row_end), NR rows at a time.
template <class C, int NR, int NT>
void RowsTimesT(const DotMatMulArgs& a, int64_t t, int64_t row_begin, int64_t row_end) {
  const float* xt = a.x + t * a.cols;
  int64_t r = row_begin;
  for (; r + NR <= row_end; r += NR) {
    DotRows<C, NR, NT>(a.w + r * a.row_bytes, a.row_bytes, a.cols, xt, a.cols,
                       a.y + t * a.rows + r, 1, a.rows, a.type);
  }
  for (; r < row_end; ++r) {
    DotRows<C, 1, NT>(a.w + r * a.row_bytes, a.row_bytes, a.cols, xt, a.cols,
                      a.y + t * a.rows + r, 1, a.rows, a.type);
  }
}

// Rows [row_begin, row_end) in slabs small enough that a slab's weights stay in L1/L2 while
// every group of activation rows passes over them; each pass keeps <= 8 accumulators live.
template <class C>
void RowsOf(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int64_t kSlabRows = 16;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kSlabRows) {
    const int64_t r1 = row_end - r0 < kSlabRows ? row_end : r0 + kSlabRows;
    int64_t t = 0;
    for (; t + kMaxRowsPerPass <= a.T; t += kMaxRowsPerPass) {
      RowsTimesT<C, 1, kMaxRowsPerPass>(a, t, r0, r1);
    }
    switch (a.T - t) {
      case 3: RowsTimesT<C, 1, 3>(a, t, r0, r1); break;
      case 2: RowsTimesT<C, 2, 2>(a, t, r0, r1); break;
      case 1: RowsTimesT<C, kRowsAtT1, 1>(a, t, r0, r1); break;
      default: break;
    }
  }
}

// f.template operator()<Codec>() with the codec of `type`.
template <class F>
void WithCodec(quant::Type type, F&& f) {
  using quant::Type;
  switch (type) {
    case Type::F32: return f.template operator()<CodecF32>();
    case Type::F16: return f.template operator()<CodecF16>();
    case Type::BF16: return f.template operator()<CodecBF16>();
    case Type::Q4_0: return f.template operator()<CodecQ4_0>();
    case Type::Q4_1: return f.template operator()<CodecQ4_1>();
    case Type::Q5_0: return f.template operator()<CodecQ5_0>();
    case Type::Q5_1: return f.template operator()<CodecQ5_1>();
    case Type::Q8_0: return f.template operator()<CodecQ8_0>();
    case Type::Q2_K: return f.template operator()<CodecQ2_K>();
    case Type::Q3_K: return f.template operator()<CodecQ3_K>();
    case Type::Q4_K: return f.template operator()<CodecQ4_K>();
    case Type::Q5_K: return f.template operator()<CodecQ5_K>();
    case Type::Q6_K: return f.template operator()<CodecQ6_K>();
    case Type::Q8_1: return f.template operator()<CodecGeneric<Type::Q8_1>>();
    case Type::Q8_K: return f.template operator()<CodecGeneric<Type::Q8_K>>();
    case Type::IQ4_NL: return f.template operator()<CodecGeneric<Type::IQ4_NL>>();
    case Type::IQ4_XS: return f.template operator()<CodecGeneric<Type::IQ4_XS>>();
    case Type::MXFP4: return f.template operator()<CodecGeneric<Type::MXFP4>>();
    case Type::NVFP4: return f.template operator()<CodecGeneric<Type::NVFP4>>();
    default:
      // cpu_matmul.cc sends only types with a codec here; anything else is a wiring bug.
      std::fprintf(stderr, "cpu dot kernels: no kernel for ggml type id %u\n", (unsigned)type);
      std::abort();
  }
}

}  // namespace

void DotMatMulRowsImpl(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  WithCodec(a.type, [&]<class C>() { RowsOf<C>(a, row_begin, row_end); });
}

}  // namespace lockstep::backend::cpu::LOCKSTEP_DOT_NS
