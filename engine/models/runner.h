// models::Runner: a Model bound to a Backend — the weights bound once, a workspace sized once for
// the largest step, and the paged KV storage of every layer — and the one forward of a step
// over a ragged batch (docs/runtime.md). Prefill chunks, decode rows and speculative verify rows
// are the same call with different token counts, so they share kernels and reduction order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/blocks.h"
#include "engine/models/arena.h"
#include "engine/models/kv_pool.h"
#include "engine/models/model.h"
#include "engine/models/stage_link.h"

namespace lockstep::models {

struct RunnerOptions {
  int64_t max_step_tokens = 256;  // rows of the workspace: tokens per step at most
  int64_t max_logit_rows = 64;    // logits rows per step at most
  quant::KvFormat k_format = quant::KvFormat::kF32;
  quant::KvFormat v_format = quant::KvFormat::kF32;
  int64_t block_size = 16;        // tokens per KV block
  int64_t n_blocks = 0;           // KV blocks in the pool
  // Pipeline stages (docs/pipeline.md). `split` = the layer boundaries {0, l1, ..., n_layer} of
  // link->size() stages (empty: unsplit); this runner is stage link->rank(). Rank 0 embeds and
  // is the one the engine drives; its Forward cuts a step into `micro_batches` groups of entries
  // that are in flight through the stages together. `timeout_ms` bounds every wait for a stage.
  std::vector<int64_t> split;
  StageLink* link = nullptr;
  int64_t micro_batches = 2;
  int64_t timeout_ms = 120000;
  // Recurrent-state slots of the Gated DeltaNet layers (docs/models.md): one per sequence in
  // flight plus speculative checkpoints. Required (>= 1) by hybrid models, unused by others.
  int64_t n_state_slots = 0;
};

// Layer boundaries for `n_stages` stages balanced by the bytes of each layer's weights (the
// embedding counts to stage 0, the head to the last): {0, l1, ..., n_layer}.
absl::StatusOr<std::vector<int64_t>> BalancedSplit(const Model& model, int64_t n_stages);
// "L1,L2,..." (explicit inner boundaries) -> {0, L1, L2, ..., n_layer}; errors name the entry.
absl::StatusOr<std::vector<int64_t>> ParseSplit(const std::string& text, int64_t n_layer,
                                                int64_t n_stages);

// The bytes one KV block costs across every layer (K and V), for sizing a pool from a budget.
int64_t KvBlockBytes(const Config& c, quant::KvFormat k, quant::KvFormat v, int64_t block_size);
// Checks that the formats can hold the model's KV rows (q formats need kv_dim % 32 == 0).
absl::Status CheckKvFormats(const Config& c, quant::KvFormat k, quant::KvFormat v);

// One sequence's part of a step: `tokens` at positions [start, start + tokens.size()), whose KV
// rows go to (and whose attention reads) the blocks of `blocks` (covering every position up
// to start + tokens.size()). The logits of its last `n_logits` rows are returned (0: none; 1:
// the next token's; tokens.size(): every row, as speculative verify and golden dumps need).
struct StepEntry {
  std::span<const int32_t> tokens;
  int64_t start = 0;
  std::span<const int32_t> blocks;
  int64_t n_logits = 0;
  // Hybrid models: the state slot this sequence reads and writes; and, when non-empty (one per
  // token), the slot that also receives the state right after each token (-1: none).
  int32_t state_slot = -1;
  std::span<const int32_t> state_checkpoints = {};
  // When set: receives the final hidden state after the output norm (the LM head's input) of
  // every one of its tokens, [tokens.size(), n_embd] (what an MTP drafter reads; mtp.h).
  std::vector<float>* hidden = nullptr;
  // When set: its rows come back as greedy tokens (Forward's `greedy`), not as logits rows --
  // each row's largest finite logit, the lowest id among equal ones, which is what
  // sampling::PlainGreedyToken picks. The rows never leave the backend (on cuda, 128k floats a
  // row stay on the device). Only where SupportsGreedy().
  bool greedy = false;
};

// Called with each named intermediate ("blk.3.attn_out"): [rows, cols] f32 in host memory.
using DumpFn = std::function<void(const std::string& name, const float* data, int64_t rows,
                                  int64_t cols)>;

class Runner {
 public:
  static absl::StatusOr<std::unique_ptr<Runner>> Create(const Model& model, backend::Backend& be,
                                                        const RunnerOptions& options);
  ~Runner();

  const Model& model() const { return model_; }
  backend::Backend& backend() const { return be_; }
  const RunnerOptions& options() const { return options_; }
  const backend::KvLayout& kv_layout() const { return layout_; }
  int64_t n_vocab() const { return model_.config().n_vocab; }

  // Runs the step. `logits` receives, per entry in order, the rows it asked for
  // ([n_logits, n_vocab]), always over the full vocabulary (a trimmed head's rows
  // are placed at their token ids, every other logit -inf) -- except the entries with `greedy`
  // set, whose n_logits greedy tokens go to `greedy` instead (per such entry in order). A greedy
  // row with a NaN or +inf logit, or no finite one, fails the step naming the entry and the id.
  absl::Status Forward(std::span<const StepEntry> batch, std::vector<float>* logits,
                       const DumpFn* dump = nullptr, std::vector<int32_t>* greedy = nullptr);
  // Whether StepEntry::greedy may be set: an unsplit runner with a full-vocabulary head.
  bool SupportsGreedy() const;

  // Copies every layer's K and V rows of block src into block dst (on every stage).
  absl::Status CopyBlock(int32_t src, int32_t dst);
  // Copies every GDN layer's recurrent state of slot src into slot dst (a speculative
  // checkpoint restored, a state forked); an error on a model without recurrent layers.
  absl::Status CopyState(int32_t src, int32_t dst);
  const backend::GdnLayout& gdn_layout() const { return gdn_layout_; }

  // Pipeline: stage `r` of the split, its layers [first, last), and one line per stage that
  // rank 0 collected at creation ("stage1=host:cpu (avx2, 2 threads) layers [15, 30)").
  int64_t first_layer() const { return first_; }
  int64_t last_layer() const { return last_; }
  const std::vector<std::string>& stage_lines() const { return stage_lines_; }
  // Stage 0 of a split: the median time for `floats` f32 values to go down every stage and back
  // to stage 0 with no compute (the transport's share of a step), over `reps` trips.
  absl::StatusOr<double> ChainRoundTrip(int64_t floats, int reps);
  // The stored K (or V) rows of positions [0, n_tokens) of a sequence's blocks in `layer`, in
  // the pool's format: [n_tokens, RowBytes] bytes (for tests and dumps).
  absl::StatusOr<std::vector<uint8_t>> DownloadKv(int64_t layer, std::span<const int32_t> blocks,
                                                  int64_t n_tokens, bool v) const;

 private:
  Runner(const Model& model, backend::Backend& be, const RunnerOptions& options)
      : model_(model), be_(be), options_(options) {}
  absl::Status Init();
  friend absl::Status RunStage(const Model& model, backend::Backend& be, StageLink& link);
  bool pipelined() const { return options_.link != nullptr; }
  bool last_stage() const { return last_ == model_.config().n_layer; }
  // The unsplit forward's parts: the step's metadata (validated), layers [first, last) over the
  // residual ws_.x, and the head over the logits rows.
  absl::StatusOr<backend::StepMeta> BuildMeta(std::span<const StepEntry> batch) const;
  absl::Status Layers(int64_t T, int64_t first, int64_t last, const DumpFn* dump);
  absl::StatusOr<backend::Tensor> HeadRows(int64_t T, int64_t R, const DumpFn* dump);
  absl::Status Head(int64_t T, int64_t R, std::vector<float>* raw, const DumpFn* dump);
  // The full-vocabulary head's rows: greedy entries' tokens to `greedy`, the other entries' rows
  // to `logits` (GreedyTokens runs on every row of every step, so a step's ops depend on its
  // shape alone and graphs replay).
  absl::Status HeadGreedy(std::span<const StepEntry> batch, int64_t T, int64_t R,
                          std::vector<float>* logits, std::vector<int32_t>* greedy,
                          const DumpFn* dump);
  absl::Status HiddenRows(std::span<const StepEntry> batch, const backend::StepMeta& meta);
  absl::Status Emit(const DumpFn* dump, int64_t layer, const char* name, backend::Tensor t);
  // Rank 0 of a split: the step cut into micro-batches that flow through the stages.
  absl::Status ForwardPipelined(std::span<const StepEntry> batch, std::vector<float>* logits);
  // Ranks > 0: serve steps from the previous stage until it says stop.
  absl::Status ServeStage();
  // Rank 0 at creation: sends the options and split down the chain and collects every stage's
  // line (a stage that cannot start answers with its error).
  absl::Status Handshake();
  void PlaceLogits(const std::vector<float>& raw, int64_t R, std::vector<float>* logits) const;

  const Model& model_;
  backend::Backend& be_;
  RunnerOptions options_;
  Weights bound_;                        // the model's weights as the backend reads them
  backend::KvLayout layout_;
  std::vector<backend::KvLayout> layouts_;  // [n_layer] each layer's (its own kv_dim)
  std::vector<backend::KvLayer> kv_;     // [n_layer]; a KV-shared layer aliases its source's
  backend::GdnLayout gdn_layout_;        // the state pool (n_slots 0: no recurrent layer)
  std::vector<backend::GdnLayer> gdn_state_;  // [n_layer]; GDN layers only
  Arena arena_{be_};                     // every allocation, freed after the destructor
  struct Workspace {
    backend::Tensor x, sel, logits;  // the residual [T, d]; the head's rows
    backend::IntTensor greedy;       // [max_logit_rows, 2] GreedyTokens of the head's rows
    backend::Tensor ple, ple_tmp;    // per-layer inputs [T, n_layer * ple] (gemma4)
    Scratch blocks;                  // what the block builders use (blocks.h)
  } ws_;
  std::vector<float> host_logits_, dump_buf_;
  std::vector<int32_t> host_greedy_;
  int64_t first_ = 0, last_ = 0;         // this stage's layers
  std::vector<std::string> stage_lines_;
};

// Runs stage link.rank() > 0 of a pipeline until rank 0 shuts it down: receives the runner's
// options and split from the previous stage, binds only its layers (and the head on the last
// stage), announces itself to rank 0 and serves steps. Errors name the stage.
absl::Status RunStage(const Model& model, backend::Backend& be, StageLink& link);

// The logits of one sequence run alone from position 0 in one step (the golden and logits
// paths): [T, n_vocab] when `all`, else [1, n_vocab]. A scratch pool just large enough.
// With `link`, the runner is stage 0 of the pipeline split at `split` (docs/pipeline.md).
absl::StatusOr<std::vector<float>> PromptLogits(const Model& model, backend::Backend& be,
                                                std::span<const int32_t> tokens, bool all,
                                                const DumpFn* dump = nullptr,
                                                quant::KvFormat k = quant::KvFormat::kF32,
                                                quant::KvFormat v = quant::KvFormat::kF32,
                                                const std::vector<int64_t>& split = {},
                                                StageLink* link = nullptr);

}  // namespace lockstep::models
