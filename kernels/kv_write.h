// KV cache write: this step's K (or V) rows into their slots of one layer's paged cache, in any
// KV format (engine/quant/kv_format.h). The bytes equal the host quantizers' (quant::Quantize for
// f16, bf16, q8_0, q5_1, q4_0; quant::Fp32ToE4m3 for fp8; a copy for f32) for finite inputs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels {

// fmt:    a quant::KvFormat value (0..6), else cudaErrorInvalidValue.
// src:    in, device, [T, kv_dim] float.
// slots:  in, device, [T] int32; row t goes to slot slots[t] (< 0: row skipped, e.g. padding).
// T:      >= 0. kv_dim: >= 1, a multiple of 32 for q8_0/q5_1/q4_0.
// cache:  in/out, device, [n_slots, KvRowBytes(fmt, kv_dim)] bytes; only the rows of the listed
//         slots are written. Slots must be distinct within one call and < n_slots.
cudaError_t LaunchKvWrite(uint32_t fmt, const float* src, const int32_t* slots, int64_t T,
                          int64_t kv_dim, void* cache, cudaStream_t stream);

// K and V of one layer: the bytes of LaunchKvWrite(k_fmt, k_src, ..., k_cache) then
// LaunchKvWrite(v_fmt, v_src, ..., v_cache), in one launch when both formats are per element
// (f32, f16, bf16, fp8) or both per block (q8_0, q5_1, q4_0), else in two. k_cache != v_cache.
cudaError_t LaunchKvWritePair(uint32_t k_fmt, const float* k_src, void* k_cache, uint32_t v_fmt,
                              const float* v_src, void* v_cache, const int32_t* slots, int64_t T,
                              int64_t kv_dim, cudaStream_t stream);

}  // namespace lockstep::kernels
