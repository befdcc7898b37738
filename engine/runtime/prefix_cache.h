// The prefix cache (docs/runtime.md): full KV blocks keyed by a hash chain of their tokens, so a
// request whose prompt starts with cached blocks skips their prefill. Entries hold a reference on
// their block; LRU eviction drops entries whose block nobody else holds. A hit compares the
// stored tokens, so a hash collision can never serve another prompt's KV.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/models/kv_pool.h"

namespace lockstep::runtime {

class PrefixCache {
 public:
  // max_blocks: entries kept at most (the byte budget over the bytes of one block).
  PrefixCache(models::KvPool& pool, int64_t max_blocks, uint64_t salt)
      : pool_(pool), max_blocks_(max_blocks), salt_(salt) {}
  ~PrefixCache() { Clear(); }

  // The longest run of cached full blocks that starts `tokens`; each returned block carries a
  // new reference for the caller.
  std::vector<int32_t> Lookup(std::span<const int32_t> tokens);
  // Offers the full blocks of a sequence (blocks[i] holds tokens[i*bs, (i+1)*bs)).
  void Insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks);
  // Drops the least recently used entry whose block only the cache holds; false if none.
  bool EvictOne();
  void Clear();
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

 private:
  struct Entry {
    int32_t block;
    std::vector<int32_t> tokens;  // this block's tokens
    uint64_t parent;              // hash of the chain up to the previous block
    uint64_t tick;
  };
  uint64_t ChainHash(uint64_t parent, std::span<const int32_t> block_tokens) const;

  models::KvPool& pool_;
  int64_t max_blocks_;
  uint64_t salt_;
  uint64_t tick_ = 0;
  absl::flat_hash_map<uint64_t, Entry> entries_;
};

}  // namespace lockstep::runtime
