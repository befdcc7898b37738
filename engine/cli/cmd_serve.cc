// `lockstep serve`: the OpenAI-compatible server (docs/serving.md).
#include "engine/cli/commands.h"

namespace lockstep::cli {

void RegisterServe(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("serve", "Serve models over an OpenAI-compatible HTTP API");
  sub->callback([] { throw CliError(2, "serve: not built yet"); });
}

}  // namespace lockstep::cli
