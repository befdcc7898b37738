#include "engine/sampling/law_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lockstep::sampling {
namespace {

constexpr double kEps = 1e-15;
constexpr double kTiny = 1e-300;  // keeps Lentz's denominators away from 0
constexpr int kMaxIterations = 100000;

// log(e^-x x^a / Gamma(a)): the common prefactor of both expansions.
double LogPrefactor(double a, double x) { return -x + a * std::log(x) - std::lgamma(a); }

// P(a, x) by the series e^-x x^a / Gamma(a+1) * sum_n x^n / ((a+1)...(a+n)); converges fast for
// x < a + 1.
double LowerSeries(double a, double x) {
  double ap = a, term = 1.0 / a, sum = term;
  for (int n = 0; n < kMaxIterations; ++n) {
    ap += 1.0;
    term *= x / ap;
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * kEps) break;
  }
  return sum * std::exp(LogPrefactor(a, x));
}

// Q(a, x) by the continued fraction e^-x x^a / Gamma(a) * 1/(x+1-a- 1(1-a)/(x+3-a- ...)),
// evaluated with the modified Lentz method; converges fast for x >= a + 1.
double UpperContinuedFraction(double a, double x) {
  double b = x + 1.0 - a, c = 1.0 / kTiny, d = 1.0 / b, h = d;
  for (int i = 1; i < kMaxIterations; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < kEps) break;
  }
  return std::exp(LogPrefactor(a, x)) * h;
}

}  // namespace

double RegularizedGammaQ(double a, double x) {
  if (!(a > 0.0) || std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  if (x <= 0.0) return 1.0;
  if (std::isinf(x)) return 0.0;
  if (x < a + 1.0) return 1.0 - LowerSeries(a, x);
  return UpperContinuedFraction(a, x);
}

double ChiSquareSurvival(double x, int64_t df) {
  if (df <= 0) return x > 0.0 ? 0.0 : 1.0;
  return RegularizedGammaQ(0.5 * static_cast<double>(df), 0.5 * x);
}

GTestResult GTest(std::span<const int64_t> observed, std::span<const double> expected_probs) {
  GTestResult r;
  int64_t n = 0;
  for (int64_t o : observed) n += o;
  int64_t categories = 0;
  bool impossible_seen = false;
  r.min_expected = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = static_cast<double>(n) * expected_probs[i];
    if (e <= 0.0) {
      impossible_seen |= observed[i] > 0;
      continue;
    }
    ++categories;
    r.min_expected = std::min(r.min_expected, e);
    if (observed[i] > 0) {
      const double o = static_cast<double>(observed[i]);
      r.g += 2.0 * o * std::log(o / e);
    }
  }
  r.df = categories - 1;
  if (impossible_seen) {
    r.g = std::numeric_limits<double>::infinity();
    r.p_value = 0.0;
    return r;
  }
  r.p_value = ChiSquareSurvival(r.g, r.df);
  return r;
}

}  // namespace lockstep::sampling
