// Dequantize and quantize rows of any type lockstep implements (Traits(t).lockstep_codec).
// `n` is a count of elements and must be a multiple of the type's block size.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/quant/kv_format.h"
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

// ---- KV rows (engine/quant/kv_format.h; engine/quant/kv_row.cc) ----

// src: [n] float -> dst: KvRowBytes(f, n) bytes. The block formats go through Quantize (so a KV
// row is encoded exactly as a weight row of that type); fp8 is Fp32ToE4m3 per element; f32 is a
// copy. n must be a multiple of KvFormatBlockElems(f).
absl::Status EncodeKvRow(KvFormat f, const float* src, int64_t n, void* dst);
// src: KvRowBytes(f, n) bytes -> dst: [n] float, exact (Dequantize, or E4m3ToFp32 per element).
absl::Status DecodeKvRow(KvFormat f, const void* src, int64_t n, float* dst);
// "f32" | "f16" | "bf16" | "q8_0" | "q5_1" | "q4_0" | "fp8"; anything else is an InvalidArgument
// error that lists them.
absl::StatusOr<KvFormat> ParseKvFormat(std::string_view name);

}  // namespace lockstep::quant
