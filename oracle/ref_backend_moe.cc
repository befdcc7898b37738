// The ref backend's mixture-of-experts ops (backend.h states the contracts): scalar loops,
// double accumulation, one rounding to float at the output, as the rest of the op oracle.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"
#include "oracle/ref_backend.h"

namespace lockstep::oracle {

using backend::IntTensor;
using backend::Tensor;
using backend::Weight;

// Per row t: order the experts by (logit descending, id ascending) and keep the first k;
// p = softmax over all experts (double); weights = p of the kept ones, renormalized over them
// in rank order when `normalize`.   logits: [T, E], weights: [T, k], ids: [T, k]
absl::Status RefBackend::MoeRoute(Tensor logits, int64_t k, bool normalize, Tensor weights,
                                  IntTensor ids) {
  if (absl::Status s = CheckMoeRoute("ref MoeRoute", logits, k, weights, ids); !s.ok()) return s;
  const int64_t T = logits.rows, E = logits.cols;
  std::vector<int32_t> order(E);
  std::vector<double> p(E);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data + t * E;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    const double m = *std::max_element(l, l + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(double{l[e]} - m);
      sum += p[e];
    }
    double kept = 0.0;
    for (int64_t j = 0; j < k; ++j) kept += p[order[j]] / sum;
    for (int64_t j = 0; j < k; ++j) {
      const double w = p[order[j]] / sum;
      weights.data[t * k + j] = static_cast<float>(normalize ? w / kept : w);
      ids.data[t * k + j] = order[j];
    }
  }
  return absl::OkStatus();
}

// y[t * k + j, r] = sum_c W[e * rpe + r, c] * x[i, c] in double, e = ids[t, j], i = t or t * k + j.
absl::Status RefBackend::MatMulExperts(const Weight& w, int64_t n_expert, Tensor x, IntTensor ids,
                                       Tensor y) {
  constexpr std::string_view op = "ref MatMulExperts";
  if (absl::Status s = CheckMatMulExperts(op, w, n_expert, x, ids, y); !s.ok()) return s;
  const int64_t T = ids.rows, k = ids.cols, rpe = w.rows / n_expert;
  std::vector<float> w_row(w.cols);
  for (int64_t e = 0; e < n_expert; ++e) {
    for (int64_t r = 0; r < rpe; ++r) {
      bool used = false;
      for (int64_t i = 0; i < T * k && !used; ++i) used = ids.data[i] == e;
      if (!used) continue;
      const auto* row = static_cast<const uint8_t*>(w.data) + (e * rpe + r) * w.row_bytes();
      if (absl::Status s = quant::Dequantize(w.type, row, w.cols, w_row.data()); !s.ok()) {
        return absl::Status(s.code(), absl::StrFormat("%s: cannot dequantize weight '%s' row %d: %s",
                                                      op, w.name, e * rpe + r, s.message()));
      }
      for (int64_t i = 0; i < T * k; ++i) {
        if (ids.data[i] != e) continue;
        const float* xi = x.data + (x.rows == T ? i / k : i) * w.cols;
        double acc = 0.0;
        for (int64_t c = 0; c < w.cols; ++c) acc += double{w_row[c]} * double{xi[c]};
        y.data[i * rpe + r] = static_cast<float>(acc);
      }
    }
  }
  return absl::OkStatus();
}

// out[t, :] = sum_{j = 0..k-1} weights[t, j] * y[t * k + j, :], in double.
absl::Status RefBackend::MoeCombine(Tensor y, Tensor weights, Tensor out) {
  if (absl::Status s = CheckMoeCombine("ref MoeCombine", y, weights, out); !s.ok()) return s;
  const int64_t T = weights.rows, k = weights.cols;
  const int64_t d = out.cols;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        acc += double{weights.data[t * k + j]} * double{y.data[(t * k + j) * d + c]};
      }
      out.data[t * d + c] = static_cast<float>(acc);
    }
  }
  return absl::OkStatus();
}

// out[t, c] = x[t, c] / (1 + exp(-g[t, c or 0])), in double.
absl::Status RefBackend::SigmoidMul(Tensor x, Tensor g, Tensor out) {
  if (absl::Status s = CheckSigmoidMul("ref SigmoidMul", x, g, out); !s.ok()) return s;
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t c = 0; c < x.cols; ++c) {
      const double gv = g.data[t * g.cols + (g.cols == 1 ? 0 : c)];
      out.data[t * x.cols + c] =
          static_cast<float>(double{x.data[t * x.cols + c]} / (1.0 + std::exp(-gv)));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::oracle
