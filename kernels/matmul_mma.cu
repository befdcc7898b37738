// The MMA route of the quantized matmul (kernels/matmul_mma.h states the reduction order): the
// auto configuration by type and T, the dispatch to the kernel families and the checks of the
// public entry points. The per-chunk arithmetic is in matmul_mma_common.cuh, the kernels in
// matmul_mma_ksplit.cu, matmul_mma_tiled.cu and matmul_mma_staged.cu.
#include "kernels/matmul_mma.h"

#include <algorithm>
#include <type_traits>

#include "engine/quant/types.h"
#include "kernels/matmul_mma_common.cuh"

namespace lockstep::kernels {
namespace {

using namespace mma_internal;  // NOLINT: the route's own internals

// The auto configuration by type, T and rows, and where it takes the split once per launch
// (docs/kernels.md runs 9, 16, 17, 18 and 21; the layer-set bench, H100). Q4_K: 16x8 up to 8
// tokens, 32x16 up to 16, 32x32 up to 32, up to 256 the split-K tiles where the matrix has fewer
// than kSplitKTiles tiles of 128 x 64 and scratch is given (else 64x32 with the split once per
// launch), the tiled kernel beyond (without the split: with it it measured 10% slower at T =
// 2048). Q6_K: 16x8 up to 8, 32x16 up to 16, 32x32 up to 256 (the split-K tiles as Q4_K's), the
// tiled kernel beyond, each with the split once per launch past T = 8. Q8_0 (34-byte blocks,
// read by 16-bit loads): the staged kernel up to 4 tokens, 16x8 up to 8, then with the split
// once per launch 32x16 up to 16, 32x32 up to 32, 64x32 up to 256 (the split-K tiles measured
// 3-14% slower there, run 21), the tiled kernel beyond. Every configuration gives the same bits,
// with or without the split.
constexpr int64_t kSplitKTiles = 512;

template <uint32_t kType>
MmaConfig AutoConfig(int64_t rows, int64_t T, bool scratch) {
  if (T <= 8) return kType == (uint32_t)q::Type::Q8_0 && T <= 4 ? MmaConfig::kStaged16x8 : MmaConfig::k16x8;
  if (T <= 16) return MmaConfig::k32x16;
  if (T <= 32) return MmaConfig::k32x32;
  if (T > 256) return MmaConfig::kTiled128x64;
  if (kType != (uint32_t)q::Type::Q8_0 && scratch && (rows + 127) / 128 * ((T + 63) / 64) < kSplitKTiles) {
    return MmaConfig::kTiledSplitK;
  }
  return kType == (uint32_t)q::Type::Q6_K ? MmaConfig::k32x32 : MmaConfig::k64x32;
}

// Whether configuration cfg (not auto) splits the activations once per launch given scratch:
// every K-split configuration and the tiled kernel, except where the layer-set bench of run 18
// measured it slower: 16x8 (at T = 3..8, where it is not the split once per warp: 14-18% slower
// for Q4_K, more registers), and for Q4_K the tiled kernel and 32x32 (at T = 32).
template <uint32_t kType>
bool UsesPreSplit(MmaConfig cfg) {
  constexpr bool kQ4K = kType == (uint32_t)q::Type::Q4_K;
  switch (cfg) {
    case MmaConfig::k32x8: case MmaConfig::k64x8: case MmaConfig::k64x16: case MmaConfig::k32x16:
    case MmaConfig::k64x32: return true;
    case MmaConfig::k32x32: case MmaConfig::kTiled128x64: case MmaConfig::kTiledSplitK: return !kQ4K;
    default: return false;  // 16x8; the staged kernel splits in shared memory
  }
}

// Bytes of scratch configuration cfg (not auto) uses at (rows, cols, T): the split's fragments where
// it takes the split once per launch, then kTiledSplitK's segment sums.
template <uint32_t kType>
int64_t ScratchBytes(MmaConfig cfg, int64_t rows, int64_t cols, int64_t T) {
  const bool pre = UsesPreSplit<kType>(cfg);
  if (MatmulMmaConfigNeedsScratch(cfg)) return TiledSplitKOffset(pre, T, cols) + TiledSplitKBytes(T, rows);
  return pre ? PreSplit::Bytes(T, cols) : 0;
}

// Scratch for a launch that uses need bytes: none kept where it uses none; false where the caller
// gave scratch that is too small or misaligned (never a silent change of path).
bool FitScratch(int64_t need, MatmulScratch& scratch) {
  if (need == 0) scratch = MatmulScratch{};
  return scratch.data == nullptr ||
         ((int64_t)scratch.bytes >= need && reinterpret_cast<uintptr_t>(scratch.data) % 16 == 0);
}

template <uint32_t kType>
cudaError_t LaunchTyped(const void* wv, int64_t rows, int64_t cols, const float* x, int64_t T,
                        float* y, float w_scale, MmaConfig cfg, MatmulScratch scratch, cudaStream_t stream) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  if (cfg == MmaConfig::kAutoByT) cfg = AutoConfig<kType>(rows, T, scratch.data != nullptr);
  const int64_t need = ScratchBytes<kType>(cfg, rows, cols, T);
  if (MatmulMmaConfigNeedsScratch(cfg) && scratch.data == nullptr) return cudaErrorInvalidValue;
  if (!FitScratch(need, scratch)) return cudaErrorInvalidValue;
  const bool pre = scratch.data != nullptr && UsesPreSplit<kType>(cfg);
  switch (cfg) {
    case MmaConfig::kTiled128x64: case MmaConfig::kTiledSplitK:
      return LaunchTiled<kType>(w, rows, cols, x, T, y, w_scale, scratch, pre, cfg == MmaConfig::kTiledSplitK, stream);
    case MmaConfig::kStaged16x8: return LaunchStaged<kType>(w, rows, cols, x, T, y, w_scale, stream);
    default: return LaunchKSplit<kType>(cfg, w, rows, cols, x, T, y, w_scale, scratch, stream);
  }
}

// The group form (matmul_mma.h): one K-split launch over every item's row tiles where auto takes
// a K-split configuration for the group's T (T <= 32: the same for every row count; not the staged
// kernel), else each item alone. Either way each item gets the configuration's bits, which are
// every configuration's.
template <uint32_t kType>
cudaError_t LaunchGroupTyped(const MatmulGroupItem* items, int n, int64_t cols, const float* x, int64_t T,
                             MatmulScratch scratch, cudaStream_t stream) {
  const MmaConfig cfg = AutoConfig<kType>(items[0].rows, T, scratch.data != nullptr);
  if (n == 1 || T > 32 || cfg == MmaConfig::kStaged16x8) {
    for (int i = 0; i < n; ++i) {
      const cudaError_t e = LaunchTyped<kType>(items[i].w, items[i].rows, cols, x, T, items[i].y, 1.0f,
                                               MmaConfig::kAutoByT, scratch, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // T and cols alone decide the bytes at T <= 32.
  if (!FitScratch(ScratchBytes<kType>(cfg, items[0].rows, cols, T), scratch)) return cudaErrorInvalidValue;
  GroupRows gr;
  for (int i = 0; i < n; ++i) {
    gr.w[i] = static_cast<const uint8_t*>(items[i].w), gr.rows[i] = items[i].rows, gr.y[i] = items[i].y;
  }
  gr.n = n;
  return LaunchKSplit<kType>(cfg, gr.w[0], gr.rows[0], cols, x, T, gr.y[0], 1.0f, scratch, stream, gr);
}

}  // namespace

cudaError_t LaunchMatmulMmaGroup(uint32_t type_id, const MatmulGroupItem* items, int n, int64_t cols,
                                 const float* x, int64_t T, cudaStream_t stream, MatmulScratch scratch) {
  q::TypeTraits tr;
  if (!MatmulMmaSupportsType(type_id) || !q::LookupType(type_id, &tr)) return cudaErrorInvalidValue;
  if (items == nullptr || n < 1 || n > kMatmulGroupMax || T < 1 || cols < 32 || cols % 32 != 0 ||
      cols % tr.block_size != 0 || x == nullptr || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  for (int i = 0; i < n; ++i) {
    if (items[i].w == nullptr || items[i].y == nullptr || items[i].rows < 1 ||
        reinterpret_cast<uintptr_t>(items[i].w) % 4 != 0) {
      return cudaErrorInvalidValue;
    }
  }
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: return LaunchGroupTyped<(uint32_t)q::Type::Q4_K>(items, n, cols, x, T, scratch, stream);
    case q::Type::Q8_0: return LaunchGroupTyped<(uint32_t)q::Type::Q8_0>(items, n, cols, x, T, scratch, stream);
    case q::Type::Q6_K: return LaunchGroupTyped<(uint32_t)q::Type::Q6_K>(items, n, cols, x, T, scratch, stream);
    default: return cudaErrorInvalidValue;
  }
}

size_t MatmulMmaGroupScratchBytes(uint32_t type_id, const MatmulGroupItem* items, int n, int64_t cols, int64_t T) {
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes = std::max(bytes, MatmulMmaScratchBytes(type_id, items[i].rows, cols, T, MmaConfig::kAutoByT));
  return bytes;
}

cudaError_t LaunchMatmulMmaExperts(uint32_t type_id, const void* w, int64_t n_expert, int64_t rpe, int64_t cols,
                                   const int32_t* ids, int64_t n, int64_t k, bool x_per_token, const float* x,
                                   float* y, cudaStream_t stream) {
  q::TypeTraits tr;
  if (!MatmulMmaSupportsType(type_id) || !q::LookupType(type_id, &tr)) return cudaErrorInvalidValue;
  if (w == nullptr || ids == nullptr || x == nullptr || y == nullptr || n_expert < 1 || rpe < 1 || cols < 32 ||
      cols % 32 != 0 || cols % tr.block_size != 0 || n < 0 || k < 1 || (x_per_token && n % k != 0) ||
      reinterpret_cast<uintptr_t>(w) % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: return LaunchExpertsTyped<(uint32_t)q::Type::Q4_K>(wb, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
    case q::Type::Q8_0: return LaunchExpertsTyped<(uint32_t)q::Type::Q8_0>(wb, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
    case q::Type::Q6_K: return LaunchExpertsTyped<(uint32_t)q::Type::Q6_K>(wb, n_expert, rpe, cols, ids, n, k, x_per_token, x, y, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool MatmulMmaSupportsType(uint32_t type_id) {
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: case q::Type::Q8_0: case q::Type::Q6_K: return true;
    default: return false;
  }
}

bool MatmulMmaConfigNeedsScratch(MmaConfig cfg) { return cfg == MmaConfig::kTiledSplitK; }

size_t MatmulMmaScratchBytes(uint32_t type_id, int64_t rows, int64_t cols, int64_t T, MmaConfig config) {
  if (T < 1 || cols < 32 || rows < 1) return 0;
  auto bytes = [&](auto type_tag) -> size_t {
    constexpr uint32_t kType = decltype(type_tag)::value;
    const MmaConfig cfg = config == MmaConfig::kAutoByT ? AutoConfig<kType>(rows, T, true) : config;
    return (size_t)ScratchBytes<kType>(cfg, rows, cols, T);
  };
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: return bytes(std::integral_constant<uint32_t, (uint32_t)q::Type::Q4_K>{});
    case q::Type::Q8_0: return bytes(std::integral_constant<uint32_t, (uint32_t)q::Type::Q8_0>{});
    case q::Type::Q6_K: return bytes(std::integral_constant<uint32_t, (uint32_t)q::Type::Q6_K>{});
    default: return 0;
  }
}

cudaError_t LaunchMatmulMma(uint32_t type_id, const void* w, int64_t rows, int64_t cols,
                            const float* x, int64_t T, float* y, float w_scale, MmaConfig config,
                            cudaStream_t stream, MatmulScratch scratch) {
  q::TypeTraits tr;
  if (!MatmulMmaSupportsType(type_id) || !q::LookupType(type_id, &tr)) return cudaErrorInvalidValue;
  if (rows < 1 || T < 1 || cols < 32 || cols % 32 != 0 || cols % tr.block_size != 0) return cudaErrorInvalidValue;
  if (w == nullptr || x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(w) % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return cudaErrorInvalidValue;
  switch ((q::Type)type_id) {
    case q::Type::Q4_K: return LaunchTyped<(uint32_t)q::Type::Q4_K>(w, rows, cols, x, T, y, w_scale, config, scratch, stream);
    case q::Type::Q8_0: return LaunchTyped<(uint32_t)q::Type::Q8_0>(w, rows, cols, x, T, y, w_scale, config, scratch, stream);
    case q::Type::Q6_K: return LaunchTyped<(uint32_t)q::Type::Q6_K>(w, rows, cols, x, T, y, w_scale, config, scratch, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace lockstep::kernels
