// The tensor-core route of the quantized matmul: y[T, rows] = x[T, cols] . W[rows, cols]^T on
// fp16 MMA (mma.sync m16n8k16, f32 accumulation), one instruction shape and one K loop for every T.
//
// Reduction order (docs/kernels.md "MMA route"): the K axis is cut into 8 fixed segments by cols
// alone (warp s of a CTA owns blocks [s * n / 8, (s + 1) * n / 8) of the n = cols / block_size
// blocks; a block is 8 chunks of 32 elements for Q4_K and Q6_K, one for Q8_0). Per chunk and token the activation is split exactly as x = 2^-e (h + l) with h, l
// binary16 (e a power-of-two exponent chosen from the chunk's own max |x|), and per chunk and row
// the integer part of the weights q (exact in binary16) goes through the MMA:
//   S = mma(q, l, mma(q, h, ...)) over the chunk's two k-steps, from 0 (Q6_K: one S per k-step,
//       one per 16-element scale),
//   acc = fma(dl, S * 2^-e, acc)   then, for types with a min (Q4_K), acc = fma(-ml, X, acc)
// with X the chunk's sum of x in a fixed tree. Chunks go in increasing order within a segment;
// the 8 segment sums meet in the chain (((s0+s1)+s2)+...)+s7; y = sum * w_scale.
// Every term depends only on (row of W, row of x), so every output element has the same bits for
// any T, any tile configuration and any neighbours. The bits differ from the float route's
// (kernels/matmul.h), so a type uses one route for every T (MatmulAutoUsesMma).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::kernels {

// True for the weight types the MMA route implements (Q4_K, Q6_K, Q8_0).
bool MatmulMmaSupportsType(uint32_t type_id);

// Tile configurations: rows x tokens per CTA, 8 warps splitting K (one segment each), or the
// tiled kernel (each warp all 8 segments in turn, the CTA's activations split once in shared
// memory). kAutoByT picks by type and T; the others are forced by the check tool to prove every
// configuration gives the same bits.
enum class MmaConfig : int {
  kAutoByT = 0,
  k16x8 = 1,    // 1 m-tile (16 rows) x 1 n-tile (8 tokens)
  k32x8 = 2,    // 2 x 1
  k64x8 = 3,    // 4 x 1
  k64x16 = 4,   // 4 x 2
  k32x16 = 5,   // 2 x 2
  kTiled128x64 = 6,  // the tiled kernel: 8 warps split rows and tokens, each runs all 8 segments;
                     // weights through a cp.async ring, the activation split once per CTA
  kStaged16x8 = 7,   // 16x8 with the weights and activations streamed through shared memory (cp.async)
  k64x32 = 8,   // 4 x 4
  k32x32 = 9,   // 2 x 4
  kTiledSplitK = 10,  // the tiled kernel's 128 x 64 tiles with its 8 K segments on 8 CTAs (grid z):
                      // each CTA writes its segment's sums to scratch, a second kernel adds them
                      // in the segment chain; needs scratch (refused without it)
};

// Whether configuration cfg needs scratch (MatmulScratch below): only kTiledSplitK, whose segment
// sums live there between its two kernels.
bool MatmulMmaConfigNeedsScratch(MmaConfig cfg);

// Scratch for the split once per launch and the split-K tiles: with it, the configurations that
// take the split (by type, where it measured faster; not 16x8 nor the staged kernel) split each
// (token, chunk) of x once into the scratch (one small kernel) and read the fragments there,
// instead of splitting a token's chunk again in every CTA of its column; kTiledSplitK keeps its
// 8 segment sums per output there. The fragments and the sums are the same values, so the bits
// are the same with or without it; without it (data == nullptr) every configuration but
// kTiledSplitK splits in the kernel, and auto does not take kTiledSplitK.
struct MatmulScratch {
  void* data = nullptr;  // device, 16-byte aligned
  size_t bytes = 0;
};

// Bytes of scratch a launch of (type, rows, cols, T, config) uses: T * cols / 32 * 136 where the
// chosen configuration splits once per launch (rounded up to 16), plus 8 * T * rows * 4 where it
// is kTiledSplitK; 0 where it uses none.
size_t MatmulMmaScratchBytes(uint32_t type_id, int64_t rows, int64_t cols, int64_t T, MmaConfig config);

// As LaunchMatmul (kernels/matmul.h): w in, device, [rows, cols / block] blocks of type_id,
// 4-byte aligned; x in, device, [T, cols] float, 16-byte aligned; y out, device, [T, rows].
// cols: a multiple of the type's block size. scratch: none, or at least MatmulMmaScratchBytes
// bytes, 16-byte aligned, not read by anyone else until the launch is done on the stream.
// Returns cudaErrorInvalidValue for an unsupported type or shape, scratch given that is too small
// or misaligned for the configuration, or none given to a configuration that needs it.
cudaError_t LaunchMatmulMma(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                            const float* x, int64_t T, float* y, float w_scale, MmaConfig config,
                            cudaStream_t stream, MatmulScratch scratch = {});

// The group form: up to kMatmulGroupMax matrices of one type and column count that read the same x,
// y_i[T, rows_i] = x[T, cols] . W_i[rows_i, cols]^T, each with exactly the bits LaunchMatmulMma
// gives it alone (every term depends only on a row of W_i and a row of x), in one launch where the
// configuration is a K-split one (auto at T <= 32 and for Q8_0 T > 4: the grid's row tiles are
// W_0's, then W_1's, ...), else as separate launches. Small decode projections (attn_k, attn_v:
// 64 CTAs alone) then share a grid with attn_q instead of each leaving most SMs idle.
// items: n in [1, kMatmulGroupMax] of (w, rows, y) as LaunchMatmulMma's; scratch: none or at least
// MatmulMmaGroupScratchBytes. Returns cudaErrorInvalidValue as LaunchMatmulMma would for any item.
inline constexpr int kMatmulGroupMax = 3;
struct MatmulGroupItem {
  const void* w = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
};
cudaError_t LaunchMatmulMmaGroup(uint32_t type_id, const MatmulGroupItem* items, int n, int64_t cols,
                                 const float* x, int64_t T, cudaStream_t stream, MatmulScratch scratch = {});
// Scratch bytes LaunchMatmulMmaGroup uses: the most any item's auto launch uses.
size_t MatmulMmaGroupScratchBytes(uint32_t type_id, const MatmulGroupItem* items, int n, int64_t cols, int64_t T);

// The expert-indexed form (kernels/moe.h LaunchMatmulExperts, which calls it for the types where
// LaunchMatmul takes this route): y[i, r] = sum_c W_e[r, c] * x[xi, c], e = ids[i], with exactly
// the bits of LaunchMatmulMma on expert e's slice and that x row (T = 1). An id outside
// [0, n_expert) gives a NaN row. Shapes and directions as LaunchMatmulExperts; x 16-byte aligned.
cudaError_t LaunchMatmulMmaExperts(uint32_t type_id, const void* w, int64_t n_expert, int64_t rpe, int64_t cols,
                                   const int32_t* ids, int64_t n, int64_t k, bool x_per_token, const float* x,
                                   float* y, cudaStream_t stream);

}  // namespace lockstep::kernels
