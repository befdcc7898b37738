// Golden manifests: every golden directory's MANIFEST.json names each file with its sha256
// (two layouts: "files": [{"file", "sha256"}, ...] or "sha256": {"file": hash}). Every golden
// test checks its directory first, so a tampered or silently regenerated golden fails by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "engine/core/sha256.h"
#include "nlohmann/json.hpp"

namespace lockstep::testing {

// SHA-256 of a byte string, lower-case hex (engine/core/sha256.h).
using core::Sha256Hex;

// Failures of golden/<dir>/MANIFEST.json: a listed file whose bytes do not hash to its sha256,
// a listed file that is missing, a file of the directory (outside subfolders' MANIFEST.json)
// that the manifest does not list. Empty: all good.
inline std::vector<std::string> CheckManifest(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> fail;
  auto read = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string text = read(fs::path(dir) / "MANIFEST.json");
  if (text.empty()) return {dir + "/MANIFEST.json is missing or empty"};
  const nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
  if (m.is_discarded()) return {dir + "/MANIFEST.json is not JSON"};
  std::vector<std::pair<std::string, std::string>> listed;
  if (m.contains("files")) {
    for (const auto& e : m["files"]) listed.emplace_back(e.at("file"), e.at("sha256"));
  }
  if (m.contains("sha256")) {
    for (const auto& [file, sha] : m["sha256"].items()) listed.emplace_back(file, sha);
  }
  if (listed.empty()) fail.push_back(dir + "/MANIFEST.json lists no file");
  std::set<std::string> names;
  for (const auto& [file, sha] : listed) {
    names.insert(file);
    const fs::path p = fs::path(dir) / file;
    if (!fs::exists(p)) {
      fail.push_back(file + ": listed in MANIFEST.json but missing");
      continue;
    }
    const std::string got = Sha256Hex(read(p));
    if (got != sha) fail.push_back(file + ": sha256 " + got + " != MANIFEST.json " + sha);
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel != "MANIFEST.json" && !names.count(rel)) fail.push_back(rel + ": not in MANIFEST.json");
  }
  return fail;
}

}  // namespace lockstep::testing
