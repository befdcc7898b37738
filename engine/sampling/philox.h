// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC'11)
// and the position-keyed noise that every sampled token is drawn with.
//
// The noise for (seed, position, token) is one Philox block, so it does not depend on batch
// composition, chunking, speculative decoding or the order in which tokens are visited. The keying
// matches cuRAND's Philox4_32_10 state: curand_init(seed, /*subsequence=*/position,
// /*offset=*/4 * (token + 2^32 * stream), &st); curand(&st) returns the same 32 bits as NoiseBits.
// docs/sampling.md states the layout.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace lockstep::sampling {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // multiplier for counter words 0 and 1
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;  // multiplier for counter words 2 and 3
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // Weyl key increment, golden ratio
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // Weyl key increment, sqrt(3) - 1

// One Philox S-box round: two 32x32->64 multiplies, a swap and a key xor.
constexpr PhiloxCounter PhiloxRound(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = uint64_t{kPhiloxM0} * c[0];
  const uint64_t p1 = uint64_t{kPhiloxM1} * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

// Philox4x32 with `rounds` rounds; the key is bumped by the Weyl constants between rounds.
// rounds = 10 is the generator everything here uses (and cuRAND's Philox4_32_10);
// other round counts exist only so the 7-round known-answer vectors can be checked too.
constexpr PhiloxCounter Philox4x32(PhiloxCounter ctr, PhiloxKey key, int rounds = 10) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    ctr = PhiloxRound(ctr, key);
  }
  return ctr;
}

// Purpose tags (counter word 1): each consumer of noise gets its own tag, so two purposes never
// read the same Philox block. The Gumbel noise of token sampling is tag 0.
inline constexpr uint32_t kNoiseStreamGumbel = 0;

// The 32 noise bits of (seed, position, token, stream):
// key = (seed low 32, seed high 32), counter = (token, stream, position low 32, position high 32),
// output word 0.
constexpr uint32_t NoiseBits(uint64_t seed, uint64_t position, uint32_t token,
                             uint32_t stream = kNoiseStreamGumbel) {
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const PhiloxCounter ctr = {token, stream, static_cast<uint32_t>(position),
                             static_cast<uint32_t>(position >> 32)};
  return Philox4x32(ctr, key)[0];
}

// Uniform in the open interval (0, 1): (x + 0.5) * 2^-32, exact in double, in [2^-33, 1 - 2^-33].
constexpr double BitsToOpenUniform(uint32_t x) { return (static_cast<double>(x) + 0.5) * 0x1p-32; }

// Standard Gumbel noise g = -log(-log(u)), in double; finite because u is never 0 or 1.
inline double GumbelNoise(uint64_t seed, uint64_t position, uint32_t token,
                          uint32_t stream = kNoiseStreamGumbel) {
  const double u = BitsToOpenUniform(NoiseBits(seed, position, token, stream));
  return -std::log(-std::log(u));
}

}  // namespace lockstep::sampling
