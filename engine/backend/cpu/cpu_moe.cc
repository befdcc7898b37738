// The cpu backend's mixture-of-experts ops (backend.h states the contracts, docs/models.md the
// invariance). MatMulExperts groups the (token, rank) rows by expert and runs the plain matmul
// kernel of cpu_matmul.cc on each expert's rows; that kernel's y[t, r] is the same DotFixed
// whatever its T (cpu_kernels.h), so a row's result does not depend on which other tokens chose
// the same expert, on T or on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace lockstep::backend {

// Per row t, sequentially: k passes of argmax over the experts not yet chosen (strict >, so the
// lower id wins a tie); m = max logit; e_i = expf(l_i - m) summed in id order; weights p = e/sum
// of the chosen, divided by their sum in rank order when `normalize`.
absl::Status CpuBackend::MoeRoute(Tensor logits, int64_t k, bool normalize, Tensor weights,
                                  IntTensor ids) {
  if (absl::Status s = CheckMoeRoute("cpu MoeRoute", logits, k, weights, ids); !s.ok()) return s;
  const int64_t T = logits.rows, E = logits.cols;
  std::vector<float> p(E);
  std::vector<uint8_t> taken(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data + t * E;
    float m = l[0];
    for (int64_t e = 1; e < E; ++e) m = std::max(m, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - m);
      sum += p[e];
    }
    std::fill(taken.begin(), taken.end(), 0);
    float kept = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
      }
      taken[best] = 1;
      ids.data[t * k + j] = static_cast<int32_t>(best);
      weights.data[t * k + j] = p[best] / sum;
      kept += weights.data[t * k + j];
    }
    if (normalize) {
      for (int64_t j = 0; j < k; ++j) weights.data[t * k + j] /= kept;
    }
  }
  return absl::OkStatus();
}

// For each expert e in increasing id: the rows i = t * k + j with ids[t, j] == e (in increasing
// i) gathered into [n_e, cols], multiplied by W_e with MatMulWithIsa, scattered back to y.
absl::Status CpuBackend::MatMulExperts(const Weight& w, int64_t n_expert, Tensor x, IntTensor ids,
                                       Tensor y) {
  if (absl::Status s = CheckMatMulExperts("cpu MatMulExperts", w, n_expert, x, ids, y); !s.ok()) {
    return s;
  }
  const int64_t T = ids.rows, k = ids.cols, n = T * k, rpe = w.rows / n_expert;
  const int64_t cols = w.cols;
  std::vector<std::vector<int64_t>> rows_of(n_expert);  // expert -> its (token, rank) rows
  for (int64_t i = 0; i < n; ++i) rows_of[ids.data[i]].push_back(i);
  std::vector<float> xe, ye;
  for (int64_t e = 0; e < n_expert; ++e) {
    const std::vector<int64_t>& rows = rows_of[e];
    if (rows.empty()) continue;
    const int64_t ne = static_cast<int64_t>(rows.size());
    xe.resize(ne * cols);
    ye.resize(ne * rpe);
    for (int64_t a = 0; a < ne; ++a) {
      const float* src = x.data + (x.rows == T ? rows[a] / k : rows[a]) * cols;
      std::copy(src, src + cols, xe.data() + a * cols);
    }
    Weight we = w;
    we.rows = rpe;
    we.data = static_cast<const uint8_t*>(w.data) + e * rpe * w.row_bytes();
    if (absl::Status s = cpu::MatMulWithIsa(cpu::BestDotIsa(), we, xe.data(), ne, ye.data(), pool_);
        !s.ok()) {
      return s;
    }
    for (int64_t a = 0; a < ne; ++a) {
      std::copy(ye.data() + a * rpe, ye.data() + (a + 1) * rpe, y.data + rows[a] * rpe);
    }
  }
  return absl::OkStatus();
}

// out[t, c] = ((0 + w_0 y_0[c]) + w_1 y_1[c]) + ..., in rank order j = 0..k-1.
absl::Status CpuBackend::MoeCombine(Tensor y, Tensor weights, Tensor out) {
  if (absl::Status s = CheckMoeCombine("cpu MoeCombine", y, weights, out); !s.ok()) return s;
  const int64_t T = weights.rows, k = weights.cols, d = out.cols;
  pool_.ParallelFor(T, std::max<int64_t>(1, 4096 / std::max<int64_t>(d * k, 1)),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t t = begin; t < end; ++t) {
                        float* o = out.data + t * d;
                        std::fill(o, o + d, 0.0f);
                        for (int64_t j = 0; j < k; ++j) {
                          cpu::AxpyInto(o, weights.data[t * k + j], y.data + (t * k + j) * d, d);
                        }
                      }
                    });
  return absl::OkStatus();
}

// out[t, c] = x[t, c] / (1 + expf(-g[t, c or 0])).
absl::Status CpuBackend::SigmoidMul(Tensor x, Tensor g, Tensor out) {
  if (absl::Status s = CheckSigmoidMul("cpu SigmoidMul", x, g, out); !s.ok()) return s;
  const int64_t d = x.cols;
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      const float gv = g.data[t * g.cols + (g.cols == 1 ? 0 : c)];
      out.data[t * d + c] = x.data[t * d + c] / (1.0f + std::exp(-gv));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::backend
