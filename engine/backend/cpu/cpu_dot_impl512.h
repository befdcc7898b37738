// The 16-lane (AVX-512) driver of the fused matmul, included by cpu_dot_avx512.cc after
// cpu_dot_impl.h (whose codecs decode 32 elements into four 8-float registers).
//
// One zmm register holds all 16 lanes of a DotFixed sum (cpu_kernels.h): with elements c..c+15
// of a row at c % 16 == 0 in lanes 0..15, `acc += w * x` adds element c + l to lane l in
// increasing c, and the lanes combine by CombineLanes (lanes l and l + 8 first, as DotFixed).
// Same operations, same order as MatMulReference, bit for bit; only the register width changes.
//
// T = 1 (decode): kRowsAtT1x16 weight rows decoded block by block in registers, each against the
// one activation row (independent accumulator chains hide add latency, LAB.md step 2).
// T > 1 (prefill, batched decode, verify): a slab of weight rows is decoded ONCE into a buffer of
// floats (L1/L2-resident), then tiles of kTileRows rows x kTileT activation rows run a plain f32
// dot over it: the decode cost is paid once per weight row instead of once per 4 activation rows.
// Float weight types (rows may end in a partial group of 16) keep cpu_dot_impl.h's driver.

namespace lockstep::backend::cpu::LOCKSTEP_DOT_NS {
namespace {

using F16v = float __attribute__((vector_size(64)));

// Weight rows interleaved at T = 1: 4 and 8 measured the same within noise (Q4_1, Q8_0; 4 was
// ~5% faster on Q5_0), 4 keeps more registers for the decoders.
constexpr int kRowsAtT1x16 = 4;
// Register tile of the buffered path: kTileRows x kTileT accumulators (16 of 32 registers) plus
// kTileRows weight vectors and one activation vector per step.
constexpr int kTileRows = 4, kTileT = 4;
// Floats of decoded weights per slab (per thread): 24 KiB, half of a 48 KiB L1d.
constexpr int64_t kSlabFloats = 6144;

inline F16v LoadF16v(const float* p) {
  F16v v;
  memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreF16v(float* p, const F16v& v) { memcpy(p, &v, sizeof(v)); }

// lo's 8 lanes then hi's.
inline F16v Cat(const F8& lo, const F8& hi) {
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// DotFixed's tree over 16 lanes: lane[l] += lane[l + 8] (l < 8), then CombineLanes' steps.
inline float Combine16(const F16v& acc) {
  const F8 lo = __builtin_shufflevector(acc, acc, 0, 1, 2, 3, 4, 5, 6, 7);
  const F8 hi = __builtin_shufflevector(acc, acc, 8, 9, 10, 11, 12, 13, 14, 15);
  return CombineLanes(lo, hi);
}

using I32x16 = int32_t __attribute__((vector_size(64)));

inline F16v Splat16(float s) { return F16v{s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s}; }
inline F16v I32ToF16v(const I32x16& v) { return __builtin_convertvector(v, F16v); }
// The 16 bytes at p widened to int32 (zero- or sign-extended): one vpmovzxbd / vpmovsxbd.
template <bool kSigned>
inline I32x16 Widen16(const uint8_t* p) {
  __m128i m;
  memcpy(&m, p, 16);
  return (I32x16)(kSigned ? _mm512_cvtepi8_epi32(m) : _mm512_cvtepu8_epi32(m));
}

// Sub-block S of a block decoded 16 at a time: Dec16<C>::Sub<S>(c, w) puts elements 32S + 0..15
// in w[0] and 32S + 16..31 in w[1], with exactly the operations of C::Sub (the same decode.h
// arithmetic, 16 lanes wide). The generic form joins C::Sub's four 8-float registers; the types
// of the shipped models have native forms below.
template <class C>
struct Dec16 {
  template <int S>
  static void Sub(const C& c, F16v* w) {
    F8 w8[4];
    c.template Sub<S>(w8);
    w[0] = Cat(w8[0], w8[1]);
    w[1] = Cat(w8[2], w8[3]);
  }
};

template <>
struct Dec16<CodecQ8_0> {  // q * d
  template <int S>
  static void Sub(const CodecQ8_0& c, F16v* w) {
    const F16v d = Splat16(LoadF16(c.b));
    w[0] = I32ToF16v(Widen16<true>(c.b + 2)) * d;
    w[1] = I32ToF16v(Widen16<true>(c.b + 18)) * d;
  }
};

template <>
struct Dec16<CodecQ4_0> {  // d * (nibble - 8)
  template <int S>
  static void Sub(const CodecQ4_0& c, F16v* w) {
    const F16v d = Splat16(LoadF16(c.b));
    const I32x16 q = Widen16<false>(c.b + 2);
    w[0] = d * I32ToF16v((q & 0xF) - 8);
    w[1] = d * I32ToF16v((q >> 4) - 8);
  }
};

template <>
struct Dec16<CodecQ4_1> {  // (d * nibble) + m
  template <int S>
  static void Sub(const CodecQ4_1& c, F16v* w) {
    const F16v d = Splat16(LoadF16(c.b)), m = Splat16(LoadF16(c.b + 2));
    const I32x16 q = Widen16<false>(c.b + 4);
    w[0] = d * I32ToF16v(q & 0xF) + m;
    w[1] = d * I32ToF16v(q >> 4) + m;
  }
};

// Fifth bits of a Q5 block as 0 or 16 per lane: bits 0-15 of qh (h = 0) or 16-31 (h = 1) are
// the lane mask of a masked move.
template <int H>
inline I32x16 Q5High16(uint32_t qh) {
  const __m512i sixteen = _mm512_set1_epi32(16);
  return (I32x16)_mm512_maskz_mov_epi32((__mmask16)(qh >> (16 * H)), sixteen);
}

template <>
struct Dec16<CodecQ5_0> {  // d * (q - 16)
  template <int S>
  static void Sub(const CodecQ5_0& c, F16v* w) {
    const F16v d = Splat16(LoadF16(c.b));
    const uint32_t qh = quant::LoadQh(c.b + 2);
    const I32x16 q = Widen16<false>(c.b + 6);
    w[0] = d * I32ToF16v(((q & 0xF) | Q5High16<0>(qh)) - 16);
    w[1] = d * I32ToF16v(((q >> 4) | Q5High16<1>(qh)) - 16);
  }
};

template <>
struct Dec16<CodecQ5_1> {  // (d * q) + m
  template <int S>
  static void Sub(const CodecQ5_1& c, F16v* w) {
    const F16v d = Splat16(LoadF16(c.b)), m = Splat16(LoadF16(c.b + 2));
    const uint32_t qh = quant::LoadQh(c.b + 4);
    const I32x16 q = Widen16<false>(c.b + 8);
    w[0] = d * I32ToF16v((q & 0xF) | Q5High16<0>(qh)) + m;
    w[1] = d * I32ToF16v((q >> 4) | Q5High16<1>(qh)) + m;
  }
};

template <>
struct Dec16<CodecQ4_K> {  // (d * sc) * q - (dmin * m)
  template <int S>
  static void Sub(const CodecQ4_K& c, F16v* w) {
    int sc, m;
    quant::ScaleMinK4(c.b + 4, S, &sc, &m);
    const F16v dl = Splat16(quant::RoundedMul(c.d, (float)sc));
    const F16v ml = Splat16(quant::RoundedMul(c.dmin, (float)m));
    const uint8_t* qs = c.b + 16 + 32 * (S / 2);
    w[0] = dl * I32ToF16v((Widen16<false>(qs) >> (4 * (S % 2))) & 0xF) - ml;
    w[1] = dl * I32ToF16v((Widen16<false>(qs + 16) >> (4 * (S % 2))) & 0xF) - ml;
  }
};

template <>
struct Dec16<CodecQ6_K> {  // (d * scale) * (q - 32), scale per 16 elements
  template <int S>
  static void Sub(const CodecQ6_K& c, F16v* w) {
    constexpr int j = S / 4, t = S % 4;
    const int8_t* scales = reinterpret_cast<const int8_t*>(c.b + 192);
    const F16v dl0 = Splat16(quant::RoundedMul(c.d, (float)scales[2 * S]));
    const F16v dl1 = Splat16(quant::RoundedMul(c.d, (float)scales[2 * S + 1]));
    const uint8_t* ql = c.b + 64 * j + 32 * (t % 2);
    const uint8_t* qh = c.b + 128 + 32 * j;
    const I32x16 q0 = ((Widen16<false>(ql) >> (4 * (t / 2))) & 0xF) |
                      (((Widen16<false>(qh) >> (2 * t)) & 3) << 4);
    const I32x16 q1 = ((Widen16<false>(ql + 16) >> (4 * (t / 2))) & 0xF) |
                      (((Widen16<false>(qh + 16) >> (2 * t)) & 3) << 4);
    w[0] = dl0 * I32ToF16v(q0 - 32);
    w[1] = dl1 * I32ToF16v(q1 - 32);
  }
};

// Combine16 of 16 accumulators at once: lane 4j + p of the result is Combine16(a[4p + j]).
// Each stage is DotFixed's tree step for every accumulator (lane l plus lane l + 8, then + 4,
// + 2, + 1), with the lanes of different accumulators packed side by side by shuffles, so the
// adds are the same IEEE adds of the same values: 15 adds and 30 shuffles instead of 16 scalar
// trees.
inline F16v Reduce16(const F16v* a) {
  __m512 s[8], u[4], v[2];
  for (int k = 0; k < 8; ++k) {  // [a2k.s1 | a2k+1.s1]: s1[l] = lane l + lane l + 8
    const __m512 x = (__m512)a[2 * k], y = (__m512)a[2 * k + 1];
    s[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  for (int m = 0; m < 4; ++m) {  // quarter j = a(4m + j).s2: s2[l] = s1[l] + s1[l + 4]
    u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0xDD));
  }
  for (int m = 0; m < 2; ++m) {  // s3[l] = s2[l] + s2[l + 2]
    v[m] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0x44),
                         _mm512_shuffle_ps(u[2 * m], u[2 * m + 1], 0xEE));
  }
  // s3[0] + s3[1]: quarter j = [u0, u1, u2, u3 of quarter j] = a(j), a(4 + j), a(8 + j), a(12 + j)
  return (F16v)_mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88),
                             _mm512_shuffle_ps(v[0], v[1], 0xDD));
}

// Elements 32S + 0..15 and 32S + 16..31 of block c in w[0], w[1].
template <class C, int S>
inline void Sub16(const C& c, F16v* w) {
  Dec16<C>::template Sub<S>(c, w);
}

// y[i] = DotFixed(decoded row i, x, cols) for i < NR; rows row + i * row_bytes.
template <class C, int NR>
void DotRowsT1(const uint8_t* row, int64_t row_bytes, int64_t cols, const float* x, float* y) {
  F16v acc[NR] = {};
  const int64_t nb = cols / C::kBlock;
  // As DotRows (cpu_dot_impl.h): the span kPrefetchSpans ahead is fetched at the pace this one is
  // consumed; integer addresses because it may lie past the weight's end.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(row) + kPrefetchSpans * NR * row_bytes;
  constexpr int kStepBytes = NR * C::kBytes;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const float* xb = x + ib * C::kBlock;
    for (int k = 0; k < kStepBytes; k += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(ahead + ib * kStepBytes + k));
    }
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) {
      const C c(row + i * row_bytes + ib * C::kBytes);
      Unroll<C::kBlock / 32>([&]<int S>() {
        F16v w[2];
        Sub16<C, S>(c, w);
        acc[i] += w[0] * LoadF16v(xb + 32 * S);
        acc[i] += w[1] * LoadF16v(xb + 32 * S + 16);
      });
    }
  }
  for (int i = 0; i < NR; ++i) y[i] = Combine16(acc[i]);
}

// Decoded rows w (row i at w + i * cols) times activation rows x (row t at x + t * cols):
// y[t * ldy + i] = DotFixed(w_i, x_t, cols) for i < NR, t < NT; cols % 16 == 0.
template <int NR, int NT>
void Tile(const float* w, const float* x, int64_t cols, float* y, int64_t ldy) {
  F16v acc[NR][NT] = {};
  for (int64_t c = 0; c < cols; c += 16) {
    F16v wv[NR];
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) wv[i] = LoadF16v(w + i * cols + c);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const F16v xv = LoadF16v(x + t * cols + c);
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) acc[i][t] += wv[i] * xv;
    }
  }
  static_assert(NR <= 4 && NT <= 4);
  F16v a[16] = {};
  for (int i = 0; i < NR; ++i) {
    for (int t = 0; t < NT; ++t) a[4 * i + t] = acc[i][t];
  }
  const F16v r = Reduce16(a);  // lane 4t + i: Combine16(acc[i][t])
  for (int t = 0; t < NT; ++t) {
    for (int i = 0; i < NR; ++i) y[t * ldy + i] = r[4 * t + i];
  }
}

template <int NR>
void TileRowsT(const float* w, const float* x, int64_t cols, int nt, float* y, int64_t ldy) {
  switch (nt) {
    case 4: return Tile<NR, 4>(w, x, cols, y, ldy);
    case 3: return Tile<NR, 3>(w, x, cols, y, ldy);
    case 2: return Tile<NR, 2>(w, x, cols, y, ldy);
    default: return Tile<NR, 1>(w, x, cols, y, ldy);
  }
}

// Row i of the slab [r0, r0 + n) decoded into buf + i * cols.
template <class C>
void DecodeSlab(const DotMatMulArgs& a, int64_t r0, int64_t n, float* buf) {
  const int64_t nb = a.cols / C::kBlock;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* row = a.w + (r0 + i) * a.row_bytes;
    float* dst = buf + i * a.cols;
    for (int64_t ib = 0; ib < nb; ++ib) {
      const C c(row + ib * C::kBytes);
      Unroll<C::kBlock / 32>([&]<int S>() {
        F16v w[2];
        Sub16<C, S>(c, w);
        StoreF16v(dst + ib * C::kBlock + 32 * S, w[0]);
        StoreF16v(dst + ib * C::kBlock + 32 * S + 16, w[1]);
      });
    }
  }
}

template <class C>
void RowsBuffered(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t cols = a.cols;
  int64_t slab = kSlabFloats / cols / kTileRows * kTileRows;
  if (slab < kTileRows) slab = kTileRows;
  thread_local std::vector<float> buf;
  if ((int64_t)buf.size() < slab * cols) buf.resize(slab * cols);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += slab) {
    const int64_t n = row_end - r0 < slab ? row_end - r0 : slab;
    DecodeSlab<C>(a, r0, n, buf.data());
    for (int64_t t0 = 0; t0 < a.T; t0 += kTileT) {
      const int nt = (int)(a.T - t0 < kTileT ? a.T - t0 : kTileT);
      const float* xt = a.x + t0 * cols;
      float* yt = a.y + t0 * a.rows + r0;
      int64_t i = 0;
      for (; i + kTileRows <= n; i += kTileRows) {
        TileRowsT<kTileRows>(buf.data() + i * cols, xt, cols, nt, yt + i, a.rows);
      }
      switch (n - i) {
        case 3: TileRowsT<3>(buf.data() + i * cols, xt, cols, nt, yt + i, a.rows); break;
        case 2: TileRowsT<2>(buf.data() + i * cols, xt, cols, nt, yt + i, a.rows); break;
        case 1: TileRowsT<1>(buf.data() + i * cols, xt, cols, nt, yt + i, a.rows); break;
        default: break;
      }
    }
  }
}

template <class C>
void RowsT1(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  int64_t r = row_begin;
  for (; r + kRowsAtT1x16 <= row_end; r += kRowsAtT1x16) {
    DotRowsT1<C, kRowsAtT1x16>(a.w + r * a.row_bytes, a.row_bytes, a.cols, a.x, a.y + r);
  }
  for (; r < row_end; ++r) DotRowsT1<C, 1>(a.w + r * a.row_bytes, a.row_bytes, a.cols, a.x, a.y + r);
}

}  // namespace

void DotMatMulRows512(const DotMatMulArgs& a, int64_t row_begin, int64_t row_end) {
  WithCodec(a.type, [&]<class C>() {
    if constexpr (C::kIsFloat) {
      RowsOf<C>(a, row_begin, row_end);
    } else if (a.T == 1) {
      RowsT1<C>(a, row_begin, row_end);
    } else {
      RowsBuffered<C>(a, row_begin, row_end);
    }
  });
}

}  // namespace lockstep::backend::cpu::LOCKSTEP_DOT_NS
