// Every numeric tolerance lockstep checks a backend against, with the derivation of its value
// (STYLE rule 4). The reference is the ref backend (oracle/ref_backend.h): double arithmetic on
// the same dequantized weights, rounded to float once at the output, so a ref output is within
// half an ulp of the exact result. A bound below is on |backend - ref| for one output element.
//
// u = 2^-24 is the unit roundoff of binary32 (round to nearest): one correctly rounded operation
// is off by at most u relative; one ulp is up to 2u relative. Every bound includes the ref's own
// final rounding (u |ref|). The bounds are worst-case a-priori bounds (Higham, "Accuracy and
// Stability of Numerical Algorithms", ch. 3-4): a sum of n float terms in any order is off by at
// most (n - 1) u sum|terms| to first order, so none assumes the cpu backend's lane count, and
// the CUDA backend is held to the same numbers. Where a bound rests on libm (glibc's measured
// maxima on x86-64: expf 1 ulp, tanhf 2 ulp, sqrtf correctly rounded) it is doubled, because
// those are measured figures, not proven ones, and first-order terms drop the rest.
#pragma once

#include <cstdint>

namespace lockstep::tol {

inline constexpr double kU = 0x1p-24;  // binary32 unit roundoff

// Underflow: a product or sum that lands in the subnormal range loses up to 2^-150 absolute
// per operation; a few hundred thousand of them stay below 2^-126.
inline constexpr double kAtol = 0x1p-126;

// MatMul, element (t, r): y = sum_c w_rc x_tc over `cols` float products (each rounded: u),
// summed in any fixed order ((cols - 1) u), plus the ref's rounding (u |y| <= u sum|wx|).
// Weights are bitwise equal in both backends (one shared dequantizer), so nothing else differs.
//   |y - y_ref| <= MatMulRtol(cols) * sum_c |w_rc x_tc| + kAtol      ((cols + 1) u derived)
// Stated against sum|wx| rather than |y|, it holds when y cancels to ~0. No libm: not doubled.
constexpr double MatMulRtol(int64_t cols) { return static_cast<double>(cols + 2) * kU; }

// GetRows copies dequantized values: bitwise equal, no arithmetic.
inline constexpr double kGetRowsAtol = 0.0;

// RmsNorm, element (t, i): ss = sum x^2 is a sum of d non-negative terms, so its relative
// error is d u; / d (+u) and + eps (+u) give (d + 2) u, which sqrt halves; sqrtf (+u), 1/ (+u),
// the two output products (+2u), the ref's rounding (+u):  (d / 2 + 6) u derived, doubled:
//   |y - y_ref| <= RmsNormRtol(d) * |y_ref| + kAtol
constexpr double RmsNormRtol(int64_t d) { return static_cast<double>(d + 12) * kU; }

// Rope, the two outputs of one rotated pair (a, b): cos and sin rounded to float (u absolute
// each, both <= 1), two rounded products, one rounded difference, the ref's rounding:
//   |y - y_ref| <= kRopeRtol * (|a| + |b|) + kAtol      (4u derived, doubled for cos/sin)
// Both backends compute the angle pos * base^(-2i/n_rot) in double, so large positions cost
// nothing extra (a float angle is off by ulp(pos * freq), ~1e-3 rad at pos 8192).
inline constexpr double kRopeRtol = 8 * kU;

// Attention, element (t, h, d). Let S = max over visible keys j of |scale| sum_d |q_d k_jd|
// (the largest score magnitude before softcap), n = number of visible keys, V = max over
// visible j of |v_jd|.
//   score error per key: (head_dim + 1) u S (dot, scale) + 7u S (softcap: /, tanhf 4u, *)
//   each p_j = exp(s_j - m): relative error <= 2 * score error (s_j and the max m), + 2u S (the
//     subtraction, |s_j - m| <= 2S) + 2u (expf, 1 ulp)
//   o = sum_j p_j v_j / sum_j p_j: twice that, + n u (products and sum of the numerator),
//     + n u (the denominator), + u (division), + u (ref rounding), all times sum_j w_j |v_jd| <= V
//   |o - o_ref| <= AttentionBound(head_dim, n, S, V) + kAtol
// Worst-case and first-order; with the max counted twice it already has the libm margin.
constexpr double AttentionBound(int64_t head_dim, int64_t n_keys, double score_abs_max,
                                double v_abs_max) {
  const double score_err = static_cast<double>(head_dim + 8) * kU * score_abs_max;
  const double p_rel = 2.0 * score_err + 2.0 * kU * score_abs_max + 2.0 * kU;
  return (2.0 * p_rel + static_cast<double>(2 * n_keys + 2) * kU) * v_abs_max;
}

// Glu, element i: out = act(g) * up.
//   silu: sigma = 1 / (1 + expf(-g)): expf 2u, +, / -> 4u relative; g / (1 + e), * up, the
//     ref's rounding -> 6u relative to |g up|.
//   gelu-tanh: the inner polynomial is off by ~6u relative (its rounded constants included),
//     which tanh' damps to <= 3u absolute; tanhf 4u absolute; 1 + tanh cancels for g << 0, so
//     the error is absolute in (1 + tanh) (<= 9u), times 0.5|g|; * up and the ref's rounding:
//     <= 7.5u |g up|.
//   |out - out_ref| <= kGluRtol * |g * up| + kAtol   (7.5u derived, doubled for libm)
inline constexpr double kGluRtol = 16 * kU;

// Softcap, element i: cap * tanhf(x / cap): division u (tanh' <= tanh(y) / y carries it as
// <= u relative), tanhf 4u, product u, the ref's rounding u:
//   |y - y_ref| <= kSoftcapRtol * |y_ref| + kAtol   (7u derived, doubled for libm)
inline constexpr double kSoftcapRtol = 16 * kU;

// Add and Scale: one rounded float operation. The ref computes it in double and rounds once;
// double rounding through binary64 is innocuous for + and * of binary32 operands (Figueroa:
// 53 >= 2 * 24 + 2), so both give the correctly rounded result: bitwise equal.
inline constexpr double kElementwiseAtol = 0.0;

// --- Gated DeltaNet and mixture-of-experts ops (backend.h). CUDA's expf is 2 ulp (4u), glibc's
// 1 ulp; the bounds take 4u for exp and double the libm-dependent sum, as above.

// CausalConvSilu, element (t, c): a = sum of K products w_i u_i in a fixed order: (K + 1) u
// sum|w u| (as MatMulRtol); silu' lies in [-0.1, 1.1], so that carries to y as 1.1 (K + 1) u
// sum|w u|; silu itself (expf 4u, 1 + e u, / u, the ref's rounding u: 7u relative to |y|).
//   |y - y_ref| <= ConvSiluBound(K, sum|w u|, |y_ref|) + kAtol    (derived, doubled)
constexpr double ConvSiluBound(int64_t K, double sum_abs, double y_abs) {
  return 2.0 * static_cast<double>(K + 2) * kU * sum_abs + 16.0 * kU * y_abs;
}

// GdnGates. g = A softplus(a + dt): z = a + dt rounds (u |z|), which softplus carries to a
// relative error <= u max(|z|, 1) (softplus'/softplus <= 1 for z <= 0, <= 1/z above); expf 4u,
// log1pf 2u, * A u, the ref's rounding u:  (|z| + 9) u relative, doubled:
//   |g - g_ref| <= GdnDecayRtol(z) |g_ref| + kAtol
// beta = 1 / (1 + expf(-b)): expf 4u, + u, / u, the ref's rounding u: 7u, doubled to 16u.
constexpr double GdnDecayRtol(double z_abs) { return 2.0 * (z_abs + 9.0) * kU; }
inline constexpr double kGdnBetaRtol = 16 * kU;

// GatedDeltaRule: every token rescales, updates and reads each state entry once: the L2 norms
// of q and k (dk + 4) u relative, exp(g) 4u, S^T k and S^T q over dk terms (dk + 1) u each, the
// rank-one update 2u. Column j of the state sees only column j of v, and with |k| = 1,
// beta in (0, 1) and decays <= 1 the map s_j -> exp(g) (I - beta k k^T) s_j does not amplify,
// so |s_j| <= N_j, where N_j = |s_j| at the start (0 at position 0) and N_j <- exp(g) N_j +
// beta |v_j| per token. Every rounding of a token lands in column j at most ~(dk + 8) u N_j in
// norm (S^T k is a dot bounded by |s_j| |k|), so after tau tokens |s_j - s_j,ref| <=
// ~tau (dk + 8) u N_j, and an output o_j = s_j . q is off by at most that times |q| plus its
// own dot's (dk + 1) u N_j |q|. The bound is on N_j |q|, not on |o_j|: s_j . q can cancel
// (q nearly orthogonal to k after one token), and then |o_j| says nothing of its error.
// First-order, doubled twice (libm, and the two computations each off by the bound):
//   |o_j - o_ref| <= GatedDeltaRuleRtol(tau, dk) N_j |q| + kAtol.
// States: |S_ij - S_ref| <= GatedDeltaRuleRtol(tau, dk) max|S_ref| (that slot and value head)
// + kAtol; a state block does not cancel as a whole.
constexpr double GatedDeltaRuleRtol(int64_t tau, int64_t dk) {
  return 4.0 * static_cast<double>((tau + 1) * (dk + 8)) * kU;
}

// GatedRmsNorm, element: RmsNorm's bound, and silu(z) (expf 4u, +, /: 6u) and two more products,
// doubled for libm:  (d + 12) u + 16u relative to |y_ref|.
constexpr double GatedRmsNormRtol(int64_t d) { return static_cast<double>(d + 12 + 16) * kU; }

// MoeRoute, weight (t, j): e_i = exp(l_i - m) 4u each; their sum over E positive terms
// (E - 1) u more; p = e / sum 2u; normalized: the k kept p summed ((k - 1) u over their own
// errors) and a division: relative error <= 2 (E + 9) u + (k + 1) u + 2u, rounded up:
//   |w - w_ref| <= MoeRouteRtol(E, k) |w_ref|.  The ids are exact (float comparisons of the same
// logits, ties to the lower id): held bitwise.
constexpr double MoeRouteRtol(int64_t E, int64_t k) { return static_cast<double>(2 * E + k + 24) * kU; }

// MoeCombine, element (t, c): k products and k - 1 sums in rank order, the ref's rounding:
//   |o - o_ref| <= MoeCombineRtol(k) sum_j |w_j y_jc| + kAtol     ((k + 1) u derived, doubled)
constexpr double MoeCombineRtol(int64_t k) { return static_cast<double>(2 * k + 2) * kU; }

// SigmoidMul: x / (1 + expf(-g)): expf 4u, + u, / u, the ref's rounding u: 7u, doubled.
inline constexpr double kSigmoidMulRtol = 16 * kU;

}  // namespace lockstep::tol

namespace lockstep::tol {

// --- Whole-model agreement with golden logits (compare::Stats) ---
//
// Tiny random models (golden/tiny/, F32 weights): the reference is transformers' float32 eager
// forward; ours differs only by float32 rounding in a different summation order (cpu) or by
// rounding once per op from double (ref). With per-op relative errors of ~1e-6 through <= 6
// layers, logit errors are ~1e-5 relative, i.e. NMSE ~1e-10; 1e-8 leaves 100x headroom while a
// wrong formula (a missed norm, a RoPE pairing, an off-by-one window) gives NMSE > 1e-3.
inline constexpr double kTinyGoldenNmse = 1e-8;
// KL(golden || ours) per position, nats: second order in the logit error, ~1e-10 expected.
inline constexpr double kTinyGoldenMaxKl = 1e-6;
// A position is decisive when the golden top-1 leads top-2 by more than this logit gap; there
// the argmax must agree. 1e-3 is ~100x the expected absolute logit error of the tiny models.
inline constexpr double kGoldenDecisiveMargin = 1e-3;

}  // namespace lockstep::tol

namespace lockstep::tol {

// Real models (golden/real/): transformers loads the GGUF itself (dequantizing with the gguf
// package, which our decoders match bit for bit) and runs float32 eager attention. What remains
// is float32 summation order through 18-30 layers: measured NMSE 3e-13..3.5e-12, max |Δlogit|
// <= 1e-4 (cpu backend, oracle/gen_real_golden.py prompts). The bounds sit ~1000x above that and
// far below what any real defect gives (a skipped norm or a wrong RoPE base: NMSE > 1e-3).
inline constexpr double kRealGoldenNmse = 1e-9;       // over the golden's top-256 entries
inline constexpr double kRealGoldenMaxAbs = 1e-2;     // any top-256 logit, absolute
inline constexpr double kRealGoldenLseAbs = 1e-2;     // log-sum-exp of the full row, absolute

}  // namespace lockstep::tol
