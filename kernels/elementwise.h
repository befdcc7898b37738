// Row and element kernels of the forward pass: RMSNorm, RoPE, GLU, add, scale, softcap, and the
// embedding gather. Each output element depends on its own row only, so batch and chunk
// invariance hold by construction; RMSNorm's one reduction has a fixed order (docs/kernels.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels {

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w (w nullable: no weight).
// x: in, device, [T, n] float. w: in, device, [n] float or nullptr. y: out, device, [T, n]
// (may alias x). Sum of squares: thread i of 256 sums elements i, i+256, ... with fma, then a
// fixed shuffle tree and the 8 warp sums in warp order.
cudaError_t LaunchRmsNorm(const float* x, const float* w, int64_t T, int64_t n, float eps, float* y,
                          cudaStream_t stream);

enum class RopeMode : int { kNormal = 0, kNeox = 2 };  // ggml's mode values

// Rotates the first n_rot dims of each head; dims >= n_rot are copied.
// kNormal pairs (2i, 2i+1); kNeox pairs (i, i + n_rot/2). theta_i = pos * base^(-2i/n_rot) /
// freq_factors[i], computed in double, cos/sin rounded to float; out0 = x0*c - x1*s,
// out1 = x0*s + x1*c, each product and sum rounded (no fma).
// x: in, device, [T, n_head, head_dim] float. positions: in, device, [T] int32.
// freq_factors: in, device, [n_rot / 2] float or nullptr. y: out, device, same shape (may alias).
// n_rot: even, <= head_dim.
cudaError_t LaunchRope(const float* x, const int32_t* positions, int64_t T, int n_head,
                       int head_dim, int n_rot, double base, const float* freq_factors,
                       RopeMode mode, float* y, cudaStream_t stream);

enum class GluOp : int { kSilu = 0, kGeluTanh = 1 };

// y[t, i] = act(g[t, i]) * u[t, i]; silu(g) = g / (1 + exp(-g)); gelu_tanh(g) =
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// g: in, device, rows of n floats at g + t * g_stride. u: in, device, at u + t * u_stride.
// y: out, device, [T, n] float (contiguous).
cudaError_t LaunchGlu(GluOp op, const float* g, int64_t g_stride, const float* u,
                      int64_t u_stride, int64_t T, int64_t n, float* y, cudaStream_t stream);

// y[i] = a[i] + b[i]. a, b: in, device, [n]. y: out, device, [n] (may alias a or b).
cudaError_t LaunchAdd(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream);

// y[i] = a[i] * s. a: in, device, [n]. y: out, device, [n] (may alias a).
cudaError_t LaunchScale(const float* a, float s, int64_t n, float* y, cudaStream_t stream);

// y[i] = cap * tanh(a[i] / cap), cap > 0. a: in, device, [n]. y: out, device, [n] (may alias).
cudaError_t LaunchSoftcap(const float* a, float cap, int64_t n, float* y, cudaStream_t stream);

// Embedding gather: y[t, :] = dequantize(row ids[t] of table), bit-identical to the host decoders.
// type_id: ggml type with a lockstep codec. table: in, device, [n_rows, cols / block_size]
// blocks, 4-byte aligned. ids: in, device, [T] int32 in [0, n_rows) (out-of-range rows are
// written as NaN). y: out, device, [T, cols] float.
cudaError_t LaunchGetRows(uint32_t type_id, const void* table, int64_t n_rows, int64_t cols,
                          const int32_t* ids, int64_t T, float* y, cudaStream_t stream);

// Row gather: y[i, :] = x[rows[i], :]. x: in, device, [*, cols] float. rows: in, device, [R]
// int32, each a row of x. y: out, device, [R, cols] float (must not overlap x).
cudaError_t LaunchGatherRows(const float* x, int64_t cols, const int32_t* rows, int64_t R,
                             float* y, cudaStream_t stream);

}  // namespace lockstep::kernels
