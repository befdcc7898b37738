// Quantized matmul y[T, rows] = x[T, cols] . W[rows, cols]^T with W in GGUF layout (each row is
// cols / block_size consecutive blocks of the type), on the GPU.
//
// Reduction order (the invariance contract, docs/kernels.md): the K axis is cut into chunks of
// 32 elements; chunk c belongs to class c % 8. Each class accumulates its chunks in increasing
// order, each chunk's 32 elements in increasing order, as acc = fma(w_k, x_k, acc) starting from
// 0, where w_k is the dequantized weight bit-identical to engine/quant/decode.h. The 8 class sums
// are combined by the fixed tree ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)); y = sum * w_scale.
// Both routes below (a warp-per-rows decode kernel and a shared-memory tiled kernel) compute
// exactly this, so every output element has the same bits for any T and either route.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matmul_mma.h"  // MatmulScratch

namespace lockstep::kernels {

enum class MatmulRoute : int {
  kAuto = 0,    // decode for T <= 6 (Q6_K: 8), tiled otherwise (kernels/matmul.cu: kDecodeMaxT)
  kDecode = 1,  // warp-per-rows GEMV-style kernel (token tiles of 8)
  kTiled = 2,   // 64 x 32 shared-memory tiles
  // The decode route with its rows-per-lane mapping forced (1, 2 or 4 rows per lane instead of
  // the launcher's choice by shape), for the check tool to prove every mapping gives the same bits.
  kDecodeRows1 = 3,
  kDecodeRows2 = 4,
  kDecodeRows4 = 5,
  kMma = 6,     // the tensor-core route (kernels/matmul_mma.h), for MatmulMmaSupportsType types
};
#define LOCKSTEP_MATMUL_DECODE_ROWS_ROUTES 1

// True for the weight types this kernel implements: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
// Q5_K, Q6_K, IQ4_XS, NVFP4 (ggml type ids, engine/quant/types.h).
bool MatmulSupportsType(uint32_t type_id);

// True where kAuto takes the MMA route (kernels/matmul_mma.h) for every T: its bits differ from
// the float routes', so a type is on one route or the other, never both by T.
bool MatmulAutoUsesMma(uint32_t type_id);

// type_id: ggml type id of W (MatmulSupportsType), else cudaErrorInvalidValue.
// w:       in, device, [rows, cols / block_size] blocks of type_id (row r at r * row_bytes),
//          4-byte aligned (16-byte alignment takes the wide-load path).
// rows:    >= 1. cols: >= 32, a multiple of 32 and of the type's block size; or, for F32, F16
//          and BF16 only, any cols >= 1 (a column count off the 32-element chunks takes a plain
//          per-element fma chain over the columns, for every T and every route asked for).
//          x then needs only 4-byte alignment.
// x:       in, device, [T, cols] float, 16-byte aligned.
// T:       >= 1 token rows.
// y:       out, device, [T, rows] float.
// w_scale: multiplies each finished dot (NVFP4's per-tensor scale2; 1 for other types).
// route:   kAuto in production; the check tool forces each route to prove they agree bitwise
//          (kDecode/kTiled/kDecodeRows* are the float routes, kMma the tensor-core one).
// scratch: none, or at least MatmulScratchBytes(type_id, rows, cols, T) bytes, 16-byte aligned:
//          where the MMA route takes it, the activations are split once per launch and the
//          split-K tiles keep their segment sums there (matmul_mma.h); the bits are the same
//          either way. The float routes use none.
cudaError_t LaunchMatmul(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                         const float* x, int64_t T, float* y, float w_scale, MatmulRoute route,
                         cudaStream_t stream, MatmulScratch scratch = {});

// Bytes of scratch LaunchMatmul's kAuto route uses at (type_id, rows, cols, T): 0 off the MMA route.
size_t MatmulScratchBytes(uint32_t type_id, int64_t rows, int64_t cols, int64_t T);

// Dequantizes W with the matmul's own chunk decoders (the values its dot products use), for the
// check tool to compare bitwise against the host decoders.
// w: in, device, as above. out: out, device, [rows, cols] float.
cudaError_t LaunchMatmulDecodeWeights(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                                      float* out, cudaStream_t stream);

}  // namespace lockstep::kernels
