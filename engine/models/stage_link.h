// The transport between pipeline stages (docs/pipeline.md): ordered byte messages between ranks,
// every wait bounded. Stage r runs layers [split[r], split[r+1]) of the model; rank 0 embeds,
// drives the engine loop and receives the logits, the last rank applies the head.
//
// The interface lives in models (not runtime) because models::Runner is what crosses it: the
// engine above calls Runner::Forward as it does unsplit, and data still flows one way.
// Implementations: LocalStageLinks below (threads of one process: the tests), MpiStageLink
// (engine/pipeline/mpi_link.h: processes of `mpirun`, on one host or many).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::models {

class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // What carries the messages ("in-process", "MPI (Open MPI 4.1.4)").
  virtual std::string Describe() const = 0;
  // Messages from one rank to another arrive in the order they were sent.
  virtual absl::Status Send(int to, std::vector<uint8_t> bytes) = 0;
  // Waits at most `timeout_ms` (< 0: until a message comes or the link breaks); the error names
  // the stage that did not answer.
  virtual absl::StatusOr<std::vector<uint8_t>> Recv(int from, int64_t timeout_ms) = 0;
};

// N endpoints in one process, for tests: each thread drives one rank. Close() makes every
// waiting and later Recv fail (a stage that died).
class LocalStageLinks {
 public:
  explicit LocalStageLinks(int n);
  StageLink& rank(int r) { return *links_[r]; }
  void Close();

 private:
  class Link;
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues;  // (from, to)
    bool closed = false;
  };
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<StageLink>> links_;
};

}  // namespace lockstep::models
