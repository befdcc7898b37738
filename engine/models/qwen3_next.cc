// qwen3_next family (transformers Qwen3NextForCausalLM; llama.cpp LLM_ARCH_QWEN3NEXT, GGUF arch
// "qwen3next"): Gated DeltaNet layers and gated full-attention layers (gdn.h) with a
// mixture-of-experts FFN in every layer (llama.cpp requires it): softmax top-k router with
// renormalized weights, SwiGLU experts, a sigmoid-gated shared expert (blocks.h MoeFfn). The
// value heads keep transformers' order: value head h reads key head h / (n_v_head / n_k_head);
// beta and alpha come from one ssm_ba projection, per key head.
#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"
#include "engine/models/gdn.h"

namespace lockstep::models {

absl::Status ReadQwen3NextConfig(const gguf::File& f, Config* c) {
  constexpr const char* kArch = "qwen3next";
  auto key = [&](const char* k) { return absl::StrCat(kArch, ".", k); };
  RETURN_IF_ERROR(ReadGdnHybridConfig(f, kArch, c));
  c->gdn.tiled_k = false;
  c->gdn.fused_ba = true;
  MoeConfig& m = c->moe;
  ASSIGN_OR_RETURN(m.n_expert, GetInt(f, key("expert_count")));
  ASSIGN_OR_RETURN(m.n_expert_used, GetInt(f, key("expert_used_count")));
  ASSIGN_OR_RETURN(m.n_ff_exp, GetInt(f, key("expert_feed_forward_length")));
  ASSIGN_OR_RETURN(m.n_ff_shexp, GetIntOr(f, key("expert_shared_feed_forward_length"), 0));
  if (m.n_expert < 1 || m.n_expert > 4096 || m.n_expert_used < 1 ||
      m.n_expert_used > m.n_expert || m.n_ff_exp < 1 || m.n_ff_shexp < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        key("expert_count"), " (", m.n_expert, "), ", key("expert_used_count"), " (",
        m.n_expert_used, "), ", key("expert_feed_forward_length"), " (", m.n_ff_exp,
        ") must satisfy 1 <= used <= count <= 4096 and length >= 1"));
  }
  m.norm_topk = true;     // transformers' norm_topk_prob (Qwen3-Next: true); llama.cpp norm_w
  m.shared_gate = true;   // sigmoid(h . ffn_gate_inp_shexp) * shared_expert(h)
  for (LayerConfig& l : c->layers) l.ffn = FfnKind::kMoe;
  return absl::OkStatus();
}

}  // namespace lockstep::models
