// `lockstep check --backend NAME`: every op of a backend against the ref backend (oracle/op_check.h).
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/cli/commands.h"
#include "oracle/op_check.h"

namespace lockstep::cli {

void RegisterCheck(CLI::App& app) {
  struct Args {
    std::string backend = "cpu";
    uint64_t seed = 0;
    int rounds = 1;
    int threads = 0;
    bool graphs = true;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "check", "Check every op of a backend against the ref backend; exit 1 on any failure");
  sub->add_option("--backend", args->backend, "Backend under test: " + BackendChoices())
      ->envname("LOCKSTEP_BACKEND");
  sub->add_option("--seed", args->seed, "Seed of the random shapes and inputs (0 = draw one)");
  sub->add_option("--rounds", args->rounds, "Draw every op's cases this many times")
      ->check(CLI::Range(1, 1000));
  sub->add_option("--threads", args->threads, "cpu backend threads (0 = all cores)");
  sub->callback([args] {
    uint64_t seed = args->seed;
    if (seed == 0) seed = std::random_device{}() | 1;
    auto cand = backend::MakeBackend(args->backend, {args->threads});
    ThrowIfError(cand.status());
    auto ref = backend::MakeBackend("ref");
    ThrowIfError(ref.status());
    std::printf("lockstep check --backend %s --seed %llu --rounds %d\n", args->backend.c_str(),
                static_cast<unsigned long long>(seed), args->rounds);
    std::fflush(stdout);
    auto lines = oracle::CheckBackendOps(**cand, **ref, {seed, args->rounds});
    if (!lines.ok()) {
      throw CliError(1, "check could not run to the end: " + std::string(lines.status().message()));
    }
    std::string failed;
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
