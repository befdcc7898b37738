#include "engine/cli/engine_flags.h"

#include "engine/cli/commands.h"
#include <cstdio>
#include <memory>

#include "engine/pipeline/pipeline.h"
#include "engine/quant/quant.h"

namespace lockstep::cli {

void AddEngineFlags(CLI::App* sub, EngineFlags& f) {
  sub->add_option("--ctx", f.ctx, "Context length (0 = the model's, at most 8192)")
      ->envname("LOCKSTEP_CTX");
  sub->add_option("--kv-k", f.kv_k, "K cache format: f32 f16 bf16 q8_0 q5_1 q4_0 fp8")
      ->capture_default_str()->envname("LOCKSTEP_KV_K");
  sub->add_option("--kv-v", f.kv_v, "V cache format: f32 f16 bf16 q8_0 q5_1 q4_0 fp8")
      ->capture_default_str()->envname("LOCKSTEP_KV_V");
  sub->add_option("--kv-block", f.kv_block, "Tokens per KV block")
      ->capture_default_str()->envname("LOCKSTEP_KV_BLOCK");
  sub->add_option("--kv-mb", f.kv_mb, "KV pool budget in MiB (0 = enough for the running set, at most 1024)")
      ->envname("LOCKSTEP_KV_MB");
  sub->add_option("--step-tokens", f.step_tokens, "Tokens per engine step (prefill chunk size)")
      ->capture_default_str()->envname("LOCKSTEP_STEP_TOKENS");
  sub->add_option("--pp-stages", f.pp_stages,
                  "Pipeline stages, one process each: mpirun -np N lockstep ... --pp-stages N")
      ->capture_default_str()->envname("LOCKSTEP_PP_STAGES");
  sub->add_option("--pp-split", f.pp_split,
                  "Layer boundaries of the stages, e.g. 10,20 (default: balanced by weight bytes)")
      ->envname("LOCKSTEP_PP_SPLIT");
  sub->add_option("--pp-micro-batches", f.pp_micro_batches,
                  "Micro-batches of a step in flight through the stages")
      ->capture_default_str()->envname("LOCKSTEP_PP_MICRO_BATCHES");
  sub->add_option("--dump-step-logits", f.dump_step_logits,
                  "Append every engine step's f32 logits to this file (ci/pp-gate)")
      ->envname("LOCKSTEP_DUMP_STEP_LOGITS");
}

bool StartPipeline(const EngineFlags& f, const models::Model& model, backend::Backend& be,
                   runtime::EngineOptions* eo) {
  if (f.pp_micro_batches < 1) {
    throw CliError(2, "--pp-micro-batches must be >= 1, got " + std::to_string(f.pp_micro_batches));
  }
  auto p = pipeline::Start(model, be, f.pp_stages, f.pp_split);
  ThrowIfError(p.status());
  if (p->served) return true;
  // The engine outlives this call in every command: the link is kept for the process.
  static std::unique_ptr<models::StageLink> link;
  link = std::move(p->link);
  eo->pp_split = p->split;
  eo->pp_link = link.get();
  eo->pp_micro_batches = f.pp_micro_batches;
  if (link != nullptr) {
    std::fprintf(stderr, "pipeline: %lld stages over %s, %lld micro-batches in flight\n",
                 static_cast<long long>(f.pp_stages), p->transport.c_str(),
                 static_cast<long long>(f.pp_micro_batches));
  }
  if (!f.dump_step_logits.empty()) {
    std::shared_ptr<std::FILE> out(std::fopen(f.dump_step_logits.c_str(), "wb"), [](std::FILE* fp) {
      if (fp != nullptr) std::fclose(fp);
    });
    if (!out) throw CliError(2, "--dump-step-logits: cannot write " + f.dump_step_logits);
    eo->on_step_logits = [out](std::span<const float> l) {
      std::fwrite(l.data(), sizeof(float), l.size(), out.get());
    };
  }
  return false;
}

// The stage banner, once the engine (and so every stage) is up.
void PrintStages(const runtime::Engine& e) {
  for (const std::string& line : e.stage_lines()) std::fprintf(stderr, "pipeline: %s\n", line.c_str());
}

quant::KvFormat ParseKvFlag(const char* flag, const std::string& value) {
  auto f = quant::ParseKvFormat(value);
  if (!f.ok()) throw CliError(2, std::string(flag) + ": " + std::string(f.status().message()));
  return *f;
}

runtime::EngineOptions ToEngineOptions(const EngineFlags& f) {
  runtime::EngineOptions o;
  o.ctx = f.ctx;
  o.k_format = ParseKvFlag("--kv-k", f.kv_k);
  o.v_format = ParseKvFlag("--kv-v", f.kv_v);
  o.block_size = f.kv_block;
  o.kv_bytes = f.kv_mb * (int64_t{1} << 20);
  o.max_step_tokens = f.step_tokens;
  return o;
}

}  // namespace lockstep::cli
