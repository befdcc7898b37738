// The architecture registry: one entry per family, one file per family (STYLE.md rule 2).
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf/gguf.h"
#include "engine/models/model.h"

namespace lockstep::models {

struct Family {
  std::string_view arch;  // general.architecture
  // Reads `<arch>.*` hyperparameters into *c (n_vocab is known from token_embd).
  absl::Status (*read_config)(const gguf::File& f, Config* c);
};

// Family entry points, one file each (llama.cc, gemma3.cc, qwen3.cc, qwen3_moe.cc). A family
// fills Config: hyperparameters, and each layer's mixer and FFN kind (model.h), whose tensors
// and forward come from the shared block builders (blocks.h).
absl::Status ReadLlamaConfig(const gguf::File& f, Config* c);
absl::Status ReadGemma3Config(const gguf::File& f, Config* c);
absl::Status ReadQwen3Config(const gguf::File& f, Config* c);
absl::Status ReadQwen3MoeConfig(const gguf::File& f, Config* c);
absl::Status ReadQwen35Config(const gguf::File& f, Config* c);     // qwen3_5.cc
absl::Status ReadQwen3NextConfig(const gguf::File& f, Config* c);  // qwen3_next.cc
absl::Status ReadQwen35MoeConfig(const gguf::File& f, Config* c);  // qwen3_5_moe.cc
absl::Status ReadGemma4Config(const gguf::File& f, Config* c);     // gemma4.cc

inline constexpr Family kFamilies[] = {
    {"llama", &ReadLlamaConfig},
    {"gemma3", &ReadGemma3Config},
    {"qwen3", &ReadQwen3Config},
    {"qwen3moe", &ReadQwen3MoeConfig},
    {"qwen35", &ReadQwen35Config},
    {"qwen3next", &ReadQwen3NextConfig},
    {"qwen35moe", &ReadQwen35MoeConfig},
    {"gemma4", &ReadGemma4Config},
};

// Shared hyperparameter readers; errors name the key.
absl::StatusOr<int64_t> GetInt(const gguf::File& f, std::string_view key);
absl::StatusOr<int64_t> GetIntOr(const gguf::File& f, std::string_view key, int64_t fallback);
absl::StatusOr<float> GetFloat(const gguf::File& f, std::string_view key);
absl::StatusOr<float> GetFloatOr(const gguf::File& f, std::string_view key, float fallback);
// One integer per layer: an array of n_layer entries, or a scalar (or `fallback` when absent)
// for every layer, as llama.cpp's get_key_or_arr.
absl::StatusOr<std::vector<int64_t>> GetIntPerLayer(const gguf::File& f, std::string_view key,
                                                    int64_t n_layer, int64_t fallback);
// Fills the fields every family shares: n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff,
// n_rot, norm_eps, rope base, context length, default attention scale.
absl::Status ReadCommonConfig(const gguf::File& f, const std::string& arch, Config* c);

}  // namespace lockstep::models
