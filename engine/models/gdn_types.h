// The data of the hybrid Gated DeltaNet families (qwen3_5, qwen3_next; docs/models.md): their
// hyperparameters, the tensors of a GDN layer and the workspace rows its mixer uses. Included by
// model.h (Config, LayerWeights) and blocks.h (Scratch); the builders are in gdn.h.
#pragma once

#include <cstdint>

#include "engine/backend/backend.h"

namespace lockstep::models {

// GGUF `<arch>.ssm.*` as llama.cpp's converter writes them for Qwen3-Next / Qwen3.5:
// conv_kernel, state_size (head_k_dim = head_v_dim), group_count (n_k_head), time_step_rank
// (n_v_head), inner_size (n_v_head * head_v_dim). n_v_head == 0: the model has no GDN layer.
struct GdnConfig {
  int64_t conv_kernel = 0, n_k_head = 0, n_v_head = 0, head_k_dim = 0, head_v_dim = 0;
  bool tiled_k = false;   // value head h reads key head h % n_k_head (qwen3_5's converter order)
  bool fused_ba = false;  // qwen3_next: one ssm_ba [d, 2 n_v_head], per key head (beta | alpha)
  int64_t key_dim() const { return n_k_head * head_k_dim; }
  int64_t value_dim() const { return n_v_head * head_v_dim; }
  int64_t channels() const { return 2 * key_dim() + value_dim(); }
  bool present() const { return n_v_head > 0; }
};

// A GDN layer's mixer tensors (GGUF blk.N.*): attn_qkv [channels, d], attn_gate (z) [value_dim,
// d], ssm_conv1d [channels, K], ssm_dt.bias [n_v_head], ssm_a [n_v_head] (= -exp(A_log)),
// ssm_beta / ssm_alpha [n_v_head, d] or ssm_ba [2 n_v_head, d], ssm_norm [head_v_dim], ssm_out
// [d, value_dim]. Unbound fields have data == nullptr.
struct GdnWeights {
  backend::Weight qkv, z, conv1d, dt_bias, ssm_a, beta, alpha, ba, norm, out;
};

// Workspace rows of the GDN mixer and of the gated attention (each [T, ...]).
struct GdnScratch {
  backend::Tensor qkv, conv;       // [T, channels]: projections, then conv + SiLU
  backend::Tensor z, core, normed; // [T, value_dim]
  backend::Tensor a, b;            // [T, n_v_head]: alpha -> g, beta logits -> beta
  backend::Tensor ba;              // [T, 2 n_v_head] (qwen3_next)
  backend::Tensor qg, agate;       // gated attention: [T, 2 q_dim] (q | gate per head), [T, q_dim]
  GdnScratch Rows(int64_t T) const {
    GdnScratch r;
    for (auto [src, dst] : {std::pair{&qkv, &r.qkv}, {&conv, &r.conv}, {&z, &r.z},
                            {&core, &r.core}, {&normed, &r.normed}, {&a, &r.a}, {&b, &r.b},
                            {&ba, &r.ba}, {&qg, &r.qg}, {&agate, &r.agate}}) {
      *dst = src->data ? src->Rows(0, T) : *src;
    }
    return r;
  }
};

}  // namespace lockstep::models
