// The odd-columns route of the matmul (kernels/matmul_odd_cols.h states its order).
#include "kernels/matmul_odd_cols.h"

#include "engine/quant/fp.h"
#include "engine/quant/types.h"
#include "kernels/pdl.cuh"

namespace lockstep::kernels::matmul_internal {
namespace {

namespace q = ::lockstep::quant;

__global__ void MatmulOddColsKernel(uint32_t type_id, const uint8_t* __restrict__ w, int64_t rows,
                                    int64_t cols, const float* __restrict__ x, int64_t T,
                                    float* __restrict__ y, float w_scale) {
  pdl::Begin();
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * T) return;
  const int64_t t = i / rows, r = i % rows;
  const float* xr = x + t * cols;
  float acc = 0.f;
  for (int64_t c = 0; c < cols; ++c) {
    float wv;
    if (type_id == (uint32_t)q::Type::F32) {
      wv = reinterpret_cast<const float*>(w)[r * cols + c];
    } else {
      const uint16_t h = reinterpret_cast<const uint16_t*>(w)[r * cols + c];
      wv = type_id == (uint32_t)q::Type::F16 ? q::Fp16ToFp32(h) : __uint_as_float((uint32_t)h << 16);
    }
    acc = __fmaf_rn(wv, xr[c], acc);
  }
  y[t * rows + r] = __fmul_rn(acc, w_scale);
}

}  // namespace

bool OddColsFloat(uint32_t type_id, int64_t cols) {
  const auto ty = (q::Type)type_id;
  return cols >= 1 && cols % 32 != 0 && (ty == q::Type::F32 || ty == q::Type::F16 || ty == q::Type::BF16);
}

cudaError_t LaunchMatmulOddCols(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                                const float* x, int64_t T, float* y, float w_scale,
                                cudaStream_t stream) {
  if (!OddColsFloat(type_id, cols) || rows < 1 || T < 1 || w == nullptr || x == nullptr ||
      y == nullptr || reinterpret_cast<uintptr_t>(w) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t n = rows * T;
  pdl::Launch(MatmulOddColsKernel, (unsigned)((n + 255) / 256), 256, 0, stream, type_id, static_cast<const uint8_t*>(w),
              rows, cols, x, T, y, w_scale);
  return cudaGetLastError();
}

}  // namespace lockstep::kernels::matmul_internal
