// The ref backend's Gated DeltaNet ops (backend.h, docs/models.md): the textbook formulas as
// scalar loops, accumulated in double. The delta-rule state is f32 at every position (the form in
// which it is stored in a slot or checkpoint), each token's update computed in double from it and
// rounded once; the conv history is the f32 inputs themselves.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "oracle/ref_backend.h"

namespace lockstep::oracle {
namespace {

using backend::GdnLayer;
using backend::StepMeta;
using backend::GdnLayout;
using backend::Tensor;
using backend::Weight;

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// Rows [first, last) of sequence s.
struct SeqRows {
  int64_t first, last;
};

}  // namespace

// y[t, c] = silu(sum_i w[c, i] u[p_t - K + 1 + i, c]); u = the state's K - 1 inputs, then x.
absl::Status RefBackend::CausalConvSilu(Tensor x, const Weight& w, const GdnLayout& l,
                                        GdnLayer state, Tensor y) {
  constexpr std::string_view kOp = "ref CausalConvSilu";
  if (absl::Status s = CheckGdnState(kOp, l, state); !s.ok()) return s;
  const int64_t C = l.channels(), K = l.conv_kernel, T = step().n_tokens();
  if (absl::Status s = CheckTensor(kOp, "x", x, T, C); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "y", y, T, C); !s.ok()) return s;
  if (absl::Status s = CheckF32Vector(kOp, "w", w, C, K); !s.ok()) return s;
  const auto* wf = static_cast<const float*>(w.data);
  const StepMeta& m = step();
  std::vector<float> hist((K - 1) * C);  // [K - 1, C]: oldest first
  for (int64_t s = 0; s < m.n_seq(); ++s) {
    const int64_t r0 = m.query_start[s], r1 = m.query_start[s + 1];
    if (r0 == r1) continue;
    float* slot = state.conv + m.state_slots[s] * l.conv_floats();
    if (m.positions[r0] == 0) {
      std::fill(hist.begin(), hist.end(), 0.0f);
    } else {
      std::copy(slot, slot + hist.size(), hist.begin());
    }
    for (int64_t t = r0; t < r1; ++t) {
      const float* xt = x.data + t * C;
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0.0;
        for (int64_t i = 0; i < K - 1; ++i) acc += double{wf[c * K + i]} * double{hist[i * C + c]};
        acc += double{wf[c * K + K - 1]} * double{xt[c]};
        y.data[t * C + c] = static_cast<float>(Silu(acc));
      }
      if (K > 1) {
        std::copy(hist.begin() + C, hist.end(), hist.begin());
        std::copy(xt, xt + C, hist.end() - C);
      }
      if (!m.state_checkpoints.empty() && m.state_checkpoints[t] >= 0) {
        std::copy(hist.begin(), hist.end(), state.conv + m.state_checkpoints[t] * l.conv_floats());
      }
    }
    std::copy(hist.begin(), hist.end(), slot);
  }
  return absl::OkStatus();
}

// g = ssm_a * softplus(a + dt_bias) (softplus(x) = x above 20, as torch and ggml); beta = sigmoid(b).
absl::Status RefBackend::GdnGates(Tensor a, Tensor b, const Weight& dt_bias, const Weight& ssm_a,
                                  Tensor g, Tensor beta) {
  constexpr std::string_view kOp = "ref GdnGates";
  const int64_t H = a.cols;
  if (absl::Status s = CheckSameShape(kOp, "a", a, "b", b); !s.ok()) return s;
  if (absl::Status s = CheckSameShape(kOp, "a", a, "g", g); !s.ok()) return s;
  if (absl::Status s = CheckSameShape(kOp, "a", a, "beta", beta); !s.ok()) return s;
  if (absl::Status s = CheckF32Vector(kOp, "dt_bias", dt_bias, 1, H); !s.ok()) return s;
  if (absl::Status s = CheckF32Vector(kOp, "ssm_a", ssm_a, 1, H); !s.ok()) return s;
  const auto* dt = static_cast<const float*>(dt_bias.data);
  const auto* A = static_cast<const float*>(ssm_a.data);
  for (int64_t t = 0; t < a.rows; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const double z = double{a.data[t * H + h]} + double{dt[h]};
      const double sp = z > 20.0 ? z : std::log1p(std::exp(z));
      const double bb = double{b.data[t * H + h]};
      g.data[t * H + h] = static_cast<float>(double{A[h]} * sp);
      beta.data[t * H + h] = static_cast<float>(1.0 / (1.0 + std::exp(-bb)));
    }
  }
  return absl::OkStatus();
}

// Per sequence and value head: S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q.
absl::Status RefBackend::GatedDeltaRule(Tensor qkv, Tensor g, Tensor beta, const GdnLayout& l,
                                        GdnLayer state, float eps, Tensor out) {
  constexpr std::string_view kOp = "ref GatedDeltaRule";
  if (absl::Status s = CheckGdnState(kOp, l, state); !s.ok()) return s;
  const int64_t T = step().n_tokens(), C = l.channels(), Hv = l.n_v_head;
  const int64_t dk = l.head_k_dim, dv = l.head_v_dim;
  if (absl::Status s = CheckTensor(kOp, "qkv", qkv, T, C); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "g", g, T, Hv); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "beta", beta, T, Hv); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "out", out, T, Hv * dv); !s.ok()) return s;
  const StepMeta& m = step();
  const int64_t k_off = l.n_k_head * dk, v_off = 2 * l.n_k_head * dk;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> S(dk * dv), q(dk), k(dk), kv(dv);
  for (int64_t s = 0; s < m.n_seq(); ++s) {
    const int64_t r0 = m.query_start[s], r1 = m.query_start[s + 1];
    if (r0 == r1) continue;
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = l.k_head_of(h);
      float* slot = state.ssm + m.state_slots[s] * l.ssm_floats() + h * dk * dv;
      for (int64_t i = 0; i < dk * dv; ++i) S[i] = m.positions[r0] == 0 ? 0.0 : double{slot[i]};
      for (int64_t t = r0; t < r1; ++t) {
        const float* row = qkv.data + t * C;
        double qq = 0.0, kk = 0.0;
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = row[kh * dk + i];
          k[i] = row[k_off + kh * dk + i];
          qq += q[i] * q[i];
          kk += k[i] * k[i];
        }
        const double qn = q_scale / std::sqrt(qq + double{eps}), kn = 1.0 / std::sqrt(kk + double{eps});
        for (int64_t i = 0; i < dk; ++i) {
          q[i] *= qn;
          k[i] *= kn;
        }
        const double decay = std::exp(double{g.data[t * Hv + h]}), b = beta.data[t * Hv + h];
        for (double& e : S) e *= decay;
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0.0;
          for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * k[i];
          kv[j] = (double{row[v_off + h * dv + j]} - acc) * b;  // the delta, times beta
        }
        // The state is stored per position (slot, checkpoints) in f32, so it is rounded to f32
        // after every token: a step that starts at this position reads exactly these values,
        // which makes the ref chunk-invariant like every other backend (backend.h contract).
        for (int64_t i = 0; i < dk; ++i) {
          for (int64_t j = 0; j < dv; ++j) {
            S[i * dv + j] = static_cast<float>(S[i * dv + j] + k[i] * kv[j]);
          }
        }
        for (int64_t j = 0; j < dv; ++j) {
          double acc = 0.0;
          for (int64_t i = 0; i < dk; ++i) acc += S[i * dv + j] * q[i];
          out.data[t * Hv * dv + h * dv + j] = static_cast<float>(acc);
        }
        if (!m.state_checkpoints.empty() && m.state_checkpoints[t] >= 0) {
          float* cp = state.ssm + m.state_checkpoints[t] * l.ssm_floats() + h * dk * dv;
          for (int64_t i = 0; i < dk * dv; ++i) cp[i] = static_cast<float>(S[i]);
        }
      }
      for (int64_t i = 0; i < dk * dv; ++i) slot[i] = static_cast<float>(S[i]);
    }
  }
  return absl::OkStatus();
}

// y = x / sqrt(mean(x^2) + eps) * w * silu(z).
absl::Status RefBackend::GatedRmsNorm(Tensor x, const Weight& w, Tensor z, float eps, Tensor y) {
  constexpr std::string_view kOp = "ref GatedRmsNorm";
  if (absl::Status s = CheckSameShape(kOp, "x", x, "z", z); !s.ok()) return s;
  if (absl::Status s = CheckSameShape(kOp, "x", x, "y", y); !s.ok()) return s;
  const int64_t d = x.cols;
  if (absl::Status s = CheckNormWeight(kOp, &w, d); !s.ok()) return s;
  const auto* wf = static_cast<const float*>(w.data);
  for (int64_t t = 0; t < x.rows; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += double{x.data[t * d + i]} * double{x.data[t * d + i]};
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + double{eps});
    for (int64_t i = 0; i < d; ++i) {
      y.data[t * d + i] = static_cast<float>(double{x.data[t * d + i]} * inv * double{wf[i]} *
                                             Silu(double{z.data[t * d + i]}));
    }
  }
  return absl::OkStatus();
}

absl::Status RefBackend::SplitHalves(Tensor x, int64_t m, Tensor a, Tensor b) {
  constexpr std::string_view kOp = "ref SplitHalves";
  if (m < 1 || x.cols % (2 * m) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: x has %d columns, not whole groups of 2 m = %d", kOp, x.cols, 2 * m));
  }
  if (absl::Status s = CheckTensor(kOp, "a", a, x.rows, x.cols / 2); !s.ok()) return s;
  if (absl::Status s = CheckTensor(kOp, "b", b, x.rows, x.cols / 2); !s.ok()) return s;
  const int64_t n = x.cols / (2 * m);
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t grp = 0; grp < n; ++grp) {
      for (int64_t i = 0; i < m; ++i) {
        a.data[t * n * m + grp * m + i] = x.data[t * x.cols + 2 * grp * m + i];
        b.data[t * n * m + grp * m + i] = x.data[t * x.cols + 2 * grp * m + m + i];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::oracle
