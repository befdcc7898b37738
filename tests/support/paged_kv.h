// Test support for the paged KV ops (backend.h KvWrite / PagedAttention): a ragged batch of
// sequences over a pool whose blocks the caller hands out (in any order, with unused blocks in
// between), the two steps that fill and read it, and host views for host backends.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/quant/kv_format.h"
#include "engine/quant/quant.h"

namespace lockstep::testing {

// A Tensor over a host vector; valid for host backends (ref, cpu), whose memory is host memory.
inline backend::Tensor HostTensor(std::vector<float>& v, int64_t rows, int64_t cols) {
  return backend::Tensor{v.data(), rows, cols};
}
// An input view: the ops never write through their input tensors.
inline backend::Tensor HostTensor(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return backend::Tensor{const_cast<float*>(v.data()), rows, cols};
}

// A step of T rows of one sequence at positions `positions` (tokens for Embed), no KV.
inline backend::StepMeta RowsStep(std::vector<int32_t> tokens, std::vector<int32_t> positions) {
  backend::StepMeta m;
  const auto T = static_cast<int32_t>(tokens.size());
  m.tokens = std::move(tokens);
  m.positions = positions.empty() ? std::vector<int32_t>(T, 0) : std::move(positions);
  m.slots.assign(T, 0);
  m.query_start = {0, T};
  m.seq_len = {T};
  m.max_blocks = 0;
  return m;
}

struct PagedSeq {
  int64_t history = 0;  // keys cached before the step
  int64_t n_new = 1;    // query rows of the step (their keys are written too)
  int64_t len() const { return history + n_new; }
};

inline int64_t BlocksFor(int64_t len, int64_t block_size) {
  return (len + block_size - 1) / block_size;
}

// Sequence s takes the next BlocksFor(len, block_size) ids of `order`, in order.
inline std::vector<std::vector<int32_t>> AssignBlocks(const std::vector<PagedSeq>& seqs,
                                                      int64_t block_size,
                                                      const std::vector<int32_t>& order) {
  std::vector<std::vector<int32_t>> out;
  size_t next = 0;
  for (const PagedSeq& s : seqs) {
    out.emplace_back(order.begin() + next, order.begin() + next + BlocksFor(s.len(), block_size));
    next += out.back().size();
  }
  return out;
}

// The write step (every key of every sequence, positions 0..len-1, sequences in order) and the
// attend step (the last n_new rows of every sequence) of a batch; block tables padded with -1.
struct PagedSteps {
  backend::StepMeta write, attend;
  std::vector<int64_t> write_row0;   // row of key 0 of sequence s in `write`
  std::vector<int64_t> attend_row0;  // row of the first query of sequence s in `attend`
};
inline PagedSteps MakePagedSteps(const std::vector<PagedSeq>& seqs,
                                 const std::vector<std::vector<int32_t>>& blocks,
                                 int64_t block_size) {
  PagedSteps st;
  int64_t max_blocks = 1;
  for (const auto& b : blocks) max_blocks = std::max<int64_t>(max_blocks, b.size());
  for (backend::StepMeta* m : {&st.write, &st.attend}) {
    m->max_blocks = max_blocks;
    m->query_start.push_back(0);
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto slot = [&](int64_t j) {
      return static_cast<int32_t>(blocks[s][j / block_size] * block_size + j % block_size);
    };
    for (backend::StepMeta* m : {&st.write, &st.attend}) {
      const bool write = m == &st.write;
      (write ? st.write_row0 : st.attend_row0).push_back(m->n_tokens());
      for (int64_t j = write ? 0 : seqs[s].history; j < seqs[s].len(); ++j) {
        m->tokens.push_back(0);
        m->positions.push_back(static_cast<int32_t>(j));
        m->slots.push_back(slot(j));
      }
      m->query_start.push_back(static_cast<int32_t>(m->n_tokens()));
      m->seq_len.push_back(static_cast<int32_t>(seqs[s].len()));
      for (int64_t b = 0; b < max_blocks; ++b) {
        m->block_table.push_back(b < static_cast<int64_t>(blocks[s].size()) ? blocks[s][b] : -1);
      }
    }
  }
  return st;
}

// What a backend made of one batch: its pool bytes and the attention output.
struct PagedRun {
  std::vector<uint8_t> k_pool, v_pool;
  std::vector<float> out;  // [attend T, n_head * head_dim]
};

// On `be`: allocates the pool (poisoned with 0xFF bytes: NaN for f32 rows), writes k, v
// ([write T, kv_dim]) in the write step, then attends q ([attend T, n_head * head_dim]) in the
// attend step into a NaN-poisoned output; frees the pool.
inline absl::StatusOr<PagedRun> RunPaged(backend::Backend& be, const backend::KvLayout& layout,
                                         const PagedSteps& st, std::vector<float> k,
                                         std::vector<float> v, std::vector<float> q,
                                         int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                                         const backend::AttentionParams& p) {
  PagedRun run;
  absl::StatusOr<void*> kp = be.Allocate(layout.k_bytes(), "test K pool");
  if (!kp.ok()) return kp.status();
  absl::StatusOr<void*> vp = be.Allocate(layout.v_bytes(), "test V pool");
  if (!vp.ok()) return vp.status();
  std::memset(*kp, 0xFF, layout.k_bytes());
  std::memset(*vp, 0xFF, layout.v_bytes());
  const backend::KvLayer layer{*kp, *vp};
  const int64_t T_w = st.write.n_tokens(), T_a = st.attend.n_tokens();
  run.out.assign(T_a * n_head * head_dim, std::nanf(""));
  absl::Status s = be.BeginStep(st.write);
  if (s.ok()) {
    s = be.KvWrite(layout, HostTensor(k, T_w, layout.kv_dim), HostTensor(v, T_w, layout.kv_dim),
                   layer);
  }
  if (s.ok()) s = be.BeginStep(st.attend);
  if (s.ok()) {
    s = be.PagedAttention(HostTensor(q, T_a, n_head * head_dim), layout, layer, n_head, n_kv_head,
                          head_dim, p, HostTensor(run.out, T_a, n_head * head_dim));
  }
  if (s.ok()) s = be.Synchronize();
  const auto* kb = static_cast<const uint8_t*>(*kp);
  const auto* vb = static_cast<const uint8_t*>(*vp);
  run.k_pool.assign(kb, kb + layout.k_bytes());
  run.v_pool.assign(vb, vb + layout.v_bytes());
  be.Free(*kp);
  be.Free(*vp);
  if (!s.ok()) return s;
  return run;
}

// Keys 0..len-1 of a sequence, decoded from a pool through its blocks.   [len, kv_dim]
inline std::vector<float> DecodeSeqRows(const std::vector<uint8_t>& pool, quant::KvFormat f,
                                        int64_t kv_dim, int64_t block_size,
                                        const std::vector<int32_t>& blocks, int64_t len) {
  const int64_t row_bytes = quant::KvRowBytes(f, kv_dim);
  std::vector<float> out(len * kv_dim);
  for (int64_t j = 0; j < len; ++j) {
    const int64_t slot = blocks[j / block_size] * block_size + j % block_size;
    if (!quant::DecodeKvRow(f, pool.data() + slot * row_bytes, kv_dim, out.data() + j * kv_dim)
             .ok()) {
      out.assign(len * kv_dim, std::nanf(""));
      break;
    }
  }
  return out;
}

}  // namespace lockstep::testing
