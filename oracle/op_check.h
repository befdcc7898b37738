// `lockstep check --backend NAME`: every op of a backend against the ref backend (the op oracle)
// through the Backend interface, on seeded random shapes (odd and ragged sizes, KV lengths
// across piece and block boundaries, every weight type of the matmul set and every KV format;
// the Gated DeltaNet and MoE ops on ragged steps with state slots and checkpoints and routes
// with ties, op_check_families.cc), held to the bounds of engine/core/tolerances.h. Outputs are NaN-poisoned before each op; a
// non-finite value where the ref is finite fails; an op that ran no case fails (docs/testing.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace lockstep::oracle {

struct OpCheckOptions {
  uint64_t seed = 1;
  int rounds = 1;  // each op's case list is drawn this many times (new random shapes each)
};

// One line per op: what it covered and the worst error as a fraction of its bound.
struct OpCheckLine {
  std::string op;
  int64_t cases = 0;
  int64_t elements = 0;
  std::string covered;  // "types F16 Q4_K ..; cols 32..4096; T 1..257"
  double worst = 0.0;   // max |cand - ref| / bound (bitwise lines: mismatching elements)
  int64_t failures = 0;
  std::string first_failure;
  bool ok() const { return cases > 0 && failures == 0; }
};

// Runs every check. An error status means the check itself could not run (an op returned an
// error, memory ran out); a breached bound is a failing line, not an error.
absl::StatusOr<std::vector<OpCheckLine>> CheckBackendOps(backend::Backend& cand,
                                                          backend::Backend& ref,
                                                          const OpCheckOptions& options);

}  // namespace lockstep::oracle
