// NumPy .npy (format 1.0/2.0/3.0) reading and writing for little-endian float32 C-order arrays:
// the format of golden logits and layer dumps. The reader validates the header completely and
// names the byte offset of whatever is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::npy {

struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;  // C order, product(shape) elements
};

absl::StatusOr<Array> Parse(std::string_view bytes);
absl::StatusOr<Array> Read(const std::string& path);
std::string Serialize(const std::vector<int64_t>& shape, const float* data);
absl::Status Write(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace lockstep::npy
