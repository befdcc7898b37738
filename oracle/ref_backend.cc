#include "oracle/ref_backend.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"

namespace lockstep::oracle {
namespace {

using backend::Tensor;
using backend::Weight;

// Row r of w as floats, by the shared dequantizer.   dst: [w.cols]
absl::Status DequantizeRow(const Weight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
  const absl::Status s = quant::Dequantize(w.type, row, w.cols, dst);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("ref backend: cannot dequantize weight '%s' "
                                                  "row %d: %s", w.name, r, s.message()));
  }
  return absl::OkStatus();
}

[[maybe_unused]] const bool kRegistered = backend::RegisterBackend(
    "ref", [](const backend::BackendOptions&) -> absl::StatusOr<std::unique_ptr<backend::Backend>> {
      return std::make_unique<RefBackend>();  // single-threaded by design: threads is ignored
    });

}  // namespace

// out[t, :] = table[tokens[t], :].   out: [T, cols]
absl::Status RefBackend::Embed(const Weight& table, Tensor out) {
  if (absl::Status s = CheckEmbed(table, out); !s.ok()) return s;
  const int64_t T = step().n_tokens();
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = step().tokens[t];
    if (absl::Status s = DequantizeRow(table, id, out.data + t * table.cols); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// y[t, r] = sum_c W[r, c] * x[t, c].   W: [rows, cols], x: [T, cols], y: [T, rows]
absl::Status RefBackend::MatMul(const Weight& w, Tensor x, Tensor y) {
  if (absl::Status s = CheckWeight("ref MatMul", w); !s.ok()) return s;
  if (absl::Status s = CheckTensor("ref MatMul", "x", x, -1, w.cols); !s.ok()) return s;
  if (absl::Status s = CheckTensor("ref MatMul", "y", y, x.rows, w.rows); !s.ok()) return s;
  std::vector<float> w_row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    if (absl::Status s = DequantizeRow(w, r, w_row.data()); !s.ok()) return s;
    for (int64_t t = 0; t < x.rows; ++t) {
      double acc = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) {
        acc += double{w_row[c]} * double{x.data[t * w.cols + c]};
      }
      y.data[t * w.rows + r] = static_cast<float>(acc);
    }
  }
  return absl::OkStatus();
}

// y[t, i] = x[t, i] / sqrt(sum_i x[t, i]^2 / d + eps) * w[i].   x, y: [n, d]; w: F32 [d] or null
absl::Status RefBackend::RmsNorm(Tensor x, const Weight* weight, float eps, Tensor y) {
  if (absl::Status s = CheckSameShape("ref RmsNorm", "x", x, "y", y); !s.ok()) return s;
  const int64_t d = x.cols;
  if (absl::Status s = CheckNormWeight("ref RmsNorm", weight, d); !s.ok()) return s;
  const float* w = weight ? static_cast<const float*>(weight->data) : nullptr;
  for (int64_t t = 0; t < x.rows; ++t) {
    const float* xt = x.data + t * d;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < d; ++i) sum_sq += double{xt[i]} * double{xt[i]};
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(d) + double{eps});
    for (int64_t i = 0; i < d; ++i) {
      const double wi = w ? double{w[i]} : 1.0;
      y.data[t * d + i] = static_cast<float>(double{xt[i]} * inv_rms * wi);
    }
  }
  return absl::OkStatus();
}

// For pair i in [0, n_rot / 2) of every head: theta = pos * base^(-2i / n_rot),
//   (a, b) <- (a cos theta - b sin theta, a sin theta + b cos theta),
// where (a, b) = (x[2i], x[2i + 1]) in normal mode and (x[i], x[i + n_rot / 2]) in neox mode.
// x: [T, n_heads * head_dim] at the step's positions; dims n_rot..head_dim-1 are left as they are.
namespace {

// theta_i = pos * base^(-2i / n_rot) / factors[i] (factors null: 1), in double.
void RefRope(const backend::StepMeta& step, backend::Tensor x, int64_t n_heads, int64_t head_dim,
             int64_t n_rot, float freq_base, backend::RopeMode mode, const float* factors) {
  const int64_t T = step.n_tokens();
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < T; ++t) {
    const double pos = step.positions[t];
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x.data + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        double inv = std::pow(double{freq_base}, -2.0 * static_cast<double>(i) /
                                                     static_cast<double>(n_rot));
        if (factors != nullptr) inv /= double{factors[i]};
        const double theta = pos * inv;
        const int64_t ia = mode == backend::RopeMode::kNormal ? 2 * i : i;
        const int64_t ib = mode == backend::RopeMode::kNormal ? 2 * i + 1 : i + half;
        const double a = xh[ia], b = xh[ib];
        xh[ia] = static_cast<float>(a * std::cos(theta) - b * std::sin(theta));
        xh[ib] = static_cast<float>(a * std::sin(theta) + b * std::cos(theta));
      }
    }
  }
}

}  // namespace

absl::Status RefBackend::Rope(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                              float freq_base, backend::RopeMode mode) {
  if (absl::Status s = CheckRope("ref Rope", x, n_heads, head_dim, n_rot); !s.ok()) return s;
  RefRope(step(), x, n_heads, head_dim, n_rot, freq_base, mode, nullptr);
  return absl::OkStatus();
}

absl::Status RefBackend::RopeFreqFactors(Tensor x, int64_t n_heads, int64_t head_dim,
                                         int64_t n_rot, float freq_base, backend::RopeMode mode,
                                         const backend::Weight& factors) {
  if (absl::Status s = CheckRope("ref RopeFreqFactors", x, n_heads, head_dim, n_rot); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckNormWeight("ref RopeFreqFactors", &factors, n_rot / 2); !s.ok()) {
    return s;
  }
  RefRope(step(), x, n_heads, head_dim, n_rot, freq_base, mode,
          static_cast<const float*>(factors.data));
  return absl::OkStatus();
}

// Row t of k and v, encoded in the layout's formats by the shared quant code, to slot slots[t].
absl::Status RefBackend::KvWrite(const backend::KvLayout& layout, Tensor k, Tensor v,
                                 backend::KvLayer layer) {
  if (absl::Status s = CheckKvWrite(layout, k, v, layer); !s.ok()) return s;
  const int64_t kv_dim = layout.kv_dim;
  const int64_t k_row = quant::KvRowBytes(layout.k_format, kv_dim);
  const int64_t v_row = quant::KvRowBytes(layout.v_format, kv_dim);
  for (int64_t t = 0; t < step().n_tokens(); ++t) {
    const int64_t slot = step().slots[t];
    if (absl::Status s = quant::EncodeKvRow(layout.k_format, k.data + t * kv_dim, kv_dim,
                                            static_cast<uint8_t*>(layer.k) + slot * k_row);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = quant::EncodeKvRow(layout.v_format, v.data + t * kv_dim, kv_dim,
                                            static_cast<uint8_t*>(layer.v) + slot * v_row);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// For query row t of sequence s, at position pos, head h (kv head g = h / (n_head / n_kv_head)):
// the sequence's keys j in [0, seq_len[s]) are gathered through its block table (slot
// block_table[s][j / block_size] * block_size + j % block_size) and decoded whole; then over the
// visible keys (j <= pos and, with a window, pos - j < window):
//   s_j = scale * q[t, h, :] . k[j, g, :];  s_j = softcap * tanh(s_j / softcap) if softcap
//   out[t, h, :] = sum_j exp(s_j - max s) v[j, g, :] / sum_j exp(s_j - max s)
// A query with no visible key gets zeros.   q, out: [T, n_head * head_dim]
absl::Status RefBackend::PagedAttention(Tensor q, const backend::KvLayout& layout,
                                        backend::KvLayer layer, int64_t n_head,
                                        int64_t n_kv_head, int64_t head_dim,
                                        const backend::AttentionParams& p, Tensor out) {
  if (absl::Status s = CheckPagedAttention(q, layout, layer, n_head, n_kv_head, head_dim, out);
      !s.ok()) {
    return s;
  }
  const backend::StepMeta& m = step();
  const int64_t kv_dim = layout.kv_dim, group = n_head / n_kv_head;
  const int64_t k_row = quant::KvRowBytes(layout.k_format, kv_dim);
  const int64_t v_row = quant::KvRowBytes(layout.v_format, kv_dim);
  for (int64_t s = 0; s < m.n_seq(); ++s) {
    // The sequence's K and V, decoded.   [n_kv, kv_dim] each
    const int64_t n_kv = m.seq_len[s];
    std::vector<float> k(n_kv * kv_dim), v(n_kv * kv_dim);
    for (int64_t j = 0; j < n_kv; ++j) {
      const int64_t slot = KeySlot(s, j, layout.block_size);
      if (absl::Status st = quant::DecodeKvRow(
              layout.k_format, static_cast<const uint8_t*>(layer.k) + slot * k_row, kv_dim,
              k.data() + j * kv_dim);
          !st.ok()) {
        return st;
      }
      if (absl::Status st = quant::DecodeKvRow(
              layout.v_format, static_cast<const uint8_t*>(layer.v) + slot * v_row, kv_dim,
              v.data() + j * kv_dim);
          !st.ok()) {
        return st;
      }
    }
    std::vector<double> score(n_kv), acc(head_dim);
    for (int64_t t = m.query_start[s]; t < m.query_start[s + 1]; ++t) {
      const int64_t pos = m.positions[t];
      auto visible = [&](int64_t j) { return j <= pos && (p.window == 0 || pos - j < p.window); };
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t g = h / group;
        const float* qth = q.data + (t * n_head + h) * head_dim;
        double max_score = -INFINITY;
        for (int64_t j = 0; j < n_kv; ++j) {
          if (!visible(j)) continue;
          const float* kj = k.data() + j * kv_dim + g * head_dim;
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) dot += double{qth[d]} * double{kj[d]};
          double sc = double{p.scale} * dot;
          if (p.softcap != 0.0f) sc = double{p.softcap} * std::tanh(sc / double{p.softcap});
          score[j] = sc;
          max_score = std::max(max_score, sc);
        }
        double denom = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n_kv; ++j) {
          if (!visible(j)) continue;
          const double e = std::exp(score[j] - max_score);
          denom += e;
          const float* vj = v.data() + j * kv_dim + g * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += e * double{vj[d]};
        }
        float* oth = out.data + (t * n_head + h) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          oth[d] = denom > 0.0 ? static_cast<float>(acc[d] / denom) : 0.0f;
        }
      }
    }
  }
  return absl::OkStatus();
}

// out[i, :] = x[output_rows[i], :].   x: [T, d], out: [R, d]
absl::Status RefBackend::GatherRows(Tensor x, Tensor out) {
  if (absl::Status s = CheckGatherRows(x, out); !s.ok()) return s;
  const std::vector<int32_t>& rows = step().output_rows;
  const int64_t R = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t c = 0; c < x.cols; ++c) out.data[i * x.cols + c] = x.data[rows[i] * x.cols + c];
  }
  return absl::OkStatus();
}

// out[i] = act(gate[i]) * up[i].   [n, d]
absl::Status RefBackend::Glu(Tensor gate, Tensor up, backend::Activation act, Tensor out) {
  if (absl::Status s = CheckSameShape("ref Glu", "gate", gate, "up", up); !s.ok()) return s;
  if (absl::Status s = CheckSameShape("ref Glu", "gate", gate, "out", out); !s.ok()) return s;
  const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < gate.size(); ++i) {
    const double g = gate.data[i];
    double a;
    if (act == backend::Activation::kSilu) {
      a = g / (1.0 + std::exp(-g));
    } else {
      a = 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
    }
    out.data[i] = static_cast<float>(a * double{up.data[i]});
  }
  return absl::OkStatus();
}

// out[i] = a[i] + b[i].   [n, d]
absl::Status RefBackend::Add(Tensor a, Tensor b, Tensor out) {
  if (absl::Status s = CheckSameShape("ref Add", "a", a, "b", b); !s.ok()) return s;
  if (absl::Status s = CheckSameShape("ref Add", "a", a, "out", out); !s.ok()) return s;
  for (int64_t i = 0; i < a.size(); ++i) {
    out.data[i] = static_cast<float>(double{a.data[i]} + double{b.data[i]});
  }
  return absl::OkStatus();
}

// out[i] = x[i] * s.   [n, d]
absl::Status RefBackend::Scale(Tensor x, float s, Tensor out) {
  if (absl::Status st = CheckSameShape("ref Scale", "x", x, "out", out); !st.ok()) return st;
  for (int64_t i = 0; i < x.size(); ++i) {
    out.data[i] = static_cast<float>(double{x.data[i]} * double{s});
  }
  return absl::OkStatus();
}

// x[i] = cap * tanh(x[i] / cap).   [n, d]
absl::Status RefBackend::Softcap(Tensor x, float cap) {
  if (absl::Status s = CheckTensor("ref Softcap", "x", x, -1, x.cols); !s.ok()) return s;
  if (cap == 0.0f || !std::isfinite(cap)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ref Softcap: cap = %g, want finite and nonzero", cap));
  }
  for (int64_t i = 0; i < x.size(); ++i) {
    x.data[i] = static_cast<float>(double{cap} * std::tanh(double{x.data[i]} / double{cap}));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::oracle
