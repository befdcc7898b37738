// MatMul and Embed of the cpu backend. MatMul runs the fused decode-and-dot kernels of
// cpu_dot_kernels.h (the fastest build this machine runs); MatMulReference is its slow twin:
// rows decoded by the shared dequantizer, then DotFixed. Both give the same bits (the contract
// of cpu_kernels.h; tests/unit/cpu_matmul_fast_test.cc holds them to it).
#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_dot_kernels.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/quant/types.h"

namespace lockstep::backend {
namespace {

// Smallest amount of work (multiply-adds) worth waking a worker for.
constexpr int64_t kMinWorkPerChunk = 1 << 16;

cpu::DotMatMulArgs DotArgs(const Weight& w, const float* x, int64_t T, float* y) {
  return {w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), w.rows, w.cols, x, T, y};
}

absl::Status NoCodecError(const Weight& w) {
  return absl::UnimplementedError(absl::StrFormat(
      "cpu MatMul: weight '%s' has type %s, which lockstep cannot decode", w.name,
      quant::Traits(w.type).name));
}

}  // namespace

namespace cpu {

// y[t, r] = DotFixed(dequantized W[r, :], x[t, :], cols).   W: [rows, cols], x: [T, cols],
// y: [T, rows]. Single-threaded: the result does not depend on the partition anyway.
absl::Status MatMulReference(const Weight& w, const float* x, int64_t T, float* y) {
  if (!quant::Traits(w.type).lockstep_codec) return NoCodecError(w);
  const int64_t rows = w.rows, cols = w.cols;
  std::vector<float> row(w.type == quant::Type::F32 ? 0 : cols);  // [cols]
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = static_cast<const float*>(w.data) + r * cols;
    if (w.type != quant::Type::F32) {
      if (absl::Status s = DequantizeRow(w, r, row.data()); !s.ok()) return s;
      wr = row.data();
    }
    for (int64_t t = 0; t < T; ++t) y[t * rows + r] = DotFixed(wr, x + t * cols, cols);
  }
  return absl::OkStatus();
}

absl::Status MatMulWithIsa(DotIsa isa, const Weight& w, const float* x, int64_t T, float* y,
                           core::ThreadPool& pool) {
  if (!quant::Traits(w.type).lockstep_codec) return NoCodecError(w);
  const DotMatMulArgs a = DotArgs(w, x, T, y);
  // Rows are the unit of work: at T = 1 a 576-column row is ~0.3 us, so even the smallest
  // matmul of a decode step splits across the pool.
  const int64_t work_per_row = std::max<int64_t>(1, w.cols * std::max<int64_t>(T, 1));
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerChunk / work_per_row);
  pool.ParallelFor(w.rows, grain,
                   [&](int64_t begin, int64_t end) { DotMatMulRows(isa, a, begin, end); });
  return absl::OkStatus();
}

}  // namespace cpu

std::string CpuBackend::Describe() const {
  return absl::StrFormat("cpu: %s, %d threads", cpu::DotIsaName(cpu::BestDotIsa()), threads());
}

// y[t, r] = sum_c W[r, c] * x[t, c].   W: [rows, cols] blocks, x: [T, cols], y: [T, rows]
// Threads partition output rows; each y[t, r] is DotFixed(W[r, :], x[t, :], cols) bit for bit,
// whatever T, the thread count or t.
absl::Status CpuBackend::MatMul(const Weight& w, Tensor x, Tensor y) {
  if (absl::Status s = CheckWeight("cpu MatMul", w); !s.ok()) return s;
  if (absl::Status s = CheckTensor("cpu MatMul", "x", x, -1, w.cols); !s.ok()) return s;
  if (absl::Status s = CheckTensor("cpu MatMul", "y", y, x.rows, w.rows); !s.ok()) return s;
  return cpu::MatMulWithIsa(cpu::BestDotIsa(), w, x.data, x.rows, y.data, pool_);
}

// out[t, :] = table[tokens[t], :].   out: [T, table.cols]; a copy of the dequantized row.
absl::Status CpuBackend::Embed(const Weight& table, Tensor out) {
  if (absl::Status s = CheckEmbed(table, out); !s.ok()) return s;
  const std::vector<int32_t>& tokens = step().tokens;
  const int64_t T = step().n_tokens();
  std::atomic<bool> failed{false};
  const int64_t grain = std::max<int64_t>(1, kMinWorkPerChunk / std::max<int64_t>(table.cols, 1));
  pool_.ParallelFor(T, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (!cpu::DequantizeRow(table, tokens[t], out.data + t * table.cols).ok()) failed = true;
    }
  });
  if (failed) {  // not reached after CheckWeight; kept so a decoder error is never silent
    return absl::InternalError(absl::StrFormat("cpu Embed: decoding '%s' failed", table.name));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::backend
