#include "engine/models/model.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/models/families.h"

namespace lockstep::models {
namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Binds tensor `name`, checking its shape (ggml order) and that lockstep can compute with it.
// Norm weights must be F32 (they are read as plain float vectors).
absl::StatusOr<backend::Weight> Bind(const gguf::File& f, const std::string& name,
                                     std::vector<int64_t> shape, bool f32_only = false) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor ", name));
  if (t->shape != shape) {
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
  backend::Weight w;
  w.type = t->type;
  w.cols = shape[0];
  w.rows = shape.size() > 1 ? shape[1] : 1;
  w.data = f.TensorData(*t);
  w.name = t->name;
  return w;
}

absl::Status BindWeights(const gguf::File& f, Config* c, Weights* w) {
  const gguf::TensorInfo* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr) return absl::NotFoundError("missing tensor token_embd.weight");
  if (emb->shape.size() != 2 || emb->shape[0] != c->n_embd) {
    return absl::InvalidArgumentError(absl::StrCat("tensor token_embd.weight has shape ",
                                                   ShapeString(emb->shape), ", expected [",
                                                   c->n_embd, ", n_vocab]"));
  }
  c->n_vocab = emb->shape[1];
  const int64_t d = c->n_embd, q_dim = c->n_head * c->head_dim, kv_dim = c->n_kv_head * c->head_dim;
  ASSIGN_OR_RETURN(w->tok_embd, Bind(f, "token_embd.weight", {d, c->n_vocab}));
  ASSIGN_OR_RETURN(w->output_norm, Bind(f, "output_norm.weight", {d}, true));
  if (const gguf::TensorInfo* out = f.FindTensor("output.weight"); out != nullptr) {
    const gguf::Value* ids = f.Find("lockstep.trim.ids");
    if (ids == nullptr) {
      ASSIGN_OR_RETURN(w->output, Bind(f, "output.weight", {d, c->n_vocab}));
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
      ASSIGN_OR_RETURN(w->output, Bind(f, "output.weight", {d, static_cast<int64_t>(ids->arr.size())}));
    }
  } else {
    w->output = w->tok_embd;  // tied embeddings
  }
  w->layers.resize(c->n_layer);
  for (int64_t il = 0; il < c->n_layer; ++il) {
    LayerWeights& l = w->layers[il];
    auto n = [il](const char* s) { return absl::StrCat("blk.", il, ".", s, ".weight"); };
    ASSIGN_OR_RETURN(l.attn_norm, Bind(f, n("attn_norm"), {d}, true));
    ASSIGN_OR_RETURN(l.wq, Bind(f, n("attn_q"), {d, q_dim}));
    ASSIGN_OR_RETURN(l.wk, Bind(f, n("attn_k"), {d, kv_dim}));
    ASSIGN_OR_RETURN(l.wv, Bind(f, n("attn_v"), {d, kv_dim}));
    ASSIGN_OR_RETURN(l.wo, Bind(f, n("attn_output"), {q_dim, d}));
    ASSIGN_OR_RETURN(l.ffn_norm, Bind(f, n("ffn_norm"), {d}, true));
    ASSIGN_OR_RETURN(l.ffn_gate, Bind(f, n("ffn_gate"), {d, c->n_ff}));
    ASSIGN_OR_RETURN(l.ffn_up, Bind(f, n("ffn_up"), {d, c->n_ff}));
    ASSIGN_OR_RETURN(l.ffn_down, Bind(f, n("ffn_down"), {c->n_ff, d}));
    if (c->qk_norm) {
      ASSIGN_OR_RETURN(l.q_norm, Bind(f, n("attn_q_norm"), {c->head_dim}, true));
      ASSIGN_OR_RETURN(l.k_norm, Bind(f, n("attn_k_norm"), {c->head_dim}, true));
    }
    if (c->post_norms) {
      ASSIGN_OR_RETURN(l.post_attn_norm, Bind(f, n("post_attention_norm"), {d}, true));
      ASSIGN_OR_RETURN(l.post_ffw_norm, Bind(f, n("post_ffw_norm"), {d}, true));
    }
  }
  return absl::OkStatus();
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
  RETURN_IF_ERROR(BindWeights(m->file_, &m->config_, &m->weights_));
  return m;
}

}  // namespace lockstep::models
