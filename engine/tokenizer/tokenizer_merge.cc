// The BPE merge loops. Both keep the symbols of a word as a linked list and the candidate
// pairs in a heap, so a word of n symbols costs O(n log n) (llama.cpp's llm_tokenizer_bpe/spm
// and Hugging Face's Word::merge_all have the same shape): best pair first, the leftmost of
// equals first, stale heap entries skipped when popped.
#include <queue>

#include "engine/tokenizer/tokenizer.h"

namespace lockstep::tokenizer {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

// Byte-level candidate: merge rank (lower first), then position.
struct RankedPair {
  int32_t rank;
  int32_t left;  // symbol index (symbols are in text order, so this is position order)
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  bool operator>(const RankedPair& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

// SentencePiece candidate, ordered the way transformers' generate_merges ranks the merge list
// (Python's stable sort by (score, len(left), len(right)) descending over vocabulary order,
// then each token's splits by (left id, right id)); position breaks the remaining ties.
struct ScoredPair {
  double priority;     // merged token's priority
  int32_t left_cps;    // code points of the left piece
  int32_t right_cps;
  int32_t merged_id;
  int32_t left_id;
  int32_t right_id;
  int32_t left;        // symbol indices
  int32_t right;
  uint32_t left_bytes;  // symbol sizes when the pair was pushed (staleness check)
  uint32_t right_bytes;
  // "Worse than": the heap's top is the best pair.
  bool operator<(const ScoredPair& o) const {
    if (priority != o.priority) return priority < o.priority;
    if (left_cps != o.left_cps) return left_cps < o.left_cps;
    if (right_cps != o.right_cps) return right_cps < o.right_cps;
    if (merged_id != o.merged_id) return merged_id > o.merged_id;
    if (left_id != o.left_id) return left_id > o.left_id;
    if (right_id != o.right_id) return right_id > o.right_id;
    return left > o.left;
  }
};

}  // namespace

void Tokenizer::EncodeTextByteLevel(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::string_view> words;
  SplitWords(text, pre_, &words);
  for (std::string_view word : words) MergeByteLevelWord(word, out);
}

void Tokenizer::MergeByteLevelWord(std::string_view word, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (unsigned char c : word) {
    if (byte_token_[c] >= 0) sym.push_back({byte_token_[c], -1, -1});  // else dropped
  }
  const int32_t n = static_cast<int32_t>(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<RankedPair, std::vector<RankedPair>, std::greater<RankedPair>> heap;
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merges_.find((static_cast<uint64_t>(sym[l].id) << 32) |
                           static_cast<uint32_t>(sym[r].id));
    if (it != merges_.end()) heap.push({it->second.rank, l, r, sym[l].id, sym[r].id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const RankedPair p = heap.top();
    heap.pop();
    Symbol& l = sym[p.left];
    if (l.id != p.left_id || l.next != p.right || sym[p.right].id != p.right_id) continue;
    Symbol& r = sym[p.right];
    l.id = merges_.at((static_cast<uint64_t>(p.left_id) << 32) | static_cast<uint32_t>(p.right_id)).id;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    r.id = -1;
    push(l.prev, p.left);
    push(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0 && n > 0; i = sym[i].next) out->push_back(sym[i].id);
}

void Tokenizer::EncodeTextSentencePiece(std::string_view text, bool at_start,
                                        std::vector<int32_t>* out) const {
  // Normalize: spaces become U+2581; the first segment of the input gets one in front when the
  // vocabulary asks for a space prefix (HF Metaspace prepend_scheme "first").
  std::string norm;
  norm.reserve(text.size() + text.size() / 2 + 3);
  if (at_start && add_space_prefix_ && !text.starts_with(' ') && !text.starts_with(kSpaceMark)) {
    norm += kSpaceMark;
  }
  for (char c : text) {
    if (c == ' ') norm += kSpaceMark;
    else norm.push_back(c);
  }

  struct Symbol {
    uint32_t start;  // byte range in norm
    uint32_t len;    // 0 once merged into its left neighbour
    int32_t id;
    bool mergeable;  // a vocabulary piece (byte-fallback and unknown symbols never merge)
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> sym;
  sym.reserve(norm.size());
  for (size_t pos = 0; pos < norm.size();) {
    const uint32_t len = DecodeUtf8(norm, pos).len;
    const std::string_view ch(norm.data() + pos, len);
    auto it = spm_by_text_.find(AV(ch));
    if (it != spm_by_text_.end()) {
      sym.push_back({static_cast<uint32_t>(pos), len, it->second, true, -1, -1});
    } else {
      // Hugging Face's BPE byte fallback: every byte as <0xXX> if all exist, else one <unk>
      // (consecutive unknowns fused); with neither, the character is dropped.
      bool all_bytes = true;
      for (uint32_t k = 0; k < len; ++k) {
        all_bytes &= byte_fallback_[static_cast<unsigned char>(norm[pos + k])] >= 0;
      }
      if (all_bytes) {
        for (uint32_t k = 0; k < len; ++k) {
          sym.push_back({static_cast<uint32_t>(pos + k), 1,
                         byte_fallback_[static_cast<unsigned char>(norm[pos + k])], false, -1, -1});
        }
      } else if (unk_id_ >= 0) {
        if (!sym.empty() && !sym.back().mergeable && sym.back().id == unk_id_) {
          sym.back().len += len;
        } else {
          sym.push_back({static_cast<uint32_t>(pos), len, unk_id_, false, -1, -1});
        }
      }
    }
    pos += len;
  }
  const int32_t n = static_cast<int32_t>(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < n ? i + 1 : -1;
  }

  std::priority_queue<ScoredPair> heap;
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || !sym[l].mergeable || !sym[r].mergeable) return;
    const std::string_view joined(norm.data() + sym[l].start, sym[l].len + sym[r].len);
    auto it = spm_by_text_.find(AV(joined));
    if (it == spm_by_text_.end()) return;
    const int32_t t = it->second;
    heap.push({priority_[t], cp_len_[sym[l].id], cp_len_[sym[r].id], t, sym[l].id, sym[r].id, l, r,
               sym[l].len, sym[r].len});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const ScoredPair p = heap.top();
    heap.pop();
    Symbol& l = sym[p.left];
    if (l.len != p.left_bytes || l.next != p.right || sym[p.right].len != p.right_bytes) continue;
    Symbol& r = sym[p.right];
    l.len += r.len;
    l.id = p.merged_id;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    r.len = 0;
    push(l.prev, p.left);
    push(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0 && n > 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace lockstep::tokenizer
