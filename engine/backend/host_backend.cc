#include "engine/backend/host_backend.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/quant/types.h"

namespace lockstep::backend {
namespace {

constexpr int64_t kAlign = 64;  // a cache line; every vector load of the cpu kernels fits in it

absl::Status StepError(std::string_view field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("BeginStep: %s %s", field, what));
}

bool KnownKvFormat(quant::KvFormat f) {
  return static_cast<uint32_t>(f) < static_cast<uint32_t>(quant::kKvFormatCount);
}

}  // namespace

HostBackend::~HostBackend() {
  for (void* p : allocations_) std::free(p);
}

absl::StatusOr<void*> HostBackend::Allocate(int64_t bytes, std::string_view what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot allocate %d bytes (negative)", name(), bytes));
  }
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a unique pointer.
  const int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign + (bytes == 0 ? kAlign : 0);
  void* p = std::aligned_alloc(kAlign, static_cast<size_t>(rounded));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: out of host memory allocating %d bytes for %s", name(), bytes, what));
  }
  allocations_.insert(p);
  return p;
}

void HostBackend::Free(void* p) {
  if (p == nullptr) return;
  if (allocations_.erase(p) > 0) std::free(p);
}

absl::Status HostBackend::Upload(void* dst, const void* src, int64_t bytes) {
  return Copy(dst, src, bytes);
}

absl::Status HostBackend::Download(void* dst, const void* src, int64_t bytes) {
  return Copy(dst, src, bytes);
}

absl::Status HostBackend::Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: copy of %d bytes with dst %p, src %p", name(), bytes, dst, src));
  }
  if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::StatusOr<Weight> HostBackend::BindWeight(const Weight& host) {
  const quant::TypeTraits t = quant::Traits(host.type);
  if (host.rows < 0 || host.cols < 0 || host.cols % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: weight '%s' has shape [%d, %d], not whole %s blocks of %d", name(), host.name,
        host.rows, host.cols, t.name, t.block_size));
  }
  if (host.rows * host.cols > 0 && host.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: weight '%s' has no data", name(), host.name));
  }
  return host;
}

absl::Status HostBackend::BeginStep(const StepMeta& m) {
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

absl::Status HostBackend::RequireStep(std::string_view op) const {
  if (has_step_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("%s %s: no step has begun (call BeginStep first)", name(), op));
}

absl::Status HostBackend::CheckTensor(std::string_view op, std::string_view field,
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

absl::Status HostBackend::CheckSameShape(std::string_view op, std::string_view field_a,
                                         const Tensor& a, std::string_view field_b,
                                         const Tensor& b) {
  if (absl::Status s = CheckTensor(op, field_a, a, -1, a.cols); !s.ok()) return s;
  return CheckTensor(op, field_b, b, a.rows, a.cols);
}

absl::Status HostBackend::CheckWeight(std::string_view op, const Weight& w) {
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

absl::Status HostBackend::CheckKvLayout(std::string_view op, const KvLayout& l) {
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

absl::Status HostBackend::CheckKvWrite(const KvLayout& layout, const Tensor& k, const Tensor& v,
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

absl::Status HostBackend::CheckPagedAttention(const Tensor& q, const KvLayout& layout,
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

}  // namespace lockstep::backend
