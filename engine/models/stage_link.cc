#include "engine/models/stage_link.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace lockstep::models {

class LocalStageLinks::Link : public StageLink {
 public:
  Link(std::shared_ptr<Shared> s, int rank, int size) : s_(std::move(s)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override { return "in-process"; }

  absl::Status Send(int to, std::vector<uint8_t> bytes) override {
    if (to < 0 || to >= size_ || to == rank_) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", rank_, " sends to stage ", to));
    }
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->closed) return absl::UnavailableError(absl::StrCat("stage link closed (to stage ", to, ")"));
    s_->queues[{rank_, to}].push_back(std::move(bytes));
    s_->cv.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<uint8_t>> Recv(int from, int64_t timeout_ms) override {
    std::unique_lock<std::mutex> lock(s_->mu);
    auto& q = s_->queues[{from, rank_}];
    auto ready = [&] { return !q.empty() || s_->closed; };
    if (timeout_ms < 0) {
      s_->cv.wait(lock, ready);
    } else {
      s_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    }
    if (!q.empty()) {
      std::vector<uint8_t> out = std::move(q.front());
      q.pop_front();
      return out;
    }
    if (s_->closed) return absl::UnavailableError(absl::StrCat("stage ", from, " is gone"));
    return absl::DeadlineExceededError(absl::StrCat(
        "stage ", from, " sent nothing to stage ", rank_, " within ", timeout_ms, " ms"));
  }

 private:
  std::shared_ptr<Shared> s_;
  int rank_, size_;
};

LocalStageLinks::LocalStageLinks(int n) : shared_(std::make_shared<Shared>()) {
  for (int r = 0; r < n; ++r) links_.push_back(std::make_unique<Link>(shared_, r, n));
}

void LocalStageLinks::Close() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->closed = true;
  shared_->cv.notify_all();
}

}  // namespace lockstep::models
