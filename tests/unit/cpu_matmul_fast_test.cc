// The cpu backend's fused decode-and-dot MatMul (cpu_dot_kernels.h) against its slow twin,
// cpu::MatMulReference (shared dequantizer + DotFixed), bit for bit: every type with a codec,
// every instruction-set build this machine runs (base, avx2, avx512: the last decodes T > 1 through
// a slab buffer, cpu_dot_impl512.h, so T = 2..9 and 33 rows cross its tiles and slabs), T = 1..9,
// several shapes (row lengths that are
// one block, a few blocks, a real model's width; float rows with ragged tails), thread counts 1,
// 2 and 3. Outputs are poisoned with NaN before each call, so an element the kernel skips fails.
//
// Weights are quantized random floats (the values models carry): every output bit must match.
// For block types also raw random bytes (any scale bits: subnormal, Inf, NaN): there every
// non-NaN output must match bit for bit and NaN must meet NaN, but a NaN's payload and sign may
// differ. Which of two NaN operands an add returns is decided by the operand order the compiler
// picks for a commutative IEEE add, in the reference as much as in the fast path, so no source
// code pins it (decode.h makes the same exception between host and device). Activations mix in
// exact +0, -0 and tiny values so a +0 added to a -0 lane, or a reordered sum, shows in the bits.
//
// Seed: LOCKSTEP_SEED=<n> replays a run; without it a fresh seed is drawn and printed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/core/threads.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace lockstep {
namespace {

using testing::RunSeed;

using backend::Weight;
using backend::cpu::DotIsa;

std::vector<DotIsa> AvailableIsas() {
  std::vector<DotIsa> out;
  for (DotIsa isa : {DotIsa::kBase, DotIsa::kAvx2, DotIsa::kAvx512}) {
    if (backend::cpu::DotIsaAvailable(isa)) out.push_back(isa);
  }
  return out;
}

// Row lengths for a type: one block, three blocks, SmolLM2's 576 and Gemma 3's 640 where they
// are whole blocks; float types also get lengths with every kind of tail (< 16, 16..31).
std::vector<int64_t> ColsFor(quant::Type type) {
  const int64_t bs = quant::Traits(type).block_size;
  if (bs == 1) return {1, 13, 16, 37, 48, 77, 576};
  std::vector<int64_t> out = {bs, 3 * bs};
  for (int64_t c : {576, 640, 1536}) {
    if (c % bs == 0 && c != bs && c != 3 * bs) out.push_back(c);
  }
  return out;
}

// x: [n] floats in [-1, 1] with exact +0, -0 and subnormal-product-sized values mixed in.
std::vector<float> Activations(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<float> x(n);
  for (float& v : x) {
    switch (pick(rng)) {
      case 0: v = 0.0f; break;
      case 1: v = -0.0f; break;
      case 2: v = u(rng) * 1e-30f; break;
      default: v = u(rng); break;
    }
  }
  return x;
}

struct TestWeight {
  std::vector<uint8_t> bytes;
  Weight w;
};

// Quantized random floats (raw = false), or raw random bytes for block types (raw = true).
TestWeight MakeWeight(std::mt19937_64& rng, quant::Type type, int64_t rows, int64_t cols,
                      bool raw) {
  TestWeight tw;
  tw.w.type = type;
  tw.w.rows = rows;
  tw.w.cols = cols;
  tw.w.name = "test.weight";
  tw.bytes.resize(rows * tw.w.row_bytes());
  if (raw) {
    for (uint8_t& b : tw.bytes) b = static_cast<uint8_t>(rng());
  } else {
    std::normal_distribution<float> g(0.0f, 0.5f);
    std::vector<float> src(rows * cols);
    for (float& v : src) v = g(rng);
    EXPECT_TRUE(quant::Quantize(type, src.data(), rows * cols, tw.bytes.data()).ok());
  }
  tw.w.data = tw.bytes.data();
  return tw;
}

// Number of elements whose bits differ (with nan_payloads_free, a NaN meeting a NaN of other bits
// counts as equal); prints the first few.
int CountBitDiffs(const std::vector<float>& want, const std::vector<float>& got,
                  const std::string& what, bool nan_payloads_free) {
  int diffs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    if (a == b || (nan_payloads_free && std::isnan(want[i]) && std::isnan(got[i]))) continue;
    if (++diffs <= 3) {
      ADD_FAILURE() << what << ": y[" << i << "] reference " << want[i] << " (0x" << std::hex << a
                    << ") fast " << got[i] << " (0x" << b << std::dec << ")";
    }
  }
  return diffs;
}

// Checks every (isa, threads, T) for one weight; returns the number of MatMul calls compared.
int CheckWeight(const TestWeight& tw, std::mt19937_64& rng,
                std::vector<std::unique_ptr<core::ThreadPool>>& pools, const std::string& tag,
                bool nan_payloads_free) {
  const Weight& w = tw.w;
  constexpr int64_t kMaxT = 9;
  const std::vector<float> x = Activations(rng, kMaxT * w.cols);  // [kMaxT, cols]
  int calls = 0;
  for (int64_t T = 1; T <= kMaxT; ++T) {
    std::vector<float> want(T * w.rows, std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(backend::cpu::MatMulReference(w, x.data(), T, want.data()).ok());
    for (DotIsa isa : AvailableIsas()) {
      for (auto& pool : pools) {
        std::vector<float> got(T * w.rows, std::numeric_limits<float>::quiet_NaN());
        EXPECT_TRUE(backend::cpu::MatMulWithIsa(isa, w, x.data(), T, got.data(), *pool).ok());
        const std::string what =
            absl::StrFormat("%s %s [%d x %d] T=%d isa=%s threads=%d", tag,
                            quant::Traits(w.type).name, w.rows, w.cols, T,
                            backend::cpu::DotIsaName(isa), pool->size());
        EXPECT_EQ(CountBitDiffs(want, got, what, nan_payloads_free), 0) << what;
        ++calls;
      }
    }
  }
  return calls;
}

std::vector<std::unique_ptr<core::ThreadPool>> MakePools() {
  std::vector<std::unique_ptr<core::ThreadPool>> pools;
  for (int n : {1, 2, 3}) pools.push_back(std::make_unique<core::ThreadPool>(n));
  return pools;
}

TEST(CpuMatMulFast, EqualsReferenceBitForBitOnQuantizedWeights) {
  std::mt19937_64 rng(RunSeed() ^ 0x51u);
  auto pools = MakePools();
  int calls = 0, weights = 0;
  for (quant::Type type : quant::CodecTypes()) {
    for (int64_t cols : ColsFor(type)) {
      for (int64_t rows : {1, 5, 33}) {
        calls += CheckWeight(MakeWeight(rng, type, rows, cols, /*raw=*/false), rng, pools,
                             "quantized", /*nan_payloads_free=*/false);
        ++weights;
      }
    }
  }
  std::printf("[ covered  ] %zu types, %d weights, %d MatMul calls, isas:", quant::CodecTypes().size(),
              weights, calls);
  for (DotIsa isa : AvailableIsas()) std::printf(" %s", backend::cpu::DotIsaName(isa));
  std::printf("\n");
}

TEST(CpuMatMulFast, EqualsReferenceBitForBitOnRawBlockBytes) {
  std::mt19937_64 rng(RunSeed() ^ 0x52u);
  auto pools = MakePools();
  int calls = 0;
  for (quant::Type type : quant::CodecTypes()) {
    if (quant::Traits(type).block_size == 1) continue;  // float rows: covered above
    for (int64_t rows : {3, 17}) {
      calls += CheckWeight(MakeWeight(rng, type, rows, ColsFor(type)[1], /*raw=*/true), rng,
                           pools, "raw", /*nan_payloads_free=*/true);
    }
  }
  std::printf("[ covered  ] %d MatMul calls on raw block bytes\n", calls);
}

// A type without a lockstep codec is an error naming the weight and the type, from both the
// fast path and its twin, before any output is written (no abort: backend.h).
TEST(CpuMatMulFast, TypeWithoutCodecIsAnErrorNotAnAbort) {
  int checked = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    quant::TypeTraits tr;
    if (!quant::LookupType(id, &tr) || tr.lockstep_codec || tr.block_size == 0) continue;
    Weight w{static_cast<quant::Type>(id), 2, tr.block_size, nullptr, "nocodec.weight"};
    std::vector<uint8_t> bytes(2 * w.row_bytes() + 1);
    w.data = bytes.data();
    const std::vector<float> x(tr.block_size, 1.0f);
    std::vector<float> y(2, std::numeric_limits<float>::quiet_NaN());
    core::ThreadPool pool(2);
    for (const absl::Status& s :
         {backend::cpu::MatMulReference(w, x.data(), 1, y.data()),
          backend::cpu::MatMulWithIsa(backend::cpu::BestDotIsa(), w, x.data(), 1, y.data(), pool)}) {
      EXPECT_FALSE(s.ok()) << tr.name;
      EXPECT_NE(s.message().find("nocodec.weight"), std::string_view::npos) << s;
      EXPECT_NE(s.message().find(tr.name), std::string_view::npos) << s;
    }
    ++checked;
  }
  std::printf("[ covered  ] %d types without a codec\n", checked);
}


// GluRows (cpu_act_impl.h) against the double formula with libm's exp and tanh (the ref
// backend's, oracle/ref_backend.cc), rounded to float: within 1 ulp of it plus 2^-50 |g up| (the
// oracle's own 1 + tanh cancels for g << 0, by up to a few 2^-53; the kernel's exp is ~1e-14
// relative; kGluRtol allows 16 * 2^-24 |g up|), NaN where it is NaN; and the same bits
// from every isa build. Inputs include +-0, +-Inf, NaN, subnormals and saturated tails.
TEST(CpuGlu, WithinOneUlpOfTheDoubleFormulaAndEqualAcrossIsas) {
  std::mt19937_64 rng(RunSeed() ^ 0x53u);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> gate, up;
  const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-30f, 30.0f, -30.0f, 88.0f, -88.0f,
                            200.0f, -200.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (float g : specials) gate.push_back(g), up.push_back(u(rng) * 4.0f);
  for (int i = 0; i < 20000; ++i) {
    const float scale = (i % 3 == 0) ? 16.0f : (i % 3 == 1) ? 2.0f : 0.01f;
    gate.push_back(u(rng) * scale);
    up.push_back(u(rng) * 4.0f);
  }
  const int64_t n = static_cast<int64_t>(gate.size());
  for (bool gelu : {false, true}) {
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double a = gelu ? 0.5 * g * (1.0 + std::tanh(0.7978845608028654 *
                                                            (g + 0.044715 * g * g * g)))
                            : g / (1.0 + std::exp(-g));
      want[i] = static_cast<float>(a * double{up[i]});
    }
    std::vector<float> first;
    for (DotIsa isa : AvailableIsas()) {
      std::vector<float> got(n, 12345.0f);
      backend::cpu::GluRows(isa, gelu, gate.data(), up.data(), got.data(), n);
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool ok = std::isnan(want[i])
                            ? std::isnan(got[i])
                            : (got[i] == want[i] ||
                               std::fabs(double{got[i]} - want[i]) <=
                                   std::fabs(double{want[i]}) * 0x1p-23 + 0x1p-149 +
                                       0x1p-50 * std::fabs(double{gate[i]} * up[i]));
        if (!ok && ++bad <= 3) {
          ADD_FAILURE() << (gelu ? "gelu" : "silu") << " isa=" << backend::cpu::DotIsaName(isa)
                        << " g=" << gate[i] << " up=" << up[i] << ": want " << want[i]
                        << " got " << got[i];
        }
      }
      EXPECT_EQ(bad, 0);
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(CountBitDiffs(first, got, absl::StrFormat("glu isa=%s vs %s",
                                                            backend::cpu::DotIsaName(isa),
                                                            backend::cpu::DotIsaName(AvailableIsas()[0])),
                                /*nan_payloads_free=*/true),
                  0);
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
