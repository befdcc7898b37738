// MTP / NextN blocks: their config and tensors (read with the model) and MtpHead, their forward
// (mtp.h; docs/models.md, "MTP heads").
#include "engine/models/mtp.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/families.h"
#include "engine/models/gdn.h"

namespace lockstep::models {

using backend::Tensor;

absl::Status SplitNextnLayers(const gguf::File& f, Config* c) {
  const std::string key = absl::StrCat(c->arch, ".nextn_predict_layers");
  ASSIGN_OR_RETURN(const int64_t n, GetIntOr(f, key, 0));
  if (n == 0) return absl::OkStatus();
  if (n < 0 || n >= c->n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(key, " is ", n, "; it must be in [0, ",
                                                   c->arch, ".block_count = ", c->n_layer, ")"));
  }
  c->n_layer -= n;
  c->n_nextn = n;
  c->nextn_layer = c->layers[c->n_layer];
  c->nextn_layer.sliding = false;
  c->nextn_layer.mixer = c->gdn.present() ? MixerKind::kGatedAttention : MixerKind::kAttention;
  c->layers.resize(c->n_layer);
  return absl::OkStatus();
}

absl::Status BindNextnLayers(const gguf::File& f, const Config& c, Weights* w) {
  if (c.n_nextn == 0) return absl::OkStatus();
  Config with = c;  // BindLayer reads c.layers[il]
  with.layers.resize(c.n_layer + c.n_nextn, c.nextn_layer);
  const int64_t d = c.n_embd;
  w->nextn.resize(c.n_nextn);
  for (int64_t j = 0; j < c.n_nextn; ++j) {
    const int64_t il = c.n_layer + j;
    NextnWeights& nw = w->nextn[j];
    auto n = [il](const char* s) { return absl::StrCat("blk.", il, ".nextn.", s, ".weight"); };
    for (const char* own : {"embed_tokens", "shared_head_head"}) {
      if (f.FindTensor(n(own)) != nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            "tensor ", n(own), ": an MTP block with its own ", own,
            " is not supported (lockstep's MTP head shares the trunk's)"));
      }
    }
    RETURN_IF_ERROR(BindLayer(f, with, il, &nw.layer));
    ASSIGN_OR_RETURN(nw.eh_proj, BindTensor(f, n("eh_proj"), {2 * d, d}));
    ASSIGN_OR_RETURN(nw.enorm, BindTensor(f, n("enorm"), {d}, true));
    ASSIGN_OR_RETURN(nw.hnorm, BindTensor(f, n("hnorm"), {d}, true));
    if (f.FindTensor(n("shared_head_norm")) != nullptr) {
      ASSIGN_OR_RETURN(nw.shared_head_norm, BindTensor(f, n("shared_head_norm"), {d}, true));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MtpHead>> MtpHead::Create(const Model& target, backend::Backend& be,
                                                         const MtpOptions& options) {
  const Config& c = target.config();
  if (c.n_nextn < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", c.arch, " model has no MTP block (no ", c.arch, ".nextn_predict_layers)"));
  }
  if (!target.weights().output_ids.empty()) {
    return absl::UnimplementedError("an MTP head over a trimmed output head is not supported");
  }
  if (options.max_step_tokens < 1 || options.block_size < 1 || options.n_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MTP options: max_step_tokens (", options.max_step_tokens, "), block_size (",
        options.block_size, ") and n_blocks (", options.n_blocks, ") must all be >= 1"));
  }
  std::unique_ptr<MtpHead> h(new MtpHead(target, be, options));
  RETURN_IF_ERROR(h->Init());
  return h;
}

MtpHead::~MtpHead() = default;

absl::Status MtpHead::Init() {
  const Config& tc = target_.config();
  const Weights& w = target_.weights();
  const NextnWeights& nw = w.nextn[0];
  il_ = tc.n_layer;
  c_ = tc;
  c_.layers.push_back(tc.nextn_layer);
  c_.n_layer = tc.n_layer + 1;
  auto bind = [&](const backend::Weight& host, backend::Weight* out) -> absl::Status {
    if (!host.bound()) {
      *out = host;
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(*out, be_.BindWeight(host));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(bind(w.tok_embd, &tok_embd_));
  RETURN_IF_ERROR(bind(w.output, &output_));
  RETURN_IF_ERROR(bind(nw.shared_head_norm.bound() ? nw.shared_head_norm : w.output_norm,
                       &head_norm_));
  RETURN_IF_ERROR(bind(nw.eh_proj, &eh_proj_));
  RETURN_IF_ERROR(bind(nw.enorm, &enorm_));
  RETURN_IF_ERROR(bind(nw.hnorm, &hnorm_));
  const std::vector<const backend::Weight*> src = nw.layer.All();
  const std::vector<backend::Weight*> dst = layer_.All();
  for (size_t i = 0; i < src.size(); ++i) RETURN_IF_ERROR(bind(*src[i], dst[i]));

  layout_.n_blocks = options_.n_blocks;
  layout_.block_size = options_.block_size;
  layout_.kv_dim = tc.n_kv_head * tc.head_dim;
  ASSIGN_OR_RETURN(kv_.k, arena_.Allocate(layout_.k_bytes(), "MTP KV pool (K)"));
  ASSIGN_OR_RETURN(kv_.v, arena_.Allocate(layout_.v_bytes(), "MTP KV pool (V)"));

  const int64_t T = options_.max_step_tokens, d = tc.n_embd;
  ASSIGN_OR_RETURN(e_, arena_.NewTensor(T, d, "MTP workspace"));
  ASSIGN_OR_RETURN(h_, arena_.NewTensor(T, d, "MTP workspace"));
  ASSIGN_OR_RETURN(ec_, arena_.NewTensor(T, 2 * d, "MTP workspace"));
  ASSIGN_OR_RETURN(x_, arena_.NewTensor(T, d, "MTP workspace"));
  ASSIGN_OR_RETURN(sel_, arena_.NewTensor(T, d, "MTP workspace"));
  ASSIGN_OR_RETURN(logits_, arena_.NewTensor(T, output_.rows, "MTP workspace"));
  Config only = tc;  // the block's one layer: its attention, FFN (dense or MoE) and gate rows
  only.layers = {tc.nextn_layer};
  return AllocateScratch(only, T, arena_, "MTP workspace", &s_);
}

absl::Status MtpHead::CopyBlock(int32_t src, int32_t dst) {
  const int64_t kb = layout_.block_size * quant::KvRowBytes(layout_.k_format, layout_.kv_dim);
  const int64_t vb = layout_.block_size * quant::KvRowBytes(layout_.v_format, layout_.kv_dim);
  auto* k = static_cast<uint8_t*>(kv_.k);
  auto* v = static_cast<uint8_t*>(kv_.v);
  RETURN_IF_ERROR(be_.Copy(k + dst * kb, k + src * kb, kb));
  return be_.Copy(v + dst * vb, v + src * vb, vb);
}

absl::Status MtpHead::Forward(const MtpEntry& e, std::vector<float>* logits, std::vector<float>* g,
                              const DumpFn* dump) {
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  const int64_t d = n_embd(), bs = layout_.block_size;
  if (T < 1 || T > options_.max_step_tokens || e.n_out < 1 || e.n_out > T) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MTP step: ", T, " rows (at most ", options_.max_step_tokens, ") asking for ", e.n_out,
        " output rows"));
  }
  if (static_cast<int64_t>(e.hidden.size()) != T * d) {
    return absl::InvalidArgumentError(absl::StrCat("MTP step: ", e.hidden.size(),
                                                   " hidden floats for ", T, " rows of ", d));
  }
  if (e.start < 0 || (e.start + T + bs - 1) / bs > static_cast<int64_t>(e.blocks.size())) {
    return absl::OutOfRangeError(absl::StrCat("MTP step: positions [", e.start, ", ", e.start + T,
                                              ") do not fit its ", e.blocks.size(), " KV blocks"));
  }
  backend::StepMeta meta;
  meta.query_start = {0, static_cast<int32_t>(T)};
  meta.seq_len = {static_cast<int32_t>(e.start + T)};
  meta.block_table.assign(e.blocks.begin(), e.blocks.end());
  meta.max_blocks = static_cast<int64_t>(e.blocks.size());
  for (int64_t i = 0; i < T; ++i) {
    const int32_t tok = e.tokens[i];
    if (tok < 0 || tok >= n_vocab()) {
      return absl::InvalidArgumentError(
          absl::StrCat("MTP step: token #", i, " is ", tok, ", outside [0, ", n_vocab(), ")"));
    }
    const int64_t p = e.start + i;
    meta.tokens.push_back(tok);
    meta.positions.push_back(static_cast<int32_t>(p));
    meta.slots.push_back(static_cast<int32_t>(e.blocks[p / bs] * bs + p % bs));
    if (i >= T - e.n_out) meta.output_rows.push_back(static_cast<int32_t>(i));
  }
  meta.may_capture = dump == nullptr;
  const int64_t R = e.n_out;
  RETURN_IF_ERROR(be_.BeginStep(meta));
  const Tensor emb = e_.Rows(0, T), hid = h_.Rows(0, T), ec = ec_.Rows(0, T), x = x_.Rows(0, T);
  const Tensor sel = sel_.Rows(0, R), out = logits_.Rows(0, R);
  auto emit = [&](const char* name, Tensor t) -> absl::Status {
    if (dump == nullptr) return absl::OkStatus();
    std::vector<float> buf(t.size());
    RETURN_IF_ERROR(be_.Download(buf.data(), t.data, t.size() * sizeof(float)));
    (*dump)(absl::StrCat("blk.", il_, ".", name), buf.data(), t.rows, t.cols);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(be_.Embed(tok_embd_, emb));
  if (c_.embed_scale != 1.0f) RETURN_IF_ERROR(be_.Scale(emb, c_.embed_scale, emb));
  RETURN_IF_ERROR(be_.RmsNorm(emb, &enorm_, c_.norm_eps, emb));
  RETURN_IF_ERROR(be_.Upload(hid.data, e.hidden.data(), T * d * sizeof(float)));
  RETURN_IF_ERROR(be_.RmsNorm(hid, &hnorm_, c_.norm_eps, hid));
  // [e | h] per row: [T, 2d] (vLLM torch.cat([inputs_embeds, hidden_states], -1)).
  for (int64_t i = 0; i < T; ++i) {
    RETURN_IF_ERROR(be_.Copy(ec.data + i * 2 * d, emb.data + i * d, d * sizeof(float)));
    RETURN_IF_ERROR(be_.Copy(ec.data + i * 2 * d + d, hid.data + i * d, d * sizeof(float)));
  }
  RETURN_IF_ERROR(emit("mtp_concat", ec));
  RETURN_IF_ERROR(be_.MatMul(eh_proj_, ec, x));
  RETURN_IF_ERROR(emit("mtp_eh_proj", x));
  const EmitFn layer_emit = [&](int64_t, const char* name, Tensor t) { return emit(name, t); };
  const Scratch s = s_.Rows(T);
  const BlockCtx b{be_, c_, layout_, s, layer_emit, nullptr, nullptr};
  RETURN_IF_ERROR(DecoderLayer(b, il_, layer_, kv_, x));
  RETURN_IF_ERROR(be_.GatherRows(x, sel));
  RETURN_IF_ERROR(be_.RmsNorm(sel, &head_norm_, c_.norm_eps, sel));
  RETURN_IF_ERROR(emit("h_nextn", sel));
  RETURN_IF_ERROR(be_.MatMul(output_, sel, out));
  if (c_.final_softcap > 0.0f) RETURN_IF_ERROR(be_.Softcap(out, c_.final_softcap));
  logits->resize(R * output_.rows);
  g->resize(R * d);
  RETURN_IF_ERROR(be_.Download(logits->data(), out.data, R * output_.rows * sizeof(float)));
  RETURN_IF_ERROR(be_.Download(g->data(), sel.data, R * d * sizeof(float)));
  return be_.Synchronize();
}

}  // namespace lockstep::models
