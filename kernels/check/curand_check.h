// cuRAND Philox with lockstep's keying, for the check tool only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels::check {

// bits[r, v] = curand() after curand_init(seed, positions[r], 4 * (token0 + v + 2^32 * stream_tag)).
// positions: in, device, [n_rows] int64. bits: out, device, [n_rows, n_tokens] uint32.
cudaError_t LaunchCurandBits(uint64_t seed, const int64_t* positions, int64_t n_rows,
                             uint32_t token0, int64_t n_tokens, uint32_t stream_tag,
                             uint32_t* bits, cudaStream_t stream);

}  // namespace lockstep::kernels::check
