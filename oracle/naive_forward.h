// The model oracle inside the repo: a naive forward of the llama, qwen3 and gemma3 families,
// written apart from engine/models (docs/testing.md, "The naive forward"). It shares nothing
// with the engine's forward but the GGUF reader: hyperparameters are read here from the metadata
// keys, weights are dequantized once by the oracle's scalar dequantizers (oracle/quant_ref.h for
// the K-quants, this file's own for the legacy blocks and floats), and the forward follows the
// published model definitions (Hugging Face transformers' modeling_llama / modeling_qwen3 /
// modeling_gemma3), including their conventions where llama.cpp's differ: llama's q/k rows are
// un-permuted back to transformers' order and rotated with rotate_half, and gemma's norm weights
// are taken back to transformers' w (the GGUF stores 1 + w) and applied as (1 + w).
//
// Arithmetic is double throughout (weights, activations, accumulations); there is no KV cache:
// Logits() recomputes every position of the sequence from the token embeddings on every call.
// Row t of a call depends only on tokens [0, t] and is computed in the same order whatever the
// sequence length, the thread count or the rows asked for, so the rows of one call over a whole
// sequence equal, bit for bit, what one call per step would give (a test holds it to that).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/types.h"

namespace lockstep::oracle {

// Hyperparameters as the naive forward reads them (from `<arch>.*` GGUF keys, see Load).
struct NaiveConfig {
  std::string arch;  // llama | qwen3 | gemma3
  int64_t n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_kv_head = 0, head_dim = 0, n_ff = 0;
  double eps = 0;
  double rope_theta = 0;        // full-attention layers
  double rope_theta_local = 0;  // gemma3 sliding layers (transformers' rope_local_base_freq)
  int64_t sliding_window = 0;   // gemma3: key j visible from query i iff i - j < window
  int sliding_pattern = 0;      // gemma3: layer l is global iff (l + 1) % pattern == 0
  double attn_softcap = 0, final_softcap = 0;  // 0: none
  bool tied_head = false;       // no output.weight: the head is token_embd
};

class NaiveModel {
 public:
  // Reads the config and dequantizes every weight to double (the whole model: 8 bytes per
  // parameter). `threads` (>= 1) parallelises dequantization and the forward over output rows;
  // results do not depend on it. `file` must outlive nothing: the weights are copied out.
  // Errors name the metadata key or tensor that is missing, mistyped or unsupported.
  static absl::StatusOr<std::unique_ptr<NaiveModel>> Load(const gguf::File& file, int threads);

  const NaiveConfig& config() const { return c_; }

  // Runs the forward over tokens[0, T) from scratch and returns the logits of positions
  // [first, T): [T - first, n_vocab], row-major, double. 0 <= first < T; ids must be < n_vocab.
  absl::StatusOr<std::vector<double>> Logits(std::span<const int32_t> tokens, int64_t first) const;

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm;
    std::vector<double> ffn_norm, gate, up, down, post_ffn_norm;
  };
  NaiveModel() = default;
  absl::Status ReadConfig(const gguf::File& f);
  absl::Status LoadWeights(const gguf::File& f);

  NaiveConfig c_;
  int threads_ = 1;
  std::vector<double> embd_;  // [n_vocab, n_embd]
  std::vector<double> out_norm_, head_;  // head_: [n_vocab, n_embd] (empty when tied)
  std::vector<Layer> layers_;
};

// The oracle's dequantizer: n values of `type` from `blocks` (raw GGUF bytes) into out[n], in
// double. F32, F16, BF16 and the legacy blocks Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 are decoded here from
// ggml's block layouts; the K-quants, IQ4_NL, IQ4_XS and NVFP4 by oracle::DequantizeRef. Every
// value is exact in double; rounded to float it is what the gguf package computes (a test checks
// each type against golden/quant). Error: the type is not covered, or n does not fill blocks.
absl::Status NaiveDequantize(quant::Type type, const uint8_t* blocks, int64_t n, double* out);

}  // namespace lockstep::oracle
