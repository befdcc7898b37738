#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/store/model_store.h"
#include "nlohmann/json.hpp"

namespace lockstep::cli {

void RegisterModels(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  CLI::App* pull = app.add_subcommand("pull", "Fetch a known model into the cache; print its path");
  pull->add_option("NAME", *name, "Known model name (see `lockstep models`)")->required();
  pull->callback([name] {
    const store::KnownModel* m = store::FindKnownModel(*name);
    if (m == nullptr) {
      std::string known;
      for (const auto& k : store::KnownModels()) known += (known.empty() ? "" : ", ") + k.name;
      throw CliError(2, "unknown model name \"" + *name + "\" (known: " + known + ")");
    }
    auto path = store::Pull(*m);
    ThrowIfError(path.status());
    std::printf("%s\n", path->c_str());
  });

  auto json = std::make_shared<bool>(false);
  CLI::App* models = app.add_subcommand("models", "List known models, their source and cache state");
  models->add_flag("--json", *json, "Print JSON");
  models->callback([json] {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& m : store::KnownModels()) {
      std::string source;
      for (const auto& p : m.parts) source += (source.empty() ? "" : " + ") + p.package;
      bool cached = store::IsCached(m);
      if (*json) {
        out.push_back({{"name", m.name}, {"description", m.description}, {"source", source},
                       {"size_bytes", m.size_bytes}, {"sha256", m.sha256}, {"cached", cached},
                       {"path", store::CachedPath(m)},
                       {"default", &m == &store::DefaultModel()}});
        continue;
      }
      std::printf("%s%s\n  %s\n  source  %s (PyPI)\n  size    %.1f MiB (%llu bytes)\n"
                  "  sha256  %s\n  cached  %s\n",
                  m.name.c_str(), &m == &store::DefaultModel() ? "  (default)" : "",
                  m.description.c_str(), source.c_str(), m.size_bytes / 1048576.0,
                  static_cast<unsigned long long>(m.size_bytes), m.sha256.c_str(),
                  cached ? store::CachedPath(m).c_str() : "no (lockstep pull NAME)");
    }
    if (*json) std::printf("%s\n", out.dump(2).c_str());
  });
}

}  // namespace lockstep::cli
