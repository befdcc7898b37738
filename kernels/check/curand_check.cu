// cuRAND side of the Philox keying check: curand_init(seed, subsequence = position,
// offset = 4 * (token + 2^32 * stream)) then curand(), the layout engine/sampling/philox.h states.
#include <curand_kernel.h>

#include <cstdint>

#include "kernels/check/curand_check.h"

namespace lockstep::kernels::check {
namespace {
__global__ void CurandBitsKernel(uint64_t seed, const int64_t* positions, int64_t n_rows,
                                 uint32_t token0, int64_t n_tokens, uint32_t stream_tag,
                                 uint32_t* bits) {
  const int64_t total = n_rows * n_tokens;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / n_tokens, v = i % n_tokens;
    curandStatePhilox4_32_10_t st;
    const unsigned long long offset =
        4ull * ((unsigned long long)(token0 + (uint32_t)v) + ((unsigned long long)stream_tag << 32));
    curand_init(seed, (unsigned long long)positions[r], offset, &st);
    bits[i] = curand(&st);
  }
}
}  // namespace

cudaError_t LaunchCurandBits(uint64_t seed, const int64_t* positions, int64_t n_rows,
                             uint32_t token0, int64_t n_tokens, uint32_t stream_tag,
                             uint32_t* bits, cudaStream_t stream) {
  const int64_t want = (n_rows * n_tokens + 255) / 256;
  CurandBitsKernel<<<(unsigned)(want < 132 * 64 ? want : 132 * 64), 256, 0, stream>>>(
      seed, positions, n_rows, token0, n_tokens, stream_tag, bits);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels::check
