// Dequantize a row of ggml quant blocks to float32 on the GPU, with the same scalar block
// decoders as the host (engine/quant/decode.h), so the results are bit-identical to the host
// Dequantize and to gguf-py except for NaN payloads (CUDA NaNs are canonical).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels {

// type_id: ggml type id with a lockstep codec (engine/quant/types.h, lockstep_codec), else
//          cudaErrorInvalidValue.
// src:  in, device, [n / block_size] blocks of type_id, 4-byte aligned (a GGUF tensor start is
//       32-byte aligned; blocks inside need only their struct alignment, <= 4).
// n:    elements, >= 0 and a multiple of the block size, else cudaErrorInvalidValue.
// dst:  out, device, [n] float.
// Returns the launch status (asynchronous errors surface at the next synchronisation).
cudaError_t LaunchDequantize(uint32_t type_id, const void* src, int64_t n, float* dst,
                             cudaStream_t stream);

}  // namespace lockstep::kernels
