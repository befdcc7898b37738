#include "engine/backend/step_backend.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/quant/types.h"

namespace lockstep::backend {
namespace {

absl::Status StepError(std::string_view field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("BeginStep: %s %s", field, what));
}

bool KnownKvFormat(quant::KvFormat f) {
  return static_cast<uint32_t>(f) < static_cast<uint32_t>(quant::kKvFormatCount);
}

}  // namespace

absl::Status StepBackend::BeginStep(const StepMeta& m) {
  has_step_ = false;
  const int64_t T = m.n_tokens(), n_seq = m.n_seq();
  auto size_error = [&](std::string_view field, size_t got, int64_t want, const char* want_what) {
    return StepError(field, absl::StrFormat("has %d entries, want %d (%s)", got, want, want_what));
  };
  if (static_cast<int64_t>(m.positions.size()) != T) {
    return size_error("positions", m.positions.size(), T, "one per token");
  }
  if (static_cast<int64_t>(m.slots.size()) != T) {
    return size_error("slots", m.slots.size(), T, "one per token");
  }
  if (static_cast<int64_t>(m.query_start.size()) != n_seq + 1) {
    return size_error("query_start", m.query_start.size(), n_seq + 1, "n_seq + 1");
  }
  if (m.max_blocks < 0) return StepError("max_blocks", absl::StrFormat("= %d < 0", m.max_blocks));
  if (static_cast<int64_t>(m.block_table.size()) != n_seq * m.max_blocks) {
    return size_error("block_table", m.block_table.size(), n_seq * m.max_blocks,
                      "n_seq * max_blocks");
  }
  if (m.query_start[0] != 0) {
    return StepError("query_start", absl::StrFormat("[0] = %d, want 0", m.query_start[0]));
  }
  for (int64_t s = 0; s < n_seq; ++s) {
    if (m.query_start[s + 1] < m.query_start[s]) {
      return StepError("query_start", absl::StrFormat("decreases at [%d]: %d < %d", s + 1,
                                                      m.query_start[s + 1], m.query_start[s]));
    }
    if (m.seq_len[s] < 0) {
      return StepError("seq_len", absl::StrFormat("[%d] = %d < 0", s, m.seq_len[s]));
    }
  }
  if (m.query_start[n_seq] != T) {
    return StepError("query_start",
                     absl::StrFormat("[n_seq] = %d, want T = %d", m.query_start[n_seq], T));
  }
  for (int64_t t = 0; t < T; ++t) {
    if (m.positions[t] < 0) {
      return StepError("positions", absl::StrFormat("[%d] = %d < 0", t, m.positions[t]));
    }
  }
  for (size_t i = 0; i < m.output_rows.size(); ++i) {
    if (m.output_rows[i] < 0 || m.output_rows[i] >= T) {
      return StepError("output_rows", absl::StrFormat("[%d] = %d is outside [0, T = %d)", i,
                                                      m.output_rows[i], T));
    }
  }
  if (!m.state_slots.empty() && static_cast<int64_t>(m.state_slots.size()) != n_seq) {
    return size_error("state_slots", m.state_slots.size(), n_seq, "one per sequence, or none");
  }
  if (!m.state_checkpoints.empty() && static_cast<int64_t>(m.state_checkpoints.size()) != T) {
    return size_error("state_checkpoints", m.state_checkpoints.size(), T, "one per token, or none");
  }
  step_ = m;
  row_seq_.resize(T);
  for (int64_t s = 0; s < n_seq; ++s) {
    for (int32_t t = m.query_start[s]; t < m.query_start[s + 1]; ++t) {
      row_seq_[t] = static_cast<int32_t>(s);
    }
  }
  has_step_ = true;
  return absl::OkStatus();
}

absl::Status StepBackend::RequireStep(std::string_view op) const {
  if (has_step_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("%s %s: no step has begun (call BeginStep first)", name(), op));
}

absl::Status StepBackend::CheckTensor(std::string_view op, std::string_view field,
                                      const Tensor& t, int64_t rows, int64_t cols) {
  if ((rows >= 0 && t.rows != rows) || t.cols != cols || t.rows < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is [%d, %d], want [%s, %d]", op, field, t.rows, t.cols,
        rows >= 0 ? absl::StrFormat("%d", rows) : std::string("any"), cols));
  }
  if (t.size() > 0 && t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %s has no data", op, field));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckSameShape(std::string_view op, std::string_view field_a,
                                         const Tensor& a, std::string_view field_b,
                                         const Tensor& b) {
  if (absl::Status s = CheckTensor(op, field_a, a, -1, a.cols); !s.ok()) return s;
  return CheckTensor(op, field_b, b, a.rows, a.cols);
}

absl::Status StepBackend::CheckWeight(std::string_view op, const Weight& w) {
  const quant::TypeTraits t = quant::Traits(w.type);
  if (!t.lockstep_codec) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: weight '%s' has type %s, which lockstep cannot decode", op, w.name, t.name));
  }
  if (w.rows < 0 || w.cols < 0 || w.cols % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: weight '%s' is [%d, %d], not whole %s blocks of %d", op, w.name, w.rows, w.cols,
        t.name, t.block_size));
  }
  if (w.rows * w.cols > 0 && w.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: weight '%s' is not bound (no data)", op, w.name));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckKvLayout(std::string_view op, const KvLayout& l) {
  for (auto [field, f] : {std::pair{"k_format", l.k_format}, std::pair{"v_format", l.v_format}}) {
    if (!KnownKvFormat(f)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: KV layout %s is unknown id %u", op, field, static_cast<uint32_t>(f)));
    }
    const int64_t block = quant::KvFormatBlockElems(f);
    if (l.kv_dim <= 0 || l.kv_dim % block != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: KV format %s (%s) stores blocks of %d elements; kv_dim = %d is not a positive "
          "multiple of it", op, quant::KvFormatName(f), field, block, l.kv_dim));
    }
  }
  if (l.block_size <= 0 || l.n_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: KV layout block_size = %d, n_blocks = %d (want > 0, >= 0)", op, l.block_size,
        l.n_blocks));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckKvWrite(const KvLayout& layout, const Tensor& k, const Tensor& v,
                                       const KvLayer& layer) const {
  if (absl::Status s = RequireStep("KvWrite"); !s.ok()) return s;
  if (absl::Status s = CheckKvLayout("KvWrite", layout); !s.ok()) return s;
  const int64_t T = step_.n_tokens();
  if (absl::Status s = CheckTensor("KvWrite", "k", k, T, layout.kv_dim); !s.ok()) return s;
  if (absl::Status s = CheckTensor("KvWrite", "v", v, T, layout.kv_dim); !s.ok()) return s;
  if (T > 0 && (layer.k == nullptr || layer.v == nullptr)) {
    return absl::InvalidArgumentError("KvWrite: the KV layer has no K or V storage");
  }
  const int64_t n_slots = layout.n_blocks * layout.block_size;
  for (int64_t t = 0; t < T; ++t) {
    if (step_.slots[t] < 0 || step_.slots[t] >= n_slots) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "KvWrite: slots[%d] = %d is outside the pool's %d slots (%d blocks of %d)", t,
          step_.slots[t], n_slots, layout.n_blocks, layout.block_size));
    }
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckPagedAttention(const Tensor& q, const KvLayout& layout,
                                              const KvLayer& layer, int64_t n_head,
                                              int64_t n_kv_head, int64_t head_dim,
                                              const Tensor& out) const {
  constexpr std::string_view op = "PagedAttention";
  if (absl::Status s = RequireStep(op); !s.ok()) return s;
  if (absl::Status s = CheckKvLayout(op, layout); !s.ok()) return s;
  if (n_head <= 0 || n_kv_head <= 0 || head_dim <= 0 || n_head % n_kv_head != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PagedAttention: n_head = %d, n_kv_head = %d, head_dim = %d (want positive, n_head a "
        "multiple of n_kv_head)", n_head, n_kv_head, head_dim));
  }
  if (n_kv_head * head_dim != layout.kv_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PagedAttention: n_kv_head * head_dim = %d * %d != the layout's kv_dim = %d", n_kv_head,
        head_dim, layout.kv_dim));
  }
  for (quant::KvFormat f : {layout.k_format, layout.v_format}) {
    const int64_t block = quant::KvFormatBlockElems(f);
    if (head_dim % block != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "PagedAttention: KV format %s stores blocks of %d elements, which do not split into "
          "heads of head_dim = %d (kv_dim = %d)", quant::KvFormatName(f), block, head_dim,
          layout.kv_dim));
    }
  }
  const int64_t T = step_.n_tokens();
  if (absl::Status s = CheckTensor(op, "q", q, T, n_head * head_dim); !s.ok()) return s;
  if (absl::Status s = CheckTensor(op, "out", out, T, n_head * head_dim); !s.ok()) return s;
  for (int64_t s = 0; s < step_.n_seq(); ++s) {
    const int64_t len = step_.seq_len[s];
    if (len > step_.max_blocks * layout.block_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "PagedAttention: seq_len[%d] = %d keys exceed its block table (%d blocks of %d)", s,
          len, step_.max_blocks, layout.block_size));
    }
    if (len > 0 && (layer.k == nullptr || layer.v == nullptr)) {
      return absl::InvalidArgumentError("PagedAttention: the KV layer has no K or V storage");
    }
    const int64_t used = (len + layout.block_size - 1) / layout.block_size;
    for (int64_t b = 0; b < used; ++b) {
      const int32_t id = step_.block_table[s * step_.max_blocks + b];
      if (id < 0 || id >= layout.n_blocks) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "PagedAttention: block_table[%d][%d] = %d is outside the pool's %d blocks", s, b, id,
            layout.n_blocks));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckEmbed(const Weight& table, const Tensor& out) const {
  if (absl::Status s = RequireStep("Embed"); !s.ok()) return s;
  const std::string op = std::string(name()) + " Embed";
  if (absl::Status s = CheckWeight(op, table); !s.ok()) return s;
  const int64_t T = step_.n_tokens();
  if (absl::Status s = CheckTensor(op, "out", out, T, table.cols); !s.ok()) return s;
  for (int64_t t = 0; t < T; ++t) {
    if (step_.tokens[t] < 0 || step_.tokens[t] >= table.rows) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tokens[%d] = %d is outside the %d rows of '%s'", op, t, step_.tokens[t],
          table.rows, table.name));
    }
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckGatherRows(const Tensor& x, const Tensor& out) const {
  if (absl::Status s = RequireStep("GatherRows"); !s.ok()) return s;
  const std::string op = std::string(name()) + " GatherRows";
  if (absl::Status s = CheckTensor(op, "x", x, step_.n_tokens(), x.cols); !s.ok()) return s;
  return CheckTensor(op, "out", out, static_cast<int64_t>(step_.output_rows.size()), x.cols);
}

absl::Status StepBackend::CheckGreedyTokens(std::string_view op, const Tensor& logits,
                                            const IntTensor& out) {
  if (logits.rows < 0 || logits.cols < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: logits is [%d, %d], want [any, >= 1]", op, logits.rows, logits.cols));
  }
  if (absl::Status s = CheckTensor(op, "logits", logits, -1, logits.cols); !s.ok()) return s;
  if (out.rows != logits.rows || out.cols != 2) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: out is [%d, %d], want [%d, 2]", op,
                                                      out.rows, out.cols, logits.rows));
  }
  if (out.size() > 0 && out.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: out has no data", op));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckNormWeight(std::string_view op, const Weight* w, int64_t d) {
  if (w == nullptr) return absl::OkStatus();
  if (w->type != quant::Type::F32 || w->cols != d || w->data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: weight '%s' is %s [%d, %d]%s, want F32 with %d columns", op, w->name,
        quant::Traits(w->type).name, w->rows, w->cols, w->data ? "" : " without data", d));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckF32Vector(std::string_view op, std::string_view field, const Weight& w,
                                         int64_t rows, int64_t cols) {
  if (w.type != quant::Type::F32 || w.rows != rows || w.cols != cols || w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s ('%s') must be F32 [%d, %d] with data; it is %s [%d, %d]", op, field, w.name,
        rows, cols, quant::Traits(w.type).name, w.rows, w.cols));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckRope(std::string_view op, const Tensor& x, int64_t n_heads,
                                    int64_t head_dim, int64_t n_rot) const {
  if (absl::Status s = RequireStep("Rope"); !s.ok()) return s;
  if (n_heads <= 0 || head_dim <= 0 || n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: n_heads = %d, head_dim = %d, n_rot = %d (want n_rot even, <= head_dim)", op,
        n_heads, head_dim, n_rot));
  }
  return CheckTensor(op, "x", x, step_.n_tokens(), n_heads * head_dim);
}

absl::Status StepBackend::CheckGdnState(std::string_view op, const GdnLayout& l,
                                        const GdnLayer& state) const {
  if (absl::Status s = RequireStep(op); !s.ok()) return s;
  if (l.n_slots < 1 || l.conv_kernel < 1 || l.n_k_head < 1 || l.n_v_head < 1 ||
      l.head_k_dim < 1 || l.head_v_dim < 1 || l.n_v_head % l.n_k_head != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: GDN layout n_slots %d, conv_kernel %d, heads %d key / %d value of %d / %d dims "
        "(value heads must be a positive multiple of key heads)", op, l.n_slots, l.conv_kernel,
        l.n_k_head, l.n_v_head, l.head_k_dim, l.head_v_dim));
  }
  if (state.conv == nullptr || state.ssm == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the layer's state has no memory", op));
  }
  const StepMeta& m = step_;
  if (static_cast<int64_t>(m.state_slots.size()) != m.n_seq()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the step gives %d state slots for %d sequences (StepMeta::state_slots; a recurrent "
        "layer needs one per sequence)", op, m.state_slots.size(), m.n_seq()));
  }
  for (size_t s = 0; s < m.state_slots.size(); ++s) {
    if (m.state_slots[s] < 0 || m.state_slots[s] >= l.n_slots) {
      return absl::OutOfRangeError(absl::StrFormat("%s: state_slots[%d] = %d is outside [0, %d)",
                                                   op, s, m.state_slots[s], l.n_slots));
    }
  }
  for (size_t t = 0; t < m.state_checkpoints.size(); ++t) {
    if (m.state_checkpoints[t] < -1 || m.state_checkpoints[t] >= l.n_slots) {
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: state_checkpoints[%d] = %d is outside [-1, %d)", op, t, m.state_checkpoints[t],
          l.n_slots));
    }
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckMoeRoute(std::string_view op, const Tensor& logits, int64_t k,
                                        const Tensor& weights, const IntTensor& ids) {
  if (absl::Status s = CheckTensor(op, "logits", logits, -1, logits.cols); !s.ok()) return s;
  const int64_t T = logits.rows, E = logits.cols;
  if (k < 1 || k > E) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: k = %d experts per token, want 1..%d (the logits' columns)", op, k, E));
  }
  if (absl::Status s = CheckTensor(op, "weights", weights, T, k); !s.ok()) return s;
  if (ids.rows != T || ids.cols != k || (ids.size() > 0 && ids.data == nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: ids is [%d, %d]%s, want [%d, %d]", op,
                                                      ids.rows, ids.cols,
                                                      ids.data ? "" : " without data", T, k));
  }
  for (int64_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits.data[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: logits[%d, %d] = %g is not finite", op, i / E, i % E, logits.data[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckMatMulExperts(std::string_view op, const Weight& w,
                                             int64_t n_expert, const Tensor& x,
                                             const IntTensor& ids, const Tensor& y) {
  if (absl::Status s = CheckWeight(op, w); !s.ok()) return s;
  if (n_expert < 1 || w.rows % n_expert != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: weight '%s' has %d rows, not a whole number of rows for each of %d experts", op,
        w.name, w.rows, n_expert));
  }
  const int64_t T = ids.rows, k = ids.cols;
  if (T < 0 || k < 1 || (ids.size() > 0 && ids.data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: ids is [%d, %d]%s, want [T, k >= 1]", op, T, k,
                        ids.data ? "" : " without data"));
  }
  if (x.rows != T && x.rows != T * k) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: x has %d rows, want T = %d or T * k = %d", op, x.rows, T, T * k));
  }
  if (absl::Status s = CheckTensor(op, "x", x, x.rows, w.cols); !s.ok()) return s;
  if (absl::Status s = CheckTensor(op, "y", y, T * k, w.rows / n_expert); !s.ok()) return s;
  for (int64_t i = 0; i < T * k; ++i) {
    if (ids.data[i] < 0 || ids.data[i] >= n_expert) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: ids[%d, %d] = %d is outside [0, %d)", op, i / k, i % k, ids.data[i], n_expert));
    }
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckMoeCombine(std::string_view op, const Tensor& y,
                                          const Tensor& weights, const Tensor& out) {
  if (absl::Status s = CheckTensor(op, "weights", weights, -1, weights.cols); !s.ok()) return s;
  const int64_t T = weights.rows, k = weights.cols;
  if (absl::Status s = CheckTensor(op, "out", out, T, out.cols); !s.ok()) return s;
  if (absl::Status s = CheckTensor(op, "y", y, T * k, out.cols); !s.ok()) return s;
  if (T * k > 0 && y.data == out.data) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: out must not alias y", op));
  }
  return absl::OkStatus();
}

absl::Status StepBackend::CheckSigmoidMul(std::string_view op, const Tensor& x, const Tensor& g,
                                          const Tensor& out) {
  if (absl::Status s = CheckSameShape(op, "x", x, "out", out); !s.ok()) return s;
  if (g.cols != x.cols && g.cols != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: g has %d columns, want %d (x's) or 1", op, g.cols, x.cols));
  }
  return CheckTensor(op, "g", g, x.rows, g.cols);
}

}  // namespace lockstep::backend
