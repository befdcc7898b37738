#include "engine/runtime/prefix_cache.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace lockstep::runtime {

uint64_t PrefixCache::ChainHash(uint64_t parent, std::span<const int32_t> block_tokens) const {
  return absl::HashOf(salt_, parent,
                      std::vector<int32_t>(block_tokens.begin(), block_tokens.end()));
}

std::vector<int32_t> PrefixCache::Lookup(std::span<const int32_t> tokens) {
  std::vector<int32_t> out;
  const int64_t bs = pool_.block_size();
  uint64_t parent = 0;
  for (int64_t i = 0; (i + 1) * bs <= static_cast<int64_t>(tokens.size()); ++i) {
    const std::span<const int32_t> bt = tokens.subspan(i * bs, bs);
    const uint64_t h = ChainHash(parent, bt);
    auto it = entries_.find(h);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(bt.begin(), bt.end(), it->second.tokens.begin(), it->second.tokens.end())) {
      break;
    }
    it->second.tick = ++tick_;
    pool_.Ref(it->second.block);
    out.push_back(it->second.block);
    parent = h;
  }
  return out;
}

void PrefixCache::Insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks) {
  if (max_blocks_ <= 0) return;
  const int64_t bs = pool_.block_size();
  uint64_t parent = 0;
  for (int64_t i = 0; (i + 1) * bs <= static_cast<int64_t>(tokens.size()) &&
                      i < static_cast<int64_t>(blocks.size());
       ++i) {
    const std::span<const int32_t> bt = tokens.subspan(i * bs, bs);
    const uint64_t h = ChainHash(parent, bt);
    auto it = entries_.find(h);
    if (it != entries_.end()) {
      it->second.tick = ++tick_;
    } else {
      while (static_cast<int64_t>(entries_.size()) >= max_blocks_) {
        if (!EvictOne()) return;
      }
      pool_.Ref(blocks[i]);
      entries_.emplace(h, Entry{blocks[i], std::vector<int32_t>(bt.begin(), bt.end()), parent,
                                ++tick_});
    }
    parent = h;
  }
}

bool PrefixCache::EvictOne() {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (pool_.refcount(it->second.block) != 1) continue;  // a sequence still uses it
    if (victim == entries_.end() || it->second.tick < victim->second.tick) victim = it;
  }
  if (victim == entries_.end()) return false;
  pool_.Unref(victim->second.block);
  entries_.erase(victim);
  return true;
}

void PrefixCache::Clear() {
  for (auto& [h, e] : entries_) pool_.Unref(e.block);
  entries_.clear();
}

}  // namespace lockstep::runtime
