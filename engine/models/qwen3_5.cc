// qwen3_5 family, text (transformers Qwen3_5ForCausalLM; llama.cpp LLM_ARCH_QWEN35, GGUF arch
// "qwen35"): Gated DeltaNet layers and gated full-attention layers (gdn.h), dense SwiGLU FFNs.
// llama.cpp's converter reorders the value heads of the GDN tensors from grouped to tiled order
// (_LinearAttentionVReorderBase), so value head h reads key head h % n_k_head. Its interleaved
// MRoPE sees the same position in every section for text, which is NEOX RoPE over
// rope.dimension_count dims. Norm weights carry the converter's + 1 (plain RMSNorm weights).
#include "engine/core/status.h"
#include "engine/models/families.h"
#include "engine/models/gdn.h"

namespace lockstep::models {

absl::Status ReadQwen35Config(const gguf::File& f, Config* c) {
  RETURN_IF_ERROR(ReadGdnHybridConfig(f, "qwen35", c));
  c->gdn.tiled_k = true;
  c->gdn.fused_ba = false;
  return absl::OkStatus();
}

}  // namespace lockstep::models
