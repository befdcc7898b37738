// The shared block builders of the decoder forward (docs/models.md): one function per kind of
// token mixer and FFN, each a fixed sequence of Backend calls over the step's T stacked rows, and
// the binder of the tensors each kind reads. An architecture is a Config whose layers name their
// kinds (model.h); models::Runner (runner.cc) runs DecoderLayer over them. As llama.cpp's
// build_attn / build_ffn / build_moe_ffn (src/llama-graph.h), minus the graph.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/models/arena.h"
#include "engine/models/model.h"

namespace lockstep::models {

// Binds tensor `name` of `f`, checking its shape (ggml order: ne[0], ne[1], ...) and that lockstep
// can compute with its type (norm weights: F32 only). A 3-D tensor is seen as
// [ne[1] * ne[2], ne[0]]. Errors name the tensor (model.cc).
absl::StatusOr<backend::Weight> BindTensor(const gguf::File& f, const std::string& name,
                                           std::vector<int64_t> shape, bool f32_only = false);

// The tensors of layer il that its mixer and FFN kinds read, as llama.cpp's converter names them
// (blk.N.attn_q, blk.N.ffn_gate_inp, blk.N.ffn_up_exps, ...). Errors name the tensor.
absl::Status BindLayer(const gguf::File& f, const Config& c, int64_t il, LayerWeights* l);

// The workspace rows of a step (each [T, ...], views of the runner's allocations).
struct Scratch {
  backend::Tensor h;                 // [T, d] the normed input of a block
  backend::Tensor q, attn;           // [T, n_head * head_dim]
  backend::Tensor k, v;              // [T, kv_dim]
  backend::Tensor o;                 // [T, d] a block's output
  backend::Tensor gate, up, act;     // [T, n_ff]
  // MoE (empty unless some layer is kMoe): router logits [T, n_expert], route weights [T, k]
  // and ids [T, k]; per (token, rank) expert rows [T * k, n_ff_exp] and outputs [T * k, d].
  backend::Tensor router, route_w, e_gate, e_up, e_act, e_out;
  backend::IntTensor route_ids;
  // The shared expert: [T, n_ff_shexp] x3, its output [T, d] and gate logit [T, 1].
  backend::Tensor sh_gate, sh_up, sh_act, sh_out, sh_g;
  GdnScratch gdn;  // GDN mixer and gated attention rows (gdn.h)
  // Per-layer inputs (Config::n_embd_per_layer > 0): the layer's slice of the step's per-layer
  // inputs and its gate, [T, ple] each.
  backend::Tensor ple_in, ple_gate;
  // Rows [0, T) of every tensor.
  Scratch Rows(int64_t T) const;
};

// Allocates the rows of every tensor the layers of `c` use, for steps of up to T tokens (the MoE
// and GDN rows only when some layer needs them); `what` names them in an out-of-memory error.
absl::Status AllocateScratch(const Config& c, int64_t T, Arena& arena, const std::string& what,
                             Scratch* s);

// Called with each named intermediate of a layer ("attn_out" of layer il -> "blk.il.attn_out").
using EmitFn = std::function<absl::Status(int64_t layer, const char* name, backend::Tensor t)>;

struct BlockCtx {
  backend::Backend& be;
  const Config& c;
  const backend::KvLayout& layout;
  const Scratch& s;  // rows [0, T) of the step
  const EmitFn& emit;
  // The recurrent state of Gated DeltaNet layers (gdn.h): its layout and, per layer, its memory.
  const backend::GdnLayout* gdn_layout = nullptr;
  const backend::GdnLayer* gdn_state = nullptr;  // [n_layer]
  // The step's per-layer inputs [T, n_layer * ple] (PerLayerInputs); empty without them.
  backend::Tensor ple = {};
};

// The per-layer inputs of a step (gemma4's PLE, transformers' get_per_layer_inputs and
// project_per_layer_inputs), for the scaled embeddings x [T, d], into out [T, n_layer * ple]:
//   out = (rmsnorm_ple(x W_proj / sqrt(d), proj_norm) + embed_ple(tokens) * sqrt(ple)) / sqrt(2)
// tmp: [T, n_layer * ple] workspace.
absl::Status PerLayerInputs(backend::Backend& be, const Config& c, const Weights& w,
                            backend::Tensor x, backend::Tensor tmp, backend::Tensor out);

// The attention projections of h: q_out = h W_q and, for a layer with its own KV, b.s.k and b.s.v
// = h W_k, h W_v, as one MatMulGroup (the separate MatMuls' values; a device backend may run them
// as one launch). q_out: [T, W_q.rows] (the gated mixer's q | gate). Shared by the plain and the
// gated (gdn.h) attention mixers.
absl::Status ProjectQkv(const BlockCtx& b, int64_t il, const LayerWeights& l, backend::Tensor h,
                        backend::Tensor q_out);
// Softmax attention once q [T, n_head * head_dim] is in b.s.q and k, v are projected
// (ProjectQkv): the per-head q/k RMSNorm (when qk_norm), RoPE, the KV write and attention into
// b.s.attn. Shared by the plain and the gated (gdn.h) attention mixers.
absl::Status AttendAfterQ(const BlockCtx& b, int64_t il, const LayerWeights& l,
                          backend::KvLayer kv, bool qk_norm);
// Softmax attention over the paged KV cache of `kv`: q/k/v projections of h, per-head q/k
// RMSNorm (c.qk_norm), RoPE, KV write, attention, output projection into out [T, d].
absl::Status AttentionMixer(const BlockCtx& b, int64_t il, const LayerWeights& l,
                            backend::KvLayer kv, backend::Tensor h, backend::Tensor out);
// out = act(h W_gate) * (h W_up) W_down.   h, out: [T, d]
absl::Status DenseFfn(const BlockCtx& b, int64_t il, const LayerWeights& l, backend::Tensor h,
                      backend::Tensor out);
// Routed experts: router logits = h W_gate_inp (F32 reduction of a plain MatMul), MoeRoute's
// top-k, each chosen expert's SwiGLU FFN on the token's row (MatMulExperts), MoeCombine in rank
// order; plus the shared expert (sigmoid-gated when c.moe.shared_gate) added after.
// h, out: [T, d]
absl::Status MoeFfn(const BlockCtx& b, int64_t il, const LayerWeights& l, backend::Tensor h,
                    backend::Tensor out);

// One pre-norm decoder layer over the residual x [T, d]:
//   x += post_attn_norm?(Mixer(attn_norm(x))); x += post_ffw_norm?(Ffn(ffn_norm(x)))
// with the mixer and FFN of c.layers[il]; with per-layer inputs p = b.ple's slice of layer il,
//   x += post_norm((act(x W_gate) * p) W_proj);
// then x *= out_scale when the layer has one. A kind without a builder yet is an Unimplemented error
// naming the kind and the layer.
absl::Status DecoderLayer(const BlockCtx& b, int64_t il, const LayerWeights& l,
                          backend::KvLayer kv, backend::Tensor x);

}  // namespace lockstep::models
