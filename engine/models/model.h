// A decoder-only transformer: hyperparameters (data, not code) and weights bound to GGUF tensors.
// models::Runner (runner.h) runs its forward on a Backend over a paged KV pool. Every layer is a
// token mixer (attention, ...) and an FFN (dense or mixture of experts), each built by a shared
// block builder (blocks.h); an architecture family (llama.cc, qwen3.cc, gemma3.cc, qwen3_moe.cc)
// only fills Config, including each layer's mixer and FFN kind (docs/models.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/models/gdn_types.h"

namespace lockstep::models {

// The token mixer of a layer (blocks.h builds each).
enum class MixerKind {
  kAttention,       // softmax attention over the paged KV cache
  kGatedAttention,  // attention whose output is gated by sigmoid(a second half of q) (qwen3_next)
  kGatedDeltaNet,   // Gated DeltaNet linear attention (qwen3_next, qwen3_5)
};
// The feed-forward part of a layer.
enum class FfnKind {
  kDense,  // act(x W_gate) * (x W_up) W_down
  kMoe,    // routed experts (MoeConfig), plus a shared expert when n_ff_shexp > 0
};
const char* MixerKindName(MixerKind k);
const char* FfnKindName(FfnKind k);

struct LayerConfig {
  bool sliding = false;      // sliding-window attention layer
  int64_t window = 0;        // keys visible: pos - j < window (sliding layers only)
  float rope_base = 10000.0f;
  MixerKind mixer = MixerKind::kAttention;
  FfnKind ffn = FfnKind::kDense;
  // A layer's own attention / FFN shape where it differs from Config's (gemma4: full-attention
  // layers have wider heads, KV-shared layers double-wide FFNs); 0 = Config's. Read through
  // Config::Dims.
  int64_t head_dim = 0, n_kv_head = 0, n_rot = 0, n_ff = 0;
  // >= 0: the earlier layer whose KV cache this layer's attention reads; it projects no k / v
  // and writes no KV of its own (gemma4's KV-shared layers). -1: its own cache.
  int64_t kv_source = -1;
  // RoPE frequencies divided by the GGUF's rope_freqs factors (gemma4's proportional RoPE).
  bool rope_freqs = false;
  float out_scale = 1.0f;    // the layer's output multiplied by this (gemma4's layer_scalar)
};

// The shape of one layer's attention and FFN (Config::Dims).
struct LayerDims {
  int64_t head_dim = 0, n_kv_head = 0, n_rot = 0, n_ff = 0;
  int64_t q_dim(int64_t n_head) const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
};

// The mixture-of-experts hyperparameters (GGUF `<arch>.expert_*`, as llama.cpp names them).
struct MoeConfig {
  int64_t n_expert = 0;       // expert_count
  int64_t n_expert_used = 0;  // expert_used_count: k of the router's top-k
  int64_t n_ff_exp = 0;       // expert_feed_forward_length: rows of one expert's gate/up
  int64_t n_ff_shexp = 0;     // expert_shared_feed_forward_length; 0 = no shared expert
  bool norm_topk = true;      // renormalize the top-k weights to sum to 1 (norm_topk_prob)
  bool shared_gate = false;   // the shared expert's output is scaled by sigmoid(x . ffn_gate_inp_shexp)
};

struct Config {
  std::string arch;          // general.architecture
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_kv_head = 0;
  int64_t head_dim = 0, n_rot = 0, n_ff = 0, n_ctx_train = 0;
  float norm_eps = 1e-5f;
  backend::RopeMode rope_mode = backend::RopeMode::kNormal;
  backend::Activation act = backend::Activation::kSilu;
  bool qk_norm = false;      // per-head RMSNorm of q and k before RoPE (gemma3, qwen3)
  bool post_norms = false;   // RMSNorm of the attention and FFN outputs before the residual (gemma3)
  float embed_scale = 1.0f;  // token embeddings multiplied by this (gemma3: sqrt(n_embd))
  float attn_scale = 1.0f;   // q·k multiplied by this
  float attn_softcap = 0.0f; // 0 = none
  float final_softcap = 0.0f;
  MoeConfig moe;
  GdnConfig gdn;             // Gated DeltaNet layers (qwen3_5, qwen3_next; gdn.h)
  // The pre-FFN RMSNorm tensor of every layer (qwen3_5/qwen3_next: "post_attention_norm").
  const char* ffn_norm_tensor = "ffn_norm";
  std::vector<LayerConfig> layers;
  // Per-layer inputs (gemma4's PLE; GGUF embedding_length_per_layer_input): dims per layer of
  // the per-layer embedding added after every layer's FFN; 0 = none.
  int64_t n_embd_per_layer = 0;
  bool v_norm = false;       // RMSNorm (no weight) of every value head before the KV write (gemma4)
  // MTP / NextN blocks after the n_layer decoder layers (GGUF `<arch>.nextn_predict_layers`),
  // not part of the trunk: only the MTP drafter runs them (engine/models/mtp.h).
  int64_t n_nextn = 0;
  LayerConfig nextn_layer;
  bool HasMoe() const;
  // Layer il's head_dim, n_kv_head, n_rot and n_ff (its own where set, else Config's), and the
  // largest q / kv rows and FFN width over all layers (what a workspace row must hold).
  LayerDims Dims(int64_t il) const;
  int64_t MaxQDim() const;
  int64_t MaxKvDim() const;
  int64_t MaxFf() const;
};

// A layer's tensors; those its mixer and FFN kinds do not use stay unbound (data == nullptr).
struct LayerWeights {
  backend::Weight attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm;
  backend::Weight ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffw_norm;
  // MoE: the router [n_expert, d] and the 3-D expert tensors seen as [n_expert * rows, cols]
  // (ffn_gate_exps/ffn_up_exps: [n_expert * n_ff_exp, d]; ffn_down_exps: [n_expert * d, n_ff_exp]).
  backend::Weight ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps;
  // The shared expert ([n_ff_shexp, d] x2, [d, n_ff_shexp]) and its gate [1, d].
  backend::Weight ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp, ffn_gate_inp_shexp;
  GdnWeights gdn;  // a Gated DeltaNet mixer's tensors (gdn_types.h)
  // Per-layer inputs (gemma4): the gate [ple, d], the projection [d, ple], its post-norm [d];
  // and the RoPE frequency factors [n_rot / 2] of a layer with rope_freqs (rope_freqs.weight).
  backend::Weight ple_gate, ple_proj, ple_post_norm, rope_freqs;
  // Every weight field, in one fixed order (binding, byte counts).
  std::vector<backend::Weight*> All();
  std::vector<const backend::Weight*> All() const;
};

// An MTP / NextN block's tensors (blk.N.nextn.*; engine/models/mtp.h): its decoder layer, the
// projection of [embedding | hidden] [2 n_embd -> n_embd], the two input norms and the head norm
// (unbound: the trunk's output_norm).
struct NextnWeights {
  backend::Weight eh_proj, enorm, hnorm, shared_head_norm;
  LayerWeights layer;
};

struct Weights {
  backend::Weight tok_embd, output_norm, output;
  // Per-layer inputs (Config::n_embd_per_layer > 0): the token table [n_vocab, n_layer * ple],
  // the projection of the scaled embedding [n_layer * ple, d] and its per-layer norm [ple].
  backend::Weight per_layer_tok_embd, per_layer_model_proj, per_layer_proj_norm;
  std::vector<LayerWeights> layers;
  std::vector<NextnWeights> nextn;  // [n_nextn]
  // A trimmed output head (FR-Spec drafts): output row r scores token output_ids[r]. Empty when
  // the head covers the whole vocabulary in id order.
  std::vector<int32_t> output_ids;
};

class Model {
 public:
  // Maps the file, reads hyperparameters through the family registered for its architecture,
  // binds and checks every tensor (shape and type). Errors name the key or tensor.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Model>> FromFile(gguf::File file);

  const Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  const gguf::File& file() const { return file_; }

 private:
  Model(gguf::File file) : file_(std::move(file)) {}
  gguf::File file_;
  Config config_;
  Weights weights_;
};

}  // namespace lockstep::models
