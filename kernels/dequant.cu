// Dequantize kernel: one thread per quant block, grid-stride over the row. Each thread runs the
// shared scalar decoder for its block and writes block_size floats. Writes from neighbouring
// threads are block_size * 4 bytes apart (not coalesced); this kernel serves weight conversion
// and tests, not the matmul hot path, which decodes in registers inside its own kernels.
#include "kernels/dequant.h"

#include "engine/quant/decode.h"
#include "engine/quant/types.h"
#include "kernels/pdl.cuh"

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

constexpr int kThreads = 128;

// src: [n_blocks] of the type's block; dst: [n_blocks * block_size].
__global__ void DequantizeKernel(uint32_t type_id, const void* __restrict__ src, int64_t n_blocks,
                                 uint32_t block_size, float* __restrict__ dst) {
  pdl::Begin();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_blocks; i += stride) {
    q::DecodeBlock(type_id, src, i, dst + i * block_size);
  }
}

}  // namespace

cudaError_t LaunchDequantize(uint32_t type_id, const void* src, int64_t n, float* dst,
                             cudaStream_t stream) {
  q::TypeTraits t;
  if (!q::LookupType(type_id, &t) || !t.lockstep_codec) return cudaErrorInvalidValue;
  if (n < 0 || n % t.block_size != 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr || reinterpret_cast<uintptr_t>(src) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t n_blocks = n / t.block_size;
  // Enough CTAs to fill an H200 (132 SMs) several times over; the loop covers any remainder.
  const int64_t want = (n_blocks + kThreads - 1) / kThreads;
  const unsigned grid = (unsigned)(want < 132 * 32 ? want : 132 * 32);
  pdl::Launch(DequantizeKernel, grid, kThreads, 0, stream, type_id, src, n_blocks, t.block_size, dst);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
