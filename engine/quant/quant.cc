// Quantize dispatch: validates the row, then hands it to the per-type quantizer
// (quantize_legacy.cc: bit-identical to gguf-py; quantize_k/iq/fp4.cc: ggml's reference
// algorithms). Dequantize lives in dequant.cc.
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"
#include "engine/quant/quantize_internal.h"

namespace lockstep::quant {

absl::Status Quantize(Type type, const float* src, int64_t n, void* dst) {
  TypeTraits t;
  if (!LookupType(static_cast<uint32_t>(type), &t)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Quantize: unknown ggml type id %u", static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Quantize %s: n = %d elements is not a non-negative multiple of the block size %u",
        t.name, n, t.block_size));
  }
  if (n > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Quantize %s: null src or dst for n = %d", t.name, n));
  }
  using Fn = void (*)(const float*, int64_t, void*);
  Fn fn = nullptr;
  switch (type) {
    case Type::F32: fn = [](const float* s, int64_t k, void* d) { memcpy(d, s, (size_t)k * 4); }; break;
    case Type::F16: fn = internal::QuantizeF16; break;
    case Type::BF16: fn = internal::QuantizeBF16; break;
    case Type::Q4_0: fn = internal::QuantizeQ4_0; break;
    case Type::Q4_1: fn = internal::QuantizeQ4_1; break;
    case Type::Q5_0: fn = internal::QuantizeQ5_0; break;
    case Type::Q5_1: fn = internal::QuantizeQ5_1; break;
    case Type::Q8_0: fn = internal::QuantizeQ8_0; break;
    case Type::Q8_1: fn = internal::QuantizeQ8_1; break;
    case Type::Q2_K: fn = internal::QuantizeQ2_K; break;
    case Type::Q3_K: fn = internal::QuantizeQ3_K; break;
    case Type::Q4_K: fn = internal::QuantizeQ4_K; break;
    case Type::Q5_K: fn = internal::QuantizeQ5_K; break;
    case Type::Q6_K: fn = internal::QuantizeQ6_K; break;
    case Type::Q8_K: fn = internal::QuantizeQ8_K; break;
    case Type::IQ4_NL: fn = internal::QuantizeIQ4_NL; break;
    case Type::IQ4_XS: fn = internal::QuantizeIQ4_XS; break;
    case Type::MXFP4: fn = internal::QuantizeMXFP4; break;
    case Type::NVFP4: fn = internal::QuantizeNVFP4; break;
    default:
      return absl::UnimplementedError(absl::StrFormat(
          "Quantize: type %s (id %u) has no lockstep codec", t.name, static_cast<uint32_t>(type)));
  }
  if (n > 0) fn(src, n, dst);
  return absl::OkStatus();
}

const std::vector<Type>& CodecTypes() {
  static const std::vector<Type> types = [] {
    std::vector<Type> out;
    for (uint32_t id = 0; id < 64; ++id) {
      TypeTraits t;
      if (LookupType(id, &t) && t.lockstep_codec) out.push_back(static_cast<Type>(id));
    }
    return out;
  }();
  return types;
}

}  // namespace lockstep::quant
