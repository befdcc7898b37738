#include "engine/pipeline/mpi_link.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep::pipeline {
namespace {

constexpr int kTag = 7;

int EnvInt(const char* a, const char* b, int fallback) {
  for (const char* name : {a, b}) {
    const char* v = std::getenv(name);
    int out = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &out)) return out;
  }
  return fallback;
}

std::string MpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

class MpiLink : public models::StageLink {
 public:
  MpiLink(int rank, int size) : rank_(rank), size_(size) {}
  ~MpiLink() override {
    for (auto& p : pending_) MPI_Wait(&p.first, MPI_STATUS_IGNORE);
    pending_.clear();
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(v, &len);
    std::string s(v, len);
    const size_t cut = s.find(',');
    return absl::StrCat("MPI (", s.substr(0, cut == std::string::npos ? s.size() : cut), ")");
  }

  absl::Status Send(int to, std::vector<uint8_t> bytes) override {
    Reap();
    if (to < 0 || to >= size_ || to == rank_ || bytes.size() > (size_t{1} << 31) - 1) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", rank_, ": a message of ",
                                                     bytes.size(), " bytes to stage ", to));
    }
    // Non-blocking, so that this stage computes its next micro-batch while the message travels;
    // the buffer lives in pending_ until MPI is done with it.
    pending_.emplace_back(MPI_Request{}, std::move(bytes));
    auto& [req, buf] = pending_.back();
    const int rc = MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, to, kTag,
                             MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) {
      pending_.pop_back();
      return absl::UnavailableError(absl::StrCat("stage ", rank_, " -> stage ", to, ": ",
                                                 MpiError(rc)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<uint8_t>> Recv(int from, int64_t timeout_ms) override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto pause = std::chrono::microseconds(20);
    MPI_Status st;
    for (;;) {
      int flag = 0;
      const int rc = MPI_Iprobe(from, kTag, MPI_COMM_WORLD, &flag, &st);
      if (rc != MPI_SUCCESS) {
        return absl::UnavailableError(absl::StrCat("stage ", rank_, " <- stage ", from, ": ",
                                                   MpiError(rc)));
      }
      if (flag) break;
      Reap();
      if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "stage ", from, " sent nothing to stage ", rank_, " within ", timeout_ms,
            " ms (LOCKSTEP_PP_TIMEOUT_MS)"));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    std::vector<uint8_t> out(count);
    const int rc = MPI_Recv(out.data(), count, MPI_BYTE, from, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("stage ", rank_, " <- stage ", from, ": ",
                                                 MpiError(rc)));
    }
    return out;
  }

 private:
  void Reap() {
    while (!pending_.empty()) {
      int done = 0;
      MPI_Test(&pending_.front().first, &done, MPI_STATUS_IGNORE);
      if (!done) return;
      pending_.pop_front();
    }
  }
  int rank_, size_;
  std::deque<std::pair<MPI_Request, std::vector<uint8_t>>> pending_;
};

}  // namespace

Launch LaunchedAs() {
  Launch l;
  l.size = EnvInt("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
  l.rank = EnvInt("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
  return l;
}

absl::StatusOr<std::unique_ptr<models::StageLink>> ConnectMpi() {
  int init = 0;
  MPI_Initialized(&init);
  if (init) return absl::FailedPreconditionError("MPI is already initialised in this process");
  int provided = 0;
  // The engine may run on another thread than main (the server): one thread at a time calls MPI.
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) return absl::UnavailableError("MPI_Init_thread failed: " + MpiError(rc));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return absl::UnavailableError("this MPI library does not support MPI_THREAD_SERIALIZED");
  }
  // Errors come back as return codes (and then as sentences) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<models::StageLink>(new MpiLink(rank, size));
}

}  // namespace lockstep::pipeline
