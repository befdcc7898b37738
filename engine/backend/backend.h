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
  int64_t n_seq() const { return static_cast<int64_t>(seq_len.size()); }
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

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
