// A decoder-only transformer: hyperparameters (data, not code) and weights bound to GGUF tensors.
// models::Runner (runner.h) runs its forward on a Backend over a paged KV pool. Architecture families
// (llama.cc, gemma3.cc, qwen3.cc) differ only in how they fill Config and bind Weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"

namespace lockstep::models {

struct LayerConfig {
  bool sliding = false;      // sliding-window attention layer
  int64_t window = 0;        // keys visible: pos - j < window (sliding layers only)
  float rope_base = 10000.0f;
};

struct Config {
  std::string arch;          // general.architecture
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_kv_head = 0;
  int64_t head_dim = 0, n_rot = 0, n_ff = 0, n_ctx_train = 0;
  float norm_eps = 1e-5f;
  backend::RopeMode rope_mode = backend::RopeMode::kNormal;
  backend::Activation act = backend::Activation::kSilu;
  bool qk_norm = false;      // per-head RMSNorm of q and k before RoPE (gemma3, qwen3)
  bool post_norms = false;   // RMSNorm of the attention and FFN outputs before the residual (gemma3)
  float embed_scale = 1.0f;  // token embeddings multiplied by this (gemma3: sqrt(n_embd))
  float attn_scale = 1.0f;   // q·k multiplied by this
  float attn_softcap = 0.0f; // 0 = none
  float final_softcap = 0.0f;
  std::vector<LayerConfig> layers;
};

struct LayerWeights {
  backend::Weight attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm;
  backend::Weight ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffw_norm;
};

struct Weights {
  backend::Weight tok_embd, output_norm, output;
  std::vector<LayerWeights> layers;
  // A trimmed output head (FR-Spec drafts): output row r scores token output_ids[r]. Empty when
  // the head covers the whole vocabulary in id order.
  std::vector<int32_t> output_ids;
};

class Model {
 public:
  // Maps the file, reads hyperparameters through the family registered for its architecture,
  // binds and checks every tensor (shape and type). Errors name the key or tensor.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Model>> FromFile(gguf::File file);

  const Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  const gguf::File& file() const { return file_; }

 private:
  Model(gguf::File file) : file_(std::move(file)) {}
  gguf::File file_;
  Config config_;
  Weights weights_;
};

}  // namespace lockstep::models
