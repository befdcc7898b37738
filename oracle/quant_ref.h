// Scalar reference dequantizers for the block formats lockstep quantizes without a bit-exact
// external oracle: Q8_1 and Q8_K (which the gguf Python package cannot even decode), the
// K-quants Q2_K..Q6_K, IQ4_NL, IQ4_XS and NVFP4. Written from the format descriptions
// (docs/formats.md, ggml's block layouts) by reading raw bytes at fixed offsets, independently of
// engine/quant/decode.h, so the two can be held against each other.
//
// Arithmetic is double. Every product a format forms (f16 or f32 scale x small integer sub-scale
// x small integer code) is exact in double and in float; the formats with a min (Q2_K, Q4_K,
// Q5_K) subtract once, which rounds once. Rounded to float, the result therefore equals ggml's
// float dequantization bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/quant/types.h"

namespace lockstep::oracle {

// True for the types DequantizeRef covers (listed above).
bool HasDequantizeRef(quant::Type type);

// blocks: [n / block_size] raw blocks of `type`; returns the n values [n]. Returns an empty vector
// when the type is not covered or n is not a positive multiple of the block size.
std::vector<double> DequantizeRef(quant::Type type, const uint8_t* blocks, int64_t n);

// Element i of one block, as the format defines it: value = scale * level - offset, where level
// is one of the format's levels (code book entries or an integer range) and `super_scale` is the
// block-level scale that `scale` is built from (f16 d for most formats, f32 d for Q8_K, the
// UE4M3 sub-block scale for NVFP4).
struct ElementRef {
  double scale = 0, offset = 0, super_scale = 0;
  int level = 0;
  const int* levels = nullptr;  // the format's levels: levels[0 .. n_levels)
  int n_levels = 0;
};

// block: one raw block of `type` (HasDequantizeRef(type)); i: element index within the block.
ElementRef DecodeElementRef(quant::Type type, const uint8_t* block, int i);

// One scale byte of NVFP4 (unsigned E4M3, bias 7) as gguf-py decodes it, including the 1/2 that
// pairs with the doubled E2M1 code values: 0x00 and 0x7F give 0, bit 7 is ignored.
double Ue4m3HalfRef(uint8_t x);

// IEEE binary16 bits -> value (subnormals included; Inf and NaN as such).
double Fp16Ref(uint16_t h);

}  // namespace lockstep::oracle
