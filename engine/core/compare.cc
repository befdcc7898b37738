#include "engine/core/compare.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"

namespace lockstep::compare {
namespace {

// log-softmax of one row in double.   x: [n] -> out: [n]
void LogSoftmax(const float* x, int64_t n, std::vector<double>* out) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  out->resize(n);
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<double>(x[i]) - lse;
}

int64_t Argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

absl::StatusOr<Stats> Logits(const float* a, const float* b, int64_t positions, int64_t vocab,
                             double margin) {
  if (positions <= 0 || vocab <= 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "compare needs at least 1 position and 2 vocab entries, got [%d, %d]", positions, vocab));
  }
  Stats s;
  s.positions = positions;
  s.vocab = vocab;
  double err2 = 0, ref2 = 0, kl_sum = 0;
  std::vector<double> la, lb;
  for (int64_t p = 0; p < positions; ++p) {
    const float* ra = a + p * vocab;
    const float* rb = b + p * vocab;
    bool finite = true;
    for (int64_t i = 0; i < vocab; ++i) {
      if (!std::isfinite(ra[i])) { ++s.nan_a; finite = false; }
      if (!std::isfinite(rb[i])) { ++s.nan_b; finite = false; }
      if (!std::isfinite(ra[i]) || !std::isfinite(rb[i])) continue;
      const double d = static_cast<double>(ra[i]) - rb[i];
      s.max_abs = std::max(s.max_abs, std::fabs(d));
      err2 += d * d;
      ref2 += static_cast<double>(rb[i]) * rb[i];
    }
    if (!finite) continue;
    const int64_t ta = Argmax(ra, vocab), tb = Argmax(rb, vocab);
    if (ta == tb) ++s.top1_agree;
    double second = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) {
      if (i != tb) second = std::max(second, static_cast<double>(rb[i]));
    }
    if (rb[tb] - second > margin) {
      ++s.decisive;
      if (ta == tb) ++s.decisive_agree;
    }
    LogSoftmax(ra, vocab, &la);
    LogSoftmax(rb, vocab, &lb);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) kl += std::exp(lb[i]) * (lb[i] - la[i]);
    kl = std::max(kl, 0.0);
    s.max_kl = std::max(s.max_kl, kl);
    kl_sum += kl;
  }
  s.nmse = ref2 > 0 ? err2 / ref2 : (err2 > 0 ? INFINITY : 0);
  s.mean_kl = kl_sum / positions;
  return s;
}

std::string Describe(const Stats& s) {
  return absl::StrFormat(
      "positions %d  vocab %d  non-finite a/b %d/%d\n"
      "max_abs %.6g  nmse %.6g  kl max %.6g mean %.6g (nats)\n"
      "top1 agreement %d/%d  decisive-position top1 agreement %d/%d\n",
      s.positions, s.vocab, s.nan_a, s.nan_b, s.max_abs, s.nmse, s.max_kl, s.mean_kl,
      s.top1_agree, s.positions, s.decisive_agree, s.decisive);
}

absl::StatusOr<TopKStats> TopKGolden(const float* ours, int64_t positions, int64_t vocab,
                                     const float* golden, int64_t golden_cols, double margin) {
  if (positions <= 0 || vocab <= 1 || golden_cols < 5 || (golden_cols - 1) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a top-K golden needs [positions, 1 + 2K] rows with K >= 2 and logits [positions, vocab "
        ">= 2]; got %d positions, vocab %d, golden width %d", positions, vocab, golden_cols));
  }
  TopKStats s;
  s.positions = positions;
  s.vocab = vocab;
  s.k = (golden_cols - 1) / 2;
  const int64_t K = s.k;
  double err2 = 0, ref2 = 0;
  for (int64_t t = 0; t < positions; ++t) {
    const float* row = golden + t * golden_cols;
    const float* x = ours + t * vocab;
    int64_t argmax = 0, bad = 0;
    double mx = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      if (!std::isfinite(x[v])) { ++bad; continue; }
      if (x[v] > x[argmax] || !std::isfinite(x[argmax])) argmax = v;
      mx = std::max(mx, static_cast<double>(x[v]));
    }
    s.non_finite += bad;
    if (bad > 0) continue;
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(x[v] - mx);
    const double lse_d = std::fabs(mx + std::log(sum) - row[0]);
    if (lse_d > s.max_lse_abs) { s.max_lse_abs = lse_d; s.worst_lse_position = t; }
    for (int64_t k = 0; k < K; ++k) {
      const float idf = row[1 + k];
      const int64_t id = static_cast<int64_t>(idf);
      if (!(idf >= 0) || static_cast<float>(id) != idf || id >= vocab) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "golden position %d entry %d: token id %g is not an id of a %d-token vocabulary", t, k,
            idf, vocab));
      }
      const double d = static_cast<double>(x[id]) - row[1 + K + k];
      if (std::fabs(d) > s.max_abs) {
        s.max_abs = std::fabs(d); s.worst_abs_position = t; s.worst_abs_token = id;
      }
      err2 += d * d;
      ref2 += static_cast<double>(row[1 + K + k]) * row[1 + K + k];
    }
    const bool agree = argmax == static_cast<int64_t>(row[1]);
    if (agree) ++s.top1_agree;
    if (row[1 + K] - row[2 + K] > margin) {
      ++s.decisive;
      if (agree) ++s.decisive_agree;
      else if (s.first_decisive_flip < 0) s.first_decisive_flip = t;
    }
  }
  s.nmse = ref2 > 0 ? err2 / ref2 : (err2 > 0 ? INFINITY : 0);
  return s;
}

std::string Describe(const TopKStats& s) {
  return absl::StrFormat(
      "positions %d  vocab %d  golden top-%d  non-finite %d\n"
      "lse max_abs %.6g (position %d)  top-K max_abs %.6g (position %d token %d)  nmse %.6g\n"
      "top1 agreement %d/%d  decisive-position top1 agreement %d/%d\n",
      s.positions, s.vocab, s.k, s.non_finite, s.max_lse_abs, s.worst_lse_position, s.max_abs,
      s.worst_abs_position, s.worst_abs_token, s.nmse, s.top1_agree, s.positions,
      s.decisive_agree, s.decisive);
}

}  // namespace lockstep::compare
