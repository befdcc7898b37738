// Tensor element types: ggml's type ids (as stored in GGUF) and their block geometry.
// Host and device code: no engine types, no allocation.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LOCKSTEP_HD __host__ __device__
#else
#define LOCKSTEP_HD
#endif

namespace lockstep::quant {

// Values are ggml's `enum ggml_type` ids, which GGUF stores verbatim. Gaps (4, 5, 31-33, 36-38)
// are ids ggml retired; a file naming one is rejected as an unknown type.
enum class Type : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

struct TypeTraits {
  const char* name;     // ggml's spelling, e.g. "Q4_K"
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
  bool lockstep_codec;  // lockstep implements dequantize (and quantize) for it
};

// Returns false (and leaves *out untouched) for ids ggml does not define.
LOCKSTEP_HD constexpr bool LookupType(uint32_t id, TypeTraits* out) {
  constexpr uint32_t QK_K = 256;
  TypeTraits t{nullptr, 0, 0, false};
  switch (id) {
    case 0: t = {"F32", 1, 4, true}; break;
    case 1: t = {"F16", 1, 2, true}; break;
    case 2: t = {"Q4_0", 32, 2 + 16, true}; break;
    case 3: t = {"Q4_1", 32, 2 + 2 + 16, true}; break;
    case 6: t = {"Q5_0", 32, 2 + 4 + 16, true}; break;
    case 7: t = {"Q5_1", 32, 2 + 2 + 4 + 16, true}; break;
    case 8: t = {"Q8_0", 32, 2 + 32, true}; break;
    case 9: t = {"Q8_1", 32, 2 + 2 + 32, true}; break;  // ggml: f16 d, f16 s, 32 x int8 (gguf-py says 40: stale)
    case 10: t = {"Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4, true}; break;
    case 11: t = {"Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12, true}; break;
    case 12: t = {"Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12, true}; break;
    case 13: t = {"Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12, true}; break;
    case 14: t = {"Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, true}; break;
    case 15: t = {"Q8_K", QK_K, 4 + QK_K + QK_K / 8, true}; break;
    case 16: t = {"IQ2_XXS", QK_K, 2 + QK_K / 4, false}; break;
    case 17: t = {"IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32, false}; break;
    case 18: t = {"IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8, false}; break;
    case 19: t = {"IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16, false}; break;
    case 20: t = {"IQ4_NL", 32, 2 + 16, true}; break;
    case 21: t = {"IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, false}; break;
    case 22: t = {"IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16, false}; break;
    case 23: t = {"IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, true}; break;
    case 24: t = {"I8", 1, 1, false}; break;
    case 25: t = {"I16", 1, 2, false}; break;
    case 26: t = {"I32", 1, 4, false}; break;
    case 27: t = {"I64", 1, 8, false}; break;
    case 28: t = {"F64", 1, 8, false}; break;
    case 29: t = {"IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, false}; break;
    case 30: t = {"BF16", 1, 2, true}; break;
    case 34: t = {"TQ1_0", QK_K, 2 + 4 * 13, false}; break;
    case 35: t = {"TQ2_0", QK_K, 2 + 64, false}; break;
    case 39: t = {"MXFP4", 32, 1 + 16, true}; break;
    case 40: t = {"NVFP4", 64, 4 + 32, true}; break;  // 4 sub-blocks of 16, UE4M3 scale each
    case 41: t = {"Q1_0", 128, 2 + 16, false}; break;
    default: return false;
  }
  *out = t;
  return true;
}

LOCKSTEP_HD constexpr TypeTraits Traits(Type t) {
  TypeTraits out{nullptr, 0, 0, false};
  LookupType(static_cast<uint32_t>(t), &out);
  return out;
}

}  // namespace lockstep::quant
