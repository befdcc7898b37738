// The cuda backend: device memory, the kernels of kernels/ on one stream, and CUDA graphs for
// decode steps (docs/backends.md, docs/kernels.md).
//
// Memory: Allocate is cudaMalloc; weights are copied to the device once at BindWeight; Upload,
// Download and Copy go through the backend's stream, and Download waits for it (so a host read
// sees every op issued before it). BeginStep validates the step (StepBackend, the same sentences
// as the host backends), packs its metadata into one pinned buffer and copies it to the device
// with one asynchronous copy; the kernels read it from there.
//
// Invariance: every kernel fixes its reduction order by shape alone (docs/kernels.md), and the
// launch parameters the backend chooses never depend on the batch's neighbours in a way that
// changes bits: the attention grid is sized by max seq_len rounded up to a power-of-two number
// of pieces, and pieces past a sequence's keys are empty and neutral (the kernel check's
// attention-invariance line holds a row alone == in a batch bitwise).
//
// Graphs: a step whose sequences all have at most kGraphMaxRowsPerSeq query rows (decode and
// speculative verify) is keyed by its launch shape (T, sequences, output rows, block-table
// width bucket, attention-piece bucket) and the first op's weight; the first step of a key runs
// eagerly, the second is captured into a CUDA graph and launched, later ones replay it. In
// replay the ops launch nothing: each op's arguments are hashed and the hash must equal the
// captured step's, else the step fails (a forward that is not a pure function of its key is a
// bug, never a silent fallback). A step with StepMeta::may_capture false always runs eagerly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/step_backend.h"
#include "kernels/gdn.h"

namespace lockstep::backend {

struct CudaOptions {
  int device = 0;
  bool graphs = true;  // capture and replay decode steps (see above)
  // Time every op with a pair of CUDA events (graphs off, so every op runs eagerly); the
  // per-op table (calls, total, mean, share) goes to stderr when the backend is destroyed.
  bool profile = false;
};

class CudaBackend final : public StepBackend {
 public:
  // Fails when no device is present or the device cannot run sm_90a code.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  // "NVIDIA H200, sm_90, 139 GiB, 132 SMs, graphs on (eager 3, captured 2, replayed 40)".
  std::string Describe() const override;

  absl::StatusOr<void*> Allocate(int64_t bytes, std::string_view what) override;
  void Free(void* p) override;
  absl::Status Upload(void* dst, const void* src, int64_t bytes) override;
  absl::Status Download(void* dst, const void* src, int64_t bytes) override;
  absl::Status Copy(void* dst, const void* src, int64_t bytes) override;
  absl::StatusOr<Weight> BindWeight(const Weight& host) override;
  absl::Status Synchronize() override;

  absl::Status BeginStep(const StepMeta& meta) override;
  absl::Status Embed(const Weight& table, Tensor out) override;
  absl::Status MatMul(const Weight& w, Tensor x, Tensor y) override;
  // Consecutive weights of one type on the MMA route and one column count run as one launch
  // (kernels::LaunchMatmulMmaGroup: each output has the bits of its own MatMul); the others
  // as MatMul.
  absl::Status MatMulGroup(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) override;
  absl::Status RmsNorm(Tensor x, const Weight* w, float eps, Tensor y) override;
  absl::Status Rope(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot, float freq_base,
                    RopeMode mode) override;
  absl::Status RopeFreqFactors(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                               float freq_base, RopeMode mode, const Weight& factors) override;
  absl::Status KvWrite(const KvLayout& layout, Tensor k, Tensor v, KvLayer layer) override;
  absl::Status PagedAttention(Tensor q, const KvLayout& layout, KvLayer layer, int64_t n_head,
                              int64_t n_kv_head, int64_t head_dim, const AttentionParams& p,
                              Tensor out) override;
  absl::Status GatherRows(Tensor x, Tensor out) override;
  absl::Status Glu(Tensor gate, Tensor up, Activation act, Tensor out) override;
  absl::Status Add(Tensor a, Tensor b, Tensor out) override;
  absl::Status Scale(Tensor x, float s, Tensor out) override;
  absl::Status Softcap(Tensor x, float cap) override;
  absl::Status GreedyTokens(Tensor logits, IntTensor out) override;
  // Gated DeltaNet and mixture of experts (cuda_backend_families.cc; kernels/gdn.h, moe.h).
  absl::Status CausalConvSilu(Tensor x, const Weight& w, const GdnLayout& l, GdnLayer state,
                              Tensor y) override;
  absl::Status GdnGates(Tensor a, Tensor b, const Weight& dt_bias, const Weight& ssm_a, Tensor g,
                        Tensor beta) override;
  absl::Status GatedDeltaRule(Tensor qkv, Tensor g, Tensor beta, const GdnLayout& l,
                              GdnLayer state, float eps, Tensor out) override;
  absl::Status GatedRmsNorm(Tensor x, const Weight& w, Tensor z, float eps, Tensor y) override;
  absl::Status SplitHalves(Tensor x, int64_t m, Tensor a, Tensor b) override;
  absl::Status MoeRoute(Tensor logits, int64_t k, bool normalize, Tensor weights,
                        IntTensor ids) override;
  absl::Status MatMulExperts(const Weight& w, int64_t n_expert, Tensor x, IntTensor ids,
                             Tensor y) override;
  absl::Status MoeCombine(Tensor y, Tensor weights, Tensor out) override;
  absl::Status SigmoidMul(Tensor x, Tensor g, Tensor out) override;

  // Counters for the benchmark and the gate: steps run eagerly, captured, replayed.
  struct GraphStats {
    int64_t eager = 0, captured = 0, replayed = 0;
  };
  GraphStats graph_stats() const { return graph_stats_; }

  // Queries with more rows than this in one sequence (prefill chunks) never use graphs.
  static constexpr int kGraphMaxRowsPerSeq = 16;

 private:
  enum class Mode { kEager, kCapture, kReplay };
  enum class StepState { kNone, kPending, kRunning };  // kPending: begun, no op yet
  struct GraphKey {
    int64_t tokens, seqs, outputs, table_width, pieces;
    const void* first;
    bool operator==(const GraphKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const GraphKey& k) {
      return H::combine(std::move(h), k.tokens, k.seqs, k.outputs, k.table_width, k.pieces,
                        k.first);
    }
  };
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t signature = 0;
  };

  CudaBackend(const CudaOptions& options, cudaStream_t stream, std::string description);

  // Every op calls this first with its arguments hashed: decides the step's mode at the first
  // op, and in replay mode returns false (launch nothing).
  absl::StatusOr<bool> Enter(const void* first_pointer, uint64_t op_hash);
  // Ends a captured or replayed step: instantiates and launches, or launches the replay.
  absl::Status FinishStep();
  void DropGraphs();
  // A cudaError_t as a Status naming the op.
  absl::Status Check(cudaError_t e, std::string_view what);
  // Returns s; a failure marks the step poisoned (a capture in progress is then discarded).
  absl::Status Guard(absl::Status s);
  // Runs one kernel launch; with options_.profile, between two events under `label()`.
  template <typename Label, typename Fn>
  absl::Status Timed(std::string_view what, Label&& label, Fn&& launch);
  // Adds the elapsed times of finished event pairs to the profile (after a synchronization).
  void CollectProfile();
  // The step's metadata as the Gated DeltaNet kernels read it (device pointers).
  kernels::GdnStepParams GdnStep() const;
  // Grows a device scratch buffer (drops graphs: they hold its old address).
  absl::Status Reserve(void*& buffer, int64_t& capacity, int64_t bytes, std::string_view what);

  CudaOptions options_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t staged_ = nullptr;  // recorded after the metadata copy leaves the pinned buffer
  std::string description_;
  absl::flat_hash_set<void*> allocations_;

  // The step's metadata on the device: [tokens T][positions T][slots T][query_start n+1]
  // [seq_len n][block_table n * table_width][output_rows R][state_slots n][checkpoints T], int32.
  void* meta_dev_ = nullptr;
  int64_t meta_capacity_ = 0;
  int32_t* meta_host_ = nullptr;  // pinned
  int64_t meta_host_capacity_ = 0;
  const int32_t* d_tokens_ = nullptr;
  const int32_t* d_positions_ = nullptr;
  const int32_t* d_slots_ = nullptr;
  const int32_t* d_query_start_ = nullptr;
  const int32_t* d_seq_len_ = nullptr;
  const int32_t* d_block_table_ = nullptr;
  const int32_t* d_output_rows_ = nullptr;
  const int32_t* d_state_slots_ = nullptr;   // 0s when the step has no recurrent state
  const int32_t* d_checkpoints_ = nullptr;   // -1s when the step has no checkpoints
  int64_t table_width_ = 0;   // block-table columns on the device (a bucket of max_blocks)
  int64_t attn_max_len_ = 0;  // max seq_len rounded up to a power-of-two count of pieces
  void* attn_ws_ = nullptr;
  int64_t attn_ws_capacity_ = 0;
  void* greedy_ws_ = nullptr;  // GreedyTokens' per-chunk partials
  int64_t greedy_ws_capacity_ = 0;
  void* matmul_ws_ = nullptr;  // MatMul's activation split (kernels/matmul.h MatmulScratch)
  int64_t matmul_ws_capacity_ = 0;

  // Graph state of the current step.
  Mode mode_ = Mode::kEager;
  StepState step_state_ = StepState::kNone;
  bool poisoned_ = false;  // an op of this step failed
  bool step_graphable_ = false;
  GraphKey key_{};
  uint64_t signature_ = 0;
  absl::flat_hash_map<GraphKey, int> seen_;
  absl::flat_hash_map<GraphKey, Graph> graphs_;
  GraphStats graph_stats_;

  struct Pending {
    std::string label;
    cudaEvent_t start, end;
  };
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  struct OpTime {
    int64_t calls = 0;
    double ms = 0;
  };
  absl::flat_hash_map<std::string, OpTime> profile_;
};

// Runs one kernel launch; with options_.profile, between two events under `label()` (defined here
// because cuda_backend_families.cc launches through it too).
template <typename Label, typename Fn>
absl::Status CudaBackend::Timed(std::string_view what, Label&& label, Fn&& launch) {
  if (!options_.profile) return Check(launch(), what);
  auto next = [this] {
    cudaEvent_t e = nullptr;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      cudaEventCreate(&e);
    }
    return e;
  };
  Pending p{label(), next(), next()};
  cudaEventRecord(p.start, stream_);
  const cudaError_t e = launch();
  cudaEventRecord(p.end, stream_);
  pending_.push_back(std::move(p));
  return Check(e, what);
}

}  // namespace lockstep::backend
