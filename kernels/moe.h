// Mixture-of-experts kernels: the router's top-k, the expert-indexed matmul, the rank-order
// combine and the sigmoid gate (engine/backend/backend.h states the ops' contracts).
//
// Reduction orders (docs/kernels.md, "MoE"): each output element's order depends only on the
// op's shape (E, k, cols), never on T or on which other tokens chose the same expert:
// - route: one warp per token row; the top-k is exact (a total order: logit descending, then
//   expert id ascending, so ties go to the lower id); the softmax sum is, per lane, an fadd chain
//   over experts lane, lane + 32, ... in increasing id, then a shfl_xor tree (16, 8, 4, 2, 1);
//   the normalizer sums the k kept weights in rank order.
// - expert matmul: exactly the order of kernels/matmul.h (chunks of 32, class c % 8 fma chains,
//   the fixed tree), so a (token, rank) row's bits equal LaunchMatmul of that expert's slice on
//   that token's row, whatever T.
// - combine: an fma chain over the ranks j = 0..k-1, from 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels {

// For every row t: ids[t, 0..k) = the k largest logits in decreasing order (equal logits: the
// lower expert id first; a NaN logit ranks as -inf, so ids stay inside [0, E), and its weight
// is NaN: nothing is hidden).
// p = softmax(logits[t]) in float (m = max, e_i = expf(l_i - m), sum as above);
// weights[t, j] = e_{ids[t, j]} / sum, then divided by their rank-order sum when normalize.
// logits:  in, device, [T, E] float. E <= 2048.
// weights: out, device, [T, k] float. ids: out, device, [T, k] int32. 1 <= k <= E, k <= 64.
cudaError_t LaunchMoeRoute(const float* logits, int64_t T, int64_t E, int64_t k, bool normalize,
                           float* weights, int32_t* ids, cudaStream_t stream);

// The expert-indexed matmul: y[i, r] = sum_c W_e[r, c] * x[xi, c], e = ids[i], for i < n,
// W_e = rows [e * rpe, (e + 1) * rpe) of w; xi = i / k when x_per_token (x has n / k rows), else
// i. Same reduction order and weight decoders as LaunchMatmul with w_scale 1 (bitwise equal to
// it row for row; kernel_check's matmul-experts line holds that).
// type_id: MatmulSupportsType, else cudaErrorInvalidValue.
// w:    in, device, [n_expert * rpe, cols / block_size] blocks of type_id, 4-byte aligned.
// ids:  in, device, [n] int32 (the [T, k] route flattened); an id outside [0, n_expert) gives a
//       NaN row (never a read outside w).
// x:    in, device, [n / k or n, cols] float. cols: >= 32, a multiple of 32 and of the block size.
// y:    out, device, [n, rpe] float.
cudaError_t LaunchMatmulExperts(uint32_t type_id, const void* w, int64_t n_expert, int64_t rpe,
                                int64_t cols, const int32_t* ids, int64_t n, int64_t k,
                                bool x_per_token, const float* x, float* y, cudaStream_t stream);

// out[t, c] = fma chain over j = 0..k-1 of weights[t, j] * y[t * k + j, c], from 0.
// y: in, device, [T * k, d] float. weights: in, device, [T, k] float. out: out, device, [T, d]
// (must not alias y).
cudaError_t LaunchMoeCombine(const float* y, const float* weights, int64_t T, int64_t k,
                             int64_t d, float* out, cudaStream_t stream);

// out[t, c] = x[t, c] / (1 + expf(-g[t, g_cols == 1 ? 0 : c])).
// x: in, device, [T, d] float. g: in, device, [T, g_cols] float, g_cols == d or 1.
// out: out, device, [T, d] (may alias x).
cudaError_t LaunchSigmoidMul(const float* x, const float* g, int64_t g_cols, int64_t T, int64_t d,
                             float* out, cudaStream_t stream);

}  // namespace lockstep::kernels
