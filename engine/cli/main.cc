// The `lockstep` binary: one executable, one subcommand per task (DESIGN.md §5).
#include <cstdio>
#include <set>
#include <string>

#include "CLI/CLI.hpp"
#include "engine/backend/backend.h"
#include "engine/cli/commands.h"

extern char** environ;

namespace lockstep::cli {

const CLI::Validator& SeedCheck() {
  static const CLI::Validator v(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        // 18446744073709551615 is the largest; compare as strings of 20 digits.
        if (!digits || (text.size() == 20 && text > "18446744073709551615")) {
          return "must be an integer in [0, 2^64 - 1], got '" + text + "'";
        }
        return "";
      },
      "SEED");
  return v;
}

std::string BackendChoices() {
  std::string out;
  for (const std::string& n : backend::BackendNames()) out += (out.empty() ? "" : " | ") + n;
  return out;
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw CliError(2, std::string(status.message()));
}

namespace {

// Every option's LOCKSTEP_* mirror, over all subcommands.
void CollectEnvNames(const CLI::App& app, std::set<std::string>& out) {
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->get_envname().empty()) out.insert(opt->get_envname());
  }
  for (const CLI::App* sub : app.get_subcommands({})) CollectEnvNames(*sub, out);
}

// A misspelt LOCKSTEP_* variable would otherwise be ignored without a word.
void RejectUnknownEnv(const CLI::App& app) {
  // Variables read by lockstep's scripts and test binaries, which may be exported while a
  // script runs `lockstep` (e.g. a ci/bisect gate): known, so not an error here.
  std::set<std::string> known = {"LOCKSTEP_CACHE_DIR",          "LOCKSTEP_BISECT_BUILD",
                                 "LOCKSTEP_BISECT_VERIFY",      "LOCKSTEP_BISECT_WORK",
                                 "LOCKSTEP_BUILD_DIR",          "LOCKSTEP_PROPERTY_CASES",
                                 "LOCKSTEP_PROPERTY_MIN_CASES", "LOCKSTEP_PROPERTY_SMOL_CASES",
                                 // read by the cpu backend (cpu_dot_kernels.h: BestDotIsa)
                                 "LOCKSTEP_CPU_ISA",
                                 // read by the cuda kernels, A/B switches that keep every bit
                                 // (kernels/pdl.cuh, kernels/matmul.cu: DecodeXSmem)
                                 "LOCKSTEP_PDL", "LOCKSTEP_DECODE_X_SMEM"};
  CollectEnvNames(app, known);
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("LOCKSTEP_", 0) != 0) continue;
    std::string name = kv.substr(0, kv.find('='));
    if (known.count(name) == 0) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw CliError(2, "unknown environment variable " + name + " (known: " + list + ")");
    }
  }
}

}  // namespace
}  // namespace lockstep::cli

int main(int argc, char** argv) {
  using lockstep::cli::CliError;
  CLI::App app{"lockstep: an LLM inference engine whose speed never changes what the model says"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lockstep 0.1.0");
  lockstep::cli::RegisterInspect(app);
  lockstep::cli::RegisterModels(app);
  lockstep::cli::RegisterCompare(app);
  lockstep::cli::RegisterLogits(app);
  lockstep::cli::RegisterText(app);
  lockstep::cli::RegisterRun(app);
  lockstep::cli::RegisterChat(app);
  lockstep::cli::RegisterServe(app);
  lockstep::cli::RegisterBench(app);
  lockstep::cli::RegisterBenchSpec(app);
  lockstep::cli::RegisterQuantize(app);
  lockstep::cli::RegisterFrSpec(app);
  lockstep::cli::RegisterCheck(app);
  lockstep::cli::RegisterQualify(app);
  lockstep::cli::RegisterSynth(app);
  try {
    lockstep::cli::RejectUnknownEnv(app);
    // Name an unknown subcommand instead of CLI11's "A subcommand is required".
    if (argc > 1 && argv[1][0] != '-') {
      std::string known;
      bool found = false;
      for (const CLI::App* sub : app.get_subcommands({})) {
        known += (known.empty() ? "" : ", ") + sub->get_name();
        found = found || sub->check_name(argv[1]);
      }
      if (!found) {
        throw CliError(2, std::string("unknown subcommand '") + argv[1] + "' (known: " + known + ")");
      }
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const CliError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
