// Construction of a backend by name. It lives in oracle/ because that is the one library that
// sees both the ref backend (oracle/) and the engine's backends (engine/backend/).
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace lockstep::oracle {

// name: "ref" (the scalar double-accumulating oracle) or "cpu" (threaded float backend).
// threads: for "cpu", workers including the caller, 0 = hardware concurrency; "ref" is
// single-threaded by design and ignores it. An unknown name is an InvalidArgument error that
// lists the known ones.
absl::StatusOr<std::unique_ptr<backend::Backend>> MakeBackend(std::string_view name,
                                                              int threads = 0);

}  // namespace lockstep::oracle
