// The block builders (blocks.h). Each is the Backend calls of one block kind in a fixed order; the
// llama / qwen3 / gemma3 forward is AttentionMixer + DenseFfn, op for op what the single
// hard-coded block computed before, so their results are bitwise unchanged.
#include "engine/models/blocks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/gdn.h"

namespace lockstep::models {

using backend::Tensor;

const char* MixerKindName(MixerKind k) {
  switch (k) {
    case MixerKind::kAttention: return "attention";
    case MixerKind::kGatedAttention: return "gated attention";
    case MixerKind::kGatedDeltaNet: return "gated deltanet";
  }
  return "?";
}

const char* FfnKindName(FfnKind k) {
  switch (k) {
    case FfnKind::kDense: return "dense FFN";
    case FfnKind::kMoe: return "MoE FFN";
  }
  return "?";
}

namespace {

// The first rows * cols values of t's rows seen as [t.rows, cols] (a workspace row holds the
// widest layer's row; a narrower layer uses its start).
Tensor Cols(Tensor t, int64_t cols) { return {t.data, t.rows, cols}; }

}  // namespace

absl::Status AllocateScratch(const Config& c, int64_t T, Arena& arena, const std::string& what,
                             Scratch* s) {
  const int64_t d = c.n_embd, q_dim = c.MaxQDim(), kv_dim = c.MaxKvDim(), n_ff = c.MaxFf();
  ASSIGN_OR_RETURN(s->h, arena.NewTensor(T, d, what));
  ASSIGN_OR_RETURN(s->q, arena.NewTensor(T, q_dim, what));
  ASSIGN_OR_RETURN(s->k, arena.NewTensor(T, kv_dim, what));
  ASSIGN_OR_RETURN(s->v, arena.NewTensor(T, kv_dim, what));
  ASSIGN_OR_RETURN(s->attn, arena.NewTensor(T, q_dim, what));
  ASSIGN_OR_RETURN(s->o, arena.NewTensor(T, d, what));
  ASSIGN_OR_RETURN(s->gate, arena.NewTensor(T, n_ff, what));
  ASSIGN_OR_RETURN(s->up, arena.NewTensor(T, n_ff, what));
  ASSIGN_OR_RETURN(s->act, arena.NewTensor(T, n_ff, what));
  if (c.n_embd_per_layer > 0) {
    ASSIGN_OR_RETURN(s->ple_in, arena.NewTensor(T, c.n_embd_per_layer, what));
    ASSIGN_OR_RETURN(s->ple_gate, arena.NewTensor(T, c.n_embd_per_layer, what));
  }
  if (c.HasMoe()) {
    const MoeConfig& m = c.moe;
    const int64_t Tk = T * m.n_expert_used;
    const std::string moe = what + " (MoE)";
    ASSIGN_OR_RETURN(s->router, arena.NewTensor(T, m.n_expert, moe));
    ASSIGN_OR_RETURN(s->route_w, arena.NewTensor(T, m.n_expert_used, moe));
    ASSIGN_OR_RETURN(s->route_ids, arena.NewIntTensor(T, m.n_expert_used, moe));
    ASSIGN_OR_RETURN(s->e_gate, arena.NewTensor(Tk, m.n_ff_exp, moe));
    ASSIGN_OR_RETURN(s->e_up, arena.NewTensor(Tk, m.n_ff_exp, moe));
    ASSIGN_OR_RETURN(s->e_act, arena.NewTensor(Tk, m.n_ff_exp, moe));
    ASSIGN_OR_RETURN(s->e_out, arena.NewTensor(Tk, d, moe));
    if (m.n_ff_shexp > 0) {
      ASSIGN_OR_RETURN(s->sh_gate, arena.NewTensor(T, m.n_ff_shexp, moe));
      ASSIGN_OR_RETURN(s->sh_up, arena.NewTensor(T, m.n_ff_shexp, moe));
      ASSIGN_OR_RETURN(s->sh_act, arena.NewTensor(T, m.n_ff_shexp, moe));
      ASSIGN_OR_RETURN(s->sh_out, arena.NewTensor(T, d, moe));
      ASSIGN_OR_RETURN(s->sh_g, arena.NewTensor(T, 1, moe));
    }
  }
  const std::string gdn = what + " (GDN)";
  return AllocateGdnScratch(
      c, T, [&](int64_t rows, int64_t cols) { return arena.NewTensor(rows, cols, gdn); }, &s->gdn);
}

bool Config::HasMoe() const {
  for (const LayerConfig& l : layers) {
    if (l.ffn == FfnKind::kMoe) return true;
  }
  return false;
}

Scratch Scratch::Rows(int64_t T) const {
  Scratch r;
  for (auto [src, dst] : {std::pair{&h, &r.h}, {&q, &r.q}, {&attn, &r.attn}, {&k, &r.k},
                          {&v, &r.v}, {&o, &r.o}, {&gate, &r.gate}, {&up, &r.up},
                          {&act, &r.act}, {&router, &r.router}, {&route_w, &r.route_w},
                          {&sh_gate, &r.sh_gate}, {&sh_up, &r.sh_up}, {&sh_act, &r.sh_act},
                          {&sh_out, &r.sh_out}, {&sh_g, &r.sh_g}, {&ple_in, &r.ple_in},
                          {&ple_gate, &r.ple_gate}}) {
    *dst = src->data ? src->Rows(0, T) : *src;
  }
  // Per (token, rank) rows: T * k of them.
  const int64_t k = route_ids.cols;
  for (auto [src, dst] : {std::pair{&e_gate, &r.e_gate}, {&e_up, &r.e_up}, {&e_act, &r.e_act},
                          {&e_out, &r.e_out}}) {
    *dst = src->data ? src->Rows(0, T * k) : *src;
  }
  r.route_ids = route_ids.data ? route_ids.Rows(0, T) : route_ids;
  r.gdn = gdn.Rows(T);
  return r;
}

absl::Status BindLayer(const gguf::File& f, const Config& c, int64_t il, LayerWeights* l) {
  const LayerConfig& lc = c.layers[il];
  const LayerDims dm = c.Dims(il);
  const int64_t d = c.n_embd, q_dim = dm.q_dim(c.n_head), kv_dim = dm.kv_dim(), n_ff = dm.n_ff;
  const bool own_kv = lc.kv_source < 0;
  auto n = [il](const char* s) { return absl::StrCat("blk.", il, ".", s, ".weight"); };
  ASSIGN_OR_RETURN(l->attn_norm, BindTensor(f, n("attn_norm"), {d}, true));
  switch (lc.mixer) {
    case MixerKind::kAttention: {
      ASSIGN_OR_RETURN(l->wq, BindTensor(f, n("attn_q"), {d, q_dim}));
      if (own_kv) {
        ASSIGN_OR_RETURN(l->wk, BindTensor(f, n("attn_k"), {d, kv_dim}));
        ASSIGN_OR_RETURN(l->wv, BindTensor(f, n("attn_v"), {d, kv_dim}));
      }
      ASSIGN_OR_RETURN(l->wo, BindTensor(f, n("attn_output"), {q_dim, d}));
      if (c.qk_norm) {
        ASSIGN_OR_RETURN(l->q_norm, BindTensor(f, n("attn_q_norm"), {dm.head_dim}, true));
        if (own_kv) {
          ASSIGN_OR_RETURN(l->k_norm, BindTensor(f, n("attn_k_norm"), {dm.head_dim}, true));
        }
      }
      if (lc.rope_freqs) {
        ASSIGN_OR_RETURN(l->rope_freqs, BindTensor(f, "rope_freqs.weight", {dm.n_rot / 2}, true));
      }
      break;
    }
    case MixerKind::kGatedAttention:
      RETURN_IF_ERROR(BindGatedAttention(f, c, il, l));
      break;
    case MixerKind::kGatedDeltaNet:
      RETURN_IF_ERROR(BindGdnMixer(f, c, il, l));
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("layer ", il, " of ", c.arch, ": the ",
                                                   MixerKindName(lc.mixer),
                                                   " mixer has no block builder yet"));
  }
  ASSIGN_OR_RETURN(l->ffn_norm, BindTensor(f, n(c.ffn_norm_tensor), {d}, true));
  switch (lc.ffn) {
    case FfnKind::kDense: {
      if (n_ff <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            c.arch, ".feed_forward_length is missing or ", n_ff, "; layer ", il,
            " has a dense FFN, which needs it positive"));
      }
      ASSIGN_OR_RETURN(l->ffn_gate, BindTensor(f, n("ffn_gate"), {d, n_ff}));
      ASSIGN_OR_RETURN(l->ffn_up, BindTensor(f, n("ffn_up"), {d, n_ff}));
      ASSIGN_OR_RETURN(l->ffn_down, BindTensor(f, n("ffn_down"), {n_ff, d}));
      break;
    }
    case FfnKind::kMoe: {
      const MoeConfig& m = c.moe;
      ASSIGN_OR_RETURN(l->ffn_gate_inp, BindTensor(f, n("ffn_gate_inp"), {d, m.n_expert}));
      ASSIGN_OR_RETURN(l->ffn_gate_exps,
                       BindTensor(f, n("ffn_gate_exps"), {d, m.n_ff_exp, m.n_expert}));
      ASSIGN_OR_RETURN(l->ffn_up_exps, BindTensor(f, n("ffn_up_exps"), {d, m.n_ff_exp, m.n_expert}));
      ASSIGN_OR_RETURN(l->ffn_down_exps,
                       BindTensor(f, n("ffn_down_exps"), {m.n_ff_exp, d, m.n_expert}));
      if (m.n_ff_shexp > 0) {
        ASSIGN_OR_RETURN(l->ffn_gate_shexp, BindTensor(f, n("ffn_gate_shexp"), {d, m.n_ff_shexp}));
        ASSIGN_OR_RETURN(l->ffn_up_shexp, BindTensor(f, n("ffn_up_shexp"), {d, m.n_ff_shexp}));
        ASSIGN_OR_RETURN(l->ffn_down_shexp, BindTensor(f, n("ffn_down_shexp"), {m.n_ff_shexp, d}));
        if (m.shared_gate) {
          ASSIGN_OR_RETURN(l->ffn_gate_inp_shexp, BindTensor(f, n("ffn_gate_inp_shexp"), {d}));
        }
      }
      break;
    }
  }
  if (c.post_norms) {
    ASSIGN_OR_RETURN(l->post_attn_norm, BindTensor(f, n("post_attention_norm"), {d}, true));
    ASSIGN_OR_RETURN(l->post_ffw_norm, BindTensor(f, n("post_ffw_norm"), {d}, true));
  }
  if (const int64_t ple = c.n_embd_per_layer; ple > 0) {
    ASSIGN_OR_RETURN(l->ple_gate, BindTensor(f, n("inp_gate"), {d, ple}));
    ASSIGN_OR_RETURN(l->ple_proj, BindTensor(f, n("proj"), {ple, d}));
    ASSIGN_OR_RETURN(l->ple_post_norm, BindTensor(f, n("post_norm"), {d}, true));
  }
  return absl::OkStatus();
}

absl::Status ProjectQkv(const BlockCtx& b, int64_t il, const LayerWeights& l, Tensor h, Tensor q_out) {
  if (b.c.layers[il].kv_source >= 0) return b.be.MatMul(l.wq, h, q_out);  // a KV-shared layer
  const int64_t kv_dim = b.c.Dims(il).kv_dim();
  const backend::Weight* ws[3] = {&l.wq, &l.wk, &l.wv};
  const Tensor ys[3] = {q_out, Cols(b.s.k, kv_dim), Cols(b.s.v, kv_dim)};  // [T, kv_dim] x 2
  return b.be.MatMulGroup(ws, h, ys);
}

absl::Status AttendAfterQ(const BlockCtx& b, int64_t il, const LayerWeights& l,
                          backend::KvLayer kv, bool qk_norm) {
  const Config& c = b.c;
  const LayerConfig& lc = c.layers[il];
  const LayerDims dm = c.Dims(il);
  const int64_t hd = dm.head_dim, n_kv = dm.n_kv_head;
  const bool own_kv = lc.kv_source < 0;  // a KV-shared layer reads an earlier layer's cache
  const Tensor q = Cols(b.s.q, dm.q_dim(c.n_head)), k = Cols(b.s.k, dm.kv_dim()),
               v = Cols(b.s.v, dm.kv_dim());
  auto rope = [&](Tensor x, int64_t heads) {
    return lc.rope_freqs ? b.be.RopeFreqFactors(x, heads, hd, dm.n_rot, lc.rope_base,
                                                c.rope_mode, l.rope_freqs)
                         : b.be.Rope(x, heads, hd, dm.n_rot, lc.rope_base, c.rope_mode);
  };
  if (qk_norm) {
    RETURN_IF_ERROR(b.be.RmsNorm(q.Reshaped(hd), &l.q_norm, c.norm_eps, q.Reshaped(hd)));
    if (own_kv) RETURN_IF_ERROR(b.be.RmsNorm(k.Reshaped(hd), &l.k_norm, c.norm_eps, k.Reshaped(hd)));
  }
  if (own_kv && c.v_norm) {
    RETURN_IF_ERROR(b.be.RmsNorm(v.Reshaped(hd), nullptr, c.norm_eps, v.Reshaped(hd)));
  }
  RETURN_IF_ERROR(rope(q, c.n_head));
  if (own_kv) RETURN_IF_ERROR(rope(k, n_kv));
  RETURN_IF_ERROR(b.emit(il, "q", q));
  if (own_kv) {
    RETURN_IF_ERROR(b.emit(il, "k", k));
    RETURN_IF_ERROR(b.emit(il, "v", v));
  }

  backend::AttentionParams ap;
  ap.scale = c.attn_scale;
  ap.window = lc.sliding ? lc.window : 0;
  ap.softcap = c.attn_softcap;
  if (own_kv) RETURN_IF_ERROR(b.be.KvWrite(b.layout, k, v, kv));
  return b.be.PagedAttention(q, b.layout, kv, c.n_head, n_kv, hd, ap,
                             Cols(b.s.attn, dm.q_dim(c.n_head)));
}

absl::Status AttentionMixer(const BlockCtx& b, int64_t il, const LayerWeights& l,
                            backend::KvLayer kv, Tensor h, Tensor out) {
  const int64_t q_dim = b.c.Dims(il).q_dim(b.c.n_head);
  const Tensor q = Cols(b.s.q, q_dim), attn = Cols(b.s.attn, q_dim);
  RETURN_IF_ERROR(ProjectQkv(b, il, l, h, q));  // q: [T, n_head * head_dim]
  RETURN_IF_ERROR(AttendAfterQ(b, il, l, kv, b.c.qk_norm));
  RETURN_IF_ERROR(b.emit(il, "kqv", attn));
  return b.be.MatMul(l.wo, attn, out);
}

absl::Status DenseFfn(const BlockCtx& b, int64_t il, const LayerWeights& l, Tensor h,
                      Tensor out) {
  const int64_t n_ff = b.c.Dims(il).n_ff;
  const Tensor gate = Cols(b.s.gate, n_ff), up = Cols(b.s.up, n_ff), act = Cols(b.s.act, n_ff);
  const backend::Weight* ws[2] = {&l.ffn_gate, &l.ffn_up};  // one MatMulGroup: both read h
  const Tensor ys[2] = {gate, up};
  RETURN_IF_ERROR(b.be.MatMulGroup(ws, h, ys));
  RETURN_IF_ERROR(b.be.Glu(gate, up, b.c.act, act));
  return b.be.MatMul(l.ffn_down, act, out);
}

absl::Status PerLayerInputs(backend::Backend& be, const Config& c, const Weights& w, Tensor x,
                            Tensor tmp, Tensor out) {
  const int64_t ple = c.n_embd_per_layer;
  RETURN_IF_ERROR(be.MatMul(w.per_layer_model_proj, x, tmp));  // [T, n_layer * ple]
  RETURN_IF_ERROR(be.Scale(tmp, 1.0f / std::sqrt(static_cast<float>(c.n_embd)), tmp));
  RETURN_IF_ERROR(be.RmsNorm(tmp.Reshaped(ple), &w.per_layer_proj_norm, c.norm_eps,
                             tmp.Reshaped(ple)));
  RETURN_IF_ERROR(be.Embed(w.per_layer_tok_embd, out));
  RETURN_IF_ERROR(be.Scale(out, std::sqrt(static_cast<float>(ple)), out));
  RETURN_IF_ERROR(be.Add(tmp, out, out));
  return be.Scale(out, 1.0f / std::sqrt(2.0f), out);
}

namespace {

// x += post_norm((act(x W_gate) * p) W_proj), p = layer il's columns of the step's per-layer
// inputs, copied row by row into s.ple_in (Copy is the one backend op that moves a strided slice).
absl::Status PerLayerInputBlock(const BlockCtx& b, int64_t il, const LayerWeights& l, Tensor x) {
  const int64_t ple = b.c.n_embd_per_layer, T = x.rows;
  const Tensor p = b.s.ple_in, g = b.s.ple_gate, o = b.s.o;
  for (int64_t t = 0; t < T; ++t) {
    RETURN_IF_ERROR(b.be.Copy(p.data + t * ple, b.ple.data + t * b.ple.cols + il * ple,
                              ple * static_cast<int64_t>(sizeof(float))));
  }
  RETURN_IF_ERROR(b.be.MatMul(l.ple_gate, x, g));  // [T, ple]
  RETURN_IF_ERROR(b.be.Glu(g, p, b.c.act, g));
  RETURN_IF_ERROR(b.be.MatMul(l.ple_proj, g, o));  // [T, d]
  RETURN_IF_ERROR(b.be.RmsNorm(o, &l.ple_post_norm, b.c.norm_eps, o));
  RETURN_IF_ERROR(b.emit(il, "per_layer_out", o));
  return b.be.Add(x, o, x);
}

}  // namespace

absl::Status MoeFfn(const BlockCtx& b, int64_t il, const LayerWeights& l, Tensor h, Tensor out) {
  const MoeConfig& m = b.c.moe;
  const Scratch& s = b.s;
  RETURN_IF_ERROR(b.be.MatMul(l.ffn_gate_inp, h, s.router));  // [T, n_expert]
  RETURN_IF_ERROR(b.emit(il, "ffn_moe_logits", s.router));
  RETURN_IF_ERROR(b.be.MoeRoute(s.router, m.n_expert_used, m.norm_topk, s.route_w, s.route_ids));
  RETURN_IF_ERROR(b.emit(il, "ffn_moe_weights", s.route_w));
  RETURN_IF_ERROR(b.be.MatMulExperts(l.ffn_gate_exps, m.n_expert, h, s.route_ids, s.e_gate));
  RETURN_IF_ERROR(b.be.MatMulExperts(l.ffn_up_exps, m.n_expert, h, s.route_ids, s.e_up));
  RETURN_IF_ERROR(b.be.Glu(s.e_gate, s.e_up, b.c.act, s.e_act));  // [T * k, n_ff_exp]
  RETURN_IF_ERROR(b.be.MatMulExperts(l.ffn_down_exps, m.n_expert, s.e_act, s.route_ids, s.e_out));
  RETURN_IF_ERROR(b.be.MoeCombine(s.e_out, s.route_w, out));  // [T, d]
  RETURN_IF_ERROR(b.emit(il, "ffn_moe_out", out));
  if (m.n_ff_shexp > 0) {
    // transformers' Qwen3NextSparseMoeBlock: routed + sigmoid(x . g) * shared_expert(x).
    RETURN_IF_ERROR(b.be.MatMul(l.ffn_gate_shexp, h, s.sh_gate));
    RETURN_IF_ERROR(b.be.MatMul(l.ffn_up_shexp, h, s.sh_up));
    RETURN_IF_ERROR(b.be.Glu(s.sh_gate, s.sh_up, b.c.act, s.sh_act));
    RETURN_IF_ERROR(b.be.MatMul(l.ffn_down_shexp, s.sh_act, s.sh_out));
    if (m.shared_gate) {
      RETURN_IF_ERROR(b.be.MatMul(l.ffn_gate_inp_shexp, h, s.sh_g));  // [T, 1]
      RETURN_IF_ERROR(b.be.SigmoidMul(s.sh_out, s.sh_g, s.sh_out));
    }
    RETURN_IF_ERROR(b.emit(il, "ffn_shexp_out", s.sh_out));
    RETURN_IF_ERROR(b.be.Add(out, s.sh_out, out));
  }
  return absl::OkStatus();
}

absl::Status DecoderLayer(const BlockCtx& b, int64_t il, const LayerWeights& l,
                          backend::KvLayer kv, Tensor x) {
  const Config& c = b.c;
  const LayerConfig& lc = c.layers[il];
  const Tensor h = b.s.h, o = b.s.o;

  RETURN_IF_ERROR(b.be.RmsNorm(x, &l.attn_norm, c.norm_eps, h));
  RETURN_IF_ERROR(b.emit(il, "attn_norm", h));
  switch (lc.mixer) {
    case MixerKind::kAttention:
      RETURN_IF_ERROR(AttentionMixer(b, il, l, kv, h, o));
      break;
    case MixerKind::kGatedAttention:
      RETURN_IF_ERROR(GatedAttentionMixer(b, il, l, kv, h, o));
      break;
    case MixerKind::kGatedDeltaNet:
      RETURN_IF_ERROR(GdnMixer(b, il, l, h, o));
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("layer ", il, ": the ", MixerKindName(lc.mixer),
                                                   " mixer has no block builder yet"));
  }
  if (c.post_norms) RETURN_IF_ERROR(b.be.RmsNorm(o, &l.post_attn_norm, c.norm_eps, o));
  RETURN_IF_ERROR(b.emit(il, "attn_out", o));
  RETURN_IF_ERROR(b.be.Add(x, o, x));

  RETURN_IF_ERROR(b.be.RmsNorm(x, &l.ffn_norm, c.norm_eps, h));
  RETURN_IF_ERROR(b.emit(il, "ffn_norm", h));
  switch (lc.ffn) {
    case FfnKind::kDense:
      RETURN_IF_ERROR(DenseFfn(b, il, l, h, o));
      break;
    case FfnKind::kMoe:
      RETURN_IF_ERROR(MoeFfn(b, il, l, h, o));
      break;
  }
  if (c.post_norms) RETURN_IF_ERROR(b.be.RmsNorm(o, &l.post_ffw_norm, c.norm_eps, o));
  RETURN_IF_ERROR(b.emit(il, "ffn_out", o));
  RETURN_IF_ERROR(b.be.Add(x, o, x));
  if (c.n_embd_per_layer > 0) RETURN_IF_ERROR(PerLayerInputBlock(b, il, l, x));
  if (lc.out_scale != 1.0f) RETURN_IF_ERROR(b.be.Scale(x, lc.out_scale, x));
  return b.emit(il, "l_out", x);
}

}  // namespace lockstep::models
