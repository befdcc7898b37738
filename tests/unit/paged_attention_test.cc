// Paged attention of the cpu backend against the ref backend (the op oracle), for every KV
// format (K and V alike, and mixed pairs), GQA shapes, sliding windows, softcap, block sizes
// 1, 3 and 16, over a fragmented pool (blocks handed out in random order, unused blocks between)
// and a ragged batch mixing a prefill, decodes, a multi-row chunk past a kKvPiece boundary and a
// sequence with no query this step. Both backends write their pools with KvWrite (the bytes must
// be equal: one shared encoder) and attend with NaN-poisoned outputs; the bound is
// tol::AttentionBound over the decoded K/V (both read the same decoded values, so the format
// adds nothing to the arithmetic difference). Also: the argument checks name what is wrong.
//
// Seed: LOCKSTEP_SEED=<n> replays a run; without it a fresh seed is drawn and printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/core/tolerances.h"
#include "engine/quant/kv_format.h"
#include "gtest/gtest.h"
#include "tests/support/paged_kv.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using backend::AttentionParams;
using backend::Backend;
using backend::KvLayout;
using quant::KvFormat;
using testing::AssignBlocks;
using testing::HostTensor;
using testing::MakePagedSteps;
using testing::PagedSeq;
using testing::PagedSteps;
using testing::RunPaged;
using testing::TestRng;

std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::unique_ptr<Backend> Make(const char* name, int threads) {
  auto b = backend::MakeBackend(name, {threads});
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

struct Shape { int64_t n_head, n_kv_head, head_dim; };

// The batch of every case: a prefill, a decode, a chunk whose keys cross the first kKvPiece
// boundary, a sequence with no query row, a decode at position 0.
const std::vector<PagedSeq> kSeqs = {{0, 5}, {37, 1}, {backend::kKvPiece + 40, 3}, {12, 0},
                                     {0, 1}};

struct Counts {
  int64_t cases = 0, elements = 0;
  double worst = 0;  // max |cpu - ref| / bound
  std::map<std::string, int64_t> formats;
};

// One case: both backends over the same batch; returns false after reporting a failure.
bool CheckCase(std::mt19937_64& rng, Backend& ref, Backend& cpu, KvFormat kf, KvFormat vf,
               const Shape& sh, int64_t block_size, int64_t window, float softcap,
               Counts* counts) {
  KvLayout layout;
  layout.k_format = kf;
  layout.v_format = vf;
  layout.block_size = block_size;
  layout.kv_dim = sh.n_kv_head * sh.head_dim;
  int64_t needed = 0;
  for (const PagedSeq& s : kSeqs) needed += testing::BlocksFor(s.len(), block_size);
  layout.n_blocks = needed + 7;  // unused blocks scattered between the used ones
  std::vector<int32_t> order(layout.n_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const auto blocks = AssignBlocks(kSeqs, block_size, order);
  const PagedSteps st = MakePagedSteps(kSeqs, blocks, block_size);
  const int64_t T_w = st.write.n_tokens(), T_a = st.attend.n_tokens();
  const int64_t row = sh.n_head * sh.head_dim;
  const std::vector<float> k = Uniform(rng, T_w * layout.kv_dim, -2.0f, 2.0f);
  const std::vector<float> v = Uniform(rng, T_w * layout.kv_dim, -3.0f, 3.0f);
  const std::vector<float> q = Uniform(rng, T_a * row, -2.0f, 2.0f);
  AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  p.window = window;
  p.softcap = softcap;
  const std::string what = absl::StrFormat(
      "K %s V %s heads=%d/%d head_dim=%d block=%d window=%d softcap=%g", quant::KvFormatName(kf),
      quant::KvFormatName(vf), sh.n_head, sh.n_kv_head, sh.head_dim, block_size, window, softcap);
  auto r = RunPaged(ref, layout, st, k, v, q, sh.n_head, sh.n_kv_head, sh.head_dim, p);
  auto c = RunPaged(cpu, layout, st, k, v, q, sh.n_head, sh.n_kv_head, sh.head_dim, p);
  if (!r.ok() || !c.ok()) {
    ADD_FAILURE() << what << ": " << (r.ok() ? c.status() : r.status());
    return false;
  }
  if (r->k_pool != c->k_pool || r->v_pool != c->v_pool) {
    ADD_FAILURE() << what << ": the pools written by ref and cpu differ";
    return false;
  }
  for (size_t s = 0; s < kSeqs.size(); ++s) {
    const int64_t len = kSeqs[s].len();
    const std::vector<float> kd = testing::DecodeSeqRows(c->k_pool, kf, layout.kv_dim, block_size,
                                                         blocks[s], len);
    const std::vector<float> vd = testing::DecodeSeqRows(c->v_pool, vf, layout.kv_dim, block_size,
                                                         blocks[s], len);
    for (int64_t i = 0; i < kSeqs[s].n_new; ++i) {
      const int64_t t = st.attend_row0[s] + i, pos = kSeqs[s].history + i;
      for (int64_t h = 0; h < sh.n_head; ++h) {
        const int64_t g = h / (sh.n_head / sh.n_kv_head);
        const float* qth = q.data() + (t * sh.n_head + h) * sh.head_dim;
        int64_t n_keys = 0;
        double score_abs_max = 0.0;
        std::vector<double> v_abs_max(sh.head_dim, 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          if (window > 0 && pos - j >= window) continue;
          ++n_keys;
          const float* kj = kd.data() + j * layout.kv_dim + g * sh.head_dim;
          const float* vj = vd.data() + j * layout.kv_dim + g * sh.head_dim;
          double abs_dot = 0.0;
          for (int64_t d = 0; d < sh.head_dim; ++d) abs_dot += std::fabs(double{qth[d]} * kj[d]);
          score_abs_max = std::max(score_abs_max, std::fabs(p.scale) * abs_dot);
          for (int64_t d = 0; d < sh.head_dim; ++d) {
            v_abs_max[d] = std::max(v_abs_max[d], double{std::fabs(vj[d])});
          }
        }
        for (int64_t d = 0; d < sh.head_dim; ++d) {
          const int64_t e = (t * sh.n_head + h) * sh.head_dim + d;
          const double bound =
              tol::AttentionBound(sh.head_dim, n_keys, score_abs_max, v_abs_max[d]) + tol::kAtol;
          const float a = c->out[e], b = r->out[e];
          const bool finite = std::isfinite(a) && std::isfinite(b);
          const double err = finite ? std::fabs(double{a} - double{b}) : INFINITY;
          if (!(err <= bound)) {
            ADD_FAILURE() << what << absl::StrFormat(
                ": seq %d query %d (pos %d) head %d dim %d: cpu %.9g ref %.9g |diff| %.3g > "
                "bound %.3g%s", s, i, pos, h, d, a, b, err, bound,
                finite ? "" : " (non-finite: NaN/Inf never passes)");
            return false;
          }
          if (bound > 0) counts->worst = std::max(counts->worst, err / bound);
          ++counts->elements;
        }
      }
    }
  }
  ++counts->cases;
  ++counts->formats[absl::StrFormat("%s/%s", quant::KvFormatName(kf), quant::KvFormatName(vf))];
  return true;
}

TEST(PagedAttention, CpuMatchesRefOnEveryFormatShapeWindowAndBatch) {
  std::mt19937_64 rng = TestRng();
  auto ref = Make("ref", 1);
  auto cpu = Make("cpu", 3);
  ASSERT_TRUE(ref && cpu);
  std::vector<std::pair<KvFormat, KvFormat>> formats;
  for (int f = 0; f < quant::kKvFormatCount; ++f) {
    formats.push_back({static_cast<KvFormat>(f), static_cast<KvFormat>(f)});
  }
  formats.push_back({KvFormat::kQ8_0, KvFormat::kQ5_1});
  formats.push_back({KvFormat::kFp8E4M3, KvFormat::kF16});
  formats.push_back({KvFormat::kBF16, KvFormat::kQ4_0});
  Counts counts;
  for (const auto& [kf, vf] : formats) {
    const bool per_element = quant::KvFormatBlockElems(kf) == 1 &&
                             quant::KvFormatBlockElems(vf) == 1;
    std::vector<Shape> shapes = {{4, 1, 64}, {6, 2, 32}, {2, 2, 128}};
    if (per_element) shapes.push_back({4, 2, 20});  // a head_dim that is no whole block
    for (const Shape& sh : shapes) {
      for (int64_t block_size : {16, 3, 1}) {
        for (int64_t window : {0, 5, 300}) {
          for (float softcap : {0.0f, 30.0f}) {
            if (block_size == 1 && (window != 0 || softcap != 0.0f)) continue;  // the pool's
            // shape matters to the gather only
            if (!CheckCase(rng, *ref, *cpu, kf, vf, sh, block_size, window, softcap, &counts)) {
              return;
            }
          }
        }
      }
    }
  }
  std::printf("[ coverage ] %lld cases, %lld output elements, worst |cpu-ref|/bound %.3g\n"
              "[ coverage ] formats (K/V):", static_cast<long long>(counts.cases),
              static_cast<long long>(counts.elements), counts.worst);
  for (const auto& [f, n] : counts.formats) std::printf(" %s:%lld", f.c_str(), (long long)n);
  std::printf("\n");
}

// The argument checks of both host backends: a bad call is an error that names the format,
// field or argument at fault, and writes nothing.
TEST(PagedAttention, BadArgumentsAreErrorsThatNameTheCulprit) {
  for (const char* name : {"ref", "cpu"}) {
    auto be = Make(name, 2);
    ASSERT_TRUE(be);
    const std::vector<PagedSeq> seqs = {{3, 2}};
    const auto blocks = AssignBlocks(seqs, 4, {1, 0});
    PagedSteps st = MakePagedSteps(seqs, blocks, 4);
    KvLayout layout{KvFormat::kQ8_0, KvFormat::kF32, 2, 4, 40};  // kv_dim 40: no whole q8_0 block
    std::vector<float> k(5 * 64), v(5 * 64), q(2 * 64), out(2 * 64);
    std::vector<uint8_t> pool(4096);
    const backend::KvLayer layer{pool.data(), pool.data() + 2048};
    auto expect_error = [&](const absl::Status& s, const std::string& needle) {
      EXPECT_FALSE(s.ok()) << name << ": expected an error naming " << needle;
      EXPECT_NE(s.message().find(needle), std::string_view::npos)
          << name << ": '" << s.message() << "' does not name " << needle;
    };
    ASSERT_TRUE(be->BeginStep(st.write).ok());
    absl::Status s = be->KvWrite(layout, HostTensor(k, 5, 40), HostTensor(v, 5, 40), layer);
    expect_error(s, "q8_0");
    expect_error(s, "kv_dim = 40");
    // head_dim 16 of a q8_0 layout (kv_dim 64 = 4 x 16): heads are no whole blocks.
    layout.kv_dim = 64;
    ASSERT_TRUE(be->BeginStep(st.attend).ok());
    s = be->PagedAttention(HostTensor(q, 2, 64), layout, layer, 4, 4, 16, {},
                           HostTensor(out, 2, 64));
    expect_error(s, "q8_0");
    expect_error(s, "kv_dim = 64");
    // A block id outside the pool.
    st.attend.block_table[1] = 9;
    ASSERT_TRUE(be->BeginStep(st.attend).ok());
    s = be->PagedAttention(HostTensor(q, 2, 64), layout, layer, 2, 2, 32, {},
                           HostTensor(out, 2, 64));
    expect_error(s, "block_table");
    // A slot outside the pool.
    st.write.slots[4] = 8;
    ASSERT_TRUE(be->BeginStep(st.write).ok());
    s = be->KvWrite(layout, HostTensor(k, 5, 64), HostTensor(v, 5, 64), layer);
    expect_error(s, "slots[4]");
    // Shapes.
    s = be->KvWrite(layout, HostTensor(k, 4, 64), HostTensor(v, 5, 64), layer);
    expect_error(s, "k is [4, 64]");
    // Step metadata, field by field.
    backend::StepMeta bad = st.attend;
    bad.positions.pop_back();
    expect_error(be->BeginStep(bad), "positions");
    bad = st.attend;
    bad.slots.push_back(0);
    expect_error(be->BeginStep(bad), "slots");
    bad = st.attend;
    bad.query_start = {0, 3};
    expect_error(be->BeginStep(bad), "query_start");
    bad = st.attend;
    bad.query_start = {1, 2};
    expect_error(be->BeginStep(bad), "query_start");
    bad = st.attend;
    bad.block_table.pop_back();
    expect_error(be->BeginStep(bad), "block_table");
    bad = st.attend;
    bad.output_rows = {0, 2};
    expect_error(be->BeginStep(bad), "output_rows");
  }
}

}  // namespace
}  // namespace lockstep
