#include "engine/spec/frspec.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/quant/quant.h"

namespace lockstep::spec {
namespace {

constexpr char kHead[] = "output.weight";
constexpr char kEmbd[] = "token_embd.weight";

// A line quoted in an error, cut so that a binary file does not flood the terminal.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "\"";
  out.append(s.substr(0, kMax));
  out.append(s.size() > kMax ? "...\"" : "\"");
  return out;
}

// Strict decimal: digits only (no sign, no spaces), at most 10 of them (fits int64 easily).
bool ParseId(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&out, i ? ", " : "", s[i]);
  return out + "]";
}

}  // namespace

absl::Status TokenCounts::Add(std::span<const int32_t> ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at index ", i,
                                                     " is outside the vocabulary [0, ",
                                                     n_vocab(), ")"));
    }
  }
  for (int32_t id : ids) ++counts_[id];
  total_ += static_cast<int64_t>(ids.size());
  return absl::OkStatus();
}

absl::Status TokenCounts::Set(int32_t id, int64_t count) {
  if (id < 0 || id >= n_vocab() || count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("count ", count, " for token id ", id,
                                                   ": id must be in [0, ", n_vocab(),
                                                   ") and the count >= 0"));
  }
  total_ += count - counts_[id];
  counts_[id] = count;
  return absl::OkStatus();
}

int64_t TokenCounts::distinct() const {
  return std::count_if(counts_.begin(), counts_.end(), [](int64_t c) { return c > 0; });
}

std::vector<int32_t> RankByCount(const TokenCounts& counts) {
  std::vector<int32_t> ranks(static_cast<size_t>(counts.n_vocab()));
  std::iota(ranks.begin(), ranks.end(), 0);
  const std::span<const int64_t> c = counts.counts();
  // Starting from id order, a stable sort by count keeps ties (zero counts included) by id.
  std::stable_sort(ranks.begin(), ranks.end(), [c](int32_t a, int32_t b) { return c[a] > c[b]; });
  return ranks;
}

double Coverage(const TokenCounts& counts, std::span<const int32_t> ranks, int64_t top_n) {
  if (counts.total() == 0) return 0;
  const size_t n = static_cast<size_t>(std::clamp<int64_t>(top_n, 0, ranks.size()));
  int64_t covered = 0;
  for (size_t i = 0; i < n; ++i) covered += counts.counts()[ranks[i]];
  return static_cast<double>(covered) / static_cast<double>(counts.total());
}

std::string FormatRanks(std::span<const int32_t> ranks) {
  std::string out;
  out.reserve(ranks.size() * 7);
  for (int32_t id : ranks) absl::StrAppend(&out, id, "\n");
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseRanks(std::string_view text, int64_t n_vocab,
                                                int64_t min_lines) {
  std::vector<int32_t> ids;
  std::vector<int64_t> first_line(static_cast<size_t>(std::max<int64_t>(n_vocab, 0)), 0);
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    int64_t id = 0;
    if (!ParseId(line, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks line ", line_no, ": ", Quote(line), " is not a token id (one decimal integer per line)"));
    }
    if (id >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("ranks line ", line_no, ": id ", id,
                                                     " is outside the vocabulary [0, ", n_vocab,
                                                     ")"));
    }
    if (first_line[id] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("ranks line ", line_no, ": id ", id,
                                                     " already appeared on line ",
                                                     first_line[id]));
    }
    first_line[id] = line_no;
    ids.push_back(static_cast<int32_t>(id));
  }
  if (line_no < min_lines) {
    return absl::InvalidArgumentError(absl::StrCat("the ranks file has ", line_no,
                                                   " lines, fewer than the ", min_lines,
                                                   " ids to keep"));
  }
  return ids;
}

absl::StatusOr<int64_t> DraftVocabSize(const gguf::File& draft) {
  const gguf::TensorInfo* emb = draft.FindTensor(kEmbd);
  if (emb == nullptr) return absl::NotFoundError(absl::StrCat("the draft has no tensor ", kEmbd));
  if (emb->shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", kEmbd, " has shape ",
                                                   ShapeString(emb->shape),
                                                   ", expected [n_embd, n_vocab]"));
  }
  return emb->shape[1];
}

absl::StatusOr<TrimmedBytes> TrimDraft(const gguf::File& draft, std::span<const int32_t> ranks,
                                       const TrimOptions& options) {
  if (draft.Find(kTrimIdsKey) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the draft is already trimmed (it has ", kTrimIdsKey,
        "): its head rows no longer follow the vocabulary; trim the untrimmed model"));
  }
  ASSIGN_OR_RETURN(const int64_t n_vocab, DraftVocabSize(draft));
  const gguf::TensorInfo* emb = draft.FindTensor(kEmbd);
  const int64_t n_embd = emb->shape[0];
  const gguf::TensorInfo* head = draft.FindTensor(kHead);
  const bool tied = head == nullptr;
  if (tied) head = emb;
  if (head->shape != std::vector<int64_t>{n_embd, n_vocab}) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", kHead, " has shape ",
                                                   ShapeString(head->shape), ", expected [",
                                                   n_embd, ", ", n_vocab, "]"));
  }
  const int64_t n = options.n;
  if (n < 1 || n > n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("N = ", n, " must be in [1, ", n_vocab,
                                                   "] (the draft's vocabulary)"));
  }
  if (static_cast<int64_t>(ranks.size()) < n) {
    return absl::InvalidArgumentError(absl::StrCat("the ranks list has ", ranks.size(),
                                                   " ids, fewer than N = ", n));
  }
  std::vector<uint8_t> seen(static_cast<size_t>(n_vocab), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ranks[i];
    if (id < 0 || id >= n_vocab || seen[id]) {
      return absl::InvalidArgumentError(absl::StrCat("ranks[", i, "] = ", id,
                                                     " is not a distinct id in [0, ", n_vocab,
                                                     ")"));
    }
    seen[id] = 1;
  }

  const quant::Type src_type = head->type;
  const quant::Type dst_type = options.type.value_or(src_type);
  const quant::TypeTraits src = quant::Traits(src_type), dst = quant::Traits(dst_type);
  if (dst.name == nullptr) return absl::InvalidArgumentError("--type names no ggml type");
  // Bytes of one row of n_embd elements; the reader already checked n_embd % block == 0 (src).
  const uint64_t src_row = static_cast<uint64_t>(n_embd) / src.block_size * src.type_size;
  std::string head_bytes;
  if (dst_type == src_type) {
    head_bytes.resize(src_row * n);
    const uint8_t* base = draft.TensorData(*head);
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(head_bytes.data() + r * src_row, base + ranks[r] * src_row, src_row);
    }
  } else {
    if (!src.lockstep_codec || !dst.lockstep_codec) {
      return absl::UnimplementedError(absl::StrCat("cannot re-encode the head from ", src.name,
                                                   " to ", dst.name,
                                                   ": lockstep has no codec for one of them"));
    }
    if (n_embd % dst.block_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--type ", dst.name, ": n_embd ", n_embd,
                                                     " is not a multiple of its block size ",
                                                     dst.block_size));
    }
    const uint64_t dst_row = static_cast<uint64_t>(n_embd) / dst.block_size * dst.type_size;
    head_bytes.resize(dst_row * n);
    std::vector<float> row(static_cast<size_t>(n_embd));  // [n_embd] f32, one row at a time
    const uint8_t* base = draft.TensorData(*head);
    for (int64_t r = 0; r < n; ++r) {
      RETURN_IF_ERROR(quant::Dequantize(src_type, base + ranks[r] * src_row, n_embd, row.data()));
      RETURN_IF_ERROR(quant::Quantize(dst_type, row.data(), n_embd, head_bytes.data() + r * dst_row));
    }
  }

  std::vector<gguf::KeyValue> metadata;
  for (const gguf::KeyValue& kv : draft.metadata()) {
    if (kv.key != kTrimSourceKey) metadata.push_back(kv);
  }
  std::vector<gguf::Value> id_values;
  id_values.reserve(n);
  for (int64_t i = 0; i < n; ++i) id_values.push_back(gguf::Value::I32(ranks[i]));
  metadata.push_back({kTrimIdsKey, gguf::Value::Array(gguf::ValueType::INT32, std::move(id_values))});
  metadata.push_back({kTrimSourceKey, gguf::Value::String(options.source_name)});

  const gguf::WriteTensor new_head{kHead, {n_embd, n}, dst_type, head_bytes};
  std::vector<gguf::WriteTensor> tensors;
  for (const gguf::TensorInfo& t : draft.tensors()) {
    if (t.name == kHead) {
      tensors.push_back(new_head);
    } else {
      tensors.push_back({t.name, t.shape, t.type,
                         std::string_view(reinterpret_cast<const char*>(draft.TensorData(t)),
                                          t.n_bytes)});
    }
  }
  if (tied) tensors.push_back(new_head);

  gguf::WriteOptions wo;
  wo.version = draft.version();
  wo.alignment = draft.alignment();
  TrimmedBytes out;
  ASSIGN_OR_RETURN(out.bytes, gguf::Serialize(metadata, tensors, wo));
  out.summary.n_vocab = n_vocab;
  out.summary.n_embd = n_embd;
  out.summary.n_kept = n;
  out.summary.tied = tied;
  out.summary.source_type = src_type;
  out.summary.head_type = dst_type;
  out.summary.head_bytes_before = head->n_bytes;
  out.summary.head_bytes_after = head_bytes.size();
  return out;
}

absl::Status CheckTrimOf(const gguf::File& draft, const gguf::File& trimmed) {
  if (trimmed.Find(kTrimIdsKey) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("the trimmed draft has no ", kTrimIdsKey,
                                                   " (make one with `lockstep trim-draft`)"));
  }
  if (draft.Find(kTrimIdsKey) != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the untrimmed draft has ", kTrimIdsKey, "; pass the model it was trimmed from"));
  }
  for (const gguf::TensorInfo& a : draft.tensors()) {
    if (a.name == kHead) continue;
    const gguf::TensorInfo* b = trimmed.FindTensor(a.name);
    if (b == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", a.name, " is in the draft but not in the trimmed draft"));
    }
    if (a.shape != b->shape || a.type != b->type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", a.name, " is ", quant::Traits(a.type).name, " ", ShapeString(a.shape),
          " in the draft but ", quant::Traits(b->type).name, " ", ShapeString(b->shape),
          " in the trimmed draft: it was not trimmed from this draft"));
    }
    if (std::memcmp(draft.TensorData(a), trimmed.TensorData(*b), a.n_bytes) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", a.name, " has different bytes in the draft and the trimmed draft: it was "
          "not trimmed from this draft"));
    }
  }
  for (const gguf::TensorInfo& b : trimmed.tensors()) {
    if (b.name != kHead && draft.FindTensor(b.name) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", b.name, " is in the trimmed draft but not in the draft"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::spec
