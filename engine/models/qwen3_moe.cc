// qwen3moe family (transformers Qwen3MoeForCausalLM; llama.cpp LLM_ARCH_QWEN3MOE): qwen3's
// attention (per-head q/k RMSNorm, NEOX RoPE) with a mixture-of-experts FFN: softmax router over
// `expert_count` experts, the top `expert_used_count`, their weights renormalized to sum to 1
// (llama.cpp passes norm_w = true for this architecture; transformers' norm_topk_prob, true in
// every released Qwen3-MoE), SwiGLU experts of `expert_feed_forward_length` rows.
// Every layer is MoE, as llama.cpp loads it (its converter's QWEN3MOE tensor list has no dense
// FFN, so transformers' decoder_sparse_step / mlp_only_layers models do not convert).
#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {

absl::Status ReadQwen3MoeConfig(const gguf::File& f, Config* c) {
  constexpr const char* kArch = "qwen3moe";
  auto key = [&](const char* k) { return absl::StrCat(kArch, ".", k); };
  RETURN_IF_ERROR(ReadCommonConfig(f, kArch, c));
  c->rope_mode = backend::RopeMode::kNeox;
  c->act = backend::Activation::kSilu;
  c->qk_norm = true;
  MoeConfig& m = c->moe;
  ASSIGN_OR_RETURN(m.n_expert, GetInt(f, key("expert_count")));
  ASSIGN_OR_RETURN(m.n_expert_used, GetInt(f, key("expert_used_count")));
  ASSIGN_OR_RETURN(m.n_ff_exp, GetInt(f, key("expert_feed_forward_length")));
  if (m.n_expert < 1 || m.n_expert > 4096 || m.n_expert_used < 1 ||
      m.n_expert_used > m.n_expert || m.n_ff_exp < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        key("expert_count"), " (", m.n_expert, "), ", key("expert_used_count"), " (",
        m.n_expert_used, ") and ", key("expert_feed_forward_length"), " (", m.n_ff_exp,
        ") must satisfy 1 <= used <= count <= 4096 and length >= 1"));
  }
  if (const gguf::Value* v = f.Find(key("expert_weights_norm")); v != nullptr) {
    if (v->type != gguf::ValueType::BOOL) {
      return absl::InvalidArgumentError(absl::StrCat(key("expert_weights_norm"), " must be a bool, is ",
                                                     gguf::ValueTypeName(v->type)));
    }
    m.norm_topk = v->AsInt() != 0;
  }
  for (LayerConfig& l : c->layers) l.ffn = FfnKind::kMoe;
  return absl::OkStatus();
}

}  // namespace lockstep::models
