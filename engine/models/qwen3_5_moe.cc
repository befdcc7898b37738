// qwen3_5_moe family, text (transformers Qwen3_5MoeForCausalLM; llama.cpp LLM_ARCH_QWEN35MOE, GGUF
// arch "qwen35moe"): qwen3_5's Gated DeltaNet and gated attention layers (gdn.h; value heads in
// the converter's tiled order, separate beta and alpha projections) with a mixture-of-experts FFN
// in every layer: softmax router, top-k always renormalized (transformers' Qwen3_5MoeTopKRouter
// divides unconditionally; llama.cpp passes norm_w = true), SwiGLU experts, and a shared expert
// scaled by sigmoid(h . ffn_gate_inp_shexp) (blocks.h MoeFfn).
#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"
#include "engine/models/gdn.h"

namespace lockstep::models {

absl::Status ReadQwen35MoeConfig(const gguf::File& f, Config* c) {
  constexpr const char* kArch = "qwen35moe";
  auto key = [&](const char* k) { return absl::StrCat(kArch, ".", k); };
  RETURN_IF_ERROR(ReadGdnHybridConfig(f, kArch, c));
  c->gdn.tiled_k = true;
  c->gdn.fused_ba = false;
  MoeConfig& m = c->moe;
  ASSIGN_OR_RETURN(m.n_expert, GetInt(f, key("expert_count")));
  ASSIGN_OR_RETURN(m.n_expert_used, GetInt(f, key("expert_used_count")));
  ASSIGN_OR_RETURN(m.n_ff_exp, GetInt(f, key("expert_feed_forward_length")));
  ASSIGN_OR_RETURN(m.n_ff_shexp, GetInt(f, key("expert_shared_feed_forward_length")));
  if (m.n_expert < 1 || m.n_expert > 4096 || m.n_expert_used < 1 ||
      m.n_expert_used > m.n_expert || m.n_ff_exp < 1 || m.n_ff_shexp < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        key("expert_count"), " (", m.n_expert, "), ", key("expert_used_count"), " (",
        m.n_expert_used, "), ", key("expert_feed_forward_length"), " (", m.n_ff_exp, ") and ",
        key("expert_shared_feed_forward_length"), " (", m.n_ff_shexp,
        ") must satisfy 1 <= used <= count <= 4096 and lengths >= 1"));
  }
  m.norm_topk = true;
  m.shared_gate = true;
  for (LayerConfig& l : c->layers) l.ffn = FfnKind::kMoe;
  return absl::OkStatus();
}

}  // namespace lockstep::models
