#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/inspect.h"
#include "engine/store/model_store.h"

namespace lockstep::cli {

void RegisterInspect(CLI::App& app) {
  struct Args {
    std::string model;
    bool json = false;
    bool full = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("inspect", "Print a GGUF file's header, metadata and tensors");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name (see `models`)")
      ->required();
  sub->add_flag("--json", args->json, "Print JSON instead of text");
  sub->add_flag("--full", args->full, "Do not abbreviate long arrays and strings");
  sub->callback([args] {
    auto path = store::ResolveModel(args->model);
    ThrowIfError(path.status());
    auto file = gguf::File::Open(*path);
    ThrowIfError(file.status());
    if (args->json) {
      std::string s = gguf::InspectJson(*file, args->full).dump(2);
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      std::string s = gguf::InspectText(*file, args->full);
      std::fwrite(s.data(), 1, s.size(), stdout);
    }
  });
}

}  // namespace lockstep::cli
