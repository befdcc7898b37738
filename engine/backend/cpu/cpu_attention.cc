// Causal GQA attention of the cpu backend: one (query token, head) pair per work item, keys in
// increasing order, nothing split.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace lockstep::backend {
namespace {

using F4 = float __attribute__((vector_size(16)));

// acc[d] += p * v[d] for d in [0, n): each d is its own accumulator, so vectorizing over d
// changes no sum's order.   acc, v: [n]
void AxpyInto(float* acc, float p, const float* v, int64_t n) {
  const F4 pv = {p, p, p, p};
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    F4 a, x;
    std::memcpy(&a, acc + d, 16);
    std::memcpy(&x, v + d, 16);
    a += pv * x;
    std::memcpy(acc + d, &a, 16);
  }
  for (; d < n; ++d) acc[d] += p * v[d];
}

}  // namespace

// For query t, head h (kv head g = h / (n_head / n_kv_head)), over the visible keys
// j in [lo, hi] = [max(0, pos - window + 1) (or 0), min(pos, n_kv - 1)]:
//   s_j = DotFixed(q, k_j) * scale, softcapped;  m = max s_j;  e_j = expf(s_j - m)
//   sum = e_lo + ... + e_hi (sequential);  out[d] = (sum_j e_j v_j[d], sequential in j) / sum
// Every step's order depends on (pos, window, n_kv, head_dim) only: a query gives the same bits
// alone, in a chunk, at any row t, on any thread. No visible key (pos >= n_kv beyond the
// window): zeros, as the ref does.
// q, out: [T, n_head, head_dim]; k, v: [n_kv, n_kv_head, head_dim]
void CpuBackend::Attention(const float* q, const int32_t* pos, int64_t T, const float* k,
                           const float* v, int64_t n_kv, int64_t n_head, int64_t n_kv_head,
                           int64_t head_dim, const AttentionParams& p, float* out) {
  const int64_t group = n_head / n_kv_head;
  const int64_t kv_stride = n_kv_head * head_dim;  // floats between key j and key j + 1
  pool_.ParallelFor(T * n_head, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> score(n_kv);   // [n_kv], indexed by key position
    std::vector<float> acc(head_dim);  // [head_dim]
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / n_head, h = item % n_head, g = h / group;
      const float* qth = q + item * head_dim;
      float* oth = out + item * head_dim;
      const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos[t] - p.window + 1) : 0;
      const int64_t hi = std::min<int64_t>(pos[t], n_kv - 1);
      if (lo > hi) {
        std::fill(oth, oth + head_dim, 0.0f);
        continue;
      }
      float max_score = -INFINITY;
      for (int64_t j = lo; j <= hi; ++j) {
        float s = cpu::DotFixed(qth, k + j * kv_stride + g * head_dim, head_dim) * p.scale;
        if (p.softcap != 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        score[j] = s;
        max_score = std::max(max_score, s);
      }
      float sum = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j <= hi; ++j) {
        const float e = std::exp(score[j] - max_score);
        sum += e;
        AxpyInto(acc.data(), e, v + j * kv_stride + g * head_dim, head_dim);
      }
      for (int64_t d = 0; d < head_dim; ++d) oth[d] = acc[d] / sum;
    }
  });
}

}  // namespace lockstep::backend
