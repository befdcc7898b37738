// `lockstep check --backend NAME [--model M ...] [--versus B]`: every op of a backend against the
// ref backend (oracle/op_check.h), then for each model the bitwise model-level lines and, with
// --versus, teacher-forced greedy against a second backend (engine/cli/model_check.h).
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/cli/commands.h"
#include "engine/cli/engine_flags.h"
#ifdef LOCKSTEP_WITH_NCCL
#include "engine/pipeline/nccl_link.h"
#endif
#include "engine/cli/model_check.h"
#include "engine/cli/model_io.h"
#include "engine/quant/kv_format.h"
#include "engine/tokenizer/tokenizer.h"
#include "oracle/op_check.h"

namespace lockstep::cli {

void RegisterCheck(CLI::App& app) {
  struct Args {
    std::string backend = "cpu";
    uint64_t seed = 0;
    int rounds = 1;
    int threads = 0;
    std::vector<std::string> models;
    std::string versus;
    std::vector<int64_t> batches = {1, 2, 3, 8, 17, 64, 256};
    int64_t max_prompt = 96;
    int64_t greedy_tokens = 128;
    bool no_ops = false;
    bool nccl = false;
    std::string kv_k = "f32", kv_v = "f32";
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "check", "Check every op of a backend against the ref backend; exit 1 on any failure");
  sub->add_option("--backend", args->backend, "Backend under test: " + BackendChoices())
      ->envname("LOCKSTEP_BACKEND");
  sub->add_option("--seed", args->seed, "Seed of the random shapes and inputs (0 = draw one)")
      ->check(SeedCheck());
  sub->add_option("--rounds", args->rounds, "Draw every op's cases this many times")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--threads", args->threads, "cpu backend threads (0 = all cores)");
  sub->add_option("--model", args->models, "Also run the model-level lines on this model (repeatable)");
  sub->add_option("--versus", args->versus, "With --model: teacher-forced greedy against this backend");
  sub->add_option("--batches", args->batches, "Decode batch sizes of the model-level lines")
      ->delimiter(',')->check(CLI::Range(int64_t{1}, int64_t{256}));
  sub->add_option("--max-prompt", args->max_prompt, "Longest random prompt of the model-level lines")
      ->check(CLI::Range(int64_t{8}, int64_t{480}));
  sub->add_option("--greedy-tokens", args->greedy_tokens, "Tokens per prompt with --versus")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  sub->add_flag("--no-ops", args->no_ops, "Skip the op lines (model-level lines only)");
  sub->add_option("--kv-k", args->kv_k, "With --model: K cache format of the bitwise model-level lines")
      ->capture_default_str();
  sub->add_option("--kv-v", args->kv_v, "With --model: V cache format of the bitwise model-level lines")
      ->capture_default_str();
  sub->add_flag("--nccl", args->nccl,
                "Only the pipeline's GPU transport: a one-rank NCCL self send/recv on device 0");
  sub->callback([args] {
    if (args->nccl) {
#ifdef LOCKSTEP_WITH_NCCL
      auto line = pipeline::NcclSelfTest(0, int64_t{1} << 20);
      ThrowIfError(line.status());
      std::printf("%s\n", line->c_str());
      if (line->find(" PASS ") == std::string::npos) throw CliError(1, "nccl self test failed");
      return;
#else
      throw CliError(2, "--nccl: this lockstep was built without CUDA (make build-cuda)");
#endif
    }
    const quant::KvFormat k_format = ParseKvFlag("--kv-k", args->kv_k);
    const quant::KvFormat v_format = ParseKvFlag("--kv-v", args->kv_v);
    uint64_t seed = args->seed;
    if (seed == 0) seed = std::random_device{}() | 1;
    auto cand = backend::MakeBackend(args->backend, {args->threads});
    ThrowIfError(cand.status());
    auto ref = backend::MakeBackend("ref");
    ThrowIfError(ref.status());
    std::printf("lockstep check --backend %s --seed %llu --rounds %d\n", args->backend.c_str(),
                static_cast<unsigned long long>(seed), args->rounds);
    std::fflush(stdout);
    std::string failed;
    if (!args->no_ops) {
      auto lines = oracle::CheckBackendOps(**cand, **ref, {seed, args->rounds});
      if (!lines.ok()) {
        throw CliError(1, "check could not run to the end: " + std::string(lines.status().message()));
      }
      for (const oracle::OpCheckLine& l : *lines) {
        std::printf("%-18s %s  cases %4lld  elements %10lld  worst %.3g of bound  [%s]\n",
                    l.op.c_str(), l.ok() ? "PASS" : "FAIL", static_cast<long long>(l.cases),
                    static_cast<long long>(l.elements), l.worst, l.covered.c_str());
        if (l.cases == 0) std::printf("    not run: no case of this op ran\n");
        if (l.failures > 0) {
          std::printf("    %lld failures; first: %s\n", static_cast<long long>(l.failures),
                      l.first_failure.c_str());
        }
        if (!l.ok()) failed += (failed.empty() ? "" : " ") + l.op;
      }
      std::fflush(stdout);
    }
    ModelCheckOptions mo;
    mo.seed = seed;
    mo.batches = args->batches;
    mo.max_prompt = args->max_prompt;
    mo.greedy_tokens = args->greedy_tokens;
    mo.k_format = k_format;
    mo.v_format = v_format;
    for (const std::string& name : args->models) {
      LoadedModel m = LoadModel(name, false, /*tokenizer=*/false);
      std::printf("model lines: %s, KV pool %s/%s\n", m.path.c_str(), quant::KvFormatName(k_format),
                  quant::KvFormatName(v_format));
      auto lines = CheckModelInvariance(*m.model, **cand, mo);
      if (!lines.ok()) {
        throw CliError(1, "model check of " + name + " could not run: " +
                              std::string(lines.status().message()));
      }
      for (const ModelCheckLine& l : *lines) {
        std::printf("model %-30s %s  rows %6lld  differing %lld%s  [%s]\n", l.name.c_str(),
                    l.ok() ? "PASS" : "FAIL", static_cast<long long>(l.rows),
                    static_cast<long long>(l.differing), l.rows == 0 ? " (not run)" : "",
                    m.path.c_str());
        if (!l.detail.empty()) std::printf("    %s\n", l.detail.c_str());
        if (!l.ok()) failed += (failed.empty() ? "" : " ") + ("model:" + l.name);
      }
      std::fflush(stdout);
      if (!args->versus.empty()) {
        auto versus = backend::MakeBackend(args->versus, {args->threads});
        ThrowIfError(versus.status());
        // Three text prompts through the model's tokenizer; a file without one (the tiny
        // golden models) gets three seeded random prompts of 8 tokens, and the line says so.
        std::vector<std::vector<int32_t>> prompts;
        auto tok = tokenizer::Tokenizer::FromGguf(m.model->file());
        if (tok.ok()) {
          for (const char* text : {"The capital of France is", "def fibonacci(n):\n",
                                   "Once upon a time, in a small village,"}) {
            prompts.push_back(tok->Encode(text, tok->add_bos_default(), false));
          }
        } else {
          std::mt19937_64 rng(seed);
          const auto V = static_cast<int32_t>(m.model->config().n_vocab);
          for (int p = 0; p < 3; ++p) {
            prompts.emplace_back();
            for (int i = 0; i < 8; ++i) {
              prompts.back().push_back(std::uniform_int_distribution<int32_t>(0, V - 1)(rng));
            }
          }
          std::printf("greedy: %s has no tokenizer; prompts are 3 x 8 seeded random token ids\n",
                      m.path.c_str());
        }
        auto greedy = CompareGreedy(*m.model, **cand, **versus, prompts, mo);
        ThrowIfError(greedy.status());
        for (const ModelCheckLine& l : *greedy) {
          std::printf("greedy %s vs %s: %s  [%s]\n    %s\n", args->backend.c_str(),
                      args->versus.c_str(), l.name.c_str(), m.path.c_str(), l.detail.c_str());
        }
      }
    }
    std::printf("backend: %s\n", (*cand)->Describe().c_str());
    if (failed.empty()) {
      std::printf("ALL GREEN (%s vs ref, seed %llu)\n", args->backend.c_str(),
                  static_cast<unsigned long long>(seed));
      return;
    }
    std::printf("FAILURES: %s\n", failed.c_str());
    throw CliError(1, "check failed: " + failed);
  });
}

}  // namespace lockstep::cli
