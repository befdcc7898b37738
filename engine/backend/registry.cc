// Construction of backends by name (backend.h). The engine's own backends are registered here;
// backends outside engine/ (the ref oracle) register themselves at static initialization.
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"

namespace lockstep::backend {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendFactory, std::less<>> factories;
};

// Function-local, so registrations from other translation units' static initializers never see
// it unconstructed. The engine's backends are in it from the first use.
Registry& TheRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    r->factories["cpu"] = [](const BackendOptions& o)
        -> absl::StatusOr<std::unique_ptr<Backend>> {
      return std::make_unique<CpuBackend>(o.threads);
    };
    return r;
  }();
  return *registry;
}

}  // namespace

bool RegisterBackend(std::string name, BackendFactory factory) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.emplace(std::move(name), std::move(factory)).second;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name,
                                                     const BackendOptions& options) {
  if (options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend option threads must be >= 0 (0 = all cores), got ", options.threads));
  }
  BackendFactory factory;
  {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat("unknown backend '", std::string(name),
                                                   "'; known backends: ",
                                                   absl::StrJoin(BackendNames(), ", ")));
  }
  return factory(options);
}

std::vector<std::string> BackendNames() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

}  // namespace lockstep::backend
