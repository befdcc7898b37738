// Writes a GGUF from a directory made by oracle/gen_tiny_golden.py: meta.json (typed metadata)
// and tensors/<gguf name>.npy (float32, GGUF conventions). Goes through lockstep's own writer.
//
// Usage: tiny_to_gguf DIR OUT.gguf [TYPE]   TYPE: F32 (default) or F16 for 2-D weights
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/core/npy.h"
#include "engine/gguf/gguf.h"
#include "engine/quant/quant.h"
#include "nlohmann/json.hpp"

namespace fs = std::filesystem;
using namespace lockstep;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tiny_to_gguf DIR OUT.gguf [F32|F16]\n");
    return 2;
  }
  const std::string dir = argv[1], out = argv[2], type = argc > 3 ? argv[3] : "F32";
  std::ifstream in(dir + "/meta.json");
  nlohmann::json meta = nlohmann::json::parse(in);
  std::vector<gguf::KeyValue> md;
  for (const auto& e : meta["metadata"]) {
    const std::string key = e[0], t = e[1];
    if (t == "string") md.push_back({key, gguf::Value::String(e[2].get<std::string>())});
    else if (t == "u32") md.push_back({key, gguf::Value::U32(e[2].get<uint32_t>())});
    else if (t == "f32") md.push_back({key, gguf::Value::F32(e[2].get<float>())});
    else {
      std::fprintf(stderr, "error: metadata %s has unknown type %s\n", key.c_str(), t.c_str());
      return 2;
    }
  }
  // Sorted by name so the file does not depend on directory order.
  std::map<std::string, npy::Array> arrays;
  for (const auto& entry : fs::directory_iterator(dir + "/tensors")) {
    std::string name = entry.path().filename().string();
    name = name.substr(0, name.size() - 4);  // strip ".npy"
    auto a = npy::Read(entry.path().string());
    if (!a.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(a.status().message()).c_str());
      return 2;
    }
    arrays.emplace(name, std::move(*a));
  }
  std::vector<std::string> blobs;
  blobs.reserve(arrays.size());
  std::vector<gguf::WriteTensor> tensors;
  for (auto& [name, a] : arrays) {
    gguf::WriteTensor t;
    t.name = name;
    t.shape.assign(a.shape.rbegin(), a.shape.rend());  // numpy [rows, cols] -> ggml [cols, rows]
    const bool half = type == "F16" && a.shape.size() == 2;
    t.type = half ? quant::Type::F16 : quant::Type::F32;
    std::string bytes(a.data.size() * (half ? 2 : 4), '\0');
    auto st = quant::Quantize(t.type, a.data.data(), static_cast<int64_t>(a.data.size()), bytes.data());
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", name.c_str(), std::string(st.message()).c_str());
      return 2;
    }
    blobs.push_back(std::move(bytes));
    t.data = blobs.back();
    tensors.push_back(std::move(t));
  }
  auto st = gguf::WriteFile(out, md, tensors);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  std::printf("wrote %s (%zu tensors)\n", out.c_str(), tensors.size());
  return 0;
}
