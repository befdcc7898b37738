// Dequantize and quantize rows of any type lockstep implements (Traits(t).lockstep_codec).
// `n` is a count of elements and must be a multiple of the type's block size.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/quant/types.h"

namespace lockstep::quant {

// src: [n / block_size] blocks of `type`; dst: [n] float.
absl::Status Dequantize(Type type, const void* src, int64_t n, float* dst);

// src: [n] float; dst: [n / block_size] blocks of `type`. NVFP4's per-tensor scale (the
// `<tensor>.scale2` F32 tensor, docs/formats.md) is not applied here: it is 1 for this call.
absl::Status Quantize(Type type, const float* src, int64_t n, void* dst);

// Every type with a lockstep codec (Traits(t).lockstep_codec), in id order, read from the type
// table so that a new codec is picked up by every caller.
const std::vector<Type>& CodecTypes();

}  // namespace lockstep::quant
