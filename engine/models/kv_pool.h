// Paged KV memory accounting (docs/runtime.md): a pool of fixed-size blocks with refcounts, and
// per-sequence block tables. The bytes of the blocks live in the backend (models::Runner owns
// them); this is only the bookkeeping, shared by the engine's scheduler, the prefix cache,
// sessions and the draft-model drafter.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep::models {

class KvPool {
 public:
  KvPool(int64_t n_blocks, int64_t block_size);

  int64_t n_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t n_used() const { return n_blocks() - n_free(); }

  // A free block with refcount 1; ResourceExhausted when none is free.
  absl::StatusOr<int32_t> Allocate();
  void Ref(int32_t block);
  void Unref(int32_t block);  // back to the free list at 0
  int32_t refcount(int32_t block) const { return refs_[block]; }

 private:
  int64_t block_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // a stack; the lowest ids are handed out first
};

// One sequence's KV: blocks[i] holds positions [i * block_size, (i + 1) * block_size); the
// first n_tokens positions are filled.
struct SeqKv {
  std::vector<int32_t> blocks;
  int64_t n_tokens = 0;
};

// Copies every layer's rows of block `src` into block `dst` (the copy half of copy-on-write).
using CopyBlockFn = std::function<absl::Status(int32_t src, int32_t dst)>;

// Makes `kv` able to hold `n_total` positions: allocates blocks at the end, and replaces a
// shared block that positions [kv.n_tokens, n_total) would write into by a private copy
// (copy-on-write). On ResourceExhausted nothing is left half-done: blocks taken are returned.
absl::Status ReserveKv(KvPool& pool, SeqKv& kv, int64_t n_total, const CopyBlockFn& copy);
// Keeps the first n positions (speculative rollback): unrefs the blocks past them.
void TruncateKv(KvPool& pool, SeqKv& kv, int64_t n);
// Unrefs every block.
void ReleaseKv(KvPool& pool, SeqKv& kv);

}  // namespace lockstep::models
