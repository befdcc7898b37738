// The cpu backend's invariance contract (DESIGN.md §1, rows "batch", "chunk", "threads"), bitwise:
// MatMul, PagedAttention and RmsNorm give the same bits for a row whatever the thread count
// (1, 2, 3, 7), whatever T, at whatever position of the batch and beside whatever neighbours;
// an attention query gives the same bits alone as inside any chunk of a prefill (same position,
// its keys written by the chunks before it). Random ragged batches over fragmented pools and
// every KV format: properties/paged_attention_properties.cc.
//
// Seed: LOCKSTEP_SEED=<n> replays a run; without it a fresh seed is drawn and printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "gtest/gtest.h"
#include "tests/support/paged_kv.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using testing::HostTensor;
using testing::TestRng;

using backend::AttentionParams;
using backend::CpuBackend;
using backend::Weight;

constexpr int kThreadCounts[] = {2, 3, 7};

std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Bitwise equality of n floats; NaN compares by its bits too, so an unwritten (poisoned)
// element fails unless both sides left it identically poisoned, which the callers rule out by
// checking `got` against a first run whose outputs are all finite.
void ExpectSameBits(const float* want, const float* got, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, want + i, 4);
    std::memcpy(&b, got + i, 4);
    if (a != b) {
      ADD_FAILURE() << what << ": element " << i << " differs: " << absl::StrFormat("%.9g", want[i])
                    << " (0x" << std::hex << a << ") vs " << absl::StrFormat("%.9g", got[i])
                    << " (0x" << b << ")" << std::dec;
      return;
    }
  }
}

void ExpectAllFinite(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      ADD_FAILURE() << what << ": element " << i << " is not finite (" << v[i] << ")";
      return;
    }
  }
}

std::vector<float> Poisoned(int64_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

TEST(CpuInvariance, MatMulThreadsBatchSizeAndPosition) {
  std::mt19937_64 rng = TestRng();
  int64_t checked = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    quant::TypeTraits tr;
    if (!quant::LookupType(id, &tr) || !tr.lockstep_codec) continue;
    const auto type = static_cast<quant::Type>(id);
    // 576 = 9 * 64 fits every block size up to 64; K-quants need multiples of 256. 100 leaves a
    // lane tail of 4 for the per-element types.
    std::vector<int64_t> cols_list = {tr.block_size == 256 ? 768 : 576};
    if (tr.block_size == 1) cols_list.push_back(100);
    for (int64_t cols : cols_list) {
      const int64_t rows = 37, T = 13;  // rows not a multiple of the 8-row tile; T odd
      std::vector<float> src = Uniform(rng, rows * cols, -1.0f, 1.0f);
      Weight w{type, rows, cols, nullptr, "invariance.weight"};
      std::vector<uint8_t> bytes(rows * w.row_bytes());
      ASSERT_TRUE(quant::Quantize(type, src.data(), rows * cols, bytes.data()).ok());
      w.data = bytes.data();
      const std::vector<float> x = Uniform(rng, T * cols, -2.0f, 2.0f);
      const std::string what = absl::StrFormat("MatMul %s rows=%d cols=%d", tr.name, rows, cols);

      std::vector<float> y1 = Poisoned(T * rows);  // [T, rows], one thread: the baseline
      ASSERT_TRUE(CpuBackend(1).MatMul(w, HostTensor(x, T, cols), HostTensor(y1, T, rows)).ok());
      ExpectAllFinite(y1, what);
      for (int threads : kThreadCounts) {
        std::vector<float> y = Poisoned(T * rows);
        ASSERT_TRUE(
            CpuBackend(threads).MatMul(w, HostTensor(x, T, cols), HostTensor(y, T, rows)).ok());
        ExpectSameBits(y1.data(), y.data(), T * rows,
                       what + absl::StrFormat(" threads=%d", threads));
      }
      CpuBackend cpu(3);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> y = Poisoned(rows);
        const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        ASSERT_TRUE(cpu.MatMul(w, HostTensor(xt, 1, cols), HostTensor(y, 1, rows)).ok());
        ExpectSameBits(y1.data() + t * rows, y.data(), rows,
                       what + absl::StrFormat(" T=1 row %d", t));
      }
      // Row t of the baseline placed at slot p of a batch of other (random) rows; odd and even
      // batch sizes put it in either half of a paired dot or in the unpaired tail.
      for (int64_t batch : {2, 6, 7}) {
        for (int64_t p = 0; p < batch; ++p) {
          const int64_t t = static_cast<int64_t>(rng() % T);
          std::vector<float> xb = Uniform(rng, batch * cols, -2.0f, 2.0f);
          std::copy(x.begin() + t * cols, x.begin() + (t + 1) * cols, xb.begin() + p * cols);
          std::vector<float> y = Poisoned(batch * rows);
          ASSERT_TRUE(cpu.MatMul(w, HostTensor(xb, batch, cols), HostTensor(y, batch, rows)).ok());
          ExpectSameBits(y1.data() + t * rows, y.data() + p * rows, rows,
                         what + absl::StrFormat(" row %d at slot %d of T=%d", t, p, batch));
        }
      }
      ++checked;
    }
  }
  std::printf("[ coverage ] MatMul: %lld (type, cols) cells x threads {1,2,3,7} x T=1 rows x "
              "15 batch slots\n", static_cast<long long>(checked));
}

TEST(CpuInvariance, PagedAttentionThreadsAndChunking) {
  std::mt19937_64 rng = TestRng();
  struct Shape { int64_t n_head, n_kv_head, head_dim; };
  int64_t checked = 0;
  for (const Shape s : {Shape{6, 2, 64}, Shape{4, 4, 20}, Shape{2, 1, 256}}) {
    for (int64_t window : {0, 5}) {
      for (float softcap : {0.0f, 30.0f}) {
        const int64_t n_kv = 29, T = 11;  // queries at positions 18..28
        AttentionParams p;
        p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
        p.window = window;
        p.softcap = softcap;
        backend::KvLayout layout;  // f32 K and V, blocks of 4 in reverse order
        layout.block_size = 4;
        layout.kv_dim = s.n_kv_head * s.head_dim;
        layout.n_blocks = testing::BlocksFor(n_kv, layout.block_size);
        std::vector<int32_t> order(layout.n_blocks);
        for (int64_t i = 0; i < layout.n_blocks; ++i) {
          order[i] = static_cast<int32_t>(layout.n_blocks - 1 - i);
        }
        const int64_t row = s.n_head * s.head_dim;  // floats per query token
        const std::vector<float> q = Uniform(rng, T * row, -2.0f, 2.0f);
        const std::vector<float> k = Uniform(rng, n_kv * layout.kv_dim, -2.0f, 2.0f);
        const std::vector<float> v = Uniform(rng, n_kv * layout.kv_dim, -3.0f, 3.0f);
        // Queries [t0, t0 + n) after the n_kv - T + t0 keys before them, as one step.
        auto run = [&](CpuBackend& cpu, int64_t t0, int64_t n) {
          const std::vector<testing::PagedSeq> seqs = {{n_kv - T + t0, n}};
          const testing::PagedSteps st = testing::MakePagedSteps(
              seqs, testing::AssignBlocks(seqs, layout.block_size, order), layout.block_size);
          const int64_t len = seqs[0].len();
          auto r = testing::RunPaged(
              cpu, layout, st, std::vector<float>(k.begin(), k.begin() + len * layout.kv_dim),
              std::vector<float>(v.begin(), v.begin() + len * layout.kv_dim),
              std::vector<float>(q.begin() + t0 * row, q.begin() + (t0 + n) * row), s.n_head,
              s.n_kv_head, s.head_dim, p);
          EXPECT_TRUE(r.ok()) << r.status();
          return r.ok() ? r->out : Poisoned(n * row);
        };
        const std::string what = absl::StrFormat("PagedAttention heads=%d/%d head_dim=%d "
                                                 "window=%d softcap=%g", s.n_head, s.n_kv_head,
                                                 s.head_dim, window, softcap);
        CpuBackend one(1);
        const std::vector<float> o1 = run(one, 0, T);
        ExpectAllFinite(o1, what);
        for (int threads : kThreadCounts) {
          CpuBackend cpu(threads);
          ExpectSameBits(o1.data(), run(cpu, 0, T).data(), T * row,
                         what + absl::StrFormat(" threads=%d", threads));
        }
        CpuBackend cpu(2);
        for (int64_t t = 0; t < T; ++t) {  // each query alone
          ExpectSameBits(o1.data() + t * row, run(cpu, t, 1).data(), row,
                         what + absl::StrFormat(" query %d alone", t));
        }
        for (int64_t chunk : {2, 3, 4}) {  // the same queries in chunks of another size
          for (int64_t t0 = 0; t0 < T; t0 += chunk) {
            const int64_t n = std::min(chunk, T - t0);
            ExpectSameBits(o1.data() + t0 * row, run(cpu, t0, n).data(), n * row,
                           what + absl::StrFormat(" chunk of %d at %d", chunk, t0));
          }
        }
        ++checked;
      }
    }
  }
  std::printf("[ coverage ] PagedAttention: %lld (shape, window, softcap) cells x threads "
              "{1,2,3,7} x 11 queries alone x chunk sizes {2,3,4}\n",
              static_cast<long long>(checked));
}

TEST(CpuInvariance, RmsNormThreadsBatchSizeAndPosition) {
  std::mt19937_64 rng = TestRng();
  int64_t checked = 0;
  for (int64_t d : {17, 576, 2048}) {
    const int64_t T = 9;
    const std::vector<float> x = Uniform(rng, T * d, -3.0f, 3.0f);
    const std::vector<float> w = Uniform(rng, d, 0.5f, 1.5f);
    const std::string what = absl::StrFormat("RmsNorm d=%d", d);
    std::vector<float> y1 = Poisoned(T * d);
    const Weight norm{quant::Type::F32, 1, d, w.data(), "invariance.norm"};
    ASSERT_TRUE(CpuBackend(1).RmsNorm(HostTensor(x, T, d), &norm, 1e-6f, HostTensor(y1, T, d)).ok());
    ExpectAllFinite(y1, what);
    for (int threads : kThreadCounts) {
      std::vector<float> y = Poisoned(T * d);
      ASSERT_TRUE(
          CpuBackend(threads).RmsNorm(HostTensor(x, T, d), &norm, 1e-6f, HostTensor(y, T, d)).ok());
      ExpectSameBits(y1.data(), y.data(), T * d, what + absl::StrFormat(" threads=%d", threads));
    }
    CpuBackend cpu(3);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> y = Poisoned(d);
      const std::vector<float> xt(x.begin() + t * d, x.begin() + (t + 1) * d);
      ASSERT_TRUE(cpu.RmsNorm(HostTensor(xt, 1, d), &norm, 1e-6f, HostTensor(y, 1, d)).ok());
      ExpectSameBits(y1.data() + t * d, y.data(), d, what + absl::StrFormat(" T=1 row %d", t));
      const int64_t batch = 5, slot = static_cast<int64_t>(rng() % batch);
      std::vector<float> xb = Uniform(rng, batch * d, -3.0f, 3.0f);
      std::copy(x.begin() + t * d, x.begin() + (t + 1) * d, xb.begin() + slot * d);
      std::vector<float> yb = Poisoned(batch * d);
      ASSERT_TRUE(
          cpu.RmsNorm(HostTensor(xb, batch, d), &norm, 1e-6f, HostTensor(yb, batch, d)).ok());
      ExpectSameBits(y1.data() + t * d, yb.data() + slot * d, d,
                     what + absl::StrFormat(" row %d at slot %d of T=%d", t, slot, batch));
    }
    ++checked;
  }
  std::printf("[ coverage ] RmsNorm: %lld sizes x threads {1,2,3,7} x T=1 rows x batch slots\n",
              static_cast<long long>(checked));
}

}  // namespace
}  // namespace lockstep
