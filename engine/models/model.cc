#include "engine/models/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/models/blocks.h"
#include "engine/models/families.h"
#include "engine/models/mtp.h"

namespace lockstep::models {
namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

}  // namespace

std::vector<backend::Weight*> LayerWeights::All() {
  return {&attn_norm,      &wq,          &wk,           &wv,
          &wo,             &q_norm,      &k_norm,       &post_attn_norm,
          &ffn_norm,       &ffn_gate,    &ffn_up,       &ffn_down,
          &post_ffw_norm,  &ffn_gate_inp, &ffn_gate_exps, &ffn_up_exps,
          &ffn_down_exps,  &ffn_gate_shexp, &ffn_up_shexp, &ffn_down_shexp,
          &ffn_gate_inp_shexp, &gdn.qkv,   &gdn.z,       &gdn.conv1d,
          &gdn.dt_bias,    &gdn.ssm_a,   &gdn.beta,     &gdn.alpha,
          &gdn.ba,         &gdn.norm,    &gdn.out,      &ple_gate,
          &ple_proj,       &ple_post_norm, &rope_freqs};
}

LayerDims Config::Dims(int64_t il) const {
  const LayerConfig& l = layers[il];
  return {l.head_dim > 0 ? l.head_dim : head_dim, l.n_kv_head > 0 ? l.n_kv_head : n_kv_head,
          l.n_rot > 0 ? l.n_rot : n_rot, l.n_ff > 0 ? l.n_ff : n_ff};
}

int64_t Config::MaxQDim() const {
  int64_t m = n_head * head_dim;
  for (int64_t il = 0; il < n_layer; ++il) m = std::max(m, Dims(il).q_dim(n_head));
  return m;
}

int64_t Config::MaxKvDim() const {
  int64_t m = n_kv_head * head_dim;
  for (int64_t il = 0; il < n_layer; ++il) m = std::max(m, Dims(il).kv_dim());
  return m;
}

int64_t Config::MaxFf() const {
  int64_t m = n_ff;
  for (int64_t il = 0; il < n_layer; ++il) m = std::max(m, Dims(il).n_ff);
  return m;
}

std::vector<const backend::Weight*> LayerWeights::All() const {
  std::vector<backend::Weight*> all = const_cast<LayerWeights*>(this)->All();
  return {all.begin(), all.end()};
}

// Binds tensor `name`, checking its shape (ggml order) and that lockstep can compute with it.
// Norm weights must be F32 (they are read as plain float vectors). A 3-D tensor (MoE experts,
// ne = {cols, rows, n_expert}) is seen as [rows * n_expert, cols].
absl::StatusOr<backend::Weight> BindTensor(const gguf::File& f, const std::string& name,
                                           std::vector<int64_t> shape, bool f32_only) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor ", name));
  // A trailing dimension of 1 is no dimension, as llama.cpp's loader compares ne (converters
  // write qwen3next's ffn_gate_inp_shexp as [n_embd, 1]).
  std::vector<int64_t> got = t->shape;
  while (got.size() > shape.size() && got.back() == 1) got.pop_back();
  if (got != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape ",
                                                   ShapeString(t->shape), ", expected ",
                                                   ShapeString(shape)));
  }
  const quant::TypeTraits tr = quant::Traits(t->type);
  if (!tr.lockstep_codec) {
    return absl::UnimplementedError(
        absl::StrCat("tensor ", name, " has type ", tr.name, ", which lockstep cannot compute with"));
  }
  if (f32_only && t->type != quant::Type::F32) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has type ", tr.name, "; norm weights must be F32"));
  }
  if (shape.size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has ", shape.size(),
                                                   " dimensions; lockstep binds at most 3"));
  }
  backend::Weight w;
  w.type = t->type;
  w.cols = shape[0];
  w.rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) w.rows *= shape[i];
  w.data = f.TensorData(*t);
  w.name = t->name;
  return w;
}

namespace {

absl::Status BindWeights(const gguf::File& f, Config* c, Weights* w) {
  const gguf::TensorInfo* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr) return absl::NotFoundError("missing tensor token_embd.weight");
  if (emb->shape.size() != 2 || emb->shape[0] != c->n_embd) {
    return absl::InvalidArgumentError(absl::StrCat("tensor token_embd.weight has shape ",
                                                   ShapeString(emb->shape), ", expected [",
                                                   c->n_embd, ", n_vocab]"));
  }
  c->n_vocab = emb->shape[1];
  const int64_t d = c->n_embd;
  ASSIGN_OR_RETURN(w->tok_embd, BindTensor(f, "token_embd.weight", {d, c->n_vocab}));
  ASSIGN_OR_RETURN(w->output_norm, BindTensor(f, "output_norm.weight", {d}, true));
  if (const gguf::TensorInfo* out = f.FindTensor("output.weight"); out != nullptr) {
    const gguf::Value* ids = f.Find("lockstep.trim.ids");
    if (ids == nullptr) {
      ASSIGN_OR_RETURN(w->output, BindTensor(f, "output.weight", {d, c->n_vocab}));
    } else {
      // A trimmed head: one row per kept token, ids distinct and inside the vocabulary.
      if (ids->type != gguf::ValueType::ARRAY || ids->arr.empty() ||
          static_cast<int64_t>(ids->arr.size()) > c->n_vocab) {
        return absl::InvalidArgumentError(
            "metadata key lockstep.trim.ids must be a non-empty integer array no longer than the vocabulary");
      }
      std::vector<uint8_t> seen(c->n_vocab, 0);
      for (size_t i = 0; i < ids->arr.size(); ++i) {
        const gguf::Value& v = ids->arr[i];
        const int64_t id = v.AsInt();
        if (!v.IsInteger() || id < 0 || id >= c->n_vocab || seen[id]) {
          return absl::InvalidArgumentError(absl::StrCat("lockstep.trim.ids[", i, "] = ", id,
                                                         " is not a distinct id in [0, ", c->n_vocab, ")"));
        }
        seen[id] = 1;
        w->output_ids.push_back(static_cast<int32_t>(id));
      }
      ASSIGN_OR_RETURN(w->output, BindTensor(f, "output.weight", {d, static_cast<int64_t>(ids->arr.size())}));
    }
  } else {
    w->output = w->tok_embd;  // tied embeddings
  }
  if (const int64_t ple = c->n_embd_per_layer; ple > 0) {
    const int64_t all = c->n_layer * ple;
    ASSIGN_OR_RETURN(w->per_layer_tok_embd,
                     BindTensor(f, "per_layer_token_embd.weight", {all, c->n_vocab}));
    ASSIGN_OR_RETURN(w->per_layer_model_proj, BindTensor(f, "per_layer_model_proj.weight", {d, all}));
    ASSIGN_OR_RETURN(w->per_layer_proj_norm,
                     BindTensor(f, "per_layer_proj_norm.weight", {ple}, true));
  }
  w->layers.resize(c->n_layer);
  for (int64_t il = 0; il < c->n_layer; ++il) {
    RETURN_IF_ERROR(BindLayer(f, *c, il, &w->layers[il]));
  }
  return BindNextnLayers(f, *c, w);  // MTP blocks (mtp.h)
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  ASSIGN_OR_RETURN(gguf::File f, gguf::File::Open(path));
  return FromFile(std::move(f));
}

absl::StatusOr<std::unique_ptr<Model>> Model::FromFile(gguf::File file) {
  std::unique_ptr<Model> m(new Model(std::move(file)));
  const gguf::Value* arch = m->file_.Find("general.architecture");
  if (arch == nullptr || arch->type != gguf::ValueType::STRING) {
    return absl::InvalidArgumentError("metadata key general.architecture is missing or not a string");
  }
  const Family* family = nullptr;
  std::vector<std::string> known;
  for (const Family& fam : kFamilies) {
    known.emplace_back(fam.arch);
    if (fam.arch == arch->str) family = &fam;
  }
  if (family == nullptr) {
    return absl::UnimplementedError(absl::StrCat("architecture \"", arch->str,
                                                 "\" is not supported (supported: ",
                                                 absl::StrJoin(known, ", "), ")"));
  }
  RETURN_IF_ERROR(family->read_config(m->file_, &m->config_));
  RETURN_IF_ERROR(SplitNextnLayers(m->file_, &m->config_));  // MTP blocks are not trunk layers
  RETURN_IF_ERROR(BindWeights(m->file_, &m->config_, &m->weights_));
  return m;
}

}  // namespace lockstep::models
