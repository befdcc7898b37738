#include "engine/cli/engine_flags.h"

#include "engine/cli/commands.h"
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
}

runtime::EngineOptions ToEngineOptions(const EngineFlags& f) {
  runtime::EngineOptions o;
  o.ctx = f.ctx;
  auto k = quant::ParseKvFormat(f.kv_k);
  if (!k.ok()) throw CliError(2, "--kv-k: " + std::string(k.status().message()));
  auto v = quant::ParseKvFormat(f.kv_v);
  if (!v.ok()) throw CliError(2, "--kv-v: " + std::string(v.status().message()));
  o.k_format = *k;
  o.v_format = *v;
  o.block_size = f.kv_block;
  o.kv_bytes = f.kv_mb * (int64_t{1} << 20);
  o.max_step_tokens = f.step_tokens;
  return o;
}

}  // namespace lockstep::cli
