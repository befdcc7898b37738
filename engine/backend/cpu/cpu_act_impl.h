// The GLU activations of the cpu backend (CpuBackend::Glu), written once with GCC vector
// extensions and compiled per instruction set next to the dot kernels (cpu_dot_base.cc,
// cpu_dot_avx2.cc, cpu_dot_avx512.cc include this file inside their target pragma). Internal.
//
// Each element is computed in double from the float inputs, with exp from the polynomial below
// (no libm call), and rounded to float once:
//   silu:      out = g / (1 + exp(-g)) * up
//   gelu-tanh: out = 0.5 * g * h * up,  h = 1 + tanh(y) = 2 - 2 / (e + 1) (y >= 0) or
//              2 / (e + 1) (y < 0),  e = exp(2 |y|),  y = sqrt(2 / pi) * (g + 0.044715 g^3)
// (h written without the cancellation of 1 + tanh for y << 0). exp's relative error is ~1e-14,
// so the result is the ref backend's double formula (oracle/ref_backend.cc) to within its own
// final rounding plus ~1e-13 relative: well inside kGluRtol (engine/core/tolerances.h). The
// double operations are IEEE element-wise ops (no FMA: the including files keep contraction
// off), so every ISA build gives the same bits, and an element's value depends on nothing but
// its inputs (batch, chunk and thread invariance, docs/design.md §1).

namespace lockstep::backend::cpu::LOCKSTEP_DOT_NS {
namespace {

// Lanes per vector: 8 doubles in the AVX-512 build (cpu_dot_avx512.cc defines it), 4 elsewhere
// (a 64-byte vector outside AVX-512 trips GCC's ABI note). Lanes never meet, so any count gives
// the same bits.
#if !defined(LOCKSTEP_ACT_LANES)
#define LOCKSTEP_ACT_LANES 4
#endif
constexpr int kActLanes = LOCKSTEP_ACT_LANES;
using D8 = double __attribute__((vector_size(8 * kActLanes)));
using I64x8 = int64_t __attribute__((vector_size(8 * kActLanes)));

inline D8 SplatD(double s) {
  D8 v;
  for (int l = 0; l < kActLanes; ++l) v[l] = s;
  return v;
}

// exp(z) for z in [-700, 700] (ExpAll handles the rest). z = k ln2 + r with k the
// nearest integer to z / ln2 (the 1.5 * 2^52 trick rounds it, and its low bits are k), ln2 in
// two parts (fdlibm's) so k * ln2_hi is exact, |r| <= 0.35; exp(r) by its Taylor series to
// r^11 / 11! (truncation < 1e-14 relative), times 2^k built in the exponent field.
inline D8 ExpD(D8 z) {
  const D8 magic = SplatD(0x1.8p52);
  const D8 km = z * SplatD(0x1.71547652b82fep0) + magic;  // 1.5 * 2^52 + k
  const D8 k = km - magic;
  const D8 r = (z - k * SplatD(0x1.62e42fee00000p-1)) - k * SplatD(0x1.a39ef35793c76p-33);
  D8 p = SplatD(1.0 / 39916800.0);
  p = p * r + SplatD(1.0 / 3628800.0);
  p = p * r + SplatD(1.0 / 362880.0);
  p = p * r + SplatD(1.0 / 40320.0);
  p = p * r + SplatD(1.0 / 5040.0);
  p = p * r + SplatD(1.0 / 720.0);
  p = p * r + SplatD(1.0 / 120.0);
  p = p * r + SplatD(1.0 / 24.0);
  p = p * r + SplatD(1.0 / 6.0);
  p = p * r + SplatD(0.5);
  p = p * r + SplatD(1.0);
  p = p * r + SplatD(1.0);
  const I64x8 two_k = (((I64x8)km) + 1023) << 52;  // |k| <= 1010: a normal 2^k
  return p * (D8)two_k;
}

// exp(z) for every z: ExpD on [-700, 700], +Inf above (exp(700) ~ 1e304 is the largest it
// builds), 0 below, NaN for NaN (NaN compares false and passes through).
inline D8 ExpAll(D8 z) {
  const D8 lo = SplatD(-700.0), hi = SplatD(700.0);
  D8 c = z < lo ? lo : z;
  c = c > hi ? hi : c;
  D8 e = ExpD(c);
  e = z > hi ? SplatD(__builtin_inf()) : e;
  return z < lo ? SplatD(0.0) : e;
}

inline D8 LoadAsD8(const float* p) {
  D8 v;
  for (int l = 0; l < kActLanes; ++l) v[l] = p[l];
  return v;
}

template <bool kGelu>
inline D8 Act(D8 g, D8 u) {
  if constexpr (kGelu) {
    const D8 y = SplatD(0.7978845608028654) * (g + SplatD(0.044715) * g * g * g);
    const D8 a = y < SplatD(0.0) ? -y : y;
    const D8 e = ExpAll(SplatD(2.0) * a);
    const D8 q = SplatD(2.0) / (e + SplatD(1.0));
    const D8 h = y < SplatD(0.0) ? q : SplatD(2.0) - q;
    return SplatD(0.5) * g * h * u;
  } else {
    const D8 e = ExpAll(-g);
    return g / (SplatD(1.0) + e) * u;
  }
}

template <bool kGelu>
void GluImpl(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kActLanes <= n; i += kActLanes) {
    const D8 o = Act<kGelu>(LoadAsD8(gate + i), LoadAsD8(up + i));
    for (int l = 0; l < kActLanes; ++l) out[i + l] = (float)o[l];
  }
  if (i < n) {  // the same lanes, padded
    float g[kActLanes] = {}, u[kActLanes] = {};
    for (int64_t l = 0; i + l < n; ++l) g[l] = gate[i + l], u[l] = up[i + l];
    const D8 o = Act<kGelu>(LoadAsD8(g), LoadAsD8(u));
    for (int64_t l = 0; i + l < n; ++l) out[i + l] = (float)o[l];
  }
}

}  // namespace

void GluRowsImpl(bool gelu, const float* gate, const float* up, float* out, int64_t n) {
  if (gelu) {
    GluImpl<true>(gate, up, out, n);
  } else {
    GluImpl<false>(gate, up, out, n);
  }
}

}  // namespace lockstep::backend::cpu::LOCKSTEP_DOT_NS
