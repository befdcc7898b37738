// Paged attention's invariances on the cpu backend (docs/design.md §1; backend.h's reduction
// contract), bitwise:
//   twin:    PagedAttention over a pool == cpu::AttentionContiguous over the same keys decoded
//            into contiguous rows, for every KV format (K and V drawn independently), block sizes
//            {1, 3, 16, 32}, a fragmented pool (block ids in random order, unused blocks);
//   batch:   each sequence's rows are the same alone as in a ragged batch with random
//            neighbours (random depths, query counts, positions of the sequence in the batch);
//   threads: 1 thread == 3 threads.
// Histories reach past kKvPiece keys, so the piecewise softmax is crossed at random offsets.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/quant/kv_format.h"
#include "properties/property_support.h"
#include "tests/support/paged_kv.h"

namespace lockstep::props {
namespace {

using backend::AttentionParams;
using backend::KvLayout;
using quant::KvFormat;
using testing::PagedSeq;

backend::Backend& CpuWith(int threads) {
  static std::unique_ptr<backend::Backend> one, three;
  std::unique_ptr<backend::Backend>& b = threads == 1 ? one : three;
  if (!b) b = Must(backend::MakeBackend("cpu", {threads}));
  return *b;
}

std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rows [row0, row0 + n) of a [*, cols] matrix.
std::vector<float> RowsOf(const std::vector<float>& m, int64_t cols, int64_t row0, int64_t n) {
  return std::vector<float>(m.begin() + row0 * cols, m.begin() + (row0 + n) * cols);
}

}  // namespace

LOCKSTEP_PROPERTY(PagedAttentionProps, EqualsContiguousTwinAloneOrBatchedAnyThreads, 150,
                  Weight::kTiny, ()) {
  std::vector<KvFormat> all_formats;
  for (int f = 0; f < quant::kKvFormatCount; ++f) all_formats.push_back(static_cast<KvFormat>(f));
  KvLayout layout;
  layout.k_format = *rc::gen::elementOf(all_formats);
  layout.v_format = *rc::gen::elementOf(all_formats);
  layout.block_size = *rc::gen::element<int64_t>(1, 3, 16, 32);
  const bool per_element = quant::KvFormatBlockElems(layout.k_format) == 1 &&
                           quant::KvFormatBlockElems(layout.v_format) == 1;
  const int64_t head_dim = per_element ? *rc::gen::element<int64_t>(8, 20, 32, 64)
                                       : *rc::gen::element<int64_t>(32, 64);
  const int64_t n_kv_head = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t n_head = n_kv_head * *rc::gen::inRange<int64_t>(1, 4);
  layout.kv_dim = n_kv_head * head_dim;
  AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.window = *rc::gen::element<int64_t>(0, 0, 1, 7, 100);
  p.softcap = *rc::gen::element(0.0f, 0.0f, 20.0f);

  const int n_seq = *rc::gen::inRange(1, 5);
  std::vector<PagedSeq> seqs(n_seq);
  for (PagedSeq& s : seqs) {
    s.history = *rc::gen::oneOf(rc::gen::inRange<int64_t>(0, 20),
                                rc::gen::inRange<int64_t>(backend::kKvPiece - 8,
                                                          backend::kKvPiece + 40));
    s.n_new = *rc::gen::inRange<int64_t>(0, 5);
  }
  if (seqs[0].n_new == 0) seqs[0].n_new = 1;
  int64_t needed = 0;
  for (const PagedSeq& s : seqs) needed += testing::BlocksFor(s.len(), layout.block_size);
  layout.n_blocks = needed + *rc::gen::inRange<int64_t>(0, 12);
  std::mt19937_64 rng(*rc::gen::arbitrary<uint64_t>());  // block order and the data
  std::vector<int32_t> order(layout.n_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const auto blocks = testing::AssignBlocks(seqs, layout.block_size, order);
  const testing::PagedSteps st = testing::MakePagedSteps(seqs, blocks, layout.block_size);
  const int64_t row = n_head * head_dim, kv_dim = layout.kv_dim;
  const std::vector<float> k = Uniform(rng, st.write.n_tokens() * kv_dim, -2.0f, 2.0f);
  const std::vector<float> v = Uniform(rng, st.write.n_tokens() * kv_dim, -3.0f, 3.0f);
  const std::vector<float> q = Uniform(rng, st.attend.n_tokens() * row, -2.0f, 2.0f);

  const testing::PagedRun batch =
      Must(testing::RunPaged(CpuWith(1), layout, st, k, v, q, n_head, n_kv_head, head_dim, p));
  const testing::PagedRun threads3 =
      Must(testing::RunPaged(CpuWith(3), layout, st, k, v, q, n_head, n_kv_head, head_dim, p));
  RC_ASSERT(BitEqual(batch.out, threads3.out));

  for (int s = 0; s < n_seq; ++s) {
    const PagedSeq& sq = seqs[s];
    if (sq.n_new == 0) continue;
    const float* got = batch.out.data() + st.attend_row0[s] * row;
    // The slow twin over the decoded keys of this sequence.
    const std::vector<float> kd = testing::DecodeSeqRows(batch.k_pool, layout.k_format, kv_dim,
                                                         layout.block_size, blocks[s], sq.len());
    const std::vector<float> vd = testing::DecodeSeqRows(batch.v_pool, layout.v_format, kv_dim,
                                                         layout.block_size, blocks[s], sq.len());
    const std::vector<float> q_s = RowsOf(q, row, st.attend_row0[s], sq.n_new);
    std::vector<int32_t> pos(sq.n_new);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(sq.history));
    std::vector<float> twin(sq.n_new * row, std::nanf(""));
    backend::cpu::AttentionContiguous(q_s.data(), pos.data(), sq.n_new, kd.data(), vd.data(),
                                      sq.len(), n_head, n_kv_head, head_dim, p, twin.data());
    RC_ASSERT(BitEqual(twin.data(), got, twin.size()));
    for (float x : twin) RC_ASSERT(std::isfinite(x));
    // Alone: the same blocks, only this sequence written and attended.
    if (n_seq > 1) {
      const testing::PagedSteps alone = testing::MakePagedSteps({sq}, {blocks[s]},
                                                                layout.block_size);
      const testing::PagedRun one = Must(testing::RunPaged(
          CpuWith(*rc::gen::element(1, 3)), layout, alone,
          RowsOf(k, kv_dim, st.write_row0[s], sq.len()),
          RowsOf(v, kv_dim, st.write_row0[s], sq.len()), q_s, n_head, n_kv_head, head_dim, p));
      RC_ASSERT(BitEqual(one.out.data(), got, one.out.size()));
      Count("sequences checked alone vs batched");
    }
    Count("sequences checked against the twin");
  }
  Count(absl::StrCat("cases with K format ", quant::KvFormatName(layout.k_format)));
  Count(absl::StrCat("cases with V format ", quant::KvFormatName(layout.v_format)));
  Count(absl::StrCat("cases with block size ", layout.block_size));
}

}  // namespace lockstep::props
