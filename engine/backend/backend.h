// The Backend interface: the ops a forward needs, nothing more. A forward (engine/models) is a
// sequence of these calls on float activations; weights stay in their GGUF block format.
//
// Reduction-order contract (DESIGN.md §1): every output element is computed by a reduction whose
// order depends only on the op's shape parameters that define that element (e.g. `cols` of a
// matmul, `head_dim` and the number of keys of an attention row) — never on the number of rows
// T in the call, the thread count, or which row of the batch the element is in. That is what
// makes batch, chunk and thread invariance hold bitwise on one backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/quant/types.h"

namespace lockstep::backend {

// A weight matrix as stored in GGUF: `rows` rows of `cols` elements of `type`, rows contiguous
// (ggml: ne[0] = cols, ne[1] = rows). Row r starts at data + r * row_bytes.
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // y[t, r] = sum_c W[r, c] * x[t, c].   x: [T, w.cols] f32, y: [T, w.rows] f32
  virtual void MatMul(const Weight& w, const float* x, int64_t T, float* y) = 0;

  // out[t, :] = dequantized row ids[t] of `table`.   ids: [T], out: [T, table.cols]
  // Precondition (checked by the caller): 0 <= ids[t] < table.rows.
  virtual void GetRows(const Weight& table, const int32_t* ids, int64_t T, float* out) = 0;

  // y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * (w ? w : 1).   x, y: [T, d]; w: [d] or null
  virtual void RmsNorm(const float* x, const float* w, int64_t T, int64_t d, float eps,
                       float* y) = 0;

  // Rotates the first n_rot dims of every head in place.   x: [T, n_heads, head_dim]; pos: [T]
  // theta_i = pos * freq_base^(-2i / n_rot).
  virtual void Rope(float* x, const int32_t* pos, int64_t T, int64_t n_heads, int64_t head_dim,
                    int64_t n_rot, float freq_base, RopeMode mode) = 0;

  // Causal attention of one sequence's T queries over its first n_kv cached positions.
  // q: [T, n_head, head_dim]; pos: [T] (query t sees keys j <= pos[t], within the window);
  // k, v: [n_kv, n_kv_head, head_dim] (grouped-query: head h reads kv head h / (n_head/n_kv_head));
  // out: [T, n_head, head_dim].
  virtual void Attention(const float* q, const int32_t* pos, int64_t T, const float* k,
                         const float* v, int64_t n_kv, int64_t n_head, int64_t n_kv_head,
                         int64_t head_dim, const AttentionParams& p, float* out) = 0;

  // out[i] = act(gate[i]) * up[i].   [n]
  virtual void Glu(const float* gate, const float* up, int64_t n, Activation act, float* out) = 0;

  // out[i] = a[i] + b[i].   [n]   (out may alias a or b)
  virtual void Add(const float* a, const float* b, int64_t n, float* out) = 0;

  // out[i] = x[i] * s.   [n]   (out may alias x)
  virtual void Scale(const float* x, float s, int64_t n, float* out) = 0;

  // x[i] = cap * tanh(x[i] / cap), in place.   [n]
  virtual void Softcap(float* x, int64_t n, float cap) = 0;
};

// Construction by name ("ref" | "cpu") is oracle/make_backend.h: oracle/ sits above engine/ in
// the link graph, so it is the one place that can see both the ref and the engine backends.

}  // namespace lockstep::backend
