// The flags that shape an Engine (context, paged KV, step budget), shared by run, chat and bench.
// Each has a LOCKSTEP_* mirror; the values go to runtime::EngineOptions unchanged, which
// validates them (the policy lives in the runtime, not here).
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "engine/quant/kv_format.h"
#include "engine/runtime/engine.h"

namespace lockstep::cli {

struct EngineFlags {
  int64_t ctx = 0;
  std::string kv_k = "f32", kv_v = "f32";
  int64_t kv_block = 16;
  int64_t kv_mb = 0;
  int64_t step_tokens = 256;
  int64_t pp_stages = 1;          // pipeline stages (docs/pipeline.md)
  std::string pp_split;           // explicit layer boundaries "L1,L2,..."
  int64_t pp_micro_batches = 2;
  std::string dump_step_logits;   // append every step's f32 logits to this file (ci/pp-gate)
};

void AddEngineFlags(CLI::App* sub, EngineFlags& f);
// The KV format named by flag's value; throws CliError naming the flag (exit 2) for a bad one.
quant::KvFormat ParseKvFlag(const char* flag, const std::string& value);
// Throws CliError naming the flag for a bad KV format.
runtime::EngineOptions ToEngineOptions(const EngineFlags& f);

// The pipeline of a command (--pp-stages): connects the stages and sets eo's pipeline fields and
// the --dump-step-logits writer. Returns true on a stage process (rank > 0) whose work is done:
// the command then returns without doing anything else. Prints the stage banner on rank 0.
bool StartPipeline(const EngineFlags& f, const models::Model& model, backend::Backend& be,
                   runtime::EngineOptions* eo);
// One stderr line per stage (host, backend, layers) of a split engine; nothing when unsplit.
void PrintStages(const runtime::Engine& e);

}  // namespace lockstep::cli
