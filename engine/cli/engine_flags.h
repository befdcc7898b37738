// The flags that shape an Engine (context, paged KV, step budget), shared by run, chat and bench.
// Each has a LOCKSTEP_* mirror; the values go to runtime::EngineOptions unchanged, which
// validates them (the policy lives in the runtime, not here).
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "engine/runtime/engine.h"

namespace lockstep::cli {

struct EngineFlags {
  int64_t ctx = 0;
  std::string kv_k = "f32", kv_v = "f32";
  int64_t kv_block = 16;
  int64_t kv_mb = 0;
  int64_t step_tokens = 256;
};

void AddEngineFlags(CLI::App* sub, EngineFlags& f);
// Throws CliError naming the flag for a bad KV format.
runtime::EngineOptions ToEngineOptions(const EngineFlags& f);

}  // namespace lockstep::cli
