#include "engine/pipeline/nccl_link.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"

namespace lockstep::pipeline {
namespace {

// NCCL is opened at run time (libnccl.so.2), not linked: a lockstep built with CUDA starts on
// machines without NCCL, and only a command that needs the GPU transport says it is missing.
struct NcclApi {
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRank) CommInitRank;
  decltype(&::ncclCommInitAll) CommInitAll;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclSend) Send;
  decltype(&::ncclRecv) Recv;
  decltype(&::ncclGroupStart) GroupStart;
  decltype(&::ncclGroupEnd) GroupEnd;
};

absl::StatusOr<const NcclApi*> Api() {
  static absl::StatusOr<NcclApi> api = []() -> absl::StatusOr<NcclApi> {
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      return absl::UnavailableError(absl::StrCat("NCCL is not installed here (", dlerror(), ")"));
    }
    NcclApi a;
    bool ok = true;
    auto get = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(h, name));
      ok = ok && *fn != nullptr;
    };
    get(&a.GetVersion, "ncclGetVersion");
    get(&a.GetErrorString, "ncclGetErrorString");
    get(&a.GetUniqueId, "ncclGetUniqueId");
    get(&a.CommInitRank, "ncclCommInitRank");
    get(&a.CommInitAll, "ncclCommInitAll");
    get(&a.CommDestroy, "ncclCommDestroy");
    get(&a.CommAbort, "ncclCommAbort");
    get(&a.Send, "ncclSend");
    get(&a.Recv, "ncclRecv");
    get(&a.GroupStart, "ncclGroupStart");
    get(&a.GroupEnd, "ncclGroupEnd");
    if (!ok) return absl::UnavailableError("libnccl.so.2 lacks a function lockstep calls");
    return a;
  }();
  if (!api.ok()) return api.status();
  return &*api;
}

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status Nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  auto api = Api();
  return absl::InternalError(absl::StrCat(what, ": ", api.ok() ? (*api)->GetErrorString(r) : "?"));
}

std::string Version(const NcclApi& api) {
  int v = 0;
  api.GetVersion(&v);
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

// Waits for `stream` until `deadline` (none when timeout_ms < 0).
absl::Status WaitStream(cudaStream_t stream, int64_t timeout_ms, const std::string& who) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return Cuda(e, who.c_str());
    if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(who, " within ", timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class NcclLink : public models::StageLink {
 public:
  NcclLink(const NcclApi& api, int rank, int size, int device, ncclComm_t comm, cudaStream_t stream)
      : api_(api), rank_(rank), size_(size), device_(device), comm_(comm), stream_(stream) {}
  ~NcclLink() override {
    cudaSetDevice(device_);
    if (buf_ != nullptr) cudaFree(buf_);
    if (broken_) api_.CommAbort(comm_); else api_.CommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override { return "NCCL " + Version(api_); }

  absl::Status Send(int to, std::vector<uint8_t> bytes) override {
    if (to < 0 || to >= size_ || to == rank_) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", rank_, " sends to stage ", to));
    }
    RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    int64_t n = static_cast<int64_t>(bytes.size());
    RETURN_IF_ERROR(Reserve(sizeof(int64_t) + n));
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(buf_, &n, sizeof(n), cudaMemcpyHostToDevice, stream_), "copy"));
    if (n > 0) {
      RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(static_cast<uint8_t*>(buf_) + sizeof(n), bytes.data(), n,
                                           cudaMemcpyHostToDevice, stream_), "copy"));
    }
    // The length first, then the payload: the receiver sizes its buffer from the first.
    RETURN_IF_ERROR(Nccl(api_.Send(buf_, sizeof(n), ncclUint8, to, comm_, stream_), "ncclSend"));
    if (n > 0) {
      RETURN_IF_ERROR(Nccl(api_.Send(static_cast<uint8_t*>(buf_) + sizeof(n), n, ncclUint8, to,
                                    comm_, stream_), "ncclSend"));
    }
    return Done(WaitStream(stream_, timeout_ms_, absl::StrCat("stage ", to, " did not receive from stage ", rank_)));
  }

  absl::StatusOr<std::vector<uint8_t>> Recv(int from, int64_t timeout_ms) override {
    RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
    RETURN_IF_ERROR(Reserve(sizeof(int64_t)));
    RETURN_IF_ERROR(Nccl(api_.Recv(buf_, sizeof(int64_t), ncclUint8, from, comm_, stream_), "ncclRecv"));
    const std::string who = absl::StrCat("stage ", from, " sent nothing to stage ", rank_);
    RETURN_IF_ERROR(Done(WaitStream(stream_, timeout_ms, who)));
    int64_t n = 0;
    RETURN_IF_ERROR(Cuda(cudaMemcpy(&n, buf_, sizeof(n), cudaMemcpyDeviceToHost), "copy"));
    if (n < 0 || n > (int64_t{1} << 34)) {
      return absl::DataLossError(absl::StrCat("stage ", from, " announced a message of ", n, " bytes"));
    }
    std::vector<uint8_t> out(n);
    if (n > 0) {
      RETURN_IF_ERROR(Reserve(n));
      RETURN_IF_ERROR(Nccl(api_.Recv(buf_, n, ncclUint8, from, comm_, stream_), "ncclRecv"));
      RETURN_IF_ERROR(Done(WaitStream(stream_, timeout_ms, who)));
      RETURN_IF_ERROR(Cuda(cudaMemcpy(out.data(), buf_, n, cudaMemcpyDeviceToHost), "copy"));
    }
    return out;
  }

 private:
  absl::Status Reserve(int64_t n) {
    if (n <= cap_) return absl::OkStatus();
    if (buf_ != nullptr) RETURN_IF_ERROR(Cuda(cudaFree(buf_), "cudaFree"));
    buf_ = nullptr;
    cap_ = std::max<int64_t>(n, 1 << 20);
    return Cuda(cudaMalloc(&buf_, cap_), "cudaMalloc (stage link buffer)");
  }
  // A failed or timed-out wait leaves NCCL mid-operation: the communicator is aborted at the end.
  absl::Status Done(absl::Status s) {
    if (!s.ok()) broken_ = true;
    return s;
  }
  const NcclApi& api_;
  int rank_, size_, device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  void* buf_ = nullptr;
  int64_t cap_ = 0;
  int64_t timeout_ms_ = 120000;
  bool broken_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<models::StageLink>> ConnectNccl(int rank, int size, int device,
                                                               const std::string& id_file,
                                                               int64_t timeout_ms) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " of ", size));
  }
  ASSIGN_OR_RETURN(const NcclApi* api, Api());
  RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  ncclUniqueId id;
  if (rank == 0) {
    RETURN_IF_ERROR(Nccl(api->GetUniqueId(&id), "ncclGetUniqueId"));
    const std::string tmp = id_file + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    std::error_code ec;
    std::filesystem::rename(tmp, id_file, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("cannot write ", id_file, ": ", ec.message()));
  } else {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::ifstream in(id_file, std::ios::binary);
      if (in.read(id.internal, sizeof(id.internal))) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("stage 0 wrote no NCCL id to ", id_file,
                                                        " within ", timeout_ms, " ms"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ncclComm_t comm;
  RETURN_IF_ERROR(Nccl(api->CommInitRank(&comm, size, id, rank), "ncclCommInitRank"));
  cudaStream_t stream;
  RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  return std::unique_ptr<models::StageLink>(new NcclLink(*api, rank, size, device, comm, stream));
}

absl::StatusOr<std::string> NcclSelfTest(int device, int64_t bytes) {
  ASSIGN_OR_RETURN(const NcclApi* api, Api());
  RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  cudaDeviceProp prop;
  RETURN_IF_ERROR(Cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  ncclComm_t comm;
  RETURN_IF_ERROR(Nccl(api->CommInitAll(&comm, 1, &device), "ncclCommInitAll"));
  cudaStream_t stream;
  RETURN_IF_ERROR(Cuda(cudaStreamCreate(&stream), "cudaStreamCreate"));
  std::vector<uint8_t> host(bytes), back(bytes);
  for (int64_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  void *a = nullptr, *b = nullptr;
  RETURN_IF_ERROR(Cuda(cudaMalloc(&a, bytes), "cudaMalloc"));
  RETURN_IF_ERROR(Cuda(cudaMalloc(&b, bytes), "cudaMalloc"));
  RETURN_IF_ERROR(Cuda(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice), "copy"));
  RETURN_IF_ERROR(Cuda(cudaMemset(b, 0, bytes), "memset"));
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Nccl(api->GroupStart(), "ncclGroupStart"));
  RETURN_IF_ERROR(Nccl(api->Send(a, bytes, ncclUint8, 0, comm, stream), "ncclSend"));
  RETURN_IF_ERROR(Nccl(api->Recv(b, bytes, ncclUint8, 0, comm, stream), "ncclRecv"));
  RETURN_IF_ERROR(Nccl(api->GroupEnd(), "ncclGroupEnd"));
  RETURN_IF_ERROR(WaitStream(stream, 30000, "the self send/recv did not finish"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RETURN_IF_ERROR(Cuda(cudaMemcpy(back.data(), b, bytes, cudaMemcpyDeviceToHost), "copy"));
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(stream);
  api->CommDestroy(comm);
  const bool same = back == host;
  return absl::StrCat("nccl ", Version(*api), ": 1 rank on device ",
                      device, " (", prop.name, "): self send/recv of ", bytes, " bytes ",
                      same ? "PASS" : "FAIL (bytes differ)", " in ", s * 1e6, " us");
}

}  // namespace lockstep::pipeline
