// `lockstep qualify`: the whole gate for one (model, quant, drafter, KV) cell (docs/qualify.md).
#include "engine/cli/commands.h"

namespace lockstep::cli {

void RegisterQualify(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("qualify", "Run the whole gate for one cell and write a report");
  sub->callback([] { throw CliError(2, "qualify is not implemented yet"); });
}

}  // namespace lockstep::cli
