// llama family (SmolLM2): pre-norm, SwiGLU, RoPE in llama.cpp's "normal" pairing (the GGUF
// converter permutes q/k rows so that pairs (2i, 2i+1) match HF's rotate_half).
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {

absl::Status ReadLlamaConfig(const gguf::File& f, Config* c) {
  RETURN_IF_ERROR(ReadCommonConfig(f, "llama", c));
  c->rope_mode = backend::RopeMode::kNormal;
  c->act = backend::Activation::kSilu;
  return absl::OkStatus();
}

}  // namespace lockstep::models
