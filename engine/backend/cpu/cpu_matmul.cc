// MatMul and GetRows of the cpu backend: weights decoded row by row by the shared dequantizer,
// float dots in the fixed order of DotFixed (cpu_kernels.h).
#include <algorithm>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace lockstep::backend {
namespace {

// Weight rows decoded together: [kRowTile, cols] floats are then reused by every activation row,
// so the decode cost is paid once per call and the tile stays in cache across the T loop.
constexpr int64_t kRowTile = 8;

// Smallest amount of work (multiply-adds) worth waking a worker for.
constexpr int64_t kMinWorkPerChunk = 1 << 16;

}  // namespace

// y[t, r] = sum_c W[r, c] * x[t, c].   W: [rows, cols] blocks, x: [T, cols], y: [T, rows]
// Threads partition tiles of output rows; each y[t, r] is one DotFixed(W[r, :], x[t, :], cols)
// (or the identical half of a DotFixedX2), whatever T, the thread count or t.
void CpuBackend::MatMul(const Weight& w, const float* x, int64_t T, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
  const int64_t work_per_tile = kRowTile * cols * std::max<int64_t>(T, 1);
  const int64_t grain =
      std::max<int64_t>(1, kMinWorkPerChunk / std::max<int64_t>(work_per_tile, 1));
  const bool is_f32 = w.type == quant::Type::F32;
  pool_.ParallelFor(tiles, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> tile(is_f32 ? 0 : kRowTile * cols);  // [kRowTile, cols]
    const float* w_row[kRowTile];
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r0 = i * kRowTile;
      const int64_t nr = std::min(kRowTile, rows - r0);
      for (int64_t k = 0; k < nr; ++k) {
        if (is_f32) {
          w_row[k] = static_cast<const float*>(w.data) + (r0 + k) * cols;
        } else {
          cpu::DequantizeRowOrDie(w, r0 + k, tile.data() + k * cols);
          w_row[k] = tile.data() + k * cols;
        }
      }
      int64_t t = 0;
      for (; t + 2 <= T; t += 2) {
        const float* x0 = x + t * cols;
        const float* x1 = x0 + cols;
        for (int64_t k = 0; k < nr; ++k) {
          cpu::DotFixedX2(w_row[k], x0, x1, cols, &y[t * rows + r0 + k],
                          &y[(t + 1) * rows + r0 + k]);
        }
      }
      for (; t < T; ++t) {
        for (int64_t k = 0; k < nr; ++k) {
          y[t * rows + r0 + k] = cpu::DotFixed(w_row[k], x + t * cols, cols);
        }
      }
    }
  });
}

// out[t, :] = table[ids[t], :].   out: [T, table.cols]; a copy of the dequantized row.
void CpuBackend::GetRows(const Weight& table, const int32_t* ids, int64_t T, float* out) {
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerChunk / std::max<int64_t>(table.cols, 1));
  pool_.ParallelFor(T, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      cpu::DequantizeRowOrDie(table, ids[t], out + t * table.cols);
    }
  });
}

}  // namespace lockstep::backend
