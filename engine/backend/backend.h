// The Backend interface: the memory and the ops a forward needs, nothing more (docs/backends.md).
//
// The backend owns memory. Activations, the KV pool and (after BindWeight) weights live in
// memory the backend allocated — host memory for `ref` and `cpu`, device memory for `cuda`. A
// Tensor is a view of such memory; only the backend dereferences its `data`. Host bytes cross
// only through Upload / Download / BeginStep, so a forward written against this interface runs
// unchanged on a device.
//
// A step is one forward over a ragged batch. BeginStep hands the backend the step's metadata
// (token ids, positions, the paged-KV block tables and slot mapping, which rows need logits);
// the ops of the step that need it (Embed, Rope, KvWrite, PagedAttention, GatherRows) read it
// from there, as vLLM's attention metadata is read (docs/runtime.md).
//
// Reduction-order contract (docs/design.md §1): every output element is computed by a reduction
// whose order depends only on the op's shape parameters that define that element (`cols` of a
// matmul, `head_dim` and the key positions of an attention row) — never on the number of rows T
// in the call, the thread count, which row of the batch the element is in, or which other
// sequences share the step. Attention reduces the KV axis in pieces of kKvPiece keys at fixed
// absolute positions, combined in order. That is what makes batch, chunk and thread invariance
// hold bitwise on one backend.
//
// Errors: every op returns absl::Status (a bad shape, a type without a codec, a device fault);
// nothing aborts. Ops may run asynchronously; Synchronize() reports what happened since.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/quant/kv_format.h"
#include "engine/quant/types.h"

namespace lockstep::backend {

// A weight matrix as stored in GGUF: `rows` rows of `cols` elements of `type`, rows contiguous
// (ggml: ne[0] = cols, ne[1] = rows). Row r starts at data + r * row_bytes(). Before BindWeight
// `data` points into the mapped file; after, into the backend's memory (which may be the same).
struct Weight {
  quant::Type type = quant::Type::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  std::string_view name;
  int64_t row_bytes() const {
    const quant::TypeTraits t = quant::Traits(type);
    return cols / t.block_size * t.type_size;
  }
  bool bound() const { return data != nullptr; }
};

// A row-major f32 matrix [rows, cols] in backend memory.
struct Tensor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t size() const { return rows * cols; }
  // The same bytes seen as [rows * cols / cols2, cols2] (cols2 divides rows * cols).
  Tensor Reshaped(int64_t cols2) const { return {data, size() / cols2, cols2}; }
  // Rows [r0, r0 + n) of this tensor.
  Tensor Rows(int64_t r0, int64_t n) const { return {data + r0 * cols, n, cols}; }
};

// A row-major int32 matrix [rows, cols] in backend memory (MoE routes: expert ids per token).
struct IntTensor {
  int32_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t size() const { return rows * cols; }
  IntTensor Rows(int64_t r0, int64_t n) const { return {data + r0 * cols, n, cols}; }
};

enum class RopeMode {
  kNormal,  // rotate pairs (2i, 2i+1)            — llama.cpp LLAMA_ROPE_TYPE_NORM (llama)
  kNeox,    // rotate pairs (i, i + n_rot / 2)     — LLAMA_ROPE_TYPE_NEOX (gemma3, qwen3)
};

enum class Activation {
  kSilu,     // x * sigmoid(x)                            (SwiGLU: llama, qwen3)
  kGeluTanh, // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GeGLU: gemma3)
};

struct AttentionParams {
  float scale = 1.0f;        // applied to q·k before masking
  int64_t window = 0;        // sliding window: key j visible to query at p iff p - j < window; 0 = none
  float softcap = 0.0f;      // 0 = none; else scores = softcap * tanh(scores / softcap)
};

// Keys per piece of the attention reduction: scores, exponent sums and value sums are formed per
// piece of keys [i * kKvPiece, (i + 1) * kKvPiece) and the pieces combined in order of i.
inline constexpr int64_t kKvPiece = 256;

// The paged KV storage of one layer: K and V rows of `kv_dim` elements in their formats,
// [n_blocks, block_size, RowBytes] each (engine/quant/kv_format.h gives the row layout).
struct KvLayout {
  quant::KvFormat k_format = quant::KvFormat::kF32;
  quant::KvFormat v_format = quant::KvFormat::kF32;
  int64_t n_blocks = 0;
  int64_t block_size = 16;  // tokens per block
  int64_t kv_dim = 0;       // n_kv_head * head_dim
  int64_t k_bytes() const { return n_blocks * block_size * quant::KvRowBytes(k_format, kv_dim); }
  int64_t v_bytes() const { return n_blocks * block_size * quant::KvRowBytes(v_format, kv_dim); }
};
struct KvLayer {
  void* k = nullptr;  // backend memory, layout.k_bytes()
  void* v = nullptr;  // backend memory, layout.v_bytes()
};

// One step's metadata, in host memory; BeginStep copies what the ops need. T = tokens.size().
// Sequence s owns rows [query_start[s], query_start[s + 1]) of every activation.
struct StepMeta {
  std::vector<int32_t> tokens;       // [T] token ids (Embed)
  std::vector<int32_t> positions;    // [T] absolute positions (Rope, attention masks)
  std::vector<int32_t> slots;        // [T] KV slot of each token: block * block_size + offset
  std::vector<int32_t> query_start;  // [n_seq + 1]
  std::vector<int32_t> seq_len;      // [n_seq] keys of sequence s after this step's writes
  std::vector<int32_t> block_table;  // [n_seq, max_blocks] block ids, row-major
  int64_t max_blocks = 0;            // columns of block_table
  std::vector<int32_t> output_rows;  // [R] rows whose final hidden state is gathered (GatherRows)
  // The step's ops depend on its shape alone and nothing reads backend memory before the step
  // ends, so a device backend may record them once and replay them (cuda graphs). False for a
  // step that downloads intermediate tensors (--dump-layers).
  bool may_capture = true;
  // Recurrent state (Gated DeltaNet layers, docs/models.md): the state-pool slot of each
  // sequence, read at the start of its rows and written at their end (empty: the step has no
  // recurrent layers). A sequence whose first row is at position 0 starts from zeros.
  std::vector<int32_t> state_slots;        // [n_seq] or empty
  // When non-empty: state_checkpoints[t] >= 0 is a slot that also receives the state right after
  // row t (speculative verify: the state at every draft position, restored on rejection).
  std::vector<int32_t> state_checkpoints;  // [T] or empty; -1 = none
  int64_t n_seq() const { return static_cast<int64_t>(seq_len.size()); }
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

// The recurrent state of one Gated DeltaNet layer for every slot of the state pool, in backend
// memory (docs/models.md, "Hybrid Gated DeltaNet"):
//   conv: [n_slots, conv_kernel - 1, channels]  the last K - 1 inputs of the causal conv
//   ssm:  [n_slots, n_v_head, head_k_dim, head_v_dim]  the delta-rule state S (f32)
struct GdnLayout {
  int64_t n_slots = 0;
  int64_t conv_kernel = 0;  // K
  int64_t n_k_head = 0, n_v_head = 0, head_k_dim = 0, head_v_dim = 0;
  // Which key head value head h reads: h % n_k_head when tiled (qwen3_5: llama.cpp's converter
  // reorders the value heads so that ggml_repeat tiles), else h / (n_v_head / n_k_head)
  // (qwen3_next: transformers' repeat_interleave).
  bool tiled_k = false;
  // conv channels: q, k (n_k_head * head_k_dim each) then v (n_v_head * head_v_dim).
  int64_t channels() const { return 2 * n_k_head * head_k_dim + n_v_head * head_v_dim; }
  int64_t conv_floats() const { return (conv_kernel - 1) * channels(); }    // per slot
  int64_t ssm_floats() const { return n_v_head * head_k_dim * head_v_dim; }  // per slot
  int64_t k_head_of(int64_t h) const {
    return tiled_k ? h % n_k_head : h / (n_v_head / n_k_head);
  }
};
struct GdnLayer {
  float* conv = nullptr;  // backend memory, n_slots * conv_floats()
  float* ssm = nullptr;   // backend memory, n_slots * ssm_floats()
};

// The error of a Gated DeltaNet op that `backend` does not implement.
inline absl::Status UnimplementedGdnOp(std::string_view backend, std::string_view op) {
  return absl::UnimplementedError(
      std::string("the ") + std::string(backend) + " backend does not implement " +
      std::string(op) + " (needed by Gated DeltaNet layers: qwen3_5, qwen3_next; docs/models.md "
      "lists which backends run which families)");
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // One line for reports and boot banners: the device or ISA path and any counters worth a look
  // (cuda: the GPU, and steps run eagerly / captured / replayed as graphs).
  virtual std::string Describe() const { return std::string(name()); }

  // ---- memory ----
  // `bytes` of backend memory, alive until Free or the backend's destruction. `what` names the
  // allocation in an out-of-memory error.
  virtual absl::StatusOr<void*> Allocate(int64_t bytes, std::string_view what) = 0;
  virtual void Free(void* p) = 0;
  // host -> backend, backend -> host, backend -> backend.
  virtual absl::Status Upload(void* dst, const void* src, int64_t bytes) = 0;
  virtual absl::Status Download(void* dst, const void* src, int64_t bytes) = 0;
  virtual absl::Status Copy(void* dst, const void* src, int64_t bytes) = 0;
  // The weight as the backend will read it (host backends return `host` itself; a device
  // backend copies it; any backend may repack). Called once per weight at load.
  virtual absl::StatusOr<Weight> BindWeight(const Weight& host) = 0;
  // Waits for every op issued so far; the first failure since the last call.
  virtual absl::Status Synchronize() = 0;

  // ---- the step ----
  virtual absl::Status BeginStep(const StepMeta& meta) = 0;

  // out[t, :] = dequantized row tokens[t] of `table`.   out: [T, table.cols]
  virtual absl::Status Embed(const Weight& table, Tensor out) = 0;
  // y[t, r] = sum_c W[r, c] * x[t, c].   x: [T, w.cols], y: [T, w.rows]
  virtual absl::Status MatMul(const Weight& w, Tensor x, Tensor y) = 0;
  // ys[i] = MatMul(*ws[i], x) for every i, with exactly the values of the separate calls (a
  // device backend may run projections that read the same x as one launch: docs/backends.md).
  // ws and ys: the same length, at most kMatMulGroupMax.
  static constexpr int kMatMulGroupMax = 3;
  virtual absl::Status MatMulGroup(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) {
    if (ws.size() != ys.size() || ws.size() > kMatMulGroupMax) {
      return absl::InvalidArgumentError(absl::StrCat("MatMulGroup: ws and ys must have the same length, at most ",
                                                      kMatMulGroupMax, " (got ", ws.size(), " and ", ys.size(), ")"));
    }
    for (size_t i = 0; i < ws.size(); ++i) {
      if (absl::Status s = MatMul(*ws[i], x, ys[i]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * (w ? w : 1).   x, y: [n, d]; w: F32 [d]
  // or null (y may alias x).
  virtual absl::Status RmsNorm(Tensor x, const Weight* w, float eps, Tensor y) = 0;
  // Rotates the first n_rot dims of every head in place, at the step's positions.
  // x: [T, n_heads * head_dim]; theta_i = pos * freq_base^(-2i / n_rot).
  virtual absl::Status Rope(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                            float freq_base, RopeMode mode) = 0;
  // Writes k, v rows [T, kv_dim] into the step's slots of `layer`, encoded in the layout's
  // formats (quantized at write time).
  virtual absl::Status KvWrite(const KvLayout& layout, Tensor k, Tensor v, KvLayer layer) = 0;
  // Causal attention of every query row over its sequence's cached keys (0 .. seq_len - 1,
  // through the block table), one call for the ragged batch. Query t at position p sees keys
  // j <= p (and p - j < window). Head h reads kv head h / (n_head / n_kv_head).
  // q, out: [T, n_head * head_dim]. A query with no visible key gets zeros.
  virtual absl::Status PagedAttention(Tensor q, const KvLayout& layout, KvLayer layer,
                                      int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                                      const AttentionParams& p, Tensor out) = 0;
  // out[i, :] = x[output_rows[i], :].   x: [T, d], out: [R, d]
  virtual absl::Status GatherRows(Tensor x, Tensor out) = 0;
  // out = act(gate) * up, elementwise.   [n, d] each
  virtual absl::Status Glu(Tensor gate, Tensor up, Activation act, Tensor out) = 0;
  // out = a + b (out may alias a or b).
  virtual absl::Status Add(Tensor a, Tensor b, Tensor out) = 0;
  // out = x * s (out may alias x).
  virtual absl::Status Scale(Tensor x, float s, Tensor out) = 0;
  // x = cap * tanh(x / cap), in place.
  virtual absl::Status Softcap(Tensor x, float cap) = 0;
  // Greedy decoding without the logits leaving the backend (docs/backends.md). For every row r
  // of logits [R, V]: out[r, 0] = the id of the largest finite entry, the lowest id among equal
  // ones (-1: none is finite); out[r, 1] = the lowest id holding a NaN or +inf (-1:
  // none). Exactly what sampling::PlainGreedyToken reads off the same row (comparisons only, so
  // the same bits on every backend). out: [R, 2].
  virtual absl::Status GreedyTokens(Tensor logits, IntTensor out) = 0;

  // ---- RoPE with frequency factors (gemma4's proportional RoPE; docs/models.md) ----
  // Rope with theta_i = pos * freq_base^(-2i / n_rot) / factors[i], as ggml_rope_ext with
  // freq_factors (llama.cpp's rope_freqs.weight: 1e30 leaves pair i unrotated). factors: F32
  // [n_rot / 2]. The default body refuses by name (cuda, so far).
  virtual absl::Status RopeFreqFactors(Tensor /*x*/, int64_t /*n_heads*/, int64_t /*head_dim*/,
                                       int64_t /*n_rot*/, float /*freq_base*/, RopeMode /*mode*/,
                                       const Weight& /*factors*/) {
    return Unimplemented("RopeFreqFactors");
  }

  // ---- Gated DeltaNet (qwen3_5, qwen3_next; docs/models.md) ----
  // Default bodies refuse by name, so a backend without them (cuda, so far) fails with a
  // sentence. Every sequence of the step needs a state slot (StepMeta::state_slots).
  //
  // Causal depthwise conv over each sequence's rows, then SiLU:
  //   y[t, c] = silu(sum_{i<K} w[c, i] * u[p_t - K + 1 + i, c])
  // where u is the sequence's conv input by position: rows of x for this step's positions, the
  // slot's conv state for the K - 1 positions before the first row (zeros if it is at position
  // 0). Then the slot (and each checkpoint) holds the last K - 1 inputs.
  // x, y: [T, channels]; w: F32 [channels, K] (GGUF ssm_conv1d, ne = {K, channels}).
  virtual absl::Status CausalConvSilu(Tensor /*x*/, const Weight& /*w*/, const GdnLayout& /*l*/,
                                      GdnLayer /*state*/, Tensor /*y*/) {
    return UnimplementedGdnOp(name(), "CausalConvSilu");
  }
  // g[t, h] = ssm_a[h] * softplus(a[t, h] + dt_bias[h]);  beta[t, h] = sigmoid(b[t, h]).
  // ssm_a holds -exp(A_log) (llama.cpp's converter). a, b, g, beta: [T, n_v_head]; g may alias
  // a, beta may alias b.
  virtual absl::Status GdnGates(Tensor /*a*/, Tensor /*b*/, const Weight& /*dt_bias*/,
                                const Weight& /*ssm_a*/, Tensor /*g*/, Tensor /*beta*/) {
    return UnimplementedGdnOp(name(), "GdnGates");
  }
  // The gated delta rule, token by token per sequence, per value head h (key head kh =
  // l.k_head_of(h)); q, k of each head L2-normalised (x / sqrt(sum x^2 + eps)), q scaled by
  // head_k_dim^-1/2, as transformers' torch_recurrent_gated_delta_rule:
  //   S = exp(g_t) S;  S += k (beta_t (v - S^T k))^T;  o_t = S^T q
  // S [head_k_dim, head_v_dim] starts from the slot (zeros at position 0) and ends there (and in
  // each checkpoint). qkv: [T, channels] (the conv's output: q | k | v); g, beta: [T, n_v_head];
  // out: [T, n_v_head * head_v_dim].
  virtual absl::Status GatedDeltaRule(Tensor /*qkv*/, Tensor /*g*/, Tensor /*beta*/,
                                      const GdnLayout& /*l*/, GdnLayer /*state*/, float /*eps*/,
                                      Tensor /*out*/) {
    return UnimplementedGdnOp(name(), "GatedDeltaRule");
  }
  // y = x / sqrt(mean(x^2) + eps) * w * silu(z), per row.  x, z, y: [n, d]; w: F32 [d].
  virtual absl::Status GatedRmsNorm(Tensor /*x*/, const Weight& /*w*/, Tensor /*z*/,
                                    float /*eps*/, Tensor /*y*/) {
    return UnimplementedGdnOp(name(), "GatedRmsNorm");
  }
  // Splits every group of 2 m columns: a[t, g m + i] = x[t, 2 g m + i], b[t, g m + i] =
  // x[t, 2 g m + m + i]. x: [T, 2 n m]; a, b: [T, n m] (q | gate of a gated attention head;
  // qwen3_next's beta | alpha of a key-head group).
  virtual absl::Status SplitHalves(Tensor /*x*/, int64_t /*m*/, Tensor /*a*/, Tensor /*b*/) {
    return UnimplementedGdnOp(name(), "SplitHalves");
  }

  // ---- mixture of experts (docs/models.md) ----
  // The ops below have default bodies that refuse by name, so a backend that has not
  // implemented them (cuda, so far) fails with a sentence instead of computing something else.
  //
  // The router's choice. For every row t of logits [T, n_expert]: ids[t, 0..k) are the k experts
  // with the largest logits, in decreasing order of logit; equal logits: the lower expert id
  // ranks first. p = softmax(logits[t]) over all n_expert; weights[t, j] = p[ids[t, j]], divided
  // by sum_j p[ids[t, j]] (summed in rank order j = 0..k-1) when `normalize` (transformers'
  // norm_topk_prob). weights: [T, k] f32, ids: [T, k] int32.
  virtual absl::Status MoeRoute(Tensor /*logits*/, int64_t /*k*/, bool /*normalize*/,
                                Tensor /*weights*/, IntTensor /*ids*/) {
    return Unimplemented("MoeRoute");
  }
  // The expert-indexed matmul over a 3-D expert tensor (GGUF ffn_{gate,up,down}_exps, ggml
  // ne = {cols, rows_per_expert, n_expert}), seen as `w` [n_expert * rows_per_expert, cols]:
  //   y[t * k + j, r] = sum_c W_e[r, c] * x[i, c],  e = ids[t, j],  W_e = rows [e * rpe, (e+1) * rpe)
  // where i = t when x has T rows (the same input for each of a token's experts) and i = t * k + j
  // when x has T * k rows. Each y element is the reduction a plain MatMul of W_e would compute for
  // that row (same order), whatever T and whichever other tokens chose expert e.
  // ids: [T, k]; x: [T or T * k, cols]; y: [T * k, rpe].
  virtual absl::Status MatMulExperts(const Weight& /*w*/, int64_t /*n_expert*/, Tensor /*x*/,
                                     IntTensor /*ids*/, Tensor /*y*/) {
    return Unimplemented("MatMulExperts");
  }
  // out[t, :] = sum_j weights[t, j] * y[t * k + j, :], summed in rank order j = 0..k-1.
  // y: [T * k, d], weights: [T, k], out: [T, d].
  virtual absl::Status MoeCombine(Tensor /*y*/, Tensor /*weights*/, Tensor /*out*/) {
    return Unimplemented("MoeCombine");
  }
  // out = x * sigmoid(g): g is [rows, cols] (elementwise) or [rows, 1] (one gate per row, e.g.
  // the shared expert's gate). out may alias x.
  virtual absl::Status SigmoidMul(Tensor /*x*/, Tensor /*g*/, Tensor /*out*/) {
    return Unimplemented("SigmoidMul");
  }

 protected:
  absl::Status Unimplemented(std::string_view op) const {
    return absl::UnimplementedError(
        absl::StrCat("the ", std::string(name()), " backend does not implement ", std::string(op), " (needed by this model's "
                     "layers; docs/models.md lists which backends run which families)"));
  }
};

// ---- the registry: construction by name (engine/backend/registry.cc) ----

struct BackendOptions {
  int threads = 0;  // cpu: workers including the caller, 0 = hardware concurrency
  bool graphs = true;  // cuda: capture decode steps into CUDA graphs and replay them
  bool profile = false;  // cuda: time every op with events (graphs off); a table at destruction
};
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)>;

// Registers `name` (once; a second registration of a name is ignored and returns false).
// Backends outside engine/ (the ref oracle in oracle/) register themselves at static
// initialization; the linker keeps them because their library is linked whole-archive.
bool RegisterBackend(std::string name, BackendFactory factory);
// An unknown name is an InvalidArgument error that lists the registered ones.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name,
                                                     const BackendOptions& options = {});
std::vector<std::string> BackendNames();

}  // namespace lockstep::backend
