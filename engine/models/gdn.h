// The block builders of the hybrid Gated DeltaNet families (qwen3_5, qwen3_next; docs/models.md),
// as llama.cpp's src/models/qwen35.cpp / qwen3next.cpp build them:
//   GDN mixer:       qkv = h W_qkv; z = h W_gate; b, a = h W_beta, h W_alpha (or split h W_ba);
//                    g = ssm_a softplus(a + dt_bias); beta = sigmoid(b);
//                    u = silu(causal_conv(qkv)); o = gated_delta_rule(u, g, beta);
//                    out = (rmsnorm(o) w_norm * silu(z)) W_out
//   gated attention: q | gate = h W_q (per head); q, k RMSNormed per head; partial NEOX RoPE;
//                    out = (attention(q, k, v) * sigmoid(gate)) W_o
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/models/blocks.h"
#include "engine/models/model.h"

namespace lockstep::models {

// Reads `<arch>.ssm.*`, the layer pattern (`<arch>.attention.recurrent_layers`, else every
// `full_attention_interval`-th layer is attention) and the shared settings of both families:
// NEOX RoPE over rope.dimension_count dims, per-head q/k RMSNorm, SwiGLU, the FFN pre-norm
// tensor post_attention_norm. Errors name the key.
absl::Status ReadGdnHybridConfig(const gguf::File& f, const std::string& arch, Config* c);

// The mixer tensors of a GDN layer / a gated attention layer (errors name the tensor).
absl::Status BindGdnMixer(const gguf::File& f, const Config& c, int64_t il, LayerWeights* l);
absl::Status BindGatedAttention(const gguf::File& f, const Config& c, int64_t il,
                                LayerWeights* l);

// The state pool's layout for `n_slots` sequences (docs/models.md): per GDN layer, per slot.
backend::GdnLayout GdnStateLayout(const Config& c, int64_t n_slots);
// Backend bytes one slot costs across the GDN layers [first, last).
int64_t GdnSlotBytes(const Config& c, int64_t first, int64_t last);

// Allocates the GDN / gated-attention workspace rows for T tokens through `alloc`.
using AllocFn = std::function<absl::StatusOr<backend::Tensor>(int64_t rows, int64_t cols)>;
absl::Status AllocateGdnScratch(const Config& c, int64_t T, const AllocFn& alloc, GdnScratch* s);

// The mixers: h [T, d] -> out [T, d]. The GDN mixer reads and writes the layer's state through
// b.gdn_layout / b.gdn_state[il] and the step's state slots.
absl::Status GdnMixer(const BlockCtx& b, int64_t il, const LayerWeights& l, backend::Tensor h,
                      backend::Tensor out);
absl::Status GatedAttentionMixer(const BlockCtx& b, int64_t il, const LayerWeights& l,
                                 backend::KvLayer kv, backend::Tensor h, backend::Tensor out);

}  // namespace lockstep::models
