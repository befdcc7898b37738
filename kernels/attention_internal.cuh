// Internal to the paged attention (kernels/attention.{h,cu}, kernels/attention_mma.cu): what the
// routes share. kernels/attention.h states the reduction order of each route.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/attention.h"

namespace lockstep::kernels::attention_internal {

struct RowInfo {
  int seq, pos, lo, hi;  // visible keys lo..hi (hi < lo: none)
};

// Query row t's sequence (binary search of query_start), position and visible key range.
__device__ inline RowInfo FindRow(const PagedAttentionParams& p, int64_t t) {
  int a = 0, b = p.n_seq - 1;  // largest i with query_start[i] <= t
  while (a < b) {
    const int m = (a + b + 1) / 2;
    if (p.query_start[m] <= t) a = m; else b = m - 1;
  }
  RowInfo r;
  r.seq = a;
  r.pos = p.positions[t];
  const int len = p.seq_len[a];
  r.hi = min(r.pos, len - 1);
  r.lo = p.window > 0 ? max(0, r.pos - p.window + 1) : 0;
  return r;
}

// The keys of piece [base, base + kAttentionPiece) that some row t..t_last (one sequence, len keys
// written) sees: ulo..uhi (ulo > uhi: none).
__device__ inline void SegmentKeys(const PagedAttentionParams& p, int64_t t, int64_t t_last, int len,
                                   int base, int& ulo, int& uhi) {
  ulo = INT_MAX, uhi = INT_MIN;
  for (int64_t tt = t; tt <= t_last; ++tt) {
    const int pos = p.positions[tt];
    const int hi = min(pos, len - 1);
    const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    if (hi >= lo) ulo = min(ulo, lo), uhi = max(uhi, hi);
  }
  ulo = max(ulo, base);
  uhi = min(uhi, base + kAttentionPiece - 1);
}

// A 16-byte global -> shared copy in flight (cp.async.cg; wait with cp.async.wait_group).
__device__ __forceinline__ void CpAsync16(void* smem_dst, const void* src) {
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
}

// The MMA route (attention_mma.cu): f16 K and V, head_dim 64 or 128, both caches 16-byte aligned,
// its shared memory within the device's opt-in limit, and p.mma_off unset.
bool MmaRouteTakes(const PagedAttentionParams& p);

// The MMA route's piece kernel: writes finished rows (keys in one piece) and the piece records of
// the others into ws, exactly as the other routes' piece kernels do; the caller runs the combine.
cudaError_t LaunchMmaPieces(const PagedAttentionParams& p, int n_pieces, float* ws, cudaStream_t stream);

// The device's SM count and opt-in shared memory per block (queried once).
int64_t SmCount();
size_t SmemOptinLimit();

}  // namespace lockstep::kernels::attention_internal
