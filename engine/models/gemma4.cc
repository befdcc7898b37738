// gemma4 family, text (transformers 5.17 Gemma4ForCausalLM / Gemma4TextModel; llama.cpp
// LLM_ARCH_GEMMA4, src/models/gemma4.cpp; GGUF by conversion/gemma.py's Gemma4Model). Gemma 3's
// layer (embeddings x sqrt(d), q/k norms, post-attention and post-FFN norms, GeGLU) plus:
//   - sliding and full layers by attention.sliding_window_pattern, with their own head_dim
//     (key_length_swa / key_length), rotated dims (rope.dimension_count_swa / dimension_count)
//     and RoPE base (rope.freq_base_swa / freq_base); full layers rotate with the rope_freqs
//     factors (transformers' "proportional" RoPE: 1e30 leaves a pair unrotated);
//   - no attention scale (q_norm carries it) and a weightless RMSNorm of every value head;
//   - the last attention.shared_kv_layers layers project no k / v: each reads the KV cache of
//     the last earlier layer of its own kind (sliding / full), as transformers' shared_kv_states;
//   - per-layer inputs (embedding_length_per_layer_input; blocks.h PerLayerInputs) added after
//     every layer's FFN through blk.N.inp_gate / proj / post_norm, then the layer's output
//     scaled by blk.N.layer_output_scale (transformers' layer_scalar);
//   - final_logit_softcapping on the head; feed_forward_length per layer (double-wide MLPs).
// Norm weights are transformers' own (Gemma4RMSNorm multiplies by w; the converter's
// norm_shift is 0). Refused by name: MoE layers, attention_k_eq_v (no attn_v), fused attn_qkv.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {
namespace {

// blk.il.layer_output_scale.weight: one F32, 1 when the file has none (llama.cpp: optional).
absl::StatusOr<float> ReadLayerScale(const gguf::File& f, int64_t il) {
  const std::string name = absl::StrCat("blk.", il, ".layer_output_scale.weight");
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return 1.0f;
  int64_t n = 1;
  for (int64_t s : t->shape) n *= s;
  if (t->type != quant::Type::F32 || n != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " must be one F32 value, is ", quant::Traits(t->type).name,
                     " with ", n, " elements"));
  }
  float v;
  std::memcpy(&v, f.TensorData(*t), sizeof v);
  return v;
}

}  // namespace

absl::Status ReadGemma4Config(const gguf::File& f, Config* c) {
  RETURN_IF_ERROR(ReadCommonConfig(f, "gemma4", c));
  c->rope_mode = backend::RopeMode::kNeox;
  c->act = backend::Activation::kGeluTanh;
  c->qk_norm = true;
  c->post_norms = true;
  c->v_norm = true;
  c->embed_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->attn_scale = 1.0f;  // transformers: self.scaling = 1.0
  ASSIGN_OR_RETURN(c->final_softcap, GetFloatOr(f, "gemma4.final_logit_softcapping", 0.0f));
  ASSIGN_OR_RETURN(c->n_embd_per_layer, GetInt(f, "gemma4.embedding_length_per_layer_input"));
  if (c->n_embd_per_layer < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemma4.embedding_length_per_layer_input is ", c->n_embd_per_layer, "; must be >= 0"));
  }
  ASSIGN_OR_RETURN(int64_t n_expert, GetIntOr(f, "gemma4.expert_count", 0));
  if (n_expert > 0) {
    return absl::UnimplementedError(absl::StrCat("gemma4 with MoE layers (gemma4.expert_count ",
                                                 n_expert, ") is not supported yet"));
  }

  ASSIGN_OR_RETURN(int64_t window, GetInt(f, "gemma4.attention.sliding_window"));
  ASSIGN_OR_RETURN(int64_t hd_swa, GetInt(f, "gemma4.attention.key_length_swa"));
  ASSIGN_OR_RETURN(int64_t v_swa, GetIntOr(f, "gemma4.attention.value_length_swa", hd_swa));
  ASSIGN_OR_RETURN(int64_t rot_swa, GetIntOr(f, "gemma4.rope.dimension_count_swa", hd_swa));
  ASSIGN_OR_RETURN(float base_swa, GetFloatOr(f, "gemma4.rope.freq_base_swa", 10000.0f));
  if (window <= 0 || hd_swa <= 0 || v_swa != hd_swa || rot_swa <= 0 || rot_swa > hd_swa ||
      rot_swa % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemma4: attention.sliding_window (", window, ") and key_length_swa (", hd_swa,
        ") must be positive, value_length_swa (", v_swa, ") equal to key_length_swa, "
        "rope.dimension_count_swa (", rot_swa, ") even and in (0, key_length_swa]"));
  }
  const gguf::Value* pattern = f.Find("gemma4.attention.sliding_window_pattern");
  if (pattern == nullptr || pattern->type != gguf::ValueType::ARRAY ||
      static_cast<int64_t>(pattern->arr.size()) != c->n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata key gemma4.attention.sliding_window_pattern must be an array of block_count (",
        c->n_layer, ") booleans"));
  }
  for (int64_t il = 0; il < c->n_layer; ++il) {
    LayerConfig& l = c->layers[il];
    l.sliding = pattern->arr[il].AsInt() != 0;
    if (l.sliding) {
      l.window = window;
      l.head_dim = hd_swa;
      l.n_rot = rot_swa;
      l.rope_base = base_swa;
    } else {
      l.rope_freqs = true;  // llama.cpp requires rope_freqs for full layers
    }
    ASSIGN_OR_RETURN(l.out_scale, ReadLayerScale(f, il));
  }

  // KV sharing: layer il >= first reads the last layer before `first` of its kind.
  ASSIGN_OR_RETURN(int64_t n_shared, GetIntOr(f, "gemma4.attention.shared_kv_layers", 0));
  if (n_shared < 0 || n_shared >= c->n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("gemma4.attention.shared_kv_layers is ",
                                                   n_shared, "; must be in [0, block_count)"));
  }
  const int64_t first = c->n_layer - n_shared;
  for (int64_t il = first; il < c->n_layer; ++il) {
    LayerConfig& l = c->layers[il];
    for (int64_t j = first - 1; j >= 0 && l.kv_source < 0; --j) {
      if (c->layers[j].sliding == l.sliding) l.kv_source = j;
    }
    if (l.kv_source < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemma4: KV-shared layer ", il, " is ", l.sliding ? "sliding" : "full",
          " attention, and no layer before ", first, " is; it has no KV cache to read"));
    }
    const LayerDims src = c->Dims(l.kv_source), own = c->Dims(il);
    if (src.head_dim != own.head_dim || src.n_kv_head != own.n_kv_head) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemma4: KV-shared layer ", il, " has ", own.n_kv_head, " kv heads of ", own.head_dim,
          "; the layer it reads (", l.kv_source, ") ", src.n_kv_head, " of ", src.head_dim));
    }
  }
  for (int64_t il = 0; il < first; ++il) {
    if (f.FindTensor(absl::StrCat("blk.", il, ".attn_qkv.weight")) != nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "gemma4 layer ", il, ": a fused blk.", il, ".attn_qkv.weight is not supported yet"));
    }
    if (f.FindTensor(absl::StrCat("blk.", il, ".attn_v.weight")) == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "gemma4 layer ", il, " has no blk.", il, ".attn_v.weight (attention_k_eq_v: values "
          "are the keys); not supported yet"));
    }
    if (f.FindTensor(absl::StrCat("blk.", il, ".ffn_gate_inp.weight")) != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("gemma4 layer ", il, " is an MoE layer; not supported yet"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep::models
