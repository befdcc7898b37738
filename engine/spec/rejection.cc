#include "engine/spec/rejection.h"

#include <algorithm>
#include <cmath>

#include "engine/sampling/philox.h"

namespace lockstep::spec {

std::vector<double> Residual(std::span<const double> p, std::span<const double> q) {
  std::vector<double> r(p.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    r[i] = std::max(0.0, p[i] - q[i]);
    total += r[i];
  }
  if (total <= 0) return std::vector<double>(p.begin(), p.end());
  for (double& v : r) v /= total;
  return r;
}

int32_t SampleFromDistribution(std::span<const double> dist, uint64_t seed, uint64_t position,
                               uint32_t stream) {
  int32_t best = -1;
  double best_score = -INFINITY;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (!(dist[i] > 0)) continue;
    const double score =
        std::log(dist[i]) + sampling::GumbelNoise(seed, position, static_cast<uint32_t>(i), stream);
    if (score > best_score) {
      best_score = score;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Verdict VerifyDraftToken(std::span<const double> p, std::span<const double> q, int32_t x,
                         uint64_t seed, uint64_t position, ResidualFn residual) {
  const double px = p[x], qx = q[x];
  // u in (0, 1): accept iff u < p/q, i.e. with probability min(1, p/q). q(x) > 0 because x ~ q.
  const double u = sampling::BitsToOpenUniform(sampling::NoiseBits(seed, position, 0, kStreamAccept));
  if (qx > 0 && u * qx < px) return {true, x};
  const std::vector<double> r = residual(p, q);
  return {false, SampleFromDistribution(r, seed, position, kStreamResidual)};
}

std::vector<double> EmittedLaw(std::span<const double> p, std::span<const double> q,
                               ResidualFn residual) {
  const size_t n = p.size();
  std::vector<double> law(n, 0.0);
  double accept_mass = 0;
  for (size_t i = 0; i < n; ++i) {
    if (q[i] <= 0) continue;
    const double a = std::min(q[i], p[i]);  // q(i) * min(1, p(i)/q(i))
    law[i] += a;
    accept_mass += a;
  }
  const std::vector<double> r = residual(p, q);
  const double reject_mass = 1.0 - accept_mass;
  for (size_t i = 0; i < n; ++i) law[i] += reject_mass * r[i];
  return law;
}

}  // namespace lockstep::spec
