// The model store trusts a cached file only after its sha256 matched (issue 9: a corrupted cached
// GGUF of the right size used to run and print garbage with exit 0).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/store/model_store.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

TEST(ModelStore, CachedFileOfTheRightSizeButWrongBytesIsRefused) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep-store-" + std::to_string(getpid()));
  fs::create_directories(dir);
  setenv("LOCKSTEP_CACHE_DIR", dir.c_str(), 1);
  const store::KnownModel& m = store::DefaultModel();
  {
    std::ofstream f(dir / m.file_name, std::ios::binary);
  }
  fs::resize_file(dir / m.file_name, m.size_bytes);  // zeros: the size the store checks first
  ASSERT_TRUE(store::IsCached(m));
  auto path = store::ResolveModel(m.name);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kDataLoss) << path.status();
  EXPECT_NE(path.status().message().find("sha256"), std::string_view::npos) << path.status();
  EXPECT_NE(path.status().message().find(m.sha256), std::string_view::npos) << path.status();
  EXPECT_FALSE(fs::exists(dir / (m.file_name + ".verified")));  // nothing marks it good
  unsetenv("LOCKSTEP_CACHE_DIR");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep
