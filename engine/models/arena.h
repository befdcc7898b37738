// Backend memory that a models:: object owns (docs/runtime.md: the backend owns memory): every
// allocation made through the arena is freed, in order, when the arena is destroyed.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/core/status.h"

namespace lockstep::models {

class Arena {
 public:
  explicit Arena(backend::Backend& be) : be_(be) {}
  ~Arena() {
    for (void* p : owned_) be_.Free(p);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // `bytes` of backend memory; `what` names it in an out-of-memory error.
  absl::StatusOr<void*> Allocate(int64_t bytes, std::string_view what) {
    ASSIGN_OR_RETURN(void* p, be_.Allocate(bytes, what));
    owned_.push_back(p);
    return p;
  }
  // A [rows, cols] f32 / int32 tensor.
  absl::StatusOr<backend::Tensor> NewTensor(int64_t rows, int64_t cols, std::string_view what) {
    ASSIGN_OR_RETURN(void* p, Allocate(rows * cols * static_cast<int64_t>(sizeof(float)), what));
    return backend::Tensor{static_cast<float*>(p), rows, cols};
  }
  absl::StatusOr<backend::IntTensor> NewIntTensor(int64_t rows, int64_t cols,
                                                  std::string_view what) {
    ASSIGN_OR_RETURN(void* p, Allocate(rows * cols * static_cast<int64_t>(sizeof(int32_t)), what));
    return backend::IntTensor{static_cast<int32_t*>(p), rows, cols};
  }

 private:
  backend::Backend& be_;
  std::vector<void*> owned_;
};

}  // namespace lockstep::models
