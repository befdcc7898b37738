// The naive forward (naive_forward.h). Read top to bottom: metadata, dequantization, weights,
// then the forward in transformers' order. Written from the published definitions, not from
// engine/models: transformers' modeling_llama.py, modeling_qwen3.py, modeling_gemma3.py (v5.17)
// and its GGUF loader (integrations/ggml.py, modeling_gguf_pytorch_utils.py). docs/models.md.
#include "oracle/naive_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numbers>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "oracle/quant_ref.h"

namespace lockstep::oracle {
namespace {

// ---- threads: contiguous chunks of [0, n), one per thread; the caller runs the first ----

template <class F>
void ParallelFor(int threads, int64_t n, int64_t grain, F&& f) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, (n + grain - 1) / grain));
  if (chunks <= 1) {
    f(int64_t{0}, n);
    return;
  }
  // Chunk boundaries are multiples of `grain`, so blocked loops inside see whole blocks.
  const int64_t per = ((n + chunks - 1) / chunks + grain - 1) / grain * grain;
  std::vector<std::thread> pool;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t lo = std::min(n, c * per), hi = std::min(n, (c + 1) * per);
    if (lo < hi) pool.emplace_back([&f, lo, hi] { f(lo, hi); });
  }
  f(int64_t{0}, std::min(n, per));
  for (std::thread& t : pool) t.join();
}

// ---- metadata ----

const gguf::Value* Key(const gguf::File& f, const std::string& key) { return f.Find(key); }

absl::StatusOr<int64_t> IntKey(const gguf::File& f, const std::string& key, int64_t fallback,
                               bool required) {
  const gguf::Value* v = Key(f, key);
  if (v == nullptr) {
    if (required) return absl::NotFoundError(absl::StrCat("naive forward: missing key ", key));
    return fallback;
  }
  if (!v->IsInteger() || v->type == gguf::ValueType::BOOL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "naive forward: key ", key, " is ", gguf::ValueTypeName(v->type), ", not an integer"));
  }
  if (v->AsInt() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("naive forward: key ", key, " is ", v->AsInt(),
                                                   "; must be positive"));
  }
  return v->AsInt();
}

absl::StatusOr<double> FloatKey(const gguf::File& f, const std::string& key, double fallback,
                                bool required) {
  const gguf::Value* v = Key(f, key);
  if (v == nullptr) {
    if (required) return absl::NotFoundError(absl::StrCat("naive forward: missing key ", key));
    return fallback;
  }
  if (v->type != gguf::ValueType::FLOAT32 && v->type != gguf::ValueType::FLOAT64) {
    return absl::InvalidArgumentError(absl::StrCat("naive forward: key ", key, " is ",
                                                   gguf::ValueTypeName(v->type), ", not a float"));
  }
  if (!(v->AsFloat() >= 0) || !std::isfinite(v->AsFloat())) {
    return absl::InvalidArgumentError(
        absl::StrCat("naive forward: key ", key, " is ", v->AsFloat(), "; must be finite, >= 0"));
  }
  return v->AsFloat();
}

// ---- dequantization (ggml block layouts, little-endian, as ggml-common.h declares them) ----

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
double F16At(const uint8_t* p) { return Fp16Ref(U16(p)); }

// Q4_0 [18 B]: d f16, qs[16]; element j < 16 is low nibble of qs[j], j >= 16 the high nibble of
// qs[j - 16]; value d * (q - 8).
void Q4_0(const uint8_t* b, double* y) {
  const double d = F16At(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * ((b[2 + j] & 0xF) - 8);
    y[j + 16] = d * ((b[2 + j] >> 4) - 8);
  }
}
// Q4_1 [20 B]: d f16, m f16, qs[16]; value d * q + m.
void Q4_1(const uint8_t* b, double* y) {
  const double d = F16At(b), m = F16At(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (b[4 + j] & 0xF) + m;
    y[j + 16] = d * (b[4 + j] >> 4) + m;
  }
}
// Q5_0 [22 B]: d f16, qh u32 (bit j: fifth bit of element j), qs[16]; value d * (q - 16).
void Q5_0(const uint8_t* b, double* y) {
  const double d = F16At(b);
  uint32_t qh;
  memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 0xF) | (((qh >> j) & 1) << 4);
    const int hi = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * (lo - 16);
    y[j + 16] = d * (hi - 16);
  }
}
// Q5_1 [24 B]: d f16, m f16, qh u32, qs[16]; value d * q + m.
void Q5_1(const uint8_t* b, double* y) {
  const double d = F16At(b), m = F16At(b + 2);
  uint32_t qh;
  memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[8 + j] & 0xF) | (((qh >> j) & 1) << 4);
    const int hi = (b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * lo + m;
    y[j + 16] = d * hi + m;
  }
}
// Q8_0 [34 B]: d f16, qs int8[32]; value d * q.
void Q8_0(const uint8_t* b, double* y) {
  const double d = F16At(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<int8_t>(b[2 + j]);
}

}  // namespace

absl::Status NaiveDequantize(quant::Type type, const uint8_t* blocks, int64_t n, double* out) {
  const quant::TypeTraits tr = quant::Traits(type);
  if (tr.name == nullptr || tr.block_size == 0 || n <= 0 || n % tr.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "naive dequantize: ", n, " elements of type ", static_cast<uint32_t>(type),
        " do not fill blocks"));
  }
  using quant::Type;
  void (*block_fn)(const uint8_t*, double*) = nullptr;
  switch (type) {
    case Type::F32:
      for (int64_t i = 0; i < n; ++i) {
        float v;
        memcpy(&v, blocks + 4 * i, 4);
        out[i] = v;
      }
      return absl::OkStatus();
    case Type::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = F16At(blocks + 2 * i);
      return absl::OkStatus();
    case Type::BF16:  // the upper half of a binary32
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(U16(blocks + 2 * i)) << 16;
        float v;
        memcpy(&v, &bits, 4);
        out[i] = v;
      }
      return absl::OkStatus();
    case Type::Q4_0: block_fn = &Q4_0; break;
    case Type::Q4_1: block_fn = &Q4_1; break;
    case Type::Q5_0: block_fn = &Q5_0; break;
    case Type::Q5_1: block_fn = &Q5_1; break;
    case Type::Q8_0: block_fn = &Q8_0; break;
    default: break;
  }
  if (block_fn != nullptr) {
    for (int64_t b = 0; b < n / tr.block_size; ++b) {
      block_fn(blocks + b * tr.type_size, out + b * tr.block_size);
    }
    return absl::OkStatus();
  }
  if (!HasDequantizeRef(type)) {
    return absl::UnimplementedError(
        absl::StrCat("naive dequantize: type ", tr.name, " is not covered by the oracle"));
  }
  const std::vector<double> v = DequantizeRef(type, blocks, n);
  if (static_cast<int64_t>(v.size()) != n) {
    return absl::InternalError(absl::StrCat("naive dequantize: ", tr.name, " gave ", v.size(),
                                            " values for ", n));
  }
  std::copy(v.begin(), v.end(), out);
  return absl::OkStatus();
}

// ---- config ----

absl::Status NaiveModel::ReadConfig(const gguf::File& f) {
  const gguf::Value* a = Key(f, "general.architecture");
  if (a == nullptr || a->type != gguf::ValueType::STRING) {
    return absl::InvalidArgumentError(
        "naive forward: general.architecture missing or not a string");
  }
  c_.arch = a->str;
  if (c_.arch != "llama" && c_.arch != "qwen3" && c_.arch != "gemma3") {
    return absl::UnimplementedError(absl::StrCat(
        "naive forward: general.architecture \"", c_.arch, "\" is not llama, qwen3 or gemma3"));
  }
  auto key = [&](const char* k) { return absl::StrCat(c_.arch, ".", k); };
  ASSIGN_OR_RETURN(c_.n_embd, IntKey(f, key("embedding_length"), 0, true));
  ASSIGN_OR_RETURN(c_.n_layer, IntKey(f, key("block_count"), 0, true));
  ASSIGN_OR_RETURN(c_.n_head, IntKey(f, key("attention.head_count"), 0, true));
  // transformers: num_key_value_heads defaults to num_attention_heads.
  ASSIGN_OR_RETURN(c_.n_kv_head, IntKey(f, key("attention.head_count_kv"), c_.n_head, false));
  ASSIGN_OR_RETURN(c_.n_ff, IntKey(f, key("feed_forward_length"), 0, true));
  if (c_.n_head % c_.n_kv_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat("naive forward: ", key("attention.head_count"),
                                                   " is not a multiple of head_count_kv"));
  }
  ASSIGN_OR_RETURN(c_.head_dim,
                   IntKey(f, key("attention.key_length"), c_.n_embd / c_.n_head, false));
  ASSIGN_OR_RETURN(int64_t v_len, IntKey(f, key("attention.value_length"), c_.head_dim, false));
  ASSIGN_OR_RETURN(int64_t n_rot, IntKey(f, key("rope.dimension_count"), c_.head_dim, false));
  if (v_len != c_.head_dim || n_rot != c_.head_dim || c_.head_dim % 2 != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "naive forward: ", key("attention.value_length"), " (", v_len, ") and ",
        key("rope.dimension_count"), " (", n_rot, ") must equal an even key_length (", c_.head_dim,
        "): these models rotate the whole head"));
  }
  ASSIGN_OR_RETURN(c_.eps, FloatKey(f, key("attention.layer_norm_rms_epsilon"), 0, true));
  // transformers' config defaults when the GGUF has no rope.freq_base: llama and qwen3 10000,
  // gemma3 1e6; gemma3's sliding layers use rope_local_base_freq = 10000.
  ASSIGN_OR_RETURN(c_.rope_theta, FloatKey(f, key("rope.freq_base"),
                                           c_.arch == "gemma3" ? 1e6 : 1e4, false));
  if (c_.rope_theta <= 0) return absl::InvalidArgumentError("naive forward: rope.freq_base <= 0");
  for (const char* k : {"rope.scaling.type", "rope.scaling.factor"}) {
    const gguf::Value* v = Key(f, key(k));
    if (v != nullptr && !(v->type == gguf::ValueType::STRING && v->str == "none")) {
      return absl::UnimplementedError(
          absl::StrCat("naive forward: ", key(k), " is set; RoPE scaling is not implemented"));
    }
  }
  ASSIGN_OR_RETURN(c_.attn_softcap, FloatKey(f, key("attn_logit_softcapping"), 0, false));
  ASSIGN_OR_RETURN(c_.final_softcap, FloatKey(f, key("final_logit_softcapping"), 0, false));
  if (c_.arch == "gemma3") {
    ASSIGN_OR_RETURN(c_.sliding_window, IntKey(f, key("attention.sliding_window"), 0, true));
    // Gemma3TextConfig: sliding_window_pattern 6 (no GGUF key carries it): layer l is
    // "full_attention" iff (l + 1) % 6 == 0.
    c_.sliding_pattern = 6;
    c_.rope_theta_local = 1e4;
  }
  const gguf::TensorInfo* e = f.FindTensor("token_embd.weight");
  if (e == nullptr || e->shape.size() != 2 || e->shape[0] != c_.n_embd) {
    return absl::InvalidArgumentError(
        "naive forward: token_embd.weight missing or not [embedding_length, n_vocab]");
  }
  c_.n_vocab = e->shape[1];
  c_.tied_head = f.FindTensor("output.weight") == nullptr;
  return absl::OkStatus();
}

// ---- weights ----

namespace {

// Dequantizes tensor `name` of ggml shape {cols, rows} (rows = 1 for a vector) into *out.
absl::Status LoadTensor(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows,
                        int threads, std::set<std::string>* used, std::vector<double>* out) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("naive forward: missing tensor ", name));
  }
  const std::vector<int64_t> want = rows == 1 ? std::vector<int64_t>{cols}
                                              : std::vector<int64_t>{cols, rows};
  if (t->shape != want) {
    return absl::InvalidArgumentError(absl::StrCat("naive forward: tensor ", name, " has ",
                                                   t->shape.size(), " dims [", t->shape[0], ", ",
                                                   t->shape.size() > 1 ? t->shape[1] : 1,
                                                   "]; expected [", cols, ", ", rows, "]"));
  }
  used->insert(name);
  out->assign(cols * rows, 0.0);
  const quant::TypeTraits tr = quant::Traits(t->type);
  const int64_t row_bytes = cols / tr.block_size * tr.type_size;
  const uint8_t* data = f.TensorData(*t);
  std::mutex mu;
  absl::Status status;
  ParallelFor(threads, rows, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      absl::Status s = NaiveDequantize(t->type, data + r * row_bytes, cols, out->data() + r * cols);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        status = absl::Status(s.code(), absl::StrCat("naive forward: tensor ", name, " row ", r,
                                                     ": ", s.message()));
        return;
      }
    }
  });
  return status;
}

// transformers' reverse_permute_weights (modeling_gguf_pytorch_utils.py): llama.cpp's converter
// reorders each head's q/k rows (h, j, i) -> (h, i, j) so that RoPE rotates adjacent pairs;
// undone here, so that rotate_half (pairs i, i + head_dim/2) applies as in modeling_llama.
std::vector<double> UnpermuteHeads(const std::vector<double>& w, int64_t heads, int64_t head_dim,
                                   int64_t cols) {
  std::vector<double> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const double* src = w.data() + (h * head_dim + 2 * i + j) * cols;
        std::copy(src, src + cols, out.data() + (h * head_dim + j * half + i) * cols);
      }
    }
  }
  return out;
}

}  // namespace

absl::Status NaiveModel::LoadWeights(const gguf::File& f) {
  const NaiveConfig& c = c_;
  std::set<std::string> used;
  auto load = [&](const std::string& name, int64_t cols, int64_t rows, std::vector<double>* out) {
    return LoadTensor(f, name, cols, rows, threads_, &used, out);
  };
  const bool gemma = c.arch == "gemma3", qk_norm = c.arch != "llama";
  RETURN_IF_ERROR(load("token_embd.weight", c.n_embd, c.n_vocab, &embd_));
  RETURN_IF_ERROR(load("output_norm.weight", c.n_embd, 1, &out_norm_));
  if (!c.tied_head) RETURN_IF_ERROR(load("output.weight", c.n_embd, c.n_vocab, &head_));
  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_kv_head * c.head_dim;
  layers_.resize(c.n_layer);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    Layer& l = layers_[il];
    const std::string p = absl::StrCat("blk.", il, ".");
    RETURN_IF_ERROR(load(p + "attn_norm.weight", c.n_embd, 1, &l.attn_norm));
    RETURN_IF_ERROR(load(p + "attn_q.weight", c.n_embd, q_dim, &l.wq));
    RETURN_IF_ERROR(load(p + "attn_k.weight", c.n_embd, kv_dim, &l.wk));
    RETURN_IF_ERROR(load(p + "attn_v.weight", c.n_embd, kv_dim, &l.wv));
    RETURN_IF_ERROR(load(p + "attn_output.weight", q_dim, c.n_embd, &l.wo));
    if (qk_norm) {
      RETURN_IF_ERROR(load(p + "attn_q_norm.weight", c.head_dim, 1, &l.q_norm));
      RETURN_IF_ERROR(load(p + "attn_k_norm.weight", c.head_dim, 1, &l.k_norm));
    }
    RETURN_IF_ERROR(load(p + "ffn_norm.weight", c.n_embd, 1, &l.ffn_norm));
    RETURN_IF_ERROR(load(p + "ffn_gate.weight", c.n_embd, c.n_ff, &l.gate));
    RETURN_IF_ERROR(load(p + "ffn_up.weight", c.n_embd, c.n_ff, &l.up));
    RETURN_IF_ERROR(load(p + "ffn_down.weight", c.n_ff, c.n_embd, &l.down));
    if (gemma) {
      RETURN_IF_ERROR(load(p + "post_attention_norm.weight", c.n_embd, 1, &l.post_attn_norm));
      RETURN_IF_ERROR(load(p + "post_ffw_norm.weight", c.n_embd, 1, &l.post_ffn_norm));
    }
    if (c.arch == "llama") {
      l.wq = UnpermuteHeads(l.wq, c.n_head, c.head_dim, c.n_embd);
      l.wk = UnpermuteHeads(l.wk, c.n_kv_head, c.head_dim, c.n_embd);
    }
    if (gemma) {
      // convert_hf_to_gguf.py stores gemma's norm weights as 1 + w; transformers' GGUF loader
      // subtracts the 1 again and Gemma3RMSNorm multiplies by (1 + w). Kept in that form.
      for (std::vector<double>* w : {&l.attn_norm, &l.q_norm, &l.k_norm, &l.post_attn_norm,
                                     &l.ffn_norm, &l.post_ffn_norm}) {
        for (double& x : *w) x -= 1.0;
      }
    }
  }
  if (gemma) {
    for (double& x : out_norm_) x -= 1.0;
  }
  // Nothing in the file may go unused: a bias or a RoPE-frequency tensor this forward does not
  // apply would otherwise be ignored silently.
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (!used.count(t.name)) {
      return absl::UnimplementedError(
          absl::StrCat("naive forward: tensor ", t.name, " is not part of the ", c.arch,
                       " definition this oracle implements"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NaiveModel>> NaiveModel::Load(const gguf::File& file, int threads) {
  if (threads < 1) return absl::InvalidArgumentError("naive forward: threads must be >= 1");
  std::unique_ptr<NaiveModel> m(new NaiveModel());
  m->threads_ = threads;
  RETURN_IF_ERROR(m->ReadConfig(file));
  RETURN_IF_ERROR(m->LoadWeights(file));
  return m;
}

// ---- the forward ----

namespace {

typedef double V2 __attribute__((vector_size(16)));
constexpr int64_t kTok = 8;     // tokens per register block (4 x V2 lanes)
constexpr int64_t kChunk = 64;  // tokens whose transposed block stays in L2 while W streams

V2 Load2(const double* p) {
  V2 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// Y[t, r] = sum_k X[t, k] W[r, k], k ascending, one double accumulator per (t, r):
// X [T, in], W [out, in], Y [T, out]. Blocked over 8 tokens x 2 rows for registers; every
// element's sum is the same sequence of operations whatever T, the blocking or the threads.
void MatMul(const double* X, int64_t T, int64_t in, const double* W, int64_t out, double* Y,
            int threads) {
  const int64_t n_blk = (T + kTok - 1) / kTok;
  std::vector<double> xt(n_blk * in * kTok, 0.0);  // [block][k][8], zero-padded tokens
  for (int64_t t = 0; t < T; ++t) {
    double* dst = xt.data() + (t / kTok) * in * kTok + t % kTok;
    for (int64_t k = 0; k < in; ++k) dst[k * kTok] = X[t * in + k];
  }
  ParallelFor(threads, out, 2, [&](int64_t r0, int64_t r1) {
    for (int64_t b0 = 0; b0 < n_blk; b0 += kChunk / kTok) {
      const int64_t b1 = std::min(n_blk, b0 + kChunk / kTok);
      for (int64_t r = r0; r < r1; r += 2) {
        const bool pair = r + 1 < r1;
        const double* w0 = W + r * in;
        const double* w1 = pair ? w0 + in : w0;
        for (int64_t b = b0; b < b1; ++b) {
          const double* xb = xt.data() + b * in * kTok;
          V2 a[4] = {}, c[4] = {};
          for (int64_t k = 0; k < in; ++k) {
            const V2 x0 = Load2(xb + k * kTok), x1 = Load2(xb + k * kTok + 2);
            const V2 x2 = Load2(xb + k * kTok + 4), x3 = Load2(xb + k * kTok + 6);
            const double u = w0[k], v = w1[k];
            a[0] += u * x0; a[1] += u * x1; a[2] += u * x2; a[3] += u * x3;
            c[0] += v * x0; c[1] += v * x1; c[2] += v * x2; c[3] += v * x3;
          }
          for (int64_t j = 0; j < kTok && b * kTok + j < T; ++j) {
            Y[(b * kTok + j) * out + r] = a[j / 2][j % 2];
            if (pair) Y[(b * kTok + j) * out + r + 1] = c[j / 2][j % 2];
          }
        }
      }
    }
  });
}

// sum_i a[i] b[i] over n (n even): two V2 accumulators, lanes combined in a fixed order.
double Dot(const double* a, const double* b, int64_t n) {
  V2 s0 = {}, s1 = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += Load2(a + i) * Load2(b + i);
    s1 += Load2(a + i + 2) * Load2(b + i + 2);
  }
  for (; i + 2 <= n; i += 2) s0 += Load2(a + i) * Load2(b + i);
  double s = (s0[0] + s1[0]) + (s0[1] + s1[1]);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// RMSNorm of each row (LlamaRMSNorm / Qwen3RMSNorm: w * x / sqrt(mean(x^2) + eps);
// Gemma3RMSNorm: (1 + w) * x / sqrt(mean(x^2) + eps)), in place over rows of width n.
void RmsNormRows(double* x, int64_t rows, int64_t n, const std::vector<double>& w, double eps,
                 bool one_plus) {
  for (int64_t t = 0; t < rows; ++t) {
    double* r = x + t * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += r[i] * r[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) r[i] = r[i] * inv * (one_plus ? 1.0 + w[i] : w[i]);
  }
}

// rotate_half RoPE (modeling_llama.apply_rotary_pos_emb) of each head of row t at position
// pos[t]: pairs (i, i + d/2) with angle pos * theta^(-2i/d).
void Rope(double* x, int64_t rows, int64_t heads, int64_t d, const int64_t* pos, double theta) {
  const int64_t half = d / 2;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos[t]) *
                         std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double cs = std::cos(ang), sn = std::sin(ang);
      for (int64_t h = 0; h < heads; ++h) {
        double* p = x + (t * heads + h) * d;
        const double a = p[i], b = p[i + half];
        p[i] = a * cs - b * sn;
        p[i + half] = b * cs + a * sn;
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<double>> NaiveModel::Logits(std::span<const int32_t> tokens,
                                                       int64_t first) const {
  const NaiveConfig& c = c_;
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0 || first < 0 || first >= T) {
    return absl::InvalidArgumentError(absl::StrCat("naive forward: first row ", first,
                                                   " outside [0, ", T, ")"));
  }
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "naive forward: token ", tokens[t], " at position ", t, " outside the vocabulary"));
    }
  }
  const bool gemma = c.arch == "gemma3";
  const int64_t d = c.n_embd, hd = c.head_dim, nh = c.n_head, nkv = c.n_kv_head;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd, group = nh / nkv;
  // Gemma3TextScaledWordEmbedding multiplies by sqrt(hidden_size).
  const double embed_scale = gemma ? std::sqrt(static_cast<double>(d)) : 1.0;
  std::vector<double> x(T * d);  // the residual stream [T, d]
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < d; ++i) x[t * d + i] = embd_[tokens[t] * d + i] * embed_scale;
  }
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = t;
  std::vector<double> xn, q, k, v, att, o, g, u;
  const double kGeluC = std::sqrt(2.0 / std::numbers::pi);  // gelu_pytorch_tanh
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const Layer& l = layers_[il];
    // Rows [q0, T) need queries and outputs: all of them except in the last layer, whose
    // earlier rows feed nothing but their keys and values.
    const int64_t q0 = il == c.n_layer - 1 ? first : 0, Tq = T - q0;
    const bool sliding = gemma && (il + 1) % c.sliding_pattern != 0;
    const double theta = sliding ? c.rope_theta_local : c.rope_theta;

    xn.assign(x.begin(), x.end());
    RmsNormRows(xn.data(), T, d, l.attn_norm, c.eps, gemma);
    q.assign(Tq * q_dim, 0);
    k.assign(T * kv_dim, 0);
    v.assign(T * kv_dim, 0);
    MatMul(xn.data() + q0 * d, Tq, d, l.wq.data(), q_dim, q.data(), threads_);
    MatMul(xn.data(), T, d, l.wk.data(), kv_dim, k.data(), threads_);
    MatMul(xn.data(), T, d, l.wv.data(), kv_dim, v.data(), threads_);
    if (!l.q_norm.empty()) {  // per-head norms of q and k, before RoPE (qwen3, gemma3)
      RmsNormRows(q.data(), Tq * nh, hd, l.q_norm, c.eps, gemma);
      RmsNormRows(k.data(), T * nkv, hd, l.k_norm, c.eps, gemma);
    }
    Rope(q.data(), Tq, nh, hd, pos.data() + q0, theta);
    Rope(k.data(), T, nkv, hd, pos.data(), theta);

    // Eager attention: softmax(q k^T * scale [softcapped] + causal/sliding mask) v, double.
    // Scale: head_dim^-0.5 (gemma3: query_pre_attn_scalar^-0.5, which equals it for the sizes
    // the GGUF can describe: transformers' default 256 and llama.cpp's head_dim).
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    att.assign(Tq * q_dim, 0);
    ParallelFor(threads_, Tq * nh, 1, [&](int64_t lo, int64_t hi) {
      std::vector<double> s(T);
      for (int64_t qh = lo; qh < hi; ++qh) {
        const int64_t tq = qh / nh, h = qh % nh, t = q0 + tq, kvh = h / group;
        const int64_t j0 = sliding ? std::max<int64_t>(0, t - c.sliding_window + 1) : 0;
        const double* qr = q.data() + (tq * nh + h) * hd;
        double mx = -INFINITY;
        for (int64_t j = j0; j <= t; ++j) {
          double sc = Dot(qr, k.data() + (j * nkv + kvh) * hd, hd) * scale;
          if (c.attn_softcap > 0) sc = c.attn_softcap * std::tanh(sc / c.attn_softcap);
          s[j] = sc;
          mx = std::max(mx, sc);
        }
        double den = 0;
        for (int64_t j = j0; j <= t; ++j) den += (s[j] = std::exp(s[j] - mx));
        double* out = att.data() + (tq * nh + h) * hd;
        for (int64_t j = j0; j <= t; ++j) {
          const double p = s[j] / den;
          const double* vr = v.data() + (j * nkv + kvh) * hd;
          for (int64_t i = 0; i < hd; ++i) out[i] += p * vr[i];
        }
      }
    });
    o.assign(Tq * d, 0);
    MatMul(att.data(), Tq, q_dim, l.wo.data(), d, o.data(), threads_);
    if (gemma) RmsNormRows(o.data(), Tq, d, l.post_attn_norm, c.eps, true);
    for (int64_t i = 0; i < Tq * d; ++i) x[q0 * d + i] += o[i];

    xn.assign(x.begin() + q0 * d, x.end());
    RmsNormRows(xn.data(), Tq, d, l.ffn_norm, c.eps, gemma);
    g.assign(Tq * c.n_ff, 0);
    u.assign(Tq * c.n_ff, 0);
    MatMul(xn.data(), Tq, d, l.gate.data(), c.n_ff, g.data(), threads_);
    MatMul(xn.data(), Tq, d, l.up.data(), c.n_ff, u.data(), threads_);
    for (int64_t i = 0; i < Tq * c.n_ff; ++i) {
      const double a = g[i];
      // llama/qwen3: SiLU; gemma3: gelu_pytorch_tanh.
      const double act = gemma ? 0.5 * a * (1.0 + std::tanh(kGeluC * (a + 0.044715 * a * a * a)))
                               : a / (1.0 + std::exp(-a));
      g[i] = act * u[i];
    }
    o.assign(Tq * d, 0);
    MatMul(g.data(), Tq, c.n_ff, l.down.data(), d, o.data(), threads_);
    if (gemma) RmsNormRows(o.data(), Tq, d, l.post_ffn_norm, c.eps, true);
    for (int64_t i = 0; i < Tq * d; ++i) x[q0 * d + i] += o[i];
  }
  const int64_t R = T - first;
  xn.assign(x.begin() + first * d, x.end());
  RmsNormRows(xn.data(), R, d, out_norm_, c.eps, gemma);
  std::vector<double> logits(R * c.n_vocab);
  MatMul(xn.data(), R, d, c.tied_head ? embd_.data() : head_.data(), c.n_vocab, logits.data(),
         threads_);
  if (c.final_softcap > 0) {
    for (double& z : logits) z = c.final_softcap * std::tanh(z / c.final_softcap);
  }
  return logits;
}

}  // namespace lockstep::oracle
