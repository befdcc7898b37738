#include "engine/models/requantize.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/core/threads.h"
#include "engine/quant/quant.h"

namespace lockstep::models {
namespace {

using quant::Type;

const std::string kFileTypeKey = "general.file_type";
const std::string kProvenanceKey = "lockstep.requantize";
const std::string kScale2Suffix = ".scale2";

const char* TypeName(Type t) {
  const char* name = quant::Traits(t).name;
  return name != nullptr ? name : "?";
}

// Every type the writer could be asked for, in id order (for "known types" lists).
std::vector<Type> WritableTypes() {
  std::vector<Type> out;
  for (const Type t : quant::CodecTypes()) {
    if (t == Type::Q8_1 || t == Type::Q8_K || t == Type::NVFP4) continue;
    out.push_back(t);
  }
  return out;
}

std::string WritableList() {
  std::vector<std::string> names;
  for (Type t : WritableTypes()) names.emplace_back(TypeName(t));
  return absl::StrJoin(names, ", ");
}

absl::Status CheckWritable(Type t) {
  quant::TypeTraits tr;
  if (!quant::LookupType(static_cast<uint32_t>(t), &tr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type id ", static_cast<uint32_t>(t), " does not exist"));
  }
  if (t == Type::Q8_1 || t == Type::Q8_K) {
    return absl::InvalidArgumentError(absl::StrCat(
        tr.name, " is an activation-only type: ggml defines it only to hold quantized "
        "activations inside dot products (it has no dequantize and no matrix multiply with it as "
        "the weight), so no GGUF reader could use weights stored in it; writable types: ",
        WritableList()));
  }
  if (t == Type::NVFP4) {
    return absl::UnimplementedError(absl::StrCat(
        "NVFP4 is refused: its per-tensor scale lives in a separate <name>.scale2 tensor "
        "(docs/formats.md) that lockstep's forward does not read yet, so an NVFP4 model would "
        "compute with weights off by that scale; writable types: ",
        WritableList()));
  }
  if (!tr.lockstep_codec) {
    return absl::UnimplementedError(absl::StrCat("lockstep cannot encode ", tr.name,
                                                 "; writable types: ", WritableList()));
  }
  return absl::OkStatus();
}

bool IsQuantized(Type t) { return quant::Traits(t).block_size > 1; }

bool IsEmbedding(const std::string& name) {
  return name == "token_embd.weight" || name == "output.weight";
}

enum class Action { kRequantize, kKeepNotWeight, kKeepEmbedding, kKeepSameType, kDropScale2 };

struct Plan {
  Action action = Action::kKeepNotWeight;
  Type to = Type::F32;
  bool fallback = false;
  const gguf::TensorInfo* scale2 = nullptr;  // source NVFP4 weight's per-tensor scale
};

// Decides every tensor's fate before any work, so that a refused tensor costs no time.
absl::StatusOr<std::vector<Plan>> PlanTensors(const gguf::File& in, const RequantizeOptions& o) {
  const std::vector<gguf::TensorInfo>& ts = in.tensors();
  std::vector<Plan> plans(ts.size());
  std::set<std::string> requantized_nvfp4;  // weight names whose scale2 gets folded
  const uint32_t block = quant::Traits(o.type).block_size;
  for (size_t i = 0; i < ts.size(); ++i) {
    const gguf::TensorInfo& t = ts[i];
    Plan& p = plans[i];
    p.to = t.type;
    // Weight matrices, 2-D, or 3-D stacks of expert matrices (rows of shape[0] either way), less
    // what llama.cpp's quantizer keeps as it is (src/llama-quant.cpp): the MoE router and the
    // Gated DeltaNet conv kernel.
    const bool matrix = (t.shape.size() == 2 || t.shape.size() == 3) &&
                        absl::EndsWith(t.name, ".weight") &&
                        !absl::StrContains(t.name, "ffn_gate_inp.weight") &&
                        !absl::StrContains(t.name, "ssm_conv1d");
    if (!matrix) {
      p.action = Action::kKeepNotWeight;
      continue;
    }
    if (o.keep_embeddings && IsEmbedding(t.name)) {
      p.action = Action::kKeepEmbedding;
      continue;
    }
    const int64_t row = t.shape[0];
    Type to = o.type;
    if (row % block != 0) {
      if (!o.fallback.has_value()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor %s has rows of %d elements, not a multiple of %s's block size %u; choose "
            "another type or give a fallback type for such tensors (--fallback TYPE)",
            t.name, row, TypeName(o.type), block));
      }
      const uint32_t fb_block = quant::Traits(*o.fallback).block_size;
      if (row % fb_block != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor %s has rows of %d elements, a multiple of neither %s's block size %u nor the "
            "fallback %s's block size %u",
            t.name, row, TypeName(o.type), block, TypeName(*o.fallback), fb_block));
      }
      to = *o.fallback;
      p.fallback = true;
    }
    if (to == t.type) {
      p.action = Action::kKeepSameType;
      continue;
    }
    if (!quant::Traits(t.type).lockstep_codec) {
      return absl::UnimplementedError(absl::StrFormat(
          "tensor %s has type %s, which lockstep cannot decode, so it cannot be requantized%s",
          t.name, TypeName(t.type),
          IsEmbedding(t.name) ? " (--keep-embeddings would keep it as it is)" : ""));
    }
    p.action = Action::kRequantize;
    p.to = to;
    if (t.type == Type::NVFP4) {
      p.scale2 = in.FindTensor(t.name + kScale2Suffix);
      if (p.scale2 != nullptr) {
        if (p.scale2->type != Type::F32 || p.scale2->n_elements != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor ", p.scale2->name, " must be a single F32 value (NVFP4 per-tensor scale)"));
        }
        requantized_nvfp4.insert(t.name);
      }
    }
  }
  // A scale2 whose weight left NVFP4 has been folded into the weight's values.
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string& n = ts[i].name;
    if (!absl::EndsWith(n, kScale2Suffix)) continue;
    const std::string weight = n.substr(0, n.size() - kScale2Suffix.size());
    if (requantized_nvfp4.count(weight) != 0) plans[i].action = Action::kDropScale2;
  }
  return plans;
}

// Decodes one source weight (times its NVFP4 scale2, if any) and encodes it as plan.to, a row
// at a time across the pool. Rows are independent in every ggml block format, so the bytes equal
// one Quantize call over the whole tensor. dst: [n_bytes of (shape, plan.to)].
absl::Status RequantizeTensor(const gguf::File& in, const gguf::TensorInfo& t, const Plan& plan,
                              core::ThreadPool& pool, std::string* dst) {
  const int64_t cols = t.shape[0];
  int64_t rows = 1;
  for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
  const quant::TypeTraits from = quant::Traits(t.type), to = quant::Traits(plan.to);
  const int64_t src_row_bytes = cols / from.block_size * from.type_size;
  const int64_t dst_row_bytes = cols / to.block_size * to.type_size;
  dst->assign(static_cast<size_t>(rows * dst_row_bytes), '\0');
  float scale2 = 1.0f;
  if (plan.scale2 != nullptr) std::memcpy(&scale2, in.TensorData(*plan.scale2), sizeof(float));
  const uint8_t* src = in.TensorData(t);
  std::mutex mu;
  absl::Status first_error;
  pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));  // [cols] f32
    for (int64_t r = r0; r < r1; ++r) {
      absl::Status s = quant::Dequantize(t.type, src + r * src_row_bytes, cols, row.data());
      if (s.ok() && plan.scale2 != nullptr) {
        for (float& v : row) v *= scale2;
      }
      for (int64_t c = 0; s.ok() && c < cols; ++c) {
        if (!std::isfinite(row[c])) {
          s = absl::InvalidArgumentError(absl::StrFormat(
              "tensor %s has a non-finite value (%g) at row %d, column %d", t.name, row[c], r, c));
        }
      }
      if (s.ok()) s = quant::Quantize(plan.to, row.data(), cols, dst->data() + r * dst_row_bytes);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lk(mu);
        if (first_error.ok()) first_error = s;
        return;
      }
    }
  });
  return first_error;
}

std::vector<gguf::KeyValue> RequantizedMetadata(const gguf::File& in, const RequantizeOptions& o) {
  std::vector<gguf::KeyValue> md;
  md.reserve(in.metadata().size() + 2);
  const std::optional<uint32_t> ftype = LlamaFileType(o.type);
  bool wrote_ftype = false, wrote_provenance = false;
  const gguf::Value provenance =
      gguf::Value::String(absl::StrCat(o.source_name, " -> ", TypeName(o.type)));
  for (const gguf::KeyValue& kv : in.metadata()) {
    if (kv.key == kFileTypeKey) {
      if (!ftype.has_value()) continue;
      // Keeps the declared integer width (llama.cpp writes UINT32).
      const gguf::ValueType vt = kv.value.IsInteger() && kv.value.type != gguf::ValueType::BOOL
                                     ? kv.value.type
                                     : gguf::ValueType::UINT32;
      md.push_back({kv.key, gguf::Value::Int(vt, *ftype)});
      wrote_ftype = true;
    } else if (kv.key == kProvenanceKey) {
      md.push_back({kv.key, provenance});
      wrote_provenance = true;
    } else {
      md.push_back(kv);
    }
  }
  if (ftype.has_value() && !wrote_ftype) {
    md.push_back({kFileTypeKey, gguf::Value::U32(*ftype)});
  }
  if (!wrote_provenance) md.push_back({kProvenanceKey, provenance});
  return md;
}

std::string NameList(const std::vector<std::string>& names, size_t max_shown) {
  std::vector<std::string> shown(names.begin(),
                                 names.begin() + std::min(names.size(), max_shown));
  std::string s = absl::StrJoin(shown, ", ");
  if (names.size() > max_shown) absl::StrAppend(&s, ", and ", names.size() - max_shown, " more");
  return s;
}

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

absl::StatusOr<quant::Type> ParseTargetType(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(std::string(name));
  for (uint32_t id = 0; id < 64; ++id) {
    quant::TypeTraits tr;
    if (!quant::LookupType(id, &tr) || upper != tr.name) continue;
    const Type t = static_cast<Type>(id);
    RETURN_IF_ERROR(CheckWritable(t));
    return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown type \"", std::string(name),
                                                 "\"; writable types: ", WritableList()));
}

std::optional<uint32_t> LlamaFileType(quant::Type t) {
  // llama.h's enum llama_ftype; a file of uniform K-quant weights is given the _M value.
  switch (t) {
    case Type::F32: return 0;      // ALL_F32
    case Type::F16: return 1;      // MOSTLY_F16
    case Type::Q4_0: return 2;
    case Type::Q4_1: return 3;
    case Type::Q8_0: return 7;
    case Type::Q5_0: return 8;
    case Type::Q5_1: return 9;
    case Type::Q2_K: return 10;
    case Type::Q3_K: return 12;    // Q3_K_M
    case Type::Q4_K: return 15;    // Q4_K_M
    case Type::Q5_K: return 17;    // Q5_K_M
    case Type::Q6_K: return 18;
    case Type::IQ4_NL: return 25;
    case Type::IQ4_XS: return 30;
    case Type::BF16: return 32;
    case Type::MXFP4: return 38;   // MXFP4_MOE
    default: return std::nullopt;
  }
}

absl::StatusOr<RequantizedBytes> Requantize(const gguf::File& in, const RequantizeOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(CheckWritable(o.type));
  if (o.fallback.has_value()) {
    absl::Status s = CheckWritable(*o.fallback);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("fallback type: ", s.message()));
  }
  ASSIGN_OR_RETURN(std::vector<Plan> plans, PlanTensors(in, o));

  RequantizedBytes out;
  RequantizeSummary& sum = out.summary;
  const std::vector<gguf::TensorInfo>& ts = in.tensors();
  sum.tensors = static_cast<int64_t>(ts.size());
  sum.bytes_before = in.file_size();
  std::vector<std::string> encoded(ts.size());  // requantized tensors' bytes
  std::vector<gguf::WriteTensor> tensors;
  tensors.reserve(ts.size());
  core::ThreadPool pool(o.threads);
  for (size_t i = 0; i < ts.size(); ++i) {
    const gguf::TensorInfo& t = ts[i];
    const Plan& p = plans[i];
    std::string line = absl::StrFormat("[%d/%d] %s %s", i + 1, ts.size(), t.name, TypeName(t.type));
    std::string_view data(reinterpret_cast<const char*>(in.TensorData(t)), t.n_bytes);
    switch (p.action) {
      case Action::kRequantize:
        RETURN_IF_ERROR(RequantizeTensor(in, t, p, pool, &encoded[i]));
        data = encoded[i];
        ++sum.requantized;
        absl::StrAppend(&line, " -> ", TypeName(p.to));
        if (p.fallback) {
          sum.fallback_names.push_back(t.name);
          absl::StrAppend(&line, " (fallback: rows of ", t.shape[0], " do not fit ",
                          TypeName(o.type), ")");
        }
        if (IsQuantized(t.type)) sum.lossy_to_lossy.push_back({t.name, t.type});
        break;
      case Action::kKeepNotWeight:
        ++sum.kept_not_weight;
        absl::StrAppend(&line, " (kept: not a weight matrix, or a router / conv kernel)");
        break;
      case Action::kKeepEmbedding:
        ++sum.kept_embeddings;
        absl::StrAppend(&line, " (kept: embedding)");
        break;
      case Action::kKeepSameType:
        ++sum.kept_same_type;
        if (p.fallback) sum.fallback_names.push_back(t.name);
        absl::StrAppend(&line, " (kept: already ", TypeName(t.type), ")");
        break;
      case Action::kDropScale2:
        ++sum.dropped_scale2;
        absl::StrAppend(&line, " (dropped: folded into its weight, which left NVFP4)");
        break;
    }
    if (o.progress) o.progress(line);
    if (p.action != Action::kDropScale2) {
      const Type type = p.action == Action::kRequantize ? p.to : t.type;
      tensors.push_back(gguf::WriteTensor{t.name, t.shape, type, data});
    }
  }
  gguf::WriteOptions wo;
  wo.version = in.version();
  wo.alignment = in.alignment();
  ASSIGN_OR_RETURN(out.bytes, gguf::Serialize(RequantizedMetadata(in, o), tensors, wo));
  sum.bytes_after = out.bytes.size();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

absl::StatusOr<RequantizeSummary> RequantizeFile(const std::string& in_path,
                                                 const std::string& out_path,
                                                 RequantizeOptions options) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  if (in_path == out_path || (fs::exists(out_path, ec) && fs::equivalent(in_path, out_path, ec))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output ", out_path, " is the input file; write the requantized model to another path"));
  }
  if (options.source_name.empty()) options.source_name = fs::path(in_path).filename().string();
  ASSIGN_OR_RETURN(gguf::File in, gguf::File::Open(in_path));
  ASSIGN_OR_RETURN(RequantizedBytes r, Requantize(in, options));

  // Written beside the output so that the rename stays on one file system (and is atomic).
  const std::string tmp = absl::StrCat(out_path, ".tmp.", static_cast<long>(getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const size_t wrote = std::fwrite(r.bytes.data(), 1, r.bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (wrote != r.bytes.size() || !closed) {
    const std::string why = std::strerror(errno);
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot write ", tmp, " (", wrote, " of ",
                                            r.bytes.size(), " bytes): ", why));
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", out_path, ": ", why));
  }
  r.summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r.summary;
}

std::string DescribeSummary(const RequantizeSummary& s, const RequantizeOptions& o) {
  const int64_t kept = s.kept_not_weight + s.kept_embeddings + s.kept_same_type;
  std::string out = absl::StrFormat(
      "requantized %d of %d tensors to %s; kept %d (%d not weight matrices, %d embeddings, %d "
      "already in their type)",
      s.requantized, s.tensors, TypeName(o.type), kept, s.kept_not_weight, s.kept_embeddings,
      s.kept_same_type);
  if (s.dropped_scale2 > 0) absl::StrAppend(&out, "; dropped ", s.dropped_scale2, " .scale2");
  out += "\n";
  if (!s.fallback_names.empty()) {
    absl::StrAppend(&out, "fallback ", TypeName(*o.fallback), " for ", s.fallback_names.size(),
                    " tensors whose rows do not fit ", TypeName(o.type), "'s ",
                    quant::Traits(o.type).block_size, "-element blocks: ",
                    NameList(s.fallback_names, 8), "\n");
  }
  if (!s.lossy_to_lossy.empty()) {
    std::map<std::string, int> by_type;
    for (const auto& [name, from] : s.lossy_to_lossy) ++by_type[TypeName(from)];
    std::vector<std::string> parts;
    for (const auto& [type, n] : by_type) parts.push_back(absl::StrCat(type, ": ", n));
    std::vector<std::string> names;
    for (const auto& [name, from] : s.lossy_to_lossy) names.push_back(name);
    const bool all = static_cast<int64_t>(names.size()) == s.requantized;
    absl::StrAppend(&out, "lossy -> lossy (decoded from an already-quantized source, then "
                          "re-encoded): ", all ? "all " : "", names.size(), " tensors (",
                    absl::StrJoin(parts, ", "), ")", all ? "" : ": ", all ? "" : NameList(names, 8),
                    "\n");
  }
  absl::StrAppendFormat(&out, "size %.1f MiB -> %.1f MiB (x%.2f) in %.1f s\n", MiB(s.bytes_before),
                        MiB(s.bytes_after),
                        s.bytes_before > 0 ? static_cast<double>(s.bytes_after) / s.bytes_before
                                           : 0.0,
                        s.seconds);
  return out;
}

}  // namespace lockstep::models
