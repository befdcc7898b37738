// Requantizing a model file: every 2-D weight matrix is decoded to float and encoded in one
// target type; everything else (1-D norms and biases, metadata) is copied as it is, except that
// general.file_type and lockstep.requantize describe the new file. Used by `lockstep quantize`
// (engine/cli/cmd_quantize.cc); docs/quantize.md is the user-facing description.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/types.h"

namespace lockstep::models {

// The type a weight can be requantized to, parsed from its ggml spelling (any case). Errors
// name the type and why it is refused: unknown; activation-only (Q8_1, Q8_K); no lockstep
// codec; NVFP4 (its per-tensor scale is not read by the forward yet, docs/quantize.md).
absl::StatusOr<quant::Type> ParseTargetType(std::string_view name);

// The llama_ftype value ("MOSTLY_Q4_0" = 2, ...) describing a file whose weights are `t`, or
// nullopt where llama.cpp has no file type for it (then general.file_type is removed).
std::optional<uint32_t> LlamaFileType(quant::Type t);

struct RequantizeOptions {
  quant::Type type = quant::Type::Q8_0;
  // token_embd.weight and output.weight keep their type.
  bool keep_embeddings = false;
  // Type for weights whose row length is not a multiple of `type`'s block size; without it such
  // a weight is an error.
  std::optional<quant::Type> fallback;
  int threads = 0;           // 0 = hardware concurrency
  std::string source_name;   // written as lockstep.requantize = "<source_name> -> <type>"
  // Called once per tensor, in file order, with a line like
  // "[12/272] blk.3.ffn_up.weight Q4_1 -> Q8_0".
  std::function<void(const std::string& line)> progress;
};

struct RequantizeSummary {
  int64_t tensors = 0;          // in the source
  int64_t requantized = 0;      // weights re-encoded (fallbacks included)
  int64_t kept_not_weight = 0;  // not 2-D/3-D *.weight tensors, MoE routers, GDN convs: copied
  int64_t kept_embeddings = 0;  // by keep_embeddings
  int64_t kept_same_type = 0;   // already in the target type: bytes copied, not re-encoded
  int64_t dropped_scale2 = 0;   // NVFP4 "<name>.scale2" tensors of weights that left NVFP4
  std::vector<std::string> fallback_names;  // stored as options.fallback
  // Weights whose source was already block-quantized (lossy -> lossy): name, source type.
  std::vector<std::pair<std::string, quant::Type>> lossy_to_lossy;
  uint64_t bytes_before = 0;    // source file size
  uint64_t bytes_after = 0;     // output file size
  double seconds = 0;           // wall time, reading to written
};

// Requantizes `in` into GGUF bytes (same version, alignment, metadata order and tensor order).
// Every error names the tensor and the numbers or type concerned; no tensor silently changes
// to a type other than options.type or options.fallback.
struct RequantizedBytes {
  std::string bytes;
  RequantizeSummary summary;
};
absl::StatusOr<RequantizedBytes> Requantize(const gguf::File& in, const RequantizeOptions& options);

// Reads in_path, requantizes, writes out_path through a temporary file in the same directory
// that is renamed over out_path only once complete (removed on failure). Refuses
// out_path == in_path (the same file by any name). source_name defaults to in_path's base name.
absl::StatusOr<RequantizeSummary> RequantizeFile(const std::string& in_path,
                                                 const std::string& out_path,
                                                 RequantizeOptions options);

// Multi-line human summary: counts, fallbacks, lossy -> lossy, sizes, time.
std::string DescribeSummary(const RequantizeSummary& s, const RequantizeOptions& options);

}  // namespace lockstep::models
