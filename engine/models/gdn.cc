// The hybrid GDN block builders (gdn.h). Tensor names and layouts are llama.cpp's
// (src/models/qwen35.cpp, qwen3next.cpp, conversion/qwen.py); the arithmetic is transformers'
// Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet (docs/models.md).
#include "engine/models/gdn.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {

using backend::Tensor;

namespace {
// transformers' l2norm inside the delta rule: eps fixed at 1e-6 (use_qk_l2norm_in_kernel).
constexpr float kL2NormEps = 1e-6f;
}  // namespace

absl::Status ReadGdnHybridConfig(const gguf::File& f, const std::string& arch, Config* c) {
  auto key = [&](const char* k) { return absl::StrCat(arch, ".", k); };
  RETURN_IF_ERROR(ReadCommonConfig(f, arch, c));
  c->rope_mode = backend::RopeMode::kNeox;
  c->act = backend::Activation::kSilu;
  c->qk_norm = true;
  c->ffn_norm_tensor = "post_attention_norm";
  GdnConfig& g = c->gdn;
  ASSIGN_OR_RETURN(g.conv_kernel, GetInt(f, key("ssm.conv_kernel")));
  ASSIGN_OR_RETURN(g.head_k_dim, GetInt(f, key("ssm.state_size")));
  ASSIGN_OR_RETURN(g.n_k_head, GetInt(f, key("ssm.group_count")));
  ASSIGN_OR_RETURN(g.n_v_head, GetInt(f, key("ssm.time_step_rank")));
  ASSIGN_OR_RETURN(const int64_t inner, GetInt(f, key("ssm.inner_size")));
  if (g.conv_kernel < 1 || g.conv_kernel > 16 || g.head_k_dim < 1 || g.n_k_head < 1 ||
      g.n_v_head < 1 || g.n_v_head % g.n_k_head != 0 || inner % g.n_v_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        arch, ": ssm.conv_kernel (", g.conv_kernel, ") must be in [1, 16]; ssm.state_size (",
        g.head_k_dim, "), ssm.group_count (", g.n_k_head, ") and ssm.time_step_rank (",
        g.n_v_head, ") positive with time_step_rank a multiple of group_count; ssm.inner_size (",
        inner, ") a multiple of time_step_rank"));
  }
  g.head_v_dim = inner / g.n_v_head;
  std::vector<bool> recurrent(c->n_layer);
  if (const gguf::Value* v = f.Find(key("attention.recurrent_layers")); v != nullptr) {
    if (v->type != gguf::ValueType::ARRAY || static_cast<int64_t>(v->arr.size()) < c->n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(key("attention.recurrent_layers"),
                                                     " must be an array of at least ", c->n_layer,
                                                     " bools"));
    }
    for (int64_t il = 0; il < c->n_layer; ++il) recurrent[il] = v->arr[il].AsInt() != 0;
  } else {
    ASSIGN_OR_RETURN(const int64_t every, GetIntOr(f, key("full_attention_interval"), 4));
    if (every < 1) {
      return absl::InvalidArgumentError(absl::StrCat(key("full_attention_interval"), " is ", every));
    }
    for (int64_t il = 0; il < c->n_layer; ++il) recurrent[il] = (il + 1) % every != 0;
  }
  for (int64_t il = 0; il < c->n_layer; ++il) {
    c->layers[il].mixer = recurrent[il] ? MixerKind::kGatedDeltaNet : MixerKind::kGatedAttention;
  }
  return absl::OkStatus();
}

absl::Status BindGdnMixer(const gguf::File& f, const Config& c, int64_t il, LayerWeights* l) {
  const GdnConfig& g = c.gdn;
  const int64_t d = c.n_embd, C = g.channels(), V = g.value_dim(), H = g.n_v_head;
  auto n = [il](const char* s) { return absl::StrCat("blk.", il, ".", s); };
  GdnWeights& w = l->gdn;
  ASSIGN_OR_RETURN(w.qkv, BindTensor(f, n("attn_qkv.weight"), {d, C}));
  ASSIGN_OR_RETURN(w.z, BindTensor(f, n("attn_gate.weight"), {d, V}));
  ASSIGN_OR_RETURN(w.conv1d, BindTensor(f, n("ssm_conv1d.weight"), {g.conv_kernel, C}, true));
  ASSIGN_OR_RETURN(w.dt_bias, BindTensor(f, n("ssm_dt.bias"), {H}, true));
  ASSIGN_OR_RETURN(w.ssm_a, BindTensor(f, n("ssm_a"), {H}, true));
  if (g.fused_ba) {
    ASSIGN_OR_RETURN(w.ba, BindTensor(f, n("ssm_ba.weight"), {d, 2 * H}));
  } else {
    ASSIGN_OR_RETURN(w.beta, BindTensor(f, n("ssm_beta.weight"), {d, H}));
    ASSIGN_OR_RETURN(w.alpha, BindTensor(f, n("ssm_alpha.weight"), {d, H}));
  }
  ASSIGN_OR_RETURN(w.norm, BindTensor(f, n("ssm_norm.weight"), {g.head_v_dim}, true));
  ASSIGN_OR_RETURN(w.out, BindTensor(f, n("ssm_out.weight"), {V, d}));
  return absl::OkStatus();
}

absl::Status BindGatedAttention(const gguf::File& f, const Config& c, int64_t il,
                                LayerWeights* l) {
  const int64_t d = c.n_embd, q_dim = c.n_head * c.head_dim, kv_dim = c.n_kv_head * c.head_dim;
  auto n = [il](const char* s) { return absl::StrCat("blk.", il, ".", s, ".weight"); };
  ASSIGN_OR_RETURN(l->wq, BindTensor(f, n("attn_q"), {d, 2 * q_dim}));  // q | gate per head
  ASSIGN_OR_RETURN(l->wk, BindTensor(f, n("attn_k"), {d, kv_dim}));
  ASSIGN_OR_RETURN(l->wv, BindTensor(f, n("attn_v"), {d, kv_dim}));
  ASSIGN_OR_RETURN(l->wo, BindTensor(f, n("attn_output"), {q_dim, d}));
  ASSIGN_OR_RETURN(l->q_norm, BindTensor(f, n("attn_q_norm"), {c.head_dim}, true));
  ASSIGN_OR_RETURN(l->k_norm, BindTensor(f, n("attn_k_norm"), {c.head_dim}, true));
  return absl::OkStatus();
}

backend::GdnLayout GdnStateLayout(const Config& c, int64_t n_slots) {
  backend::GdnLayout l;
  l.n_slots = n_slots;
  l.conv_kernel = c.gdn.conv_kernel;
  l.n_k_head = c.gdn.n_k_head;
  l.n_v_head = c.gdn.n_v_head;
  l.head_k_dim = c.gdn.head_k_dim;
  l.head_v_dim = c.gdn.head_v_dim;
  l.tiled_k = c.gdn.tiled_k;
  return l;
}

int64_t GdnSlotBytes(const Config& c, int64_t first, int64_t last) {
  if (!c.gdn.present()) return 0;
  const backend::GdnLayout l = GdnStateLayout(c, 1);
  int64_t n = 0;
  for (int64_t il = first; il < last; ++il) {
    if (c.layers[il].mixer == MixerKind::kGatedDeltaNet) n += l.conv_floats() + l.ssm_floats();
  }
  return n * static_cast<int64_t>(sizeof(float));
}

absl::Status AllocateGdnScratch(const Config& c, int64_t T, const AllocFn& alloc, GdnScratch* s) {
  bool gdn = false, gated = false;
  for (const LayerConfig& l : c.layers) {
    gdn |= l.mixer == MixerKind::kGatedDeltaNet;
    gated |= l.mixer == MixerKind::kGatedAttention;
  }
  const GdnConfig& g = c.gdn;
  if (gdn) {
    ASSIGN_OR_RETURN(s->qkv, alloc(T, g.channels()));
    ASSIGN_OR_RETURN(s->conv, alloc(T, g.channels()));
    ASSIGN_OR_RETURN(s->z, alloc(T, g.value_dim()));
    ASSIGN_OR_RETURN(s->core, alloc(T, g.value_dim()));
    ASSIGN_OR_RETURN(s->normed, alloc(T, g.value_dim()));
    ASSIGN_OR_RETURN(s->a, alloc(T, g.n_v_head));
    ASSIGN_OR_RETURN(s->b, alloc(T, g.n_v_head));
    if (g.fused_ba) {
      ASSIGN_OR_RETURN(s->ba, alloc(T, 2 * g.n_v_head));
    }
  }
  if (gated) {
    ASSIGN_OR_RETURN(s->qg, alloc(T, 2 * c.n_head * c.head_dim));
    ASSIGN_OR_RETURN(s->agate, alloc(T, c.n_head * c.head_dim));
  }
  return absl::OkStatus();
}

absl::Status GdnMixer(const BlockCtx& b, int64_t il, const LayerWeights& l, Tensor h, Tensor out) {
  const Config& c = b.c;
  const GdnConfig& g = c.gdn;
  const GdnWeights& w = l.gdn;
  const GdnScratch& s = b.s.gdn;
  if (b.gdn_layout == nullptr || b.gdn_state == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", il, " is a Gated DeltaNet layer but the runner gave it no recurrent state"));
  }
  const backend::GdnLayer state = b.gdn_state[il];
  RETURN_IF_ERROR(b.be.MatMul(w.qkv, h, s.qkv));  // [T, channels]: q | k | v
  RETURN_IF_ERROR(b.be.MatMul(w.z, h, s.z));      // [T, value_dim]
  if (g.fused_ba) {
    // transformers' fix_query_key_value_ordering: per key head, (beta | alpha) of its
    // n_v_head / n_k_head value heads.
    RETURN_IF_ERROR(b.be.MatMul(w.ba, h, s.ba));
    RETURN_IF_ERROR(b.be.SplitHalves(s.ba, g.n_v_head / g.n_k_head, s.b, s.a));
  } else {
    RETURN_IF_ERROR(b.be.MatMul(w.beta, h, s.b));
    RETURN_IF_ERROR(b.be.MatMul(w.alpha, h, s.a));
  }
  RETURN_IF_ERROR(b.be.GdnGates(s.a, s.b, w.dt_bias, w.ssm_a, s.a, s.b));  // a -> g, b -> beta
  RETURN_IF_ERROR(b.be.CausalConvSilu(s.qkv, w.conv1d, *b.gdn_layout, state, s.conv));
  RETURN_IF_ERROR(b.emit(il, "conv_output_silu", s.conv));
  RETURN_IF_ERROR(b.be.GatedDeltaRule(s.conv, s.a, s.b, *b.gdn_layout, state, kL2NormEps, s.core));
  RETURN_IF_ERROR(b.emit(il, "gdn_core", s.core));
  const int64_t dv = g.head_v_dim;
  RETURN_IF_ERROR(b.be.GatedRmsNorm(s.core.Reshaped(dv), w.norm, s.z.Reshaped(dv), c.norm_eps,
                                    s.normed.Reshaped(dv)));
  RETURN_IF_ERROR(b.emit(il, "final_output", s.normed));
  return b.be.MatMul(w.out, s.normed, out);
}

absl::Status GatedAttentionMixer(const BlockCtx& b, int64_t il, const LayerWeights& l,
                                 backend::KvLayer kv, Tensor h, Tensor out) {
  // q and its output gate interleaved per head: [T, n_head * 2 head_dim] -> q | gate.
  const GdnScratch& s = b.s.gdn;
  RETURN_IF_ERROR(ProjectQkv(b, il, l, h, s.qg));
  RETURN_IF_ERROR(b.be.SplitHalves(s.qg, b.c.head_dim, b.s.q, s.agate));
  RETURN_IF_ERROR(AttendAfterQ(b, il, l, kv, /*qk_norm=*/true));
  RETURN_IF_ERROR(b.be.SigmoidMul(b.s.attn, s.agate, b.s.attn));
  RETURN_IF_ERROR(b.emit(il, "kqv", b.s.attn));
  return b.be.MatMul(l.wo, b.s.attn, out);
}

}  // namespace lockstep::models
