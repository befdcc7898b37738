// The decoder forward, shared by every family: the embedding, each layer's DecoderLayer (the block
// builders of blocks.h, per the layer's mixer and FFN kind) and the head, over the stacked tokens
// of the step. Nothing here touches activation memory: every read and write goes
// through the backend (docs/runtime.md).
#include "engine/models/runner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/models/gdn.h"
#include "engine/models/stage_wire.h"

namespace lockstep::models {

using backend::Tensor;

namespace {

bool KvShared(const Config& c) {
  for (const LayerConfig& l : c.layers) {
    if (l.kv_source >= 0) return true;
  }
  return false;
}

}  // namespace

int64_t KvBlockBytes(const Config& c, quant::KvFormat k, quant::KvFormat v, int64_t block_size) {
  int64_t bytes = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    if (c.layers[il].kv_source >= 0) continue;  // reads another layer's cache
    const int64_t kv_dim = c.Dims(il).kv_dim();
    bytes += block_size * (quant::KvRowBytes(k, kv_dim) + quant::KvRowBytes(v, kv_dim));
  }
  return bytes;
}

absl::Status CheckKvFormats(const Config& c, quant::KvFormat k, quant::KvFormat v) {
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerDims dm = c.Dims(il);
    for (quant::KvFormat f : {k, v}) {
      const int64_t be = quant::KvFormatBlockElems(f);
      if (dm.head_dim % be != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "KV format ", quant::KvFormatName(f), " stores blocks of ", be,
            " elements, which do not divide layer ", il, "'s head_dim ", dm.head_dim,
            " (kv_dim ", dm.kv_dim(), "); choose f32, f16, bf16 or fp8"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Runner>> Runner::Create(const Model& model, backend::Backend& be,
                                                       const RunnerOptions& options) {
  if (options.max_step_tokens < 1 || options.max_logit_rows < 1 || options.block_size < 1 ||
      options.n_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "runner options: max_step_tokens (", options.max_step_tokens, "), max_logit_rows (",
        options.max_logit_rows, "), block_size (", options.block_size, ") and n_blocks (",
        options.n_blocks, ") must all be >= 1"));
  }
  RETURN_IF_ERROR(CheckKvFormats(model.config(), options.k_format, options.v_format));
  std::unique_ptr<Runner> r(new Runner(model, be, options));
  RETURN_IF_ERROR(r->Init());
  if (r->pipelined() && options.link->rank() == 0) RETURN_IF_ERROR(r->Handshake());
  return r;
}

Runner::~Runner() {
  if (pipelined() && options_.link->rank() == 0) {
    wire::Message stop;
    stop.kind = wire::Kind::kStop;
    (void)options_.link->Send(1, wire::Encode(stop));  // a stage already gone needs no stop
  }
}

absl::Status Runner::Init() {
  const Config& c = model_.config();
  const Weights& w = model_.weights();
  first_ = 0;
  last_ = c.n_layer;
  if (pipelined()) {
    const std::vector<int64_t>& sp = options_.split;
    const int n = options_.link->size(), r = options_.link->rank();
    bool ok = n >= 2 && static_cast<int>(sp.size()) == n + 1 && sp.front() == 0 &&
              sp.back() == c.n_layer;
    for (size_t i = 1; ok && i < sp.size(); ++i) ok = sp[i] > sp[i - 1];
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline split {", absl::StrJoin(sp, ","), "} is not ", n + 1,
          " increasing layer boundaries from 0 to ", c.n_layer, " for ", n, " stages"));
    }
    if (options_.micro_batches < 1) {
      return absl::InvalidArgumentError(absl::StrCat("micro_batches is ", options_.micro_batches,
                                                     "; it must be >= 1"));
    }
    first_ = sp[r];
    last_ = sp[r + 1];
  }
  if (pipelined() && (c.n_embd_per_layer > 0 || KvShared(c))) {
    return absl::UnimplementedError(absl::StrCat(
        c.arch, ": pipeline stages do not carry per-layer inputs or KV shared across layers yet"));
  }
  const bool embeds = first_ == 0, head = last_stage();
  auto bind = [&](const backend::Weight& host, backend::Weight* out) -> absl::Status {
    if (!host.bound()) {
      *out = host;  // a weight this family does not use
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(*out, be_.BindWeight(host));
    return absl::OkStatus();
  };
  bound_.output_ids = w.output_ids;
  if (embeds) {
    RETURN_IF_ERROR(bind(w.tok_embd, &bound_.tok_embd));
    RETURN_IF_ERROR(bind(w.per_layer_tok_embd, &bound_.per_layer_tok_embd));
    RETURN_IF_ERROR(bind(w.per_layer_model_proj, &bound_.per_layer_model_proj));
    RETURN_IF_ERROR(bind(w.per_layer_proj_norm, &bound_.per_layer_proj_norm));
  }
  if (head) {
    RETURN_IF_ERROR(bind(w.output_norm, &bound_.output_norm));
    RETURN_IF_ERROR(bind(w.output, &bound_.output));
  }
  bound_.layers.resize(w.layers.size());
  for (int64_t il = first_; il < last_; ++il) {
    const LayerWeights& h = w.layers[il];
    LayerWeights& b = bound_.layers[il];
    const std::vector<const backend::Weight*> src = h.All();
    const std::vector<backend::Weight*> dst = b.All();
    for (size_t i = 0; i < src.size(); ++i) {
      RETURN_IF_ERROR(bind(*src[i], dst[i]));
    }
  }

  layout_.k_format = options_.k_format;
  layout_.v_format = options_.v_format;
  layout_.n_blocks = options_.n_blocks;
  layout_.block_size = options_.block_size;
  layout_.kv_dim = c.n_kv_head * c.head_dim;
  kv_.resize(c.n_layer);  // only this stage's layers get storage
  layouts_.assign(c.n_layer, layout_);
  for (int64_t il = first_; il < last_; ++il) {
    const int64_t src = c.layers[il].kv_source;
    if (src >= 0) {  // a KV-shared layer reads (never writes) an earlier layer's cache
      if (src >= il) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", il, " reads the KV cache of layer ", src, ", which is not an earlier layer"));
      }
      layouts_[il] = layouts_[src];
      kv_[il] = kv_[src];
      continue;
    }
    layouts_[il].kv_dim = c.Dims(il).kv_dim();
    ASSIGN_OR_RETURN(kv_[il].k, arena_.Allocate(layouts_[il].k_bytes(), "KV pool (K)"));
    ASSIGN_OR_RETURN(kv_[il].v, arena_.Allocate(layouts_[il].v_bytes(), "KV pool (V)"));
  }
  gdn_state_.resize(c.n_layer);
  if (c.gdn.present()) {
    if (pipelined()) {
      return absl::UnimplementedError(absl::StrCat(
          c.arch, ": pipeline stages do not carry the recurrent state of Gated DeltaNet layers yet"));
    }
    if (options_.n_state_slots < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.arch, " has Gated DeltaNet layers: runner option n_state_slots must be >= 1 (one per "
                  "sequence), is ", options_.n_state_slots));
    }
    gdn_layout_ = GdnStateLayout(c, options_.n_state_slots);
    const int64_t n = options_.n_state_slots;
    for (int64_t il = first_; il < last_; ++il) {
      if (c.layers[il].mixer != MixerKind::kGatedDeltaNet) continue;
      ASSIGN_OR_RETURN(Tensor conv, arena_.NewTensor(n, gdn_layout_.conv_floats(), "state pool (conv)"));
      ASSIGN_OR_RETURN(Tensor ssm, arena_.NewTensor(n, gdn_layout_.ssm_floats(), "state pool (delta)"));
      gdn_state_[il] = {conv.data, ssm.data};
    }
  }

  const int64_t T = options_.max_step_tokens, d = c.n_embd;
  Scratch& s = ws_.blocks;
  ASSIGN_OR_RETURN(ws_.x, arena_.NewTensor(T, d, "workspace"));
  RETURN_IF_ERROR(AllocateScratch(c, T, arena_, "workspace", &s));
  if (c.n_embd_per_layer > 0) {
    ASSIGN_OR_RETURN(ws_.ple, arena_.NewTensor(T, c.n_layer * c.n_embd_per_layer, "workspace"));
    ASSIGN_OR_RETURN(ws_.ple_tmp, arena_.NewTensor(T, c.n_layer * c.n_embd_per_layer, "workspace"));
  }
  if (head) {
    ASSIGN_OR_RETURN(ws_.sel, arena_.NewTensor(options_.max_logit_rows, d, "workspace"));
    ASSIGN_OR_RETURN(ws_.logits, arena_.NewTensor(options_.max_logit_rows, w.output.rows, "workspace"));
    ASSIGN_OR_RETURN(ws_.greedy, arena_.NewIntTensor(options_.max_logit_rows, 2, "workspace"));
  }
  return absl::OkStatus();
}

absl::Status Runner::CopyBlock(int32_t src, int32_t dst) {
  const int64_t rows = layout_.block_size;
  if (pipelined() && options_.link->rank() == 0) {
    wire::Message m;
    m.kind = wire::Kind::kCopy;
    m.src = src;
    m.dst = dst;
    RETURN_IF_ERROR(options_.link->Send(1, wire::Encode(m)));
  }
  for (size_t il = 0; il < kv_.size(); ++il) {
    const backend::KvLayer& l = kv_[il];
    // Another stage's layer, or a KV-shared one (its source's blocks are copied once).
    if (l.k == nullptr || model_.config().layers[il].kv_source >= 0) continue;
    const int64_t kb = rows * quant::KvRowBytes(layout_.k_format, layouts_[il].kv_dim);
    const int64_t vb = rows * quant::KvRowBytes(layout_.v_format, layouts_[il].kv_dim);
    auto* k = static_cast<uint8_t*>(l.k);
    auto* v = static_cast<uint8_t*>(l.v);
    RETURN_IF_ERROR(be_.Copy(k + dst * kb, k + src * kb, kb));
    RETURN_IF_ERROR(be_.Copy(v + dst * vb, v + src * vb, vb));
  }
  return absl::OkStatus();
}

absl::Status Runner::CopyState(int32_t src, int32_t dst) {
  if (gdn_layout_.n_slots == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(model_.config().arch, " has no recurrent state to copy"));
  }
  if (src < 0 || dst < 0 || src >= gdn_layout_.n_slots || dst >= gdn_layout_.n_slots) {
    return absl::OutOfRangeError(absl::StrCat("CopyState: slots ", src, " -> ", dst,
                                              " outside [0, ", gdn_layout_.n_slots, ")"));
  }
  const int64_t cf = gdn_layout_.conv_floats(), sf = gdn_layout_.ssm_floats();
  for (const backend::GdnLayer& l : gdn_state_) {
    if (l.conv == nullptr) continue;  // not a GDN layer
    RETURN_IF_ERROR(be_.Copy(l.conv + dst * cf, l.conv + src * cf, cf * sizeof(float)));
    RETURN_IF_ERROR(be_.Copy(l.ssm + dst * sf, l.ssm + src * sf, sf * sizeof(float)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> Runner::DownloadKv(int64_t layer,
                                                        std::span<const int32_t> blocks,
                                                        int64_t n_tokens, bool v) const {
  const int64_t bs = layout_.block_size;
  if (layer < first_ || layer >= last_ || n_tokens > static_cast<int64_t>(blocks.size()) * bs) {
    return absl::OutOfRangeError(absl::StrCat("DownloadKv: layer ", layer, " (this stage holds [",
                                              first_, ", ", last_, ")), ", n_tokens,
                                              " tokens over ", blocks.size(), " blocks"));
  }
  const int64_t row =
      quant::KvRowBytes(v ? layout_.v_format : layout_.k_format, layouts_[layer].kv_dim);
  const auto* base = static_cast<const uint8_t*>(v ? kv_[layer].v : kv_[layer].k);
  std::vector<uint8_t> out(n_tokens * row);
  for (int64_t p = 0; p < n_tokens; ++p) {
    const int64_t slot = blocks[p / bs] * bs + p % bs;
    RETURN_IF_ERROR(be_.Download(out.data() + p * row, base + slot * row, row));
  }
  return out;
}

absl::StatusOr<backend::StepMeta> Runner::BuildMeta(std::span<const StepEntry> batch) const {
  const Config& c = model_.config();
  const int64_t bs = layout_.block_size;
  // The step's metadata: stacked tokens, positions, slots, block tables, logits rows.
  backend::StepMeta meta;
  meta.query_start.push_back(0);
  for (const StepEntry& e : batch) {
    meta.max_blocks = std::max<int64_t>(meta.max_blocks, static_cast<int64_t>(e.blocks.size()));
  }
  for (size_t ei = 0; ei < batch.size(); ++ei) {
    const StepEntry& e = batch[ei];
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat("step entry ", ei, " has no tokens"));
    if (e.n_logits < 0 || e.n_logits > n) {
      return absl::InvalidArgumentError(absl::StrCat("step entry ", ei, " asks for ", e.n_logits,
                                                     " logits rows of its ", n, " tokens"));
    }
    if (e.start < 0 || (e.start + n + bs - 1) / bs > static_cast<int64_t>(e.blocks.size())) {
      return absl::OutOfRangeError(absl::StrCat(
          "step entry ", ei, ": positions [", e.start, ", ", e.start + n, ") need ",
          (e.start + n + bs - 1) / bs, " KV blocks of ", bs, " tokens; its table has ",
          e.blocks.size()));
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t tok = e.tokens[i];
      if (tok < 0 || tok >= c.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat("step entry ", ei, " token #", i, " is ",
                                                       tok, ", outside [0, ", c.n_vocab, ")"));
      }
      const int64_t p = e.start + i;
      if (i >= n - e.n_logits) {
        meta.output_rows.push_back(static_cast<int32_t>(meta.tokens.size()));
      }
      meta.tokens.push_back(tok);
      meta.positions.push_back(static_cast<int32_t>(p));
      meta.slots.push_back(static_cast<int32_t>(e.blocks[p / bs] * bs + p % bs));
    }
    meta.query_start.push_back(static_cast<int32_t>(meta.tokens.size()));
    meta.seq_len.push_back(static_cast<int32_t>(e.start + n));
    if (c.gdn.present()) {
      // The sequence's recurrent state (docs/models.md): its slot and optional checkpoints.
      if (e.state_slot < 0 || e.state_slot >= gdn_layout_.n_slots) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step entry ", ei, " has state slot ", e.state_slot, "; ", c.arch,
            " has recurrent layers and needs one in [0, ", gdn_layout_.n_slots, ")"));
      }
      meta.state_slots.push_back(e.state_slot);
      if (!e.state_checkpoints.empty()) {
        if (static_cast<int64_t>(e.state_checkpoints.size()) != n) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step entry ", ei, " gives ", e.state_checkpoints.size(),
              " state checkpoints for its ", n, " tokens"));
        }
        meta.state_checkpoints.resize(meta.query_start[ei], -1);
        meta.state_checkpoints.insert(meta.state_checkpoints.end(), e.state_checkpoints.begin(),
                                      e.state_checkpoints.end());
      }
    }
    for (int64_t b = 0; b < meta.max_blocks; ++b) {
      meta.block_table.push_back(b < static_cast<int64_t>(e.blocks.size()) ? e.blocks[b] : 0);
    }
  }
  const int64_t T = meta.n_tokens();
  const int64_t R = static_cast<int64_t>(meta.output_rows.size());
  if (!meta.state_checkpoints.empty()) meta.state_checkpoints.resize(T, -1);
  if (T > options_.max_step_tokens) {
    return absl::OutOfRangeError(absl::StrCat("the step has ", T, " tokens; the workspace holds ",
                                              options_.max_step_tokens, " (max_step_tokens)"));
  }
  if (R > options_.max_logit_rows) {
    return absl::OutOfRangeError(absl::StrCat("the step asks for ", R,
                                              " logits rows; the workspace holds ",
                                              options_.max_logit_rows, " (max_logit_rows)"));
  }
  return meta;
}

absl::Status Runner::Emit(const DumpFn* dump, int64_t layer, const char* name, Tensor t) {
  if (dump == nullptr) return absl::OkStatus();
  dump_buf_.resize(t.size());
  RETURN_IF_ERROR(be_.Download(dump_buf_.data(), t.data, t.size() * sizeof(float)));
  (*dump)(layer < 0 ? std::string(name) : absl::StrCat("blk.", layer, ".", name), dump_buf_.data(),
          t.rows, t.cols);
  return absl::OkStatus();
}

bool Runner::SupportsGreedy() const {
  return !pipelined() && model_.weights().output_ids.empty();
}

absl::Status Runner::Forward(std::span<const StepEntry> batch, std::vector<float>* logits,
                             const DumpFn* dump, std::vector<int32_t>* greedy) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].greedy) continue;
    if (!SupportsGreedy()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step entry ", i, " asks for greedy tokens; a ",
          pipelined() ? "pipelined runner" : "trimmed head", " returns logits rows only"));
    }
    if (greedy == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("step entry ", i, " asks for greedy tokens and Forward was given no output for them"));
    }
  }
  if (greedy != nullptr) greedy->clear();
  if (pipelined()) {
    if (options_.link->rank() != 0) {
      return absl::FailedPreconditionError("a pipeline's steps are driven on stage 0");
    }
    if (dump != nullptr) {
      return absl::InvalidArgumentError("intermediate dumps (--dump-layers) need an unsplit model");
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].hidden != nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            "step entry ", i, " asks for its hidden rows (an MTP drafter); pipeline stages do "
            "not return them"));
      }
    }
    return ForwardPipelined(batch, logits);
  }
  ASSIGN_OR_RETURN(backend::StepMeta meta, BuildMeta(batch));
  const int64_t T = meta.n_tokens();
  const int64_t R = static_cast<int64_t>(meta.output_rows.size());
  meta.may_capture = dump == nullptr;  // a dump reads tensors mid-step
  RETURN_IF_ERROR(be_.BeginStep(meta));
  const Tensor x = ws_.x.Rows(0, T);
  RETURN_IF_ERROR(be_.Embed(bound_.tok_embd, x));
  const Config& c = model_.config();
  if (c.embed_scale != 1.0f) RETURN_IF_ERROR(be_.Scale(x, c.embed_scale, x));
  RETURN_IF_ERROR(Emit(dump, -1, "inp_embd", x));
  if (c.n_embd_per_layer > 0) {
    RETURN_IF_ERROR(PerLayerInputs(be_, c, bound_, x, ws_.ple_tmp.Rows(0, T), ws_.ple.Rows(0, T)));
    RETURN_IF_ERROR(Emit(dump, -1, "inp_per_layer", ws_.ple.Rows(0, T)));
  }
  RETURN_IF_ERROR(Layers(T, 0, c.n_layer, dump));
  RETURN_IF_ERROR(HiddenRows(batch, meta));
  logits->clear();
  if (R > 0 && model_.weights().output_ids.empty()) {
    RETURN_IF_ERROR(HeadGreedy(batch, T, R, logits, greedy, dump));
  } else if (R > 0) {
    RETURN_IF_ERROR(Head(T, R, &host_logits_, dump));
    PlaceLogits(host_logits_, R, logits);
  }
  return be_.Synchronize();
}

absl::Status Runner::Layers(int64_t T, int64_t first, int64_t last, const DumpFn* dump) {
  const EmitFn emit = [&](int64_t layer, const char* name, Tensor t) {
    return Emit(dump, layer, name, t);
  };
  const Scratch s = ws_.blocks.Rows(T);
  const Tensor x = ws_.x.Rows(0, T);
  const Tensor ple = ws_.ple.data ? ws_.ple.Rows(0, T) : Tensor{};
  for (int64_t il = first; il < last; ++il) {
    const BlockCtx b{be_, model_.config(), layouts_[il], s, emit, &gdn_layout_,
                     gdn_state_.data(), ple};
    RETURN_IF_ERROR(DecoderLayer(b, il, bound_.layers[il], kv_[il], x));
  }
  return absl::OkStatus();
}

// The entries that asked for them get the output-normed rows of all their tokens (the head's
// RmsNorm, row by row, over the whole step; the scratch row buffer h is free after the layers).
absl::Status Runner::HiddenRows(std::span<const StepEntry> batch, const backend::StepMeta& meta) {
  bool any = false;
  for (const StepEntry& e : batch) any |= e.hidden != nullptr;
  if (!any) return absl::OkStatus();
  const Config& c = model_.config();
  const int64_t T = meta.n_tokens(), d = c.n_embd;
  const Tensor x = ws_.x.Rows(0, T), h = ws_.blocks.h.Rows(0, T);
  RETURN_IF_ERROR(be_.RmsNorm(x, &bound_.output_norm, c.norm_eps, h));
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].hidden == nullptr) continue;
    const int64_t n = meta.query_start[i + 1] - meta.query_start[i];
    batch[i].hidden->resize(n * d);
    RETURN_IF_ERROR(be_.Download(batch[i].hidden->data(), h.data + meta.query_start[i] * d,
                                 n * d * sizeof(float)));
  }
  return absl::OkStatus();
}

// The head over the step's logits rows, left in the workspace: [R, n_out] (n_out < n_vocab for
// a trimmed head).
absl::StatusOr<Tensor> Runner::HeadRows(int64_t T, int64_t R, const DumpFn* dump) {
  const Config& c = model_.config();
  const Weights& w = bound_;
  const Tensor x = ws_.x.Rows(0, T);
  const Tensor sel = ws_.sel.Rows(0, R), out = ws_.logits.Rows(0, R);
  RETURN_IF_ERROR(be_.GatherRows(x, sel));
  RETURN_IF_ERROR(be_.RmsNorm(sel, &w.output_norm, c.norm_eps, sel));
  RETURN_IF_ERROR(Emit(dump, -1, "result_norm", sel));
  RETURN_IF_ERROR(be_.MatMul(w.output, sel, out));
  if (c.final_softcap > 0.0f) RETURN_IF_ERROR(be_.Softcap(out, c.final_softcap));
  RETURN_IF_ERROR(Emit(dump, -1, "result_output", out));
  return out;
}

// The head's rows in host memory: raw [R, n_out] (PlaceLogits spreads a trimmed head's over the
// vocabulary).
absl::Status Runner::Head(int64_t T, int64_t R, std::vector<float>* raw, const DumpFn* dump) {
  ASSIGN_OR_RETURN(const Tensor out, HeadRows(T, R, dump));
  raw->resize(out.size());
  return be_.Download(raw->data(), out.data, out.size() * sizeof(float));
}

absl::Status Runner::HeadGreedy(std::span<const StepEntry> batch, int64_t T, int64_t R,
                                std::vector<float>* logits, std::vector<int32_t>* greedy,
                                const DumpFn* dump) {
  ASSIGN_OR_RETURN(const Tensor out, HeadRows(T, R, dump));
  const backend::IntTensor picks = ws_.greedy.Rows(0, R);
  RETURN_IF_ERROR(be_.GreedyTokens(out, picks));
  const int64_t V = out.cols;
  bool any_greedy = false;
  for (const StepEntry& e : batch) any_greedy |= e.greedy && e.n_logits > 0;
  if (!any_greedy) {  // one download of every row
    logits->resize(R * V);
    return be_.Download(logits->data(), out.data, R * V * sizeof(float));
  }
  host_greedy_.resize(R * 2);
  RETURN_IF_ERROR(be_.Download(host_greedy_.data(), picks.data, R * 2 * sizeof(int32_t)));
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t n = batch[i].n_logits;
    if (n == 0) continue;
    if (!batch[i].greedy) {
      const size_t base = logits->size();
      logits->resize(base + n * V);
      RETURN_IF_ERROR(be_.Download(logits->data() + base, out.data + row * V, n * V * sizeof(float)));
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const int32_t token = host_greedy_[2 * (row + j)], bad = host_greedy_[2 * (row + j) + 1];
        if (bad >= 0) {
          float v = 0.0f;
          RETURN_IF_ERROR(be_.Download(&v, out.data + (row + j) * V + bad, sizeof(float)));
          return absl::InvalidArgumentError(absl::StrCat(
              "step entry ", i, ", logits row ", j, ": logits[", bad, "] is ",
              std::isnan(v) ? "NaN" : "+inf", "; a logits row must be finite or -inf"));
        }
        if (token < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "step entry ", i, ", logits row ", j, ": no token can be drawn, every logit is -inf"));
        }
        greedy->push_back(token);
      }
    }
    row += n;
  }
  return absl::OkStatus();
}

void Runner::PlaceLogits(const std::vector<float>& raw, int64_t R,
                         std::vector<float>* logits) const {
  const Config& c = model_.config();
  const std::vector<int32_t>& ids = model_.weights().output_ids;
  if (ids.empty()) {
    logits->insert(logits->end(), raw.begin(), raw.begin() + R * c.n_vocab);
    return;
  }
  // A trimmed head scores only its kept tokens: row r of the head is token output_ids[r].
  const int64_t n_out = static_cast<int64_t>(ids.size());
  const size_t base = logits->size();
  logits->resize(base + R * c.n_vocab, -INFINITY);
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t r = 0; r < n_out; ++r) (*logits)[base + i * c.n_vocab + ids[r]] = raw[i * n_out + r];
  }
}

absl::StatusOr<std::vector<float>> PromptLogits(const Model& model, backend::Backend& be,
                                                std::span<const int32_t> tokens, bool all,
                                                const DumpFn* dump, quant::KvFormat k,
                                                quant::KvFormat v,
                                                const std::vector<int64_t>& split,
                                                StageLink* link) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError("the prompt has no tokens");
  RunnerOptions o;
  o.max_step_tokens = T;
  o.max_logit_rows = all ? T : 1;
  o.block_size = 16;
  o.n_blocks = (T + o.block_size - 1) / o.block_size;
  o.k_format = k;
  o.v_format = v;
  o.split = split;
  o.link = link;
  o.micro_batches = 1;  // one sequence
  o.n_state_slots = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<Runner> r, Runner::Create(model, be, o));
  std::vector<int32_t> blocks(o.n_blocks);
  for (int64_t b = 0; b < o.n_blocks; ++b) blocks[b] = static_cast<int32_t>(b);
  StepEntry e{tokens, 0, blocks, all ? T : 1};
  e.state_slot = 0;  // hybrid models: the one sequence's recurrent state
  std::vector<float> logits;
  RETURN_IF_ERROR(r->Forward(std::span(&e, 1), &logits, dump));
  return logits;
}

}  // namespace lockstep::models
