// The decoder forward, shared by every family: a fixed sequence of Backend calls. All tokens of
// the batch are stacked into one [T, ...] activation so that matmuls see one call per weight;
// attention runs per sequence against its own cache.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/models/model.h"

namespace lockstep::models {
namespace {

using backend::Backend;

struct Scratch {
  explicit Scratch(const Config& c, int64_t T)
      : x(T * c.n_embd), h(T * c.n_embd), q(T * c.n_head * c.head_dim),
        k(T * c.n_kv_head * c.head_dim), v(T * c.n_kv_head * c.head_dim),
        attn(T * c.n_head * c.head_dim), o(T * c.n_embd), gate(T * c.n_ff), up(T * c.n_ff),
        act(T * c.n_ff) {}
  std::vector<float> x;     // [T, n_embd] residual stream
  std::vector<float> h;     // [T, n_embd] normed input of a sub-block
  std::vector<float> q;     // [T, n_head, head_dim]
  std::vector<float> k, v;  // [T, n_kv_head, head_dim]
  std::vector<float> attn;  // [T, n_head, head_dim]
  std::vector<float> o;     // [T, n_embd] sub-block output
  std::vector<float> gate, up, act;  // [T, n_ff]
};

}  // namespace

absl::Status Forward(const Model& model, Backend& be, std::span<BatchEntry> batch, bool all_logits,
                     std::vector<float>* logits, const DumpFn* dump) {
  const Config& c = model.config();
  const Weights& w = model.weights();
  const int64_t d = c.n_embd, hd = c.head_dim, kv_dim = c.n_kv_head * hd;

  // Stack the batch: token ids, positions, and where each entry's rows start.
  std::vector<int32_t> ids, pos;
  std::vector<int64_t> row0;
  for (size_t e = 0; e < batch.size(); ++e) {
    const BatchEntry& b = batch[e];
    if (b.cache == nullptr || b.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("batch entry ", e, " has no cache or no tokens"));
    }
    if (b.cache->n_past + static_cast<int64_t>(b.tokens.size()) > b.cache->capacity) {
      return absl::OutOfRangeError(absl::StrCat("batch entry ", e, ": ", b.cache->n_past, " + ",
                                                b.tokens.size(), " tokens exceed the KV capacity ",
                                                b.cache->capacity));
    }
    row0.push_back(static_cast<int64_t>(ids.size()));
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      if (b.tokens[i] < 0 || b.tokens[i] >= c.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat("batch entry ", e, " token #", i, " is ",
                                                       b.tokens[i], ", outside [0, ", c.n_vocab, ")"));
      }
      ids.push_back(b.tokens[i]);
      pos.push_back(static_cast<int32_t>(b.cache->n_past + i));
    }
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  Scratch s(c, T);
  auto emit = [&](const std::string& name, const std::vector<float>& t, int64_t cols) {
    if (dump != nullptr) (*dump)(name, t.data(), T, cols);
  };

  be.GetRows(w.tok_embd, ids.data(), T, s.x.data());
  if (c.embed_scale != 1.0f) be.Scale(s.x.data(), c.embed_scale, T * d, s.x.data());
  emit("inp_embd", s.x, d);

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = w.layers[il];
    const LayerConfig& lc = c.layers[il];
    const std::string p = absl::StrCat("blk.", il, ".");

    be.RmsNorm(s.x.data(), static_cast<const float*>(l.attn_norm.data), T, d, c.norm_eps, s.h.data());
    emit(p + "attn_norm", s.h, d);
    be.MatMul(l.wq, s.h.data(), T, s.q.data());
    be.MatMul(l.wk, s.h.data(), T, s.k.data());
    be.MatMul(l.wv, s.h.data(), T, s.v.data());
    if (c.qk_norm) {
      be.RmsNorm(s.q.data(), static_cast<const float*>(l.q_norm.data), T * c.n_head, hd, c.norm_eps,
                 s.q.data());
      be.RmsNorm(s.k.data(), static_cast<const float*>(l.k_norm.data), T * c.n_kv_head, hd,
                 c.norm_eps, s.k.data());
    }
    be.Rope(s.q.data(), pos.data(), T, c.n_head, hd, c.n_rot, lc.rope_base, c.rope_mode);
    be.Rope(s.k.data(), pos.data(), T, c.n_kv_head, hd, c.n_rot, lc.rope_base, c.rope_mode);
    emit(p + "q", s.q, c.n_head * hd);
    emit(p + "k", s.k, kv_dim);
    emit(p + "v", s.v, kv_dim);

    backend::AttentionParams ap;
    ap.scale = c.attn_scale;
    ap.window = lc.sliding ? lc.window : 0;
    ap.softcap = c.attn_softcap;
    for (size_t e = 0; e < batch.size(); ++e) {
      KvCache& kv = *batch[e].cache;
      const int64_t r = row0[e], n = static_cast<int64_t>(batch[e].tokens.size());
      std::memcpy(kv.k[il].data() + kv.n_past * kv_dim, s.k.data() + r * kv_dim,
                  n * kv_dim * sizeof(float));
      std::memcpy(kv.v[il].data() + kv.n_past * kv_dim, s.v.data() + r * kv_dim,
                  n * kv_dim * sizeof(float));
      be.Attention(s.q.data() + r * c.n_head * hd, pos.data() + r, n, kv.k[il].data(),
                   kv.v[il].data(), kv.n_past + n, c.n_head, c.n_kv_head, hd, ap,
                   s.attn.data() + r * c.n_head * hd);
    }
    emit(p + "kqv", s.attn, c.n_head * hd);
    be.MatMul(l.wo, s.attn.data(), T, s.o.data());
    if (c.post_norms) {
      be.RmsNorm(s.o.data(), static_cast<const float*>(l.post_attn_norm.data), T, d, c.norm_eps,
                 s.o.data());
    }
    emit(p + "attn_out", s.o, d);
    be.Add(s.x.data(), s.o.data(), T * d, s.x.data());

    be.RmsNorm(s.x.data(), static_cast<const float*>(l.ffn_norm.data), T, d, c.norm_eps, s.h.data());
    emit(p + "ffn_norm", s.h, d);
    be.MatMul(l.ffn_gate, s.h.data(), T, s.gate.data());
    be.MatMul(l.ffn_up, s.h.data(), T, s.up.data());
    be.Glu(s.gate.data(), s.up.data(), T * c.n_ff, c.act, s.act.data());
    be.MatMul(l.ffn_down, s.act.data(), T, s.o.data());
    if (c.post_norms) {
      be.RmsNorm(s.o.data(), static_cast<const float*>(l.post_ffw_norm.data), T, d, c.norm_eps,
                 s.o.data());
    }
    emit(p + "ffn_out", s.o, d);
    be.Add(s.x.data(), s.o.data(), T * d, s.x.data());
    emit(p + "l_out", s.x, d);
  }

  // Rows whose logits are wanted: all, or each entry's last.
  std::vector<int64_t> rows;
  for (size_t e = 0; e < batch.size(); ++e) {
    const int64_t n = static_cast<int64_t>(batch[e].tokens.size());
    for (int64_t i = all_logits ? 0 : n - 1; i < n; ++i) rows.push_back(row0[e] + i);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> sel(R * d);
  for (int64_t i = 0; i < R; ++i) {
    std::memcpy(sel.data() + i * d, s.x.data() + rows[i] * d, d * sizeof(float));
  }
  be.RmsNorm(sel.data(), static_cast<const float*>(w.output_norm.data), R, d, c.norm_eps, sel.data());
  if (dump != nullptr) (*dump)("result_norm", sel.data(), R, d);
  const int64_t n_out = w.output.rows;  // n_vocab, or the kept rows of a trimmed head
  logits->resize(R * n_out);
  be.MatMul(w.output, sel.data(), R, logits->data());
  if (c.final_softcap > 0.0f) be.Softcap(logits->data(), R * n_out, c.final_softcap);
  if (dump != nullptr) (*dump)("result_output", logits->data(), R, n_out);

  for (BatchEntry& b : batch) b.cache->n_past += static_cast<int64_t>(b.tokens.size());
  return absl::OkStatus();
}

}  // namespace lockstep::models
