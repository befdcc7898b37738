#include "engine/backend/host_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/quant/types.h"

namespace lockstep::backend {
namespace {

constexpr int64_t kAlign = 64;  // a cache line; every vector load of the cpu kernels fits in it

}  // namespace

HostBackend::~HostBackend() {
  for (void* p : allocations_) std::free(p);
}

absl::StatusOr<void*> HostBackend::Allocate(int64_t bytes, std::string_view what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot allocate %d bytes (negative)", name(), bytes));
  }
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a unique pointer.
  const int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign + (bytes == 0 ? kAlign : 0);
  void* p = std::aligned_alloc(kAlign, static_cast<size_t>(rounded));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: out of host memory allocating %d bytes for %s", name(), bytes, what));
  }
  allocations_.insert(p);
  return p;
}

void HostBackend::Free(void* p) {
  if (p == nullptr) return;
  if (allocations_.erase(p) > 0) std::free(p);
}

absl::Status HostBackend::Upload(void* dst, const void* src, int64_t bytes) {
  return Copy(dst, src, bytes);
}

absl::Status HostBackend::Download(void* dst, const void* src, int64_t bytes) {
  return Copy(dst, src, bytes);
}

absl::Status HostBackend::Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes < 0 || (bytes > 0 && (dst == nullptr || src == nullptr))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: copy of %d bytes with dst %p, src %p", name(), bytes, dst, src));
  }
  if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::StatusOr<Weight> HostBackend::BindWeight(const Weight& host) {
  const quant::TypeTraits t = quant::Traits(host.type);
  if (host.rows < 0 || host.cols < 0 || host.cols % t.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: weight '%s' has shape [%d, %d], not whole %s blocks of %d", name(), host.name,
        host.rows, host.cols, t.name, t.block_size));
  }
  if (host.rows * host.cols > 0 && host.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: weight '%s' has no data", name(), host.name));
  }
  return host;
}

absl::Status HostBackend::GreedyTokens(Tensor logits, IntTensor out) {
  if (absl::Status s = CheckGreedyTokens(std::string(name()) + " GreedyTokens", logits, out); !s.ok()) {
    return s;
  }
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* row = logits.data + r * logits.cols;
    int32_t best = -1, bad = -1;
    for (int64_t i = 0; i < logits.cols; ++i) {
      const float v = row[i];
      if (std::isnan(v) || v == INFINITY) {
        if (bad < 0) bad = static_cast<int32_t>(i);
        continue;
      }
      if (v > -INFINITY && (best < 0 || v > row[best])) best = static_cast<int32_t>(i);
    }
    out.data[2 * r] = best;
    out.data[2 * r + 1] = bad;
  }
  return absl::OkStatus();
}

}  // namespace lockstep::backend
