// Per-type quantizers behind quant::Quantize (quant.h). Each takes src [n] floats (n a multiple
// of the block size) and writes n / block_size blocks to dst.
#pragma once

#include <cstdint>

namespace lockstep::quant::internal {

// Types gguf-py implements quantize for: bit-identical to it (quantize_legacy.cc).
void QuantizeF16(const float* src, int64_t n, void* dst);
void QuantizeBF16(const float* src, int64_t n, void* dst);
void QuantizeQ4_0(const float* src, int64_t n, void* dst);
void QuantizeQ4_1(const float* src, int64_t n, void* dst);
void QuantizeQ5_0(const float* src, int64_t n, void* dst);
void QuantizeQ5_1(const float* src, int64_t n, void* dst);
void QuantizeQ8_0(const float* src, int64_t n, void* dst);
void QuantizeMXFP4(const float* src, int64_t n, void* dst);

// Types gguf-py cannot quantize: ggml's reference algorithms, held to a stated round-trip
// error bound (quantize_k.cc, quantize_iq.cc, quantize_fp4.cc).
void QuantizeQ8_1(const float* src, int64_t n, void* dst);
void QuantizeQ2_K(const float* src, int64_t n, void* dst);
void QuantizeQ3_K(const float* src, int64_t n, void* dst);
void QuantizeQ4_K(const float* src, int64_t n, void* dst);
void QuantizeQ5_K(const float* src, int64_t n, void* dst);
void QuantizeQ6_K(const float* src, int64_t n, void* dst);
void QuantizeQ8_K(const float* src, int64_t n, void* dst);
void QuantizeIQ4_NL(const float* src, int64_t n, void* dst);
void QuantizeIQ4_XS(const float* src, int64_t n, void* dst);
void QuantizeNVFP4(const float* src, int64_t n, void* dst);

}  // namespace lockstep::quant::internal
