// Gated DeltaNet kernels (qwen3_5, qwen3_next): the causal conv + SiLU, the gates, the gated
// delta rule in its recurrent form, the gated RMSNorm, and the column split of gated heads
// (engine/backend/backend.h states the ops' contracts, docs/models.md the layer).
//
// Reduction orders (docs/kernels.md, "Gated DeltaNet"): the conv and the delta rule run token by
// token in position order for each sequence, one thread per (sequence, channel) or one CTA per
// (sequence, value head), and the state between tokens (and between steps) is the same f32
// values in the state pool; every dot is an fma chain or a fixed tree whose shape depends on
// K, head_k_dim or d only. So a prefill cut into chunks, or a sequence decoded one token per step
// in a batch of any size, performs exactly the arithmetic of one pass: bitwise equal results.
//
// Step metadata (device, as the backend packs it): query_start [n_seq + 1] (rows of sequence s:
// [qs[s], qs[s+1])), positions [T], state_slots [n_seq] (the slot read at a sequence's first row
// unless it is at position 0, when the state starts from zeros, and written after its last),
// checkpoints [T] or nullptr (>= 0: a slot that also receives the state right after row t).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::kernels {

inline constexpr int kGdnMaxConvKernel = 16;

struct GdnStepParams {
  const int32_t* query_start = nullptr;  // in, device, [n_seq + 1]
  const int32_t* positions = nullptr;    // in, device, [T]
  const int32_t* state_slots = nullptr;  // in, device, [n_seq]
  const int32_t* checkpoints = nullptr;  // in, device, [T] or nullptr
  int64_t T = 0;
  int n_seq = 0;
};

// y[t, c] = silu(sum_{i<K} w[c, i] * u[p_t - K + 1 + i, c]), u = the slot's K - 1 inputs, then x
// (docs/kernels.md: one fma chain over i from 0; silu(a) = a / (1 + expf(-a))).
// x: in, device, [T, C] float. w: in, device, [C, K] float, 1 <= K <= 16.
// conv_state: in/out, device, [n_slots, K - 1, C] float: each sequence's slot (and checkpoint
// slots) end holding its last K - 1 inputs. y: out, device, [T, C] (may alias x).
cudaError_t LaunchCausalConvSilu(const GdnStepParams& step, const float* x, const float* w,
                                 int64_t C, int K, float* conv_state, float* y,
                                 cudaStream_t stream);

// g[t, h] = ssm_a[h] * softplus(a[t, h] + dt_bias[h]) (softplus(z) = z above 20, else
// log1pf(expf(z))); beta[t, h] = 1 / (1 + expf(-b[t, h])).
// a, b: in, device, [T, H] float. dt_bias, ssm_a: in, device, [H] float.
// g, beta: out, device, [T, H] (g may alias a, beta may alias b).
cudaError_t LaunchGdnGates(const float* a, const float* b, const float* dt_bias,
                           const float* ssm_a, int64_t T, int64_t H, float* g, float* beta,
                           cudaStream_t stream);

struct GatedDeltaRuleParams {
  const float* qkv = nullptr;   // in, device, [T, C]: q | k (n_k_head * dk each) | v (n_v_head * dv)
  const float* g = nullptr;     // in, device, [T, n_v_head] log decay
  const float* beta = nullptr;  // in, device, [T, n_v_head]
  float* ssm = nullptr;         // in/out, device, [n_slots, n_v_head, dk, dv] float
  float* out = nullptr;         // out, device, [T, n_v_head * dv]
  int n_k_head = 0, n_v_head = 0, dk = 0, dv = 0;  // dv <= 1024; dk * dv + 2 dk floats fit 227 KiB
  bool tiled_k = false;  // value head h reads key head h % n_k_head, else h / (n_v_head / n_k_head)
  float eps = 0.0f;      // L2 norm: x / sqrt(sum x^2 + eps)
};

// The gated delta rule, per (sequence, value head), token by token:
//   q, k L2-normalised (q also times dk^-1/2); S = expf(g) S; delta = beta (v - S^T k);
//   S += k delta^T; o = S^T q.
// One CTA per (sequence, value head); thread j owns column j of S [dk, dv] in shared memory.
// sum q^2, sum k^2: warp 0, lane l an fma chain over i = l, l + 32, ..., then a shfl_xor tree
// (16..1); S^T k and S^T q: thread j's fma chain over i = 0..dk-1 (docs/kernels.md).
cudaError_t LaunchGatedDeltaRule(const GdnStepParams& step, const GatedDeltaRuleParams& p,
                                 cudaStream_t stream);

// y[t, :] = x[t, :] * (1 / sqrtf(sum x^2 / d + eps)) * w * silu(z[t, :]), the sum as LaunchRmsNorm's
// (thread i of 256: fma over i, i + 256, ...; shfl_xor tree; the 8 warp sums in warp order).
// x, z: in, device, [T, d] float. w: in, device, [d] float. y: out, device, [T, d] (may alias x).
cudaError_t LaunchGatedRmsNorm(const float* x, const float* w, const float* z, int64_t T,
                               int64_t d, float eps, float* y, cudaStream_t stream);

// a[t, grp m + i] = x[t, 2 grp m + i], b[t, grp m + i] = x[t, 2 grp m + m + i].
// x: in, device, [T, 2 half] float, half a multiple of m >= 1. a, b: out, device, [T, half].
cudaError_t LaunchSplitHalves(const float* x, int64_t T, int64_t half, int64_t m, float* a,
                              float* b, cudaStream_t stream);

}  // namespace lockstep::kernels
