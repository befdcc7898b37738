// SHA-256 (FIPS 180-4): the one implementation of the engine (model-file identities in the boot
// report and the model store, hashed API keys in the server, golden manifests in the tests).
// Checked against the FIPS test vectors and Python's hashlib (tests/unit/sha256_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lockstep::core {

class Sha256 {
 public:
  Sha256();
  void Update(std::string_view bytes);
  // The digest of everything given to Update, lower-case hex (64 characters). Ends the hash.
  std::string HexDigest();

 private:
  uint32_t h_[8];
  unsigned char buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string Sha256Hex(std::string_view bytes);
// Streams the file in 1 MiB pieces; errors name the path.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace lockstep::core
