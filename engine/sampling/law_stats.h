// Goodness-of-fit statistics for checking a sampler's law against its exact distribution:
// the G-test (likelihood-ratio test) with a chi-square p-value. Used by the sampling tests and by
// the speculative verifier's law tests.
#pragma once

#include <cstdint>
#include <span>

namespace lockstep::sampling {

// Regularized upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), a > 0, x >= 0.
// Series for x < a + 1, Lentz continued fraction otherwise (Numerical Recipes 6.2), both run to
// relative 1e-15, so tail values down to ~1e-300 keep ~14 significant digits.
double RegularizedGammaQ(double a, double x);

// P[X >= x] for X ~ chi-square with `df` degrees of freedom: Q(df / 2, x / 2).
double ChiSquareSurvival(double x, int64_t df);

struct GTestResult {
  double g = 0.0;             // 2 * sum O ln(O / E)
  int64_t df = 0;             // categories with E > 0, minus 1
  double p_value = 1.0;       // ChiSquareSurvival(g, df); 0 if a category with E = 0 was observed
  double min_expected = 0.0;  // smallest E over categories with E > 0 (chi-square needs E >~ 5)
};

// observed: [k] counts; expected_probs: [k] the exact law (sums to 1).
GTestResult GTest(std::span<const int64_t> observed, std::span<const double> expected_probs);

}  // namespace lockstep::sampling
