// Speculative rejection sampling (Leviathan et al. 2023; Chen et al. 2023): a draft token x ~ q
// is accepted with probability min(1, p(x)/q(x)); on rejection the token is drawn from the
// residual norm(max(0, p - q)). The emitted token's law is exactly p.
//
// Every random draw is position-keyed Philox noise (engine/sampling/philox.h) on its own stream,
// so a run is a pure function of (seed, position) and replays bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lockstep::spec {

// Noise streams (Philox counter word 1); stream 0 is plain sampling's Gumbel noise.
inline constexpr uint32_t kStreamDraft = 1;     // the draft's own sample x ~ q
inline constexpr uint32_t kStreamAccept = 2;    // the acceptance uniform
inline constexpr uint32_t kStreamResidual = 3;  // the residual sample after a rejection

// The residual distribution norm(max(0, p - q)) over [n_vocab]. When p == q everywhere (the
// residual has no mass, and rejection has probability 0) it returns p.
std::vector<double> Residual(std::span<const double> p, std::span<const double> q);

using ResidualFn = std::vector<double> (*)(std::span<const double>, std::span<const double>);

// Draws x ~ dist by Gumbel-max on log dist with noise (seed, position, stream); -1 if dist has
// no mass. Lowest id on ties.
int32_t SampleFromDistribution(std::span<const double> dist, uint64_t seed, uint64_t position,
                               uint32_t stream);

struct Verdict {
  bool accepted = false;
  int32_t token = -1;  // x when accepted, else the residual draw
};

// Verifies draft token x against target law p and draft law q (both [n_vocab], each summing to
// 1) at `position`. `residual` is injectable so tests can show that a wrong residual is caught.
Verdict VerifyDraftToken(std::span<const double> p, std::span<const double> q, int32_t x,
                         uint64_t seed, uint64_t position, ResidualFn residual = &Residual);

// The exact law of the emitted token when x ~ q is verified against p, computed in double:
// law[i] = q[i] min(1, p[i]/q[i]) + (1 - sum_j q[j] min(1, p[j]/q[j])) residual[i].
// Equal to p up to rounding; the property test checks |law - p| <= 1e-12.
std::vector<double> EmittedLaw(std::span<const double> p, std::span<const double> q,
                               ResidualFn residual = &Residual);

}  // namespace lockstep::spec
