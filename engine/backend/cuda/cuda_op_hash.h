// The signature of one op call of the cuda backend (cuda_backend.h, "Graphs"): a replayed step's
// ops must hash to the captured step's.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/backend/backend.h"

namespace lockstep::backend::cuda_internal {

// FNV-1a over the bytes of each argument: the signature of one op call.
class OpHash {
 public:
  explicit OpHash(int op) { Mix(op); }
  template <typename T>
  OpHash& Mix(const T& v) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (unsigned char c : b) h_ = (h_ ^ c) * 0x100000001b3ull;
    return *this;
  }
  OpHash& Mix(const Tensor& t) { return Mix(t.data).Mix(t.rows).Mix(t.cols); }
  OpHash& Mix(const IntTensor& t) { return Mix(t.data).Mix(t.rows).Mix(t.cols); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace lockstep::backend::cuda_internal
