// Paged attention for a ragged batch, one launch per layer, decode and prefill alike.
//
// Reduction order (docs/kernels.md): the keys of a sequence are cut into fixed pieces of
// kAttentionPiece keys (key j is in piece j / kAttentionPiece), whatever the batch, and each
// piece into 8 sub-pieces of 32 keys (one warp each, key j on lane j % 32). A score is the dot
// product as 8 fma chains over the dims (dim d in chain d % 8, increasing d) meeting in the fixed
// tree ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)), times scale, then the optional softcap; the piece max
// is exact; p = expf(s - max). The piece sum is a shfl_xor tree (16..1) over each warp's 32
// keys (invisible keys add +0), then the 8 warp sums in warp order; each output dim is, per warp,
// an fma chain over the warp's visible keys in key order, then the 8 warp partials in warp order.
// Pieces are combined in piece order (rescaled by expf(m_i - M), M the max of the piece maxima);
// a row whose keys lie in one piece is finished by the piece kernel with the same arithmetic. So
// a query row's result depends only on its own sequence's cache and position, not on its
// neighbours, the slots, the block table's fragmentation, the grid's piece count, nor on
// whether it runs as decode or inside a prefill.
//
// The MMA route (attention_mma.cu; f16 K and V, head_dim 64 or 128, both caches 16-byte aligned)
// has its own order, the same for every batch: pieces as above, but within a piece each (row,
// query head) pair runs the piece's keys 32 at a time in key order on binary16 tensor cores with
// an online softmax: q scaled by a power of two and split into binary16 h + l, scores as one
// MMA chain per key over the head dim (k-steps of 16, h then l), p = expf(s - m) against the
// running max with the previous steps rescaled by expf(m_old - m_new), each step's sum over the
// pair's 32 keys in a fixed lane order, and the output as one MMA chain per dim over the keys
// (k-steps of 16, p * 2^14 split into h + l). The piece records and the combine are the ones
// above. attention_mma.cu states it operation by operation. A format and shape take one route
// for every T, so a row's bits still depend only on its own sequence and position.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lockstep::kernels {

inline constexpr int kAttentionPiece = 256;  // keys per piece: a compile-time constant
inline constexpr int kAttentionMaxHeadDim = 256;

struct PagedAttentionParams {
  const float* q = nullptr;             // in, device, [T, n_head, head_dim] float
  const void* k_cache = nullptr;        // in, device, [n_slots, KvRowBytes(k_format, kv_dim)] bytes
  const void* v_cache = nullptr;        // in, device, [n_slots, KvRowBytes(v_format, kv_dim)] bytes
  uint32_t k_format = 0, v_format = 0;  // quant::KvFormat values
  const int32_t* query_start = nullptr; // in, device, [n_seq + 1]; rows of seq i: [qs[i], qs[i+1])
  const int32_t* seq_len = nullptr;     // in, device, [n_seq]; keys 0..seq_len-1 are written
  const int32_t* block_table = nullptr; // in, device, [n_seq, max_blocks_per_seq] block ids
  const int32_t* positions = nullptr;   // in, device, [T]; query at p sees keys j <= p (and
                                        //   p - j < window when window > 0), j < seq_len
  float* out = nullptr;                 // out, device, [T, n_head, head_dim] float
  int64_t T = 0;                        // query rows (query_start[n_seq] == T)
  int n_seq = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
  int block_size = 0;                   // tokens per cache block
  int max_blocks_per_seq = 0;
  int max_seq_len = 0;                  // host-side bound on every seq_len (sizes the grid)
  int window = 0;                       // sliding window, 0 = none
  float scale = 1.0f;                   // applied to q.k
  float softcap = 0.0f;                 // 0 = none; else s = cap * tanh(s / cap) after scale
  // The grouped f16 route's work split (0: chosen by the launcher; > 0: forced, for the check
  // tool). Neither changes a bit of the output.
  int group_rows_per_cta = 0;           // query rows per CTA
  int group_heads_per_cta = 0;          // query heads of one KV head per CTA (grouped route only;
                                        //   group_rows_per_cta also forces the MMA route's rows)
  // Check and bench only: the f16 shapes of the MMA route run the CUDA-core routes instead
  // (other bits). The engine never sets it.
  bool mma_off = false;
};

// Bytes of scratch the launch needs: T * n_head * pieces * (head_dim + 2) floats, pieces =
// ceil(max_seq_len / kAttentionPiece).
size_t PagedAttentionWorkspaceBytes(int64_t T, int n_head, int head_dim, int max_seq_len);

// Whether the launch takes the MMA route (its own bits; see above): f16 K and V, head_dim 64 or
// 128, both caches 16-byte aligned, mma_off unset, and the device's shared memory large enough.
bool PagedAttentionUsesMma(const PagedAttentionParams& p);

// workspace: scratch, device, >= PagedAttentionWorkspaceBytes bytes, 16-byte aligned.
// Constraints: n_head % n_kv_head == 0, 1 <= head_dim <= 256, kv_dim = n_kv_head * head_dim a
// multiple of the formats' block size. A query that sees no key gets zeros.
cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, void* workspace,
                                 size_t workspace_bytes, cudaStream_t stream);

}  // namespace lockstep::kernels
