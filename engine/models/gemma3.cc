// gemma3 family: embeddings scaled by sqrt(n_embd), per-head q/k RMSNorm, post-attention and
// post-FFN RMSNorms, GeGLU (tanh GELU), NEOX RoPE. Five sliding-window layers (RoPE base 10000)
// then one global layer (RoPE base from rope.freq_base), repeating — as llama.cpp and HF's
// Gemma3 config (sliding_window_pattern 6) define it. GGUF norm weights already include
// Gemma's "+1" (the converter adds it), so they are used as plain RMSNorm weights.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {

absl::Status ReadGemma3Config(const gguf::File& f, Config* c) {
  RETURN_IF_ERROR(ReadCommonConfig(f, "gemma3", c));
  c->rope_mode = backend::RopeMode::kNeox;
  c->act = backend::Activation::kGeluTanh;
  c->qk_norm = true;
  c->post_norms = true;
  c->embed_scale = std::sqrt(static_cast<float>(c->n_embd));
  ASSIGN_OR_RETURN(int64_t window, GetInt(f, "gemma3.attention.sliding_window"));
  if (window <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemma3.attention.sliding_window must be positive, is ", window));
  }
  // Sliding layers use RoPE base 10000 (HF rope_local_base_freq; llama.cpp freq_base_swa).
  constexpr int kPattern = 6;
  for (int64_t il = 0; il < c->n_layer; ++il) {
    LayerConfig& l = c->layers[il];
    l.sliding = (il % kPattern) < kPattern - 1;
    if (l.sliding) {
      l.window = window;
      l.rope_base = 10000.0f;
    }
  }
  // HF: query_pre_attn_scalar = head_dim for every size but 27B; llama.cpp does the same.
  c->attn_scale = 1.0f / std::sqrt(static_cast<float>(c->head_dim));
  return absl::OkStatus();
}

}  // namespace lockstep::models
