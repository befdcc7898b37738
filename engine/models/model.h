// A decoder-only transformer: hyperparameters (data, not code), weights bound to GGUF tensors,
// and one forward over a batch of sequences on any Backend. Architecture families
// (llama.cc, gemma3.cc, qwen3.cc) differ only in how they fill Config and bind Weights.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
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

// One sequence's KV cache: per layer, contiguous [capacity, n_kv_head, head_dim] f32 for K and V.
struct KvCache {
  KvCache(const Config& c, int64_t capacity);
  int64_t capacity = 0;
  int64_t n_past = 0;  // positions 0..n_past-1 are filled
  std::vector<std::vector<float>> k, v;
};

struct BatchEntry {
  KvCache* cache = nullptr;
  std::span<const int32_t> tokens;  // placed at positions cache->n_past ...
};

// Called with each named intermediate ("blk.3.attn_out"): [rows, cols] f32, rows = batch tokens.
using DumpFn = std::function<void(const std::string& name, const float* data, int64_t rows,
                                  int64_t cols)>;

// Runs the batch; advances each cache's n_past by its token count. `logits` receives, per entry
// in order, [T_e, n_out] when all_logits, else [1, n_out] for the entry's last token, where
// n_out = weights().output.rows (n_vocab, or the kept rows of a trimmed head).
absl::Status Forward(const Model& model, backend::Backend& be, std::span<BatchEntry> batch,
                     bool all_logits, std::vector<float>* logits, const DumpFn* dump = nullptr);

}  // namespace lockstep::models
