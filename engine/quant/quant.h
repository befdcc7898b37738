// Dequantize and quantize rows of any type lockstep implements (Traits(t).lockstep_codec).
// `n` is a count of elements and must be a multiple of the type's block size.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/quant/types.h"

namespace lockstep::quant {

// src: [n / block_size] blocks of `type`; dst: [n] float.
absl::Status Dequantize(Type type, const void* src, int64_t n, float* dst);

// src: [n] float; dst: [n / block_size] blocks of `type`. For NVFP4 the values are divided by
// the per-tensor scale first (see QuantizeNvfp4 in nvfp4.h); here the per-tensor scale is 1.
absl::Status Quantize(Type type, const float* src, int64_t n, void* dst);

}  // namespace lockstep::quant
