// The matmul's route for F32, F16 and BF16 weights whose column count is off the 32-element
// chunks (small projections of tiny models: 8, 48 columns). Internal to kernels/matmul.cu, which
// takes it for such shapes whatever route is asked for (kernels/matmul.h).
//
// Reduction order: one thread per output element, y = (fma chain over c = 0..cols-1 in
// increasing order from 0) * w_scale. It depends on cols alone, so T cannot change it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels::matmul_internal {

// True for F32 / F16 / BF16 with cols >= 1 not a multiple of 32.
bool OddColsFloat(uint32_t type_id, int64_t cols);

// w: in, device, [rows, cols] of type_id, 4-byte aligned. x: in, device, [T, cols] float.
// y: out, device, [T, rows] float. rows, T >= 1, else cudaErrorInvalidValue.
cudaError_t LaunchMatmulOddCols(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                                const float* x, int64_t T, float* y, float w_scale,
                                cudaStream_t stream);

}  // namespace lockstep::kernels::matmul_internal
