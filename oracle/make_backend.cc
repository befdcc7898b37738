#include "oracle/make_backend.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "oracle/ref_backend.h"

namespace lockstep::oracle {

absl::StatusOr<std::unique_ptr<backend::Backend>> MakeBackend(std::string_view name,
                                                              int threads) {
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend threads must be >= 0 (0 = all cores), got ", threads));
  }
  if (name == "ref") return std::make_unique<RefBackend>();
  if (name == "cpu") return std::make_unique<backend::CpuBackend>(threads);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", std::string(name), "'; known backends: ref, cpu"));
}

}  // namespace lockstep::oracle
