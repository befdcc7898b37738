// The cpu backend's Gated DeltaNet ops (backend.h, docs/models.md): float arithmetic.
//
// Invariance (docs/design.md §1): the conv and the delta rule run token by token in position
// order for each sequence, and the state between tokens (and between steps) is the same f32
// values, so a prefill cut into chunks, or a sequence decoded one token per step in a batch of
// any size, performs exactly the arithmetic of one pass: the results are bitwise equal. Threads
// only pick which (sequence, channel) or (sequence, value head) a worker runs; every reduction
// is a sequential loop over head_k_dim (or K) in index order. The chunked (WY) form of
// transformers' torch_chunk_gated_delta_rule is the same recurrence reassociated; it is what a
// device kernel would use, and the op tests hold this form to both of transformers' forms.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_backend.h"

namespace lockstep::backend {
namespace {

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

// Work item (sequence s, channel c): its K - 1 history values, then every row in order.
absl::Status CpuBackend::CausalConvSilu(Tensor x, const Weight& w, const GdnLayout& l,
                                        GdnLayer state, Tensor y) {
  constexpr std::string_view kOp = "cpu CausalConvSilu";
  if (absl::Status s = CheckGdnState(kOp, l, state); !s.ok()) return s;
  const int64_t C = l.channels(), K = l.conv_kernel, T = step().n_tokens();
  if (absl::Status s = CheckTensor(kOp, "x", x, T, C); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "y", y, T, C); !s.ok()) return s;
  if (absl::Status s = CheckF32Vector(kOp, "w", w, C, K); !s.ok()) return s;
  if (K > 16) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: conv kernel %d > 16", kOp, K));
  }
  const auto* wf = static_cast<const float*>(w.data);
  const StepMeta& m = step();
  const int64_t n_seq = m.n_seq();
  pool_.ParallelFor(n_seq * C, 64, [&](int64_t begin, int64_t end) {
    float hist[16];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / C, c = item % C;
      const int64_t r0 = m.query_start[s], r1 = m.query_start[s + 1];
      if (r0 == r1) continue;
      float* slot = state.conv + m.state_slots[s] * l.conv_floats();
      for (int64_t i = 0; i < K - 1; ++i) hist[i] = m.positions[r0] == 0 ? 0.0f : slot[i * C + c];
      const float* wc = wf + c * K;
      for (int64_t t = r0; t < r1; ++t) {
        const float xt = x.data[t * C + c];
        float acc = 0.0f;
        for (int64_t i = 0; i < K - 1; ++i) acc += wc[i] * hist[i];
        acc += wc[K - 1] * xt;
        y.data[t * C + c] = Silu(acc);
        for (int64_t i = 0; i + 1 < K - 1; ++i) hist[i] = hist[i + 1];
        if (K > 1) hist[K - 2] = xt;
        if (!m.state_checkpoints.empty() && m.state_checkpoints[t] >= 0) {
          float* cp = state.conv + m.state_checkpoints[t] * l.conv_floats();
          for (int64_t i = 0; i < K - 1; ++i) cp[i * C + c] = hist[i];
        }
      }
      for (int64_t i = 0; i < K - 1; ++i) slot[i * C + c] = hist[i];
    }
  });
  return absl::OkStatus();
}

// g = ssm_a * softplus(a + dt_bias) (x above 20, as torch and ggml); beta = sigmoid(b).
absl::Status CpuBackend::GdnGates(Tensor a, Tensor b, const Weight& dt_bias, const Weight& ssm_a,
                                  Tensor g, Tensor beta) {
  constexpr std::string_view kOp = "cpu GdnGates";
  const int64_t H = a.cols;
  if (absl::Status s = CheckSameShape(kOp, "a", a, "b", b); !s.ok()) return s;
  if (absl::Status s = CheckSameShape(kOp, "a", a, "g", g); !s.ok()) return s;
  if (absl::Status s = CheckSameShape(kOp, "a", a, "beta", beta); !s.ok()) return s;
  if (absl::Status s = CheckF32Vector(kOp, "dt_bias", dt_bias, 1, H); !s.ok()) return s;
  if (absl::Status s = CheckF32Vector(kOp, "ssm_a", ssm_a, 1, H); !s.ok()) return s;
  const auto* dt = static_cast<const float*>(dt_bias.data);
  const auto* A = static_cast<const float*>(ssm_a.data);
  for (int64_t i = 0; i < a.rows * H; ++i) {
    const int64_t h = i % H;
    const float z = a.data[i] + dt[h];
    const float sp = z > 20.0f ? z : std::log1p(std::exp(z));  // log1p: no 1 + e cancellation
    const float bb = b.data[i];
    g.data[i] = A[h] * sp;
    beta.data[i] = 1.0f / (1.0f + std::exp(-bb));
  }
  return absl::OkStatus();
}

// Work item (sequence s, value head h): the state S [dk, dv] in a local buffer, every row in
// order. kv and o reduce over i = 0..dk-1 in order, vectorized across j (no reassociation).
absl::Status CpuBackend::GatedDeltaRule(Tensor qkv, Tensor g, Tensor beta, const GdnLayout& l,
                                        GdnLayer state, float eps, Tensor out) {
  constexpr std::string_view kOp = "cpu GatedDeltaRule";
  if (absl::Status s = CheckGdnState(kOp, l, state); !s.ok()) return s;
  const int64_t T = step().n_tokens(), C = l.channels(), Hv = l.n_v_head;
  const int64_t dk = l.head_k_dim, dv = l.head_v_dim;
  if (absl::Status s = CheckTensor(kOp, "qkv", qkv, T, C); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "g", g, T, Hv); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "beta", beta, T, Hv); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "out", out, T, Hv * dv); !s.ok()) return s;
  const StepMeta& m = step();
  const int64_t k_off = l.n_k_head * dk, v_off = 2 * l.n_k_head * dk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  pool_.ParallelFor(m.n_seq() * Hv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> S(dk * dv), q(dk), k(dk), kv(dv), o(dv);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t s = item / Hv, h = item % Hv;
      const int64_t r0 = m.query_start[s], r1 = m.query_start[s + 1];
      if (r0 == r1) continue;
      const int64_t kh = l.k_head_of(h);
      float* slot = state.ssm + m.state_slots[s] * l.ssm_floats() + h * dk * dv;
      if (m.positions[r0] == 0) {
        std::fill(S.begin(), S.end(), 0.0f);
      } else {
        std::copy(slot, slot + dk * dv, S.begin());
      }
      for (int64_t t = r0; t < r1; ++t) {
        const float* row = qkv.data + t * C;
        float qq = 0.0f, kk = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = row[kh * dk + i];
          k[i] = row[k_off + kh * dk + i];
          qq += q[i] * q[i];
          kk += k[i] * k[i];
        }
        const float qn = q_scale / std::sqrt(qq + eps), kn = 1.0f / std::sqrt(kk + eps);
        for (int64_t i = 0; i < dk; ++i) {
          q[i] *= qn;
          k[i] *= kn;
        }
        const float decay = std::exp(g.data[t * Hv + h]), b = beta.data[t * Hv + h];
        for (float& e : S) e *= decay;
        std::fill(kv.begin(), kv.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          const float* Si = S.data() + i * dv;
          for (int64_t j = 0; j < dv; ++j) kv[j] += Si[j] * k[i];
        }
        const float* vt = row + v_off + h * dv;
        for (int64_t j = 0; j < dv; ++j) kv[j] = (vt[j] - kv[j]) * b;
        std::fill(o.begin(), o.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* Si = S.data() + i * dv;
          for (int64_t j = 0; j < dv; ++j) Si[j] += k[i] * kv[j];
          for (int64_t j = 0; j < dv; ++j) o[j] += Si[j] * q[i];
        }
        std::copy(o.begin(), o.end(), out.data + t * Hv * dv + h * dv);
        if (!m.state_checkpoints.empty() && m.state_checkpoints[t] >= 0) {
          std::copy(S.begin(), S.end(),
                    state.ssm + m.state_checkpoints[t] * l.ssm_floats() + h * dk * dv);
        }
      }
      std::copy(S.begin(), S.end(), slot);
    }
  });
  return absl::OkStatus();
}

// y = x * (1 / sqrtf(sum x^2 / d + eps)) * w * silu(z), the sum in index order.
absl::Status CpuBackend::GatedRmsNorm(Tensor x, const Weight& w, Tensor z, float eps, Tensor y) {
  constexpr std::string_view kOp = "cpu GatedRmsNorm";
  if (absl::Status s = CheckSameShape(kOp, "x", x, "z", z); !s.ok()) return s;
  if (absl::Status s = CheckSameShape(kOp, "x", x, "y", y); !s.ok()) return s;
  const int64_t d = x.cols;
  if (absl::Status s = CheckNormWeight(kOp, &w, d); !s.ok()) return s;
  const auto* wf = static_cast<const float*>(w.data);
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* xt = x.data + t * d;
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) ss += xt[i] * xt[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) y.data[t * d + i] = xt[i] * inv * wf[i] * Silu(z.data[t * d + i]);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::SplitHalves(Tensor x, int64_t m, Tensor a, Tensor b) {
  constexpr std::string_view kOp = "cpu SplitHalves";
  if (m < 1 || x.cols % (2 * m) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: x has %d columns, not whole groups of 2 m = %d", kOp, x.cols, 2 * m));
  }
  if (absl::Status s = CheckTensor(kOp, "a", a, x.rows, x.cols / 2); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "b", b, x.rows, x.cols / 2); !s.ok()) return s;
  const int64_t half = x.cols / 2;
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t grp = 0; grp < half / m; ++grp) {
      const float* src = x.data + t * x.cols + 2 * grp * m;
      std::copy(src, src + m, a.data + t * half + grp * m);
      std::copy(src + m, src + 2 * m, b.data + t * half + grp * m);
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::backend
