// Synthetic models: real-size llama / qwen3 / gemma3 GGUFs with seeded random weights, for
// benchmarks that need a model's shape and quantization mix but not its knowledge (docs/models.md,
// "Synthetic models"). Used by `lockstep synth` (engine/cli/cmd_synth.cc).
//
// Every weight value is a function of (seed, tensor name, row, column) only, and every row is
// quantized on its own, so the file's bytes do not depend on the thread count. The vocabulary is
// a byte-level BPE one (256 byte tokens, a few merges, BOS/EOS, "<synth_N>" fillers) that
// lockstep's tokenizer and llama.cpp's llama-vocab.cpp both load.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/types.h"

namespace lockstep::models {

// One shape: the hyperparameters of the real model named in `like`. The one table of them is
// kSynthShapes below (and docs/models.md repeats it).
struct SynthShape {
  const char* arch;   // general.architecture: "llama" | "qwen3" | "gemma3"
  const char* shape;  // "tiny" | "1b" | "8b"
  const char* like;   // whose shape it is, e.g. "Llama-3-8B"
  int64_t n_vocab, n_embd, n_layer, n_ff, n_head, n_kv_head, head_dim, n_ctx;
  float rope_base, norm_eps;
  int64_t sliding_window;  // gemma3: keys a sliding layer sees (5 sliding : 1 global); else 0
  bool tied;               // no output.weight: the head is token_embd (as in the real model)
};

// Left out of the real configs, because lockstep's forward has no such thing: Llama 3.2's
// "llama3" RoPE frequency scaling and Gemma 3 4B's linear RoPE scaling (x8, global layers). They
// change no tensor and no cost, only which positions the model would attend to sensibly.
inline constexpr SynthShape kSynthShapes[] = {
    // arch    shape  like            vocab   embd  lay ff     head kv hdim ctx     rope  eps   window tied
    {"llama",  "tiny", "tiny llama",   512,    256,  4,  512,   4,  2, 64,  2048,   5e5f, 1e-5f, 0,    false},
    {"llama",  "1b",   "Llama-3.2-1B", 128256, 2048, 16, 8192,  32, 8, 64,  131072, 5e5f, 1e-5f, 0,    true},
    {"llama",  "8b",   "Llama-3-8B",   128256, 4096, 32, 14336, 32, 8, 128, 8192,   5e5f, 1e-5f, 0,    false},
    {"qwen3",  "tiny", "tiny qwen3",   512,    256,  4,  512,   4,  2, 64,  2048,   1e6f, 1e-6f, 0,    true},
    {"qwen3",  "1b",   "Qwen3-1.7B",   151936, 2048, 28, 6144,  16, 8, 128, 40960,  1e6f, 1e-6f, 0,    true},
    {"qwen3",  "8b",   "Qwen3-8B",     151936, 4096, 36, 12288, 32, 8, 128, 40960,  1e6f, 1e-6f, 0,    false},
    // tiny gemma3: n_embd 384 is not a multiple of 256, so its q4_k_m has the fallbacks
    // Gemma-3-1B's (n_embd 1152) has; 6 layers hold one global layer.
    {"gemma3", "tiny", "tiny gemma3",  512,    384,  6,  512,   4,  2, 64,  2048,   1e6f, 1e-6f, 32,   true},
    {"gemma3", "1b",   "Gemma-3-1B",   262144, 1152, 26, 6912,  4,  1, 256, 32768,  1e6f, 1e-6f, 512,  true},
    {"gemma3", "8b",   "Gemma-3-4B",   262208, 2560, 34, 10240, 8,  4, 256, 131072, 1e6f, 1e-6f, 1024, true},
};

// Quantization mixes, named as llama.cpp's llama-quantize names them.
inline constexpr const char* kSynthQuants[] = {"q4_k_m", "q8_0", "f16"};

// The smallest vocabulary the synthetic tokenizer fits in (bytes, merges, BOS, EOS).
int64_t SynthMinVocab();

struct SynthOptions {
  std::string arch, shape, quant;  // required: one of kSynthShapes' arch / shape, kSynthQuants
  uint64_t seed = 0;
  int threads = 0;     // 0 = all cores; the bytes do not depend on it
  int64_t layers = 0;  // > 0: this block count instead of the shape's (quick tests)
  int64_t vocab = 0;   // > 0: this vocabulary size instead of the shape's
  // Called once per tensor, in file order, with a line like
  // "[12/291] blk.1.attn_v.weight Q6_K [4096, 1024]".
  std::function<void(const std::string& line)> progress;
};

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;  // ggml order
  quant::Type type;
  float mean = 0, sigma = 0;   // values drawn ~ mean + sigma * N(0, 1)
};

// Everything decided before a weight is drawn.
struct SynthPlan {
  SynthShape shape;   // the table row with --layers / --vocab applied
  std::string quant;  // lower case, one of kSynthQuants
  std::vector<gguf::KeyValue> metadata;
  std::vector<SynthTensor> tensors;
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;  // the size of the GGUF
};

// Checks the options (an unknown arch, shape or quant is an error whose sentence lists the valid
// ones) and lays out metadata and tensors.
absl::StatusOr<SynthPlan> PlanSynth(const SynthOptions& options);

// The tensor type llama.cpp's Q4_K_M rule (llama-quant.cpp, llama_tensor_get_type_impl) gives
// `name` (a 2-D weight) with rows of `cols` elements in a model of `n_layer` blocks, `tied` when
// the model has no output.weight. Exposed for tests.
quant::Type Q4KMType(const std::string& name, int64_t cols, int64_t n_layer, bool tied);

// Draws row `row` of tensor `t` (t.shape[0] floats) into `out`.
void SynthRow(uint64_t seed, const SynthTensor& t, int64_t row, std::span<float> out);

struct SynthSummary {
  SynthPlan plan;
  double seconds = 0;
};

// Writes the model to `out_path` through "<out_path>.tmp.<pid>" in the same directory, renamed
// over out_path only once complete (removed on failure). An existing out_path is an error unless
// `force`. Tensor data is streamed: memory holds two chunks of a few tens of MiB, not the model.
absl::StatusOr<SynthSummary> WriteSynth(const SynthOptions& options, const std::string& out_path,
                                        bool force);

// The same bytes in memory (tests; tiny shapes).
absl::StatusOr<std::string> SynthBytes(const SynthOptions& options);

// Multi-line human summary: shape, tensors by type, size, time.
std::string DescribeSynth(const SynthSummary& s);

}  // namespace lockstep::models
