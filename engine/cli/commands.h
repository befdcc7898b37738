// Subcommands of the `lockstep` binary. Each Register* adds one subcommand to the app and sets
// its callback; a callback reports failure by throwing CliError (exit code and sentence).
#pragma once

#include <stdexcept>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace lockstep::cli {

// Exit codes: 1 = a check ran and failed (e.g. a tolerance breached), 2 = bad input / error.
class CliError : public std::runtime_error {
 public:
  CliError(int exit_code, const std::string& sentence)
      : std::runtime_error(sentence), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Throws CliError(2, status.message()) for a non-OK status.
void ThrowIfError(const absl::Status& status);

void RegisterInspect(CLI::App& app);
void RegisterModels(CLI::App& app);  // `pull` and `models`
void RegisterCompare(CLI::App& app);
void RegisterLogits(CLI::App& app);
void RegisterText(CLI::App& app);  // tokenize, detokenize, template
void RegisterRun(CLI::App& app);
void RegisterChat(CLI::App& app);  // interactive multi-turn chat on a parked session
void RegisterServe(CLI::App& app);  // the OpenAI-compatible server (docs/serving.md)
void RegisterBench(CLI::App& app);
void RegisterBenchSpec(CLI::App& app);
void RegisterQuantize(CLI::App& app);
void RegisterFrSpec(CLI::App& app);  // ranks, trim-draft
void RegisterCheck(CLI::App& app);   // every op of a backend against ref
void RegisterQualify(CLI::App& app);  // a (model, quant, drafter, KV) cell's gate and report

// --seed values: decimal digits within 64 bits (no sign, no wrap-around), for every subcommand.
const CLI::Validator& SeedCheck();

// "ref | cpu | cuda": the registered backends, for help texts.
std::string BackendChoices();
void RegisterSynth(CLI::App& app);

}  // namespace lockstep::cli
