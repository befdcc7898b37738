// qwen3 family: llama-like with per-head RMSNorm of q and k before RoPE, NEOX RoPE pairing.
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {

absl::Status ReadQwen3Config(const gguf::File& f, Config* c) {
  RETURN_IF_ERROR(ReadCommonConfig(f, "qwen3", c));
  c->rope_mode = backend::RopeMode::kNeox;
  c->act = backend::Activation::kSilu;
  c->qk_norm = true;
  return absl::OkStatus();
}

}  // namespace lockstep::models
