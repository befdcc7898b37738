// Paged KV of the cpu backend: KvWrite encodes rows into the pool; PagedAttention is causal GQA
// attention over the pool for a whole ragged batch, one (query row, head) pair per work item,
// keys in increasing order, the softmax reduced in fixed pieces of kKvPiece keys (backend.h).
// AttentionContiguous is PagedAttention's slow twin over contiguous decoded K/V.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/quant/quant.h"

namespace lockstep::backend {
namespace {

// Visible keys [*lo, *hi] of a query at `pos` over `n_kv` keys (empty when *lo > *hi).
void VisibleKeys(int64_t pos, int64_t n_kv, int64_t window, int64_t* lo, int64_t* hi) {
  *lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  *hi = std::min<int64_t>(pos, n_kv - 1);
}

}  // namespace

namespace cpu {

// Written as the formula in cpu_kernels.h reads; shares only DotFixed and AxpyInto with the fast
// path, so the property that the two agree checks the paging, the decoding and the batching.
void AttentionContiguous(const float* q, const int32_t* pos, int64_t T, const float* k,
                         const float* v, int64_t n_kv, int64_t n_head, int64_t n_kv_head,
                         int64_t head_dim, const AttentionParams& p, float* out) {
  const int64_t group = n_head / n_kv_head;
  std::vector<float> score(std::max<int64_t>(n_kv, 1));  // [n_kv], by key position
  std::vector<float> acc(head_dim), piece_acc(head_dim);  // [head_dim]
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t g = h / group;
      const float* qth = q + (t * n_head + h) * head_dim;
      float* oth = out + (t * n_head + h) * head_dim;
      int64_t lo, hi;
      VisibleKeys(pos[t], n_kv, p.window, &lo, &hi);
      if (lo > hi) {
        for (int64_t d = 0; d < head_dim; ++d) oth[d] = 0.0f;
        continue;
      }
      float m = -INFINITY;
      for (int64_t j = lo; j <= hi; ++j) {
        float s = DotFixed(qth, k + (j * n_kv_head + g) * head_dim, head_dim) * p.scale;
        if (p.softcap != 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        score[j] = s;
        m = std::max(m, s);
      }
      float sum = 0.0f;
      for (int64_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
      for (int64_t i = lo / kKvPiece; i <= hi / kKvPiece; ++i) {
        float piece_sum = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) piece_acc[d] = 0.0f;
        for (int64_t j = std::max(lo, i * kKvPiece); j <= std::min(hi, (i + 1) * kKvPiece - 1);
             ++j) {
          const float e = std::exp(score[j] - m);
          piece_sum += e;
          AxpyInto(piece_acc.data(), e, v + (j * n_kv_head + g) * head_dim, head_dim);
        }
        sum += piece_sum;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += piece_acc[d];
      }
      for (int64_t d = 0; d < head_dim; ++d) oth[d] = acc[d] / sum;
    }
  }
}

}  // namespace cpu

// Row t of k and v, encoded in the layout's formats, to slot slots[t] of the pool.
// k, v: [T, kv_dim]; layer.k / layer.v: [n_blocks * block_size, RowBytes] bytes.
absl::Status CpuBackend::KvWrite(const KvLayout& layout, Tensor k, Tensor v, KvLayer layer) {
  if (absl::Status s = CheckKvWrite(layout, k, v, layer); !s.ok()) return s;
  const int64_t kv_dim = layout.kv_dim;
  const int64_t k_row = quant::KvRowBytes(layout.k_format, kv_dim);
  const int64_t v_row = quant::KvRowBytes(layout.v_format, kv_dim);
  const int32_t* slots = step().slots.data();
  std::atomic<bool> failed{false};
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / kv_dim);
  pool_.ParallelFor(step().n_tokens(), grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      auto* k_dst = static_cast<uint8_t*>(layer.k) + slots[t] * k_row;
      auto* v_dst = static_cast<uint8_t*>(layer.v) + slots[t] * v_row;
      if (!quant::EncodeKvRow(layout.k_format, k.data + t * kv_dim, kv_dim, k_dst).ok() ||
          !quant::EncodeKvRow(layout.v_format, v.data + t * kv_dim, kv_dim, v_dst).ok()) {
        failed = true;
      }
    }
  });
  if (failed) {  // not reached after CheckKvWrite; kept so an encoder error is never silent
    return absl::InternalError(absl::StrFormat("cpu KvWrite: encoding a %s/%s row failed",
                                               quant::KvFormatName(layout.k_format),
                                               quant::KvFormatName(layout.v_format)));
  }
  return absl::OkStatus();
}

// For query row t of sequence s at position pos, head h (kv head g = h / (n_head / n_kv_head)),
// over the visible keys j in [lo, hi] = [max(0, pos - window + 1) (or 0), min(pos, seq_len[s] - 1)],
// key j read from slot block_table[s][j / block_size] * block_size + j % block_size and its
// head slice decoded from the layout's format: exactly cpu::AttentionContiguous's arithmetic
// (cpu_kernels.h). Every step's order depends on (pos, window, seq_len, head_dim) only: a query
// gives the same bits alone, in a chunk, at any row, beside any sequences, on any thread.
// q, out: [T, n_head * head_dim]
absl::Status CpuBackend::PagedAttention(Tensor q, const KvLayout& layout, KvLayer layer,
                                        int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                                        const AttentionParams& p, Tensor out) {
  if (absl::Status s = CheckPagedAttention(q, layout, layer, n_head, n_kv_head, head_dim, out);
      !s.ok()) {
    return s;
  }
  const StepMeta& meta = step();
  const std::span<const int32_t> row_seq = this->row_seq();
  const int64_t group = n_head / n_kv_head;
  const int64_t bs = layout.block_size;
  const quant::KvFormat kf = layout.k_format, vf = layout.v_format;
  const int64_t k_row = quant::KvRowBytes(kf, layout.kv_dim);
  const int64_t v_row = quant::KvRowBytes(vf, layout.kv_dim);
  const auto* k_pool = static_cast<const uint8_t*>(layer.k);
  const auto* v_pool = static_cast<const uint8_t*>(layer.v);
  std::atomic<bool> failed{false};
  pool_.ParallelFor(meta.n_tokens() * n_head, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> score;                          // [hi - lo + 1]
    std::vector<float> k_buf(head_dim), v_buf(head_dim);  // a decoded head slice
    std::vector<float> acc(head_dim), piece_acc(head_dim);
    // Key j's head slice as floats: in the pool itself for f32, else decoded into buf.
    auto head_slice = [&](const uint8_t* pool_base, int64_t row_bytes, quant::KvFormat f,
                          int64_t s, int64_t j, int64_t g, float* buf) -> const float* {
      const uint8_t* src = pool_base + KeySlot(s, j, bs) * row_bytes + KvHeadOffset(f, g, head_dim);
      if (f == quant::KvFormat::kF32) return reinterpret_cast<const float*>(src);
      if (!quant::DecodeKvRow(f, src, head_dim, buf).ok()) failed = true;
      return buf;
    };
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_head, h = item % n_head, g = h / group;
      const int64_t s = row_seq[t];
      const float* qth = q.data + item * head_dim;
      float* oth = out.data + item * head_dim;
      int64_t lo, hi;
      VisibleKeys(meta.positions[t], meta.seq_len[s], p.window, &lo, &hi);
      if (lo > hi) {
        std::fill(oth, oth + head_dim, 0.0f);
        continue;
      }
      score.resize(hi - lo + 1);
      float m = -INFINITY;
      for (int64_t j = lo; j <= hi; ++j) {
        const float* kj = head_slice(k_pool, k_row, kf, s, j, g, k_buf.data());
        float sc = cpu::DotFixed(qth, kj, head_dim) * p.scale;
        if (p.softcap != 0.0f) sc = p.softcap * std::tanh(sc / p.softcap);
        score[j - lo] = sc;
        m = std::max(m, sc);
      }
      float sum = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = lo / kKvPiece; i <= hi / kKvPiece; ++i) {
        float piece_sum = 0.0f;
        std::fill(piece_acc.begin(), piece_acc.end(), 0.0f);
        const int64_t j_end = std::min(hi, (i + 1) * kKvPiece - 1);
        for (int64_t j = std::max(lo, i * kKvPiece); j <= j_end; ++j) {
          const float e = std::exp(score[j - lo] - m);
          piece_sum += e;
          cpu::AxpyInto(piece_acc.data(), e, head_slice(v_pool, v_row, vf, s, j, g, v_buf.data()),
                        head_dim);
        }
        sum += piece_sum;
        for (int64_t d = 0; d < head_dim; ++d) acc[d] += piece_acc[d];
      }
      for (int64_t d = 0; d < head_dim; ++d) oth[d] = acc[d] / sum;
    }
  });
  if (failed) {  // not reached after CheckPagedAttention; kept so a decoder error is never silent
    return absl::InternalError(absl::StrFormat("cpu PagedAttention: decoding a %s/%s row failed",
                                               quant::KvFormatName(kf), quant::KvFormatName(vf)));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::backend
