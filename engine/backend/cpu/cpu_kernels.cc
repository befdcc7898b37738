#include "engine/backend/cpu/cpu_kernels.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/quant/quant.h"

namespace lockstep::backend::cpu {
namespace {

// Four float lanes in one SSE register (GCC/Clang vector extension: element-wise IEEE ops, no
// re-association, so the lane arithmetic is exactly the scalar arithmetic written out 4 times).
using F4 = float __attribute__((vector_size(16)));

inline F4 Load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// lane: [16] partial sums; returns them combined by the fixed tree of DotFixed.
inline float CombineLanes(float* lane) {
  for (int width = kDotLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  }
  return lane[0];
}

inline void StoreLanes(F4 a0, F4 a1, F4 a2, F4 a3, float* lane) {
  std::memcpy(lane + 0, &a0, 16);
  std::memcpy(lane + 4, &a1, 16);
  std::memcpy(lane + 8, &a2, 16);
  std::memcpy(lane + 12, &a3, 16);
}

}  // namespace

static_assert(kDotLanes == 16, "DotFixed keeps its 16 lanes in four F4 accumulators");

float DotFixed(const float* a, const float* b, int64_t n) {
  F4 acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
  int64_t c = 0;
  for (; c + kDotLanes <= n; c += kDotLanes) {
    acc0 += Load4(a + c + 0) * Load4(b + c + 0);
    acc1 += Load4(a + c + 4) * Load4(b + c + 4);
    acc2 += Load4(a + c + 8) * Load4(b + c + 8);
    acc3 += Load4(a + c + 12) * Load4(b + c + 12);
  }
  float lane[kDotLanes];
  StoreLanes(acc0, acc1, acc2, acc3, lane);
  for (int64_t l = 0; c + l < n; ++l) lane[l] += a[c + l] * b[c + l];  // tail: lane c % 16
  return CombineLanes(lane);
}

void DotFixedX2(const float* a, const float* b0, const float* b1, int64_t n, float* y0,
                float* y1) {
  F4 p0 = {}, p1 = {}, p2 = {}, p3 = {};  // lanes of the dot with b0
  F4 q0 = {}, q1 = {}, q2 = {}, q3 = {};  // lanes of the dot with b1
  int64_t c = 0;
  for (; c + kDotLanes <= n; c += kDotLanes) {
    const F4 a0 = Load4(a + c + 0), a1 = Load4(a + c + 4);
    const F4 a2 = Load4(a + c + 8), a3 = Load4(a + c + 12);
    p0 += a0 * Load4(b0 + c + 0);
    p1 += a1 * Load4(b0 + c + 4);
    p2 += a2 * Load4(b0 + c + 8);
    p3 += a3 * Load4(b0 + c + 12);
    q0 += a0 * Load4(b1 + c + 0);
    q1 += a1 * Load4(b1 + c + 4);
    q2 += a2 * Load4(b1 + c + 8);
    q3 += a3 * Load4(b1 + c + 12);
  }
  float lane0[kDotLanes], lane1[kDotLanes];
  StoreLanes(p0, p1, p2, p3, lane0);
  StoreLanes(q0, q1, q2, q3, lane1);
  for (int64_t l = 0; c + l < n; ++l) {
    lane0[l] += a[c + l] * b0[c + l];
    lane1[l] += a[c + l] * b1[c + l];
  }
  *y0 = CombineLanes(lane0);
  *y1 = CombineLanes(lane1);
}

absl::Status DequantizeRow(const Weight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
  const absl::Status s = quant::Dequantize(w.type, row, w.cols, dst);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("cpu backend: cannot dequantize weight '%s' "
                                                  "row %d: %s", w.name, r, s.message()));
  }
  return absl::OkStatus();
}

void AxpyInto(float* acc, float p, const float* v, int64_t n) {
  const F4 pv = {p, p, p, p};
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    F4 a = Load4(acc + d);
    a += pv * Load4(v + d);
    std::memcpy(acc + d, &a, 16);
  }
  for (; d < n; ++d) acc[d] += p * v[d];
}

}  // namespace lockstep::backend::cpu
