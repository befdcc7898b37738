#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"

#include <string>

namespace lockstep::models {
namespace {

bool IsInteger(gguf::ValueType t) {
  using VT = gguf::ValueType;
  return t == VT::UINT8 || t == VT::INT8 || t == VT::UINT16 || t == VT::INT16 ||
         t == VT::UINT32 || t == VT::INT32 || t == VT::UINT64 || t == VT::INT64;
}

}  // namespace

absl::StatusOr<int64_t> GetInt(const gguf::File& f, std::string_view key_sv) {
  const std::string key(key_sv);
  const gguf::Value* v = f.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata key ", key));
  if (!IsInteger(v->type)) {
    return absl::InvalidArgumentError(absl::StrCat("metadata key ", key, " must be an integer, is ",
                                                   gguf::ValueTypeName(v->type)));
  }
  return v->AsInt();
}

absl::StatusOr<int64_t> GetIntOr(const gguf::File& f, std::string_view key, int64_t fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return GetInt(f, key);
}

absl::StatusOr<float> GetFloat(const gguf::File& f, std::string_view key_sv) {
  const std::string key(key_sv);
  const gguf::Value* v = f.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata key ", key));
  if (v->type != gguf::ValueType::FLOAT32 && v->type != gguf::ValueType::FLOAT64) {
    return absl::InvalidArgumentError(absl::StrCat("metadata key ", key, " must be a float, is ",
                                                   gguf::ValueTypeName(v->type)));
  }
  return static_cast<float>(v->AsFloat());
}

absl::StatusOr<float> GetFloatOr(const gguf::File& f, std::string_view key, float fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return GetFloat(f, key);
}

absl::StatusOr<std::vector<int64_t>> GetIntPerLayer(const gguf::File& f, std::string_view key_sv,
                                                    int64_t n_layer, int64_t fallback) {
  const std::string key(key_sv);
  const gguf::Value* v = f.Find(key);
  if (v == nullptr || v->type != gguf::ValueType::ARRAY) {
    ASSIGN_OR_RETURN(int64_t x, GetIntOr(f, key, fallback));
    return std::vector<int64_t>(n_layer, x);
  }
  if (static_cast<int64_t>(v->arr.size()) != n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("metadata key ", key, " has ", v->arr.size(),
                                                   " entries; block_count is ", n_layer));
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->arr.size(); ++i) {
    if (!v->arr[i].IsInteger()) {
      return absl::InvalidArgumentError(absl::StrCat("metadata key ", key, "[", i, "] is ",
                                                     gguf::ValueTypeName(v->arr[i].type),
                                                     ", not an integer"));
    }
    out.push_back(v->arr[i].AsInt());
  }
  return out;
}

absl::Status ReadCommonConfig(const gguf::File& f, const std::string& arch, Config* c) {
  auto key = [&](const char* k) { return absl::StrCat(arch, ".", k); };
  c->arch = std::string(arch);
  ASSIGN_OR_RETURN(c->n_embd, GetInt(f, key("embedding_length")));
  ASSIGN_OR_RETURN(c->n_layer, GetInt(f, key("block_count")));
  ASSIGN_OR_RETURN(c->n_head, GetInt(f, key("attention.head_count")));
  if (c->n_layer <= 0 || c->n_layer > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(arch, ": implausible hyperparameters (",
                                                   key("block_count"), " ", c->n_layer,
                                                   "; must be in [1, 4096])"));
  }
  // Either may be one value per layer (llama.cpp's get_key_or_arr): Config holds layer 0's, a
  // layer that differs its own (LayerConfig::n_kv_head / n_ff, set below).
  ASSIGN_OR_RETURN(std::vector<int64_t> kv_heads,
                   GetIntPerLayer(f, key("attention.head_count_kv"), c->n_layer, c->n_head));
  // Absent in all-MoE families (qwen35moe); a dense FFN layer requires it (BindLayer).
  ASSIGN_OR_RETURN(std::vector<int64_t> ffs,
                   GetIntPerLayer(f, key("feed_forward_length"), c->n_layer, 0));
  c->n_kv_head = kv_heads[0];
  c->n_ff = ffs[0];
  for (int64_t il = 0; il < c->n_layer; ++il) {
    if (c->n_head <= 0 || kv_heads[il] <= 0 || c->n_head % kv_heads[il] != 0 || ffs[il] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", il, ": ", key("attention.head_count_kv"), " ", kv_heads[il],
          " must be positive and divide head_count ", c->n_head, "; ",
          key("feed_forward_length"), " ", ffs[il], " must not be negative"));
    }
  }
  ASSIGN_OR_RETURN(c->n_ctx_train, GetIntOr(f, key("context_length"), 0));
  if (c->n_embd <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_kv_head <= 0 || c->n_ff < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        arch, ": embedding_length, block_count, head_count and head_count_kv must all be "
              "positive, feed_forward_length (when present) too"));
  }
  if (c->n_layer > 4096 || c->n_head > 4096 || c->n_embd > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(arch, ": implausible hyperparameters (block_count ",
                                                   c->n_layer, ", head_count ", c->n_head, ")"));
  }
  if (c->n_head % c->n_kv_head != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(key("attention.head_count"), " (", c->n_head, ") is not a multiple of ",
                     key("attention.head_count_kv"), " (", c->n_kv_head, ")"));
  }
  ASSIGN_OR_RETURN(c->head_dim, GetIntOr(f, key("attention.key_length"), c->n_embd / c->n_head));
  ASSIGN_OR_RETURN(int64_t v_len, GetIntOr(f, key("attention.value_length"), c->head_dim));
  if (v_len != c->head_dim) {
    return absl::UnimplementedError(absl::StrCat(key("attention.value_length"), " (", v_len,
                                                 ") differs from key_length (", c->head_dim, ")"));
  }
  ASSIGN_OR_RETURN(c->n_rot, GetIntOr(f, key("rope.dimension_count"), c->head_dim));
  if (c->n_rot <= 0 || c->n_rot > c->head_dim || c->n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(key("rope.dimension_count"), " is ", c->n_rot,
                                                   "; must be even and in (0, head_dim]"));
  }
  ASSIGN_OR_RETURN(c->norm_eps, GetFloat(f, key("attention.layer_norm_rms_epsilon")));
  ASSIGN_OR_RETURN(float base, GetFloatOr(f, key("rope.freq_base"), 10000.0f));
  c->layers.assign(c->n_layer, LayerConfig{false, 0, base});
  for (int64_t il = 0; il < c->n_layer; ++il) {
    if (kv_heads[il] != c->n_kv_head) c->layers[il].n_kv_head = kv_heads[il];
    if (ffs[il] != c->n_ff) c->layers[il].n_ff = ffs[il];
  }
  c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->head_dim));
  return absl::OkStatus();
}

}  // namespace lockstep::models
