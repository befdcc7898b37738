// FR-Spec (Zhao et al. 2025, "frequency-ranked speculative sampling"): a draft model's LM head
// keeps only the N most frequent tokens, so each draft step scores N rows instead of n_vocab.
// Verification stays full-vocabulary, so what is emitted never changes; only how often the
// draft is right can (a token outside the kept set is never proposed). docs/frspec.md.
//
// This file holds the pieces that are data, not I/O policy: counting and ranking token ids,
// reading and checking a ranks file, and rewriting a draft GGUF with a trimmed head. The CLI
// (engine/cli/cmd_frspec.cc) drives generation and the A/B measurement.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/types.h"

namespace lockstep::spec {

// Metadata keys a trimmed draft carries (engine/models/model.cc reads the first).
inline constexpr char kTrimIdsKey[] = "lockstep.trim.ids";        // INT32 array, [N], rank order
inline constexpr char kTrimSourceKey[] = "lockstep.trim.source";  // STRING: the input file's name

// Per-id occurrence counts over a vocabulary: counts[id] = times id was generated.
class TokenCounts {
 public:
  explicit TokenCounts(int64_t n_vocab) : counts_(static_cast<size_t>(n_vocab), 0) {}
  // Counts every id of `ids`; an id outside [0, n_vocab) is an error naming its index.
  absl::Status Add(std::span<const int32_t> ids);
  // Sets one id's count (tests and merges); the id must be in range.
  absl::Status Set(int32_t id, int64_t count);

  int64_t n_vocab() const { return static_cast<int64_t>(counts_.size()); }
  int64_t total() const { return total_; }     // sum of all counts
  int64_t distinct() const;                    // ids with a count > 0
  std::span<const int64_t> counts() const { return counts_; }

 private:
  std::vector<int64_t> counts_;  // [n_vocab]
  int64_t total_ = 0;
};

// Every id of the vocabulary once, in rank order: count descending, ties by id ascending (so
// never-counted ids come last, by id ascending). [n_vocab].
std::vector<int32_t> RankByCount(const TokenCounts& counts);

// Fraction of all counted tokens whose id is among the first `top_n` of `ranks` (top_n is
// clamped to ranks.size()); 0 when nothing was counted.
double Coverage(const TokenCounts& counts, std::span<const int32_t> ranks, int64_t top_n);

// The ranks file: one decimal id per line, rank order, '\n' line ends (a final line end is
// optional, a '\r' before it is tolerated).
std::string FormatRanks(std::span<const int32_t> ranks);

// Parses a ranks file and checks it against a vocabulary of n_vocab ids: each line one id in
// [0, n_vocab), no id twice, at least `min_lines` lines. Errors name the 1-based line number
// (and, for a duplicate, the line that had the id first). Returns every id in file order.
absl::StatusOr<std::vector<int32_t>> ParseRanks(std::string_view text, int64_t n_vocab,
                                                int64_t min_lines);

struct TrimOptions {
  int64_t n = 0;                      // kept rows, in [1, n_vocab]
  std::optional<quant::Type> type;    // re-encode the new head to this type (default: keep)
  std::string source_name;            // written as lockstep.trim.source
};

struct TrimSummary {
  int64_t n_vocab = 0, n_embd = 0, n_kept = 0;
  bool tied = false;                   // the head was taken from token_embd.weight
  quant::Type source_type = quant::Type::F32, head_type = quant::Type::F32;
  uint64_t head_bytes_before = 0, head_bytes_after = 0;  // the head's rows, all vs kept
};

struct TrimmedBytes {
  std::string bytes;  // the whole new GGUF
  TrimSummary summary;
};

// A copy of `draft` (same version, alignment, metadata order and tensor order) whose
// output.weight is [n_embd, N]: the rows of the first N ids of `ranks`, in that order, taken
// from output.weight or, with tied embeddings, token_embd.weight (which stays whole: it still
// embeds the input). With tied embeddings the new output.weight is appended after the other
// tensors. Metadata gains lockstep.trim.ids (the N ids) and lockstep.trim.source. A draft that
// is already trimmed is refused (its rows no longer index ids). `ranks` must be a valid ranks
// list for the draft's vocabulary (ParseRanks) with at least N entries.
absl::StatusOr<TrimmedBytes> TrimDraft(const gguf::File& draft, std::span<const int32_t> ranks,
                                       const TrimOptions& options);

// The draft's vocabulary size: token_embd.weight's row count. Errors name the tensor.
absl::StatusOr<int64_t> DraftVocabSize(const gguf::File& draft);

// Checks that `trimmed` is `draft` with a trimmed head: a lockstep.trim.ids key, and every
// tensor other than output.weight present in both with the same shape, type and bytes. The
// error names the first tensor that differs (so an A/B compares heads, not bodies).
absl::Status CheckTrimOf(const gguf::File& draft, const gguf::File& trimmed);

}  // namespace lockstep::spec
