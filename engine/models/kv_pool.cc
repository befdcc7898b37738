#include "engine/models/kv_pool.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"

namespace lockstep::models {

KvPool::KvPool(int64_t n_blocks, int64_t block_size) : block_size_(block_size), refs_(n_blocks, 0) {
  free_.reserve(n_blocks);
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

absl::StatusOr<int32_t> KvPool::Allocate() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the KV pool has no free block (", n_blocks(), " blocks of ", block_size_,
                     " tokens, all in use)"));
  }
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void KvPool::Ref(int32_t block) { ++refs_[block]; }

void KvPool::Unref(int32_t block) {
  if (--refs_[block] == 0) free_.push_back(block);
}

absl::Status ReserveKv(KvPool& pool, SeqKv& kv, int64_t n_total, const CopyBlockFn& copy) {
  const int64_t bs = pool.block_size();
  const int64_t need = (n_total + bs - 1) / bs;
  const size_t had = kv.blocks.size();
  // Copy-on-write: the block that the first new position lands in, if it already exists and
  // is shared (a prefix-cache or session block), becomes a private copy.
  if (n_total > kv.n_tokens && kv.n_tokens % bs != 0) {
    const size_t i = static_cast<size_t>(kv.n_tokens / bs);
    if (i < kv.blocks.size() && pool.refcount(kv.blocks[i]) > 1) {
      ASSIGN_OR_RETURN(const int32_t fresh, pool.Allocate());
      const absl::Status s = copy(kv.blocks[i], fresh);
      if (!s.ok()) {
        pool.Unref(fresh);
        return s;
      }
      pool.Unref(kv.blocks[i]);
      kv.blocks[i] = fresh;
    }
  }
  while (static_cast<int64_t>(kv.blocks.size()) < need) {
    absl::StatusOr<int32_t> b = pool.Allocate();
    if (!b.ok()) {
      while (kv.blocks.size() > had) {
        pool.Unref(kv.blocks.back());
        kv.blocks.pop_back();
      }
      return b.status();
    }
    kv.blocks.push_back(*b);
  }
  return absl::OkStatus();
}

void TruncateKv(KvPool& pool, SeqKv& kv, int64_t n) {
  const int64_t bs = pool.block_size();
  const size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  while (kv.blocks.size() > keep) {
    pool.Unref(kv.blocks.back());
    kv.blocks.pop_back();
  }
  if (kv.n_tokens > n) kv.n_tokens = n;
}

void ReleaseKv(KvPool& pool, SeqKv& kv) {
  for (int32_t b : kv.blocks) pool.Unref(b);
  kv.blocks.clear();
  kv.n_tokens = 0;
}

}  // namespace lockstep::models
