#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/backend/cuda/cuda_op_hash.h"
#include "engine/quant/types.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/kv_write.h"
#include "kernels/matmul.h"
#include "kernels/sampling.h"

namespace lockstep::backend {
namespace {

using cuda_internal::OpHash;

// A transfer's arguments: a byte count >= 0 and both pointers when it moves any byte.
absl::Status CheckTransfer(const char* op, const void* dst, const void* src, int64_t bytes) {
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda %s: %d bytes with dst %p, src %p", op, bytes, dst, src));
  }
  return absl::OkStatus();
}

int64_t Pow2AtLeast(int64_t n) { return n <= 1 ? 1 : int64_t{1} << (64 - std::countl_zero(uint64_t(n - 1))); }

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaOptions& options) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cuda backend: no CUDA device is usable (cudaGetDeviceCount: %s)",
        e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuda backend: device %d does not exist (%d present)", options.device, count));
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, options.device); e != cudaSuccess) {
    return absl::InternalError(absl::StrFormat("cuda backend: cudaGetDeviceProperties: %s",
                                               cudaGetErrorString(e)));
  }
  if (prop.major != 9 || prop.minor != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cuda backend: the kernels are built for sm_90a only; device %d (%s) is sm_%d%d",
        options.device, prop.name, prop.major, prop.minor));
  }
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return absl::InternalError(absl::StrFormat("cuda backend: cudaSetDevice(%d): %s",
                                               options.device, cudaGetErrorString(e)));
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return absl::InternalError(
        absl::StrFormat("cuda backend: cudaStreamCreate: %s", cudaGetErrorString(e)));
  }
  std::string description = absl::StrFormat(
      "%s, sm_%d%d, %.0f GiB, %d SMs, graphs %s", prop.name, prop.major, prop.minor,
      static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.multiProcessorCount,
      options.graphs ? "on" : "off");
  return std::unique_ptr<CudaBackend>(new CudaBackend(options, stream, std::move(description)));
}

CudaBackend::CudaBackend(const CudaOptions& options, cudaStream_t stream, std::string description)
    : options_(options), stream_(stream), description_(std::move(description)) {
  cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming);
}

CudaBackend::~CudaBackend() {
  (void)FinishStep();
  cudaStreamSynchronize(stream_);
  if (options_.profile) {
    CollectProfile();
    std::vector<std::pair<std::string, OpTime>> rows(profile_.begin(), profile_.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
    double total = 0;
    for (auto& [k, v] : rows) total += v.ms;
    std::fprintf(stderr, "cuda op profile (events around each launch, graphs off): %.3f ms in all\n",
                 total);
    std::fprintf(stderr, "  %-44s %9s %11s %10s %6s\n", "op", "calls", "total ms", "mean us", "share");
    for (auto& [k, v] : rows) {
      std::fprintf(stderr, "  %-44s %9lld %11.3f %10.2f %5.1f%%\n", k.c_str(),
                   static_cast<long long>(v.calls), v.ms, 1000.0 * v.ms / v.calls,
                   100.0 * v.ms / total);
    }
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  DropGraphs();
  for (void* p : allocations_) cudaFree(p);
  if (meta_dev_ != nullptr) cudaFree(meta_dev_);
  if (attn_ws_ != nullptr) cudaFree(attn_ws_);
  if (greedy_ws_ != nullptr) cudaFree(greedy_ws_);
  if (matmul_ws_ != nullptr) cudaFree(matmul_ws_);
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (staged_ != nullptr) cudaEventDestroy(staged_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string CudaBackend::Describe() const {
  return absl::StrFormat("cuda: %s (steps eager %d, captured %d, replayed %d)", description_,
                         graph_stats_.eager, graph_stats_.captured, graph_stats_.replayed);
}

absl::Status CudaBackend::Check(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  poisoned_ = true;
  cudaGetLastError();  // clear a non-sticky error so the next call reports its own
  return absl::InternalError(absl::StrFormat("cuda %s: %s", what, cudaGetErrorString(e)));
}

void CudaBackend::CollectProfile() {
  for (Pending& p : pending_) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) {
      OpTime& t = profile_[p.label];
      ++t.calls;
      t.ms += ms;
    }
    free_events_.push_back(p.start);
    free_events_.push_back(p.end);
  }
  pending_.clear();
}

absl::Status CudaBackend::Guard(absl::Status s) {
  if (!s.ok()) poisoned_ = true;
  return s;
}

// ---- memory ----

absl::StatusOr<void*> CudaBackend::Allocate(int64_t bytes, std::string_view what) {
  RETURN_IF_ERROR(FinishStep());
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda: cannot allocate %d bytes (negative) for %s", bytes, what));
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
      e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cuda: out of device memory allocating %d bytes for %s (%d of %d bytes free): %s", bytes,
        what, free_b, total_b, cudaGetErrorString(e)));
  }
  allocations_.insert(p);
  return p;
}

void CudaBackend::Free(void* p) {
  if (p == nullptr || allocations_.erase(p) == 0) return;
  (void)FinishStep();
  cudaStreamSynchronize(stream_);
  cudaFree(p);
}

absl::Status CudaBackend::Upload(void* dst, const void* src, int64_t bytes) {
  RETURN_IF_ERROR(FinishStep());
  RETURN_IF_ERROR(CheckTransfer("Upload", dst, src, bytes));
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "Upload"));
  return Check(cudaStreamSynchronize(stream_), "Upload");  // the host buffer may go after return
}

absl::Status CudaBackend::Download(void* dst, const void* src, int64_t bytes) {
  RETURN_IF_ERROR(FinishStep());
  RETURN_IF_ERROR(CheckTransfer("Download", dst, src, bytes));
  if (bytes > 0) {
    RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "Download"));
  }
  RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), "Download (an earlier op failed)"));
  if (options_.profile) CollectProfile();
  return absl::OkStatus();
}

absl::Status CudaBackend::Copy(void* dst, const void* src, int64_t bytes) {
  RETURN_IF_ERROR(FinishStep());
  RETURN_IF_ERROR(CheckTransfer("Copy", dst, src, bytes));
  if (bytes == 0) return absl::OkStatus();
  return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "Copy");
}

absl::StatusOr<Weight> CudaBackend::BindWeight(const Weight& host) {
  const quant::TypeTraits t = quant::Traits(host.type);
  if (host.rows < 0 || host.cols < 0 || host.cols % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuda: weight '%s' has shape [%d, %d], not whole %s blocks of %d", host.name, host.rows,
        host.cols, t.name, t.block_size));
  }
  const int64_t bytes = host.rows * host.row_bytes();
  if (bytes > 0 && host.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("cuda: weight '%s' has no data", host.name));
  }
  ASSIGN_OR_RETURN(void* p, Allocate(bytes, absl::StrFormat("weight '%s'", host.name)));
  RETURN_IF_ERROR(Upload(p, host.data, bytes));
  Weight bound = host;
  bound.data = p;
  return bound;
}

absl::Status CudaBackend::Synchronize() {
  RETURN_IF_ERROR(FinishStep());
  RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), "Synchronize"));
  if (options_.profile) CollectProfile();
  return Check(cudaGetLastError(), "Synchronize");
}

absl::Status CudaBackend::Reserve(void*& buffer, int64_t& capacity, int64_t bytes,
                                  std::string_view what) {
  if (bytes <= capacity) return absl::OkStatus();
  if (mode_ == Mode::kCapture) {
    // Not reached: a key's first step runs eagerly and grows every buffer it needs.
    return Guard(absl::InternalError(absl::StrFormat(
        "cuda: %s must grow to %d bytes while a graph is being captured", what, bytes)));
  }
  RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream_), what));
  DropGraphs();  // they hold the old address
  const int64_t want = std::max<int64_t>(bytes, 2 * capacity);
  if (buffer != nullptr) cudaFree(buffer);
  buffer = nullptr;
  capacity = 0;
  if (cudaError_t e = cudaMalloc(&buffer, want); e != cudaSuccess) {
    cudaGetLastError();
    return Guard(absl::ResourceExhaustedError(absl::StrFormat(
        "cuda: out of device memory growing %s to %d bytes: %s", what, want,
        cudaGetErrorString(e))));
  }
  capacity = want;
  return absl::OkStatus();
}

void CudaBackend::DropGraphs() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
}

// ---- the step ----

absl::Status CudaBackend::BeginStep(const StepMeta& m) {
  RETURN_IF_ERROR(FinishStep());
  step_state_ = StepState::kNone;
  RETURN_IF_ERROR(StepBackend::BeginStep(m));
  const int64_t T = m.n_tokens(), n = m.n_seq(), R = static_cast<int64_t>(m.output_rows.size());
  table_width_ = Pow2AtLeast(std::max<int64_t>(m.max_blocks, 1));
  int64_t max_len = 0;
  for (int32_t len : m.seq_len) max_len = std::max<int64_t>(max_len, len);
  const int64_t pieces = (max_len + kernels::kAttentionPiece - 1) / kernels::kAttentionPiece;
  attn_max_len_ = Pow2AtLeast(std::max<int64_t>(pieces, 1)) * kernels::kAttentionPiece;

  const int64_t words = 3 * T + (n + 1) + n + n * table_width_ + R + n + T;
  const int64_t bytes = words * static_cast<int64_t>(sizeof(int32_t));
  // The previous step's copy must have left the pinned buffer before it is rewritten.
  RETURN_IF_ERROR(Check(cudaEventSynchronize(staged_), "BeginStep"));
  if (bytes > meta_host_capacity_) {
    if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
    meta_host_ = nullptr;
    meta_host_capacity_ = 0;
    const int64_t want = std::max<int64_t>(bytes, 4096);
    void* p = nullptr;
    RETURN_IF_ERROR(Check(cudaHostAlloc(&p, want, cudaHostAllocDefault), "BeginStep (pinned metadata)"));
    meta_host_ = static_cast<int32_t*>(p);
    meta_host_capacity_ = want;
  }
  RETURN_IF_ERROR(Reserve(meta_dev_, meta_capacity_, std::max<int64_t>(bytes, 4096), "step metadata"));
  int32_t* h = meta_host_;
  auto put = [&h](const int32_t* src, int64_t count) {
    if (count > 0) std::memcpy(h, src, count * sizeof(int32_t));
    h += count;
  };
  const int32_t* dev = static_cast<const int32_t*>(meta_dev_);
  d_tokens_ = dev;
  put(m.tokens.data(), T);
  d_positions_ = dev + (h - meta_host_);
  put(m.positions.data(), T);
  d_slots_ = dev + (h - meta_host_);
  put(m.slots.data(), T);
  d_query_start_ = dev + (h - meta_host_);
  put(m.query_start.data(), n + 1);
  d_seq_len_ = dev + (h - meta_host_);
  put(m.seq_len.data(), n);
  d_block_table_ = dev + (h - meta_host_);
  for (int64_t s = 0; s < n; ++s) {
    put(m.block_table.data() + s * m.max_blocks, m.max_blocks);
    std::fill(h, h + (table_width_ - m.max_blocks), 0);  // never read: seq_len bounds the keys
    h += table_width_ - m.max_blocks;
  }
  d_output_rows_ = dev + (h - meta_host_);
  put(m.output_rows.data(), R);
  // Recurrent state (Gated DeltaNet): always packed (0 slots, -1 checkpoints when the step has
  // none), so a captured graph's kernels read the same addresses whatever the step carries.
  d_state_slots_ = dev + (h - meta_host_);
  if (m.state_slots.empty()) {
    std::fill(h, h + n, 0);
    h += n;
  } else {
    put(m.state_slots.data(), n);
  }
  d_checkpoints_ = dev + (h - meta_host_);
  if (m.state_checkpoints.empty()) {
    std::fill(h, h + T, -1);
    h += T;
  } else {
    put(m.state_checkpoints.data(), T);
  }
  RETURN_IF_ERROR(Check(
      cudaMemcpyAsync(meta_dev_, meta_host_, bytes, cudaMemcpyHostToDevice, stream_), "BeginStep"));
  RETURN_IF_ERROR(Check(cudaEventRecord(staged_, stream_), "BeginStep"));

  bool graphable = options_.graphs && m.may_capture && T > 0;
  for (int64_t s = 0; s < n && graphable; ++s) {
    graphable = m.query_start[s + 1] - m.query_start[s] <= kGraphMaxRowsPerSeq;
  }
  key_ = GraphKey{T, n, R, table_width_, attn_max_len_, nullptr};
  step_graphable_ = graphable;
  signature_ = 0;
  poisoned_ = false;
  mode_ = Mode::kEager;
  step_state_ = StepState::kPending;
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaBackend::Enter(const void* first_pointer, uint64_t op_hash) {
  if (step_state_ == StepState::kPending) {
    step_state_ = StepState::kRunning;
    mode_ = Mode::kEager;
    if (step_graphable_) {
      key_.first = first_pointer;
      if (graphs_.contains(key_)) {
        mode_ = Mode::kReplay;
      } else if (seen_[key_] >= 1) {
        RETURN_IF_ERROR(Check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                              "graph capture"));
        mode_ = Mode::kCapture;
      } else {
        ++seen_[key_];
      }
    }
    if (mode_ == Mode::kEager) ++graph_stats_.eager;
  }
  signature_ = (signature_ ^ op_hash) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  return mode_ != Mode::kReplay;
}

absl::Status CudaBackend::FinishStep() {
  const Mode mode = mode_;
  mode_ = Mode::kEager;  // whatever follows in this step runs eagerly
  if (mode == Mode::kCapture) {
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (end != cudaSuccess || poisoned_) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (poisoned_) return absl::OkStatus();  // the failing op already returned its error
      return Check(end, "graph capture");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    RETURN_IF_ERROR(Check(inst, "graph instantiate"));
    graphs_[key_] = Graph{exec, signature_};
    ++graph_stats_.captured;
    return Check(cudaGraphLaunch(exec, stream_), "graph launch");
  }
  if (mode == Mode::kReplay) {
    if (poisoned_) return absl::OkStatus();
    const Graph& g = graphs_.at(key_);
    if (g.signature != signature_) {
      return absl::InternalError(absl::StrFormat(
          "cuda graph replay: this step's ops (signature %016x) differ from the ones captured "
          "for its shape (%016x); nothing was run", signature_, g.signature));
    }
    ++graph_stats_.replayed;
    return Check(cudaGraphLaunch(g.exec, stream_), "graph launch");
  }
  return absl::OkStatus();
}

// ---- ops: validate (the shared sentences), hash, launch unless replaying ----

absl::Status CudaBackend::Embed(const Weight& table, Tensor out) {
  RETURN_IF_ERROR(Guard(CheckEmbed(table, out)));
  ASSIGN_OR_RETURN(bool launch, Enter(table.data, OpHash(1).Mix(table.data).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  return Timed("Embed", [&] { return std::string("Embed"); }, [&] {
    return kernels::LaunchGetRows(static_cast<uint32_t>(table.type), table.data, table.rows,
                                  table.cols, d_tokens_, out.rows, out.data, stream_);
  });
}

absl::Status CudaBackend::MatMul(const Weight& w, Tensor x, Tensor y) {
  RETURN_IF_ERROR(Guard(CheckWeight("cuda MatMul", w)));
  RETURN_IF_ERROR(Guard(CheckTensor("cuda MatMul", "x", x, -1, w.cols)));
  RETURN_IF_ERROR(Guard(CheckTensor("cuda MatMul", "y", y, x.rows, w.rows)));
  if (!kernels::MatmulSupportsType(static_cast<uint32_t>(w.type))) {
    return Guard(absl::UnimplementedError(absl::StrFormat(
        "cuda MatMul: weight '%s' has type %s, which the cuda matmul does not implement (F32 F16 "
        "BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K IQ4_XS NVFP4)", w.name, quant::Traits(w.type).name)));
  }
  // F32 / F16 / BF16 take any column count (kernels/matmul.h); the quantized types need whole
  // 32-element chunks and 16-byte aligned activation rows.
  const bool float_type = w.type == quant::Type::F32 || w.type == quant::Type::F16 || w.type == quant::Type::BF16;
  const bool odd_cols = w.cols % 32 != 0;
  if (odd_cols ? !float_type : reinterpret_cast<uintptr_t>(x.data) % 16 != 0) {
    return Guard(absl::UnimplementedError(absl::StrFormat(
        "cuda MatMul: weight '%s' has %d columns and x is at %p; the kernel needs a multiple of "
        "32 columns and 16-byte aligned rows (any column count for F32, F16, BF16)", w.name, w.cols,
        static_cast<void*>(x.data))));
  }
  if (x.rows == 0) return absl::OkStatus();
  // The MMA route splits the activations once into this scratch and keeps the split-K tiles'
  // segment sums there (the same bits as without it).
  const int64_t ws = static_cast<int64_t>(kernels::MatmulScratchBytes(static_cast<uint32_t>(w.type), w.rows, w.cols, x.rows));
  if (ws > 0 && mode_ != Mode::kReplay) {
    RETURN_IF_ERROR(Reserve(matmul_ws_, matmul_ws_capacity_, ws, "matmul scratch"));
  }
  ASSIGN_OR_RETURN(bool launch, Enter(w.data, OpHash(2).Mix(w.data).Mix(x).Mix(y).Mix(ws > 0 ? matmul_ws_ : nullptr).value()));
  if (!launch) return absl::OkStatus();
  return Timed(
      "MatMul",
      [&] {
        return absl::StrFormat("MatMul %s %dx%d T%s", quant::Traits(w.type).name, w.rows, w.cols,
                               x.rows == 1 ? "=1" : x.rows <= 8 ? "<=8" : ">8");
      },
      [&] {
        kernels::MatmulScratch scratch;
        if (ws > 0) scratch = {matmul_ws_, static_cast<size_t>(matmul_ws_capacity_)};
        return kernels::LaunchMatmul(static_cast<uint32_t>(w.type), w.data, w.rows, w.cols,
                                     x.data, x.rows, y.data, 1.0f, kernels::MatmulRoute::kAuto,
                                     stream_, scratch);
      });
}

absl::Status CudaBackend::MatMulGroup(std::span<const Weight* const> ws, Tensor x,
                                      std::span<const Tensor> ys) {
  if (ws.size() != ys.size() || ws.size() > static_cast<size_t>(kMatMulGroupMax)) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "cuda MatMulGroup: ws and ys must have the same length, at most %d (got %d and %d)",
        kMatMulGroupMax, ws.size(), ys.size())));
  }
  static_assert(kMatMulGroupMax <= kernels::kMatmulGroupMax);
  for (size_t i = 0; i < ws.size();) {
    // The run of weights from i that can share a launch: one MMA-route type, one column count.
    size_t j = i + 1;
    const bool mma = kernels::MatmulAutoUsesMma(static_cast<uint32_t>(ws[i]->type)) && ws[i]->cols % 32 == 0 &&
                     reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
    while (mma && j < ws.size() && ws[j]->type == ws[i]->type && ws[j]->cols == ws[i]->cols) ++j;
    if (j - i == 1 || x.rows == 0) {
      for (size_t k = i; k < j; ++k) RETURN_IF_ERROR(MatMul(*ws[k], x, ys[k]));
      i = j;
      continue;
    }
    kernels::MatmulGroupItem items[kernels::kMatmulGroupMax];
    const int n = static_cast<int>(j - i);
    OpHash hash(30);
    for (int k = 0; k < n; ++k) {
      const Weight& w = *ws[i + k];
      RETURN_IF_ERROR(Guard(CheckWeight("cuda MatMulGroup", w)));
      RETURN_IF_ERROR(Guard(CheckTensor("cuda MatMulGroup", "x", x, -1, w.cols)));
      RETURN_IF_ERROR(Guard(CheckTensor("cuda MatMulGroup", absl::StrFormat("ys[%d]", i + k), ys[i + k], x.rows, w.rows)));
      items[k] = {w.data, w.rows, ys[i + k].data};
      hash.Mix(w.data).Mix(ys[i + k]);
    }
    const uint32_t type = static_cast<uint32_t>(ws[i]->type);
    const int64_t cols = ws[i]->cols;
    const int64_t sb = static_cast<int64_t>(kernels::MatmulMmaGroupScratchBytes(type, items, n, cols, x.rows));
    if (sb > 0 && mode_ != Mode::kReplay) {
      RETURN_IF_ERROR(Reserve(matmul_ws_, matmul_ws_capacity_, sb, "matmul scratch"));
    }
    ASSIGN_OR_RETURN(bool launch, Enter(ws[i]->data, hash.Mix(x).Mix(sb > 0 ? matmul_ws_ : nullptr).value()));
    if (launch) {
      RETURN_IF_ERROR(Timed(
          "MatMulGroup",
          [&] {  // every matrix's rows: "MatMulGroup Q4_K 4096+1024+1024x4096 T=1"
            std::string rows;
            for (int k = 0; k < n; ++k) absl::StrAppend(&rows, k ? "+" : "", items[k].rows);
            return absl::StrFormat("MatMulGroup %s %sx%d T%s", quant::Traits(ws[i]->type).name, rows, cols,
                                   x.rows == 1 ? "=1" : x.rows <= 8 ? "<=8" : ">8");
          },
          [&] {
            kernels::MatmulScratch scratch;
            if (sb > 0) scratch = {matmul_ws_, static_cast<size_t>(matmul_ws_capacity_)};
            return kernels::LaunchMatmulMmaGroup(type, items, n, cols, x.data, x.rows, stream_, scratch);
          }));
    }
    i = j;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RmsNorm(Tensor x, const Weight* weight, float eps, Tensor y) {
  RETURN_IF_ERROR(Guard(CheckSameShape("cuda RmsNorm", "x", x, "y", y)));
  RETURN_IF_ERROR(Guard(CheckNormWeight("cuda RmsNorm", weight, x.cols)));
  if (x.rows == 0) return absl::OkStatus();
  const float* w = weight ? static_cast<const float*>(weight->data) : nullptr;
  ASSIGN_OR_RETURN(bool launch,
                   Enter(x.data, OpHash(3).Mix(x).Mix(w).Mix(eps).Mix(y).value()));
  if (!launch) return absl::OkStatus();
  return Timed("RmsNorm", [] { return std::string("RmsNorm"); },
               [&] { return kernels::LaunchRmsNorm(x.data, w, x.rows, x.cols, eps, y.data, stream_); });
}

absl::Status CudaBackend::Rope(Tensor x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                               float freq_base, RopeMode mode) {
  RETURN_IF_ERROR(Guard(CheckRope("cuda Rope", x, n_heads, head_dim, n_rot)));
  if (x.rows == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(4).Mix(x).Mix(n_heads).Mix(head_dim)
                                                  .Mix(n_rot).Mix(freq_base).Mix(mode).value()));
  if (!launch) return absl::OkStatus();
  const auto kmode = mode == RopeMode::kNormal ? kernels::RopeMode::kNormal : kernels::RopeMode::kNeox;
  return Timed("Rope", [] { return std::string("Rope"); }, [&] {
    return kernels::LaunchRope(x.data, d_positions_, x.rows, static_cast<int>(n_heads),
                               static_cast<int>(head_dim), static_cast<int>(n_rot),
                               static_cast<double>(freq_base), nullptr, kmode, x.data, stream_);
  });
}

absl::Status CudaBackend::KvWrite(const KvLayout& layout, Tensor k, Tensor v, KvLayer layer) {
  RETURN_IF_ERROR(Guard(CheckKvWrite(layout, k, v, layer)));
  if (k.rows == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(k.data, OpHash(5).Mix(layout.k_format).Mix(layout.v_format)
                                                  .Mix(layout.kv_dim).Mix(k).Mix(v).Mix(layer.k)
                                                  .Mix(layer.v).value()));
  if (!launch) return absl::OkStatus();
  return Timed("KvWrite", [] { return std::string("KvWrite (K and V)"); }, [&] {
    return kernels::LaunchKvWritePair(static_cast<uint32_t>(layout.k_format), k.data, layer.k,
                                      static_cast<uint32_t>(layout.v_format), v.data, layer.v,
                                      d_slots_, k.rows, layout.kv_dim, stream_);
  });
}

absl::Status CudaBackend::PagedAttention(Tensor q, const KvLayout& layout, KvLayer layer,
                                         int64_t n_head, int64_t n_kv_head, int64_t head_dim,
                                         const AttentionParams& ap, Tensor out) {
  RETURN_IF_ERROR(Guard(CheckPagedAttention(q, layout, layer, n_head, n_kv_head, head_dim, out)));
  if (head_dim > kernels::kAttentionMaxHeadDim) {
    return Guard(absl::UnimplementedError(absl::StrFormat(
        "cuda PagedAttention: head_dim = %d exceeds the kernel's %d", head_dim,
        kernels::kAttentionMaxHeadDim)));
  }
  const int64_t T = q.rows;
  if (T == 0) return absl::OkStatus();
  const int64_t ws = static_cast<int64_t>(kernels::PagedAttentionWorkspaceBytes(
      T, static_cast<int>(n_head), static_cast<int>(head_dim), static_cast<int>(attn_max_len_)));
  if (mode_ != Mode::kReplay) {
    RETURN_IF_ERROR(Reserve(attn_ws_, attn_ws_capacity_, ws, "attention workspace"));
  }
  ASSIGN_OR_RETURN(bool launch,
                   Enter(q.data, OpHash(6).Mix(q).Mix(out).Mix(layer.k).Mix(layer.v)
                                     .Mix(layout.k_format).Mix(layout.v_format)
                                     .Mix(layout.block_size).Mix(layout.n_blocks).Mix(n_head)
                                     .Mix(n_kv_head).Mix(head_dim).Mix(ap.scale).Mix(ap.window)
                                     .Mix(ap.softcap).Mix(attn_ws_).value()));
  if (!launch) return absl::OkStatus();
  kernels::PagedAttentionParams p;
  p.q = q.data;
  p.k_cache = layer.k;
  p.v_cache = layer.v;
  p.k_format = static_cast<uint32_t>(layout.k_format);
  p.v_format = static_cast<uint32_t>(layout.v_format);
  p.query_start = d_query_start_;
  p.seq_len = d_seq_len_;
  p.block_table = d_block_table_;
  p.positions = d_positions_;
  p.out = out.data;
  p.T = T;
  p.n_seq = static_cast<int>(step().n_seq());
  p.n_head = static_cast<int>(n_head);
  p.n_kv_head = static_cast<int>(n_kv_head);
  p.head_dim = static_cast<int>(head_dim);
  p.block_size = static_cast<int>(layout.block_size);
  p.max_blocks_per_seq = static_cast<int>(table_width_);
  p.max_seq_len = static_cast<int>(attn_max_len_);
  p.window = static_cast<int>(ap.window);
  p.scale = ap.scale;
  p.softcap = ap.softcap;
  return Timed(
      "PagedAttention",
      [&] { return absl::StrFormat("PagedAttention T%s", T == 1 ? "=1" : T <= 16 ? "<=16" : ">16"); },
      [&] { return kernels::LaunchPagedAttention(p, attn_ws_, attn_ws_capacity_, stream_); });
}

absl::Status CudaBackend::GatherRows(Tensor x, Tensor out) {
  RETURN_IF_ERROR(Guard(CheckGatherRows(x, out)));
  if (out.rows == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(7).Mix(x).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  return Timed("GatherRows", [] { return std::string("GatherRows"); }, [&] {
    return kernels::LaunchGatherRows(x.data, x.cols, d_output_rows_, out.rows, out.data, stream_);
  });
}

absl::Status CudaBackend::Glu(Tensor gate, Tensor up, Activation act, Tensor out) {
  RETURN_IF_ERROR(Guard(CheckSameShape("cuda Glu", "gate", gate, "up", up)));
  RETURN_IF_ERROR(Guard(CheckSameShape("cuda Glu", "gate", gate, "out", out)));
  if (gate.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch,
                   Enter(gate.data, OpHash(8).Mix(gate).Mix(up).Mix(act).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  const auto op = act == Activation::kSilu ? kernels::GluOp::kSilu : kernels::GluOp::kGeluTanh;
  return Timed("Glu", [] { return std::string("Glu"); }, [&] {
    return kernels::LaunchGlu(op, gate.data, gate.cols, up.data, up.cols, gate.rows, gate.cols,
                              out.data, stream_);
  });
}

absl::Status CudaBackend::Add(Tensor a, Tensor b, Tensor out) {
  RETURN_IF_ERROR(Guard(CheckSameShape("cuda Add", "a", a, "b", b)));
  RETURN_IF_ERROR(Guard(CheckSameShape("cuda Add", "a", a, "out", out)));
  if (a.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(a.data, OpHash(9).Mix(a).Mix(b).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  return Timed("Add", [] { return std::string("Add"); },
               [&] { return kernels::LaunchAdd(a.data, b.data, a.size(), out.data, stream_); });
}

absl::Status CudaBackend::Scale(Tensor x, float s, Tensor out) {
  RETURN_IF_ERROR(Guard(CheckSameShape("cuda Scale", "x", x, "out", out)));
  if (x.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(10).Mix(x).Mix(s).Mix(out).value()));
  if (!launch) return absl::OkStatus();
  return Timed("Scale", [] { return std::string("Scale"); },
               [&] { return kernels::LaunchScale(x.data, s, x.size(), out.data, stream_); });
}

absl::Status CudaBackend::Softcap(Tensor x, float cap) {
  RETURN_IF_ERROR(Guard(CheckTensor("cuda Softcap", "x", x, -1, x.cols)));
  if (!(cap > 0.0f)) {
    return Guard(absl::InvalidArgumentError(
        absl::StrFormat("cuda Softcap: cap = %g, want > 0", cap)));
  }
  if (x.size() == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(bool launch, Enter(x.data, OpHash(11).Mix(x).Mix(cap).value()));
  if (!launch) return absl::OkStatus();
  return Timed("Softcap", [] { return std::string("Softcap"); },
               [&] { return kernels::LaunchSoftcap(x.data, cap, x.size(), x.data, stream_); });
}

absl::Status CudaBackend::GreedyTokens(Tensor logits, IntTensor out) {
  RETURN_IF_ERROR(Guard(CheckGreedyTokens("cuda GreedyTokens", logits, out)));
  if (logits.rows == 0) return absl::OkStatus();
  if (logits.rows > 65535) {
    return Guard(absl::InvalidArgumentError(absl::StrFormat(
        "cuda GreedyTokens: %d rows, at most 65535 in one call", logits.rows)));
  }
  const int64_t ws_bytes = static_cast<int64_t>(kernels::GreedyTokensWorkspaceBytes(logits.rows, logits.cols));
  if (mode_ != Mode::kReplay) {
    RETURN_IF_ERROR(Reserve(greedy_ws_, greedy_ws_capacity_, ws_bytes, "GreedyTokens workspace"));
  }
  ASSIGN_OR_RETURN(bool launch,
                   Enter(logits.data, OpHash(12).Mix(logits).Mix(out).Mix(greedy_ws_).value()));
  if (!launch) return absl::OkStatus();
  return Timed("GreedyTokens", [] { return std::string("GreedyTokens"); }, [&] {
    return kernels::LaunchGreedyTokens(logits.data, logits.rows, logits.cols, greedy_ws_,
                                       static_cast<size_t>(greedy_ws_capacity_), out.data, stream_);
  });
}

// ---- registration: linked whole-archive into the binaries that may use it ----

namespace {
[[maybe_unused]] const bool kRegistered = RegisterBackend("cuda", [](const BackendOptions& o)
                                                     -> absl::StatusOr<std::unique_ptr<Backend>> {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> be,
                   CudaBackend::Create({0, o.graphs && !o.profile, o.profile}));
  return std::unique_ptr<Backend>(std::move(be));
});
}  // namespace

}  // namespace lockstep::backend
