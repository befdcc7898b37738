// Files written by the independent gguf-py writer (tests/data/gguf/make_gguf_py_files.py):
// the reader sees exactly the values and tensor bytes the script recorded in
// gguf_py_files.json, and Reserialize reproduces each file byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/gguf/gguf.h"
#include "nlohmann/json.hpp"

namespace lockstep::gguf {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/data/gguf/";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Fnv1a64(const uint8_t* p, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Compares a parsed value with the script's JSON; counts what it compared.
void ExpectValue(const Value& v, const nlohmann::json& j, const std::string& where, int* n) {
  ++*n;
  switch (v.type) {
    case ValueType::STRING: EXPECT_EQ(v.str, j.get<std::string>()) << where; break;
    case ValueType::BOOL: EXPECT_EQ(v.u != 0, j.get<bool>()) << where; break;
    case ValueType::FLOAT32:
      EXPECT_EQ(static_cast<float>(v.f), j.get<float>()) << where;
      break;
    case ValueType::FLOAT64:
      EXPECT_EQ(v.f, j.get<double>()) << where;
      EXPECT_EQ(std::signbit(v.f), std::signbit(j.get<double>())) << where;
      break;
    case ValueType::ARRAY:
      ASSERT_TRUE(j.is_array()) << where;
      ASSERT_EQ(v.arr.size(), j.size()) << where;
      for (size_t i = 0; i < v.arr.size(); ++i) {
        EXPECT_EQ(v.arr[i].type, v.elem_type) << where;
        ExpectValue(v.arr[i], j[i], where + "[" + std::to_string(i) + "]", n);
      }
      break;
    case ValueType::UINT64:
      EXPECT_EQ(v.u, j.get<uint64_t>()) << where;
      break;
    default: EXPECT_EQ(v.AsInt(), j.get<int64_t>()) << where; break;
  }
}

nlohmann::json Manifest() {
  const std::string text = ReadAll(kDir + "gguf_py_files.json");
  EXPECT_FALSE(text.empty()) << "missing " << kDir << "gguf_py_files.json";
  return nlohmann::json::parse(text);
}

TEST(GgufPyFiles, ValuesTensorsAndByteIdenticalReserialize) {
  const nlohmann::json manifest = Manifest();
  ASSERT_GE(manifest["files"].size(), 4u);
  int files = 0, values = 0, tensors = 0;
  for (const auto& spec : manifest["files"]) {
    const std::string name = spec["file"];
    SCOPED_TRACE(name);
    auto f = File::Open(kDir + name);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->version(), spec["version"].get<uint32_t>());
    EXPECT_EQ(f->alignment(), spec["alignment"].get<uint64_t>());
    EXPECT_EQ(f->file_size(), spec["file_size"].get<uint64_t>());

    const auto& md = spec["metadata"];
    ASSERT_EQ(f->metadata().size(), md.size());
    for (size_t i = 0; i < md.size(); ++i) {
      const KeyValue& kv = f->metadata()[i];
      EXPECT_EQ(kv.key, md[i]["key"].get<std::string>());
      EXPECT_EQ(ValueTypeName(kv.value.type), md[i]["type"].get<std::string>()) << kv.key;
      if (md[i].contains("elem_type")) {
        EXPECT_EQ(ValueTypeName(kv.value.elem_type), md[i]["elem_type"].get<std::string>())
            << kv.key;
      }
      ExpectValue(kv.value, md[i]["value"], kv.key, &values);
    }

    const auto& ts = spec["tensors"];
    ASSERT_EQ(f->tensors().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const TensorInfo& t = f->tensors()[i];
      EXPECT_EQ(t.name, ts[i]["name"].get<std::string>());
      EXPECT_EQ(static_cast<uint32_t>(t.type), ts[i]["type"].get<uint32_t>()) << t.name;
      EXPECT_EQ(t.shape, ts[i]["shape"].get<std::vector<int64_t>>()) << t.name;
      EXPECT_EQ(t.n_bytes, ts[i]["n_bytes"].get<uint64_t>()) << t.name;
      EXPECT_EQ(Fnv1a64(f->TensorData(t), t.n_bytes), ts[i]["fnv1a64"].get<std::string>())
          << t.name;
      ++tensors;
    }

    auto again = Reserialize(*f);
    ASSERT_TRUE(again.ok()) << again.status();
    const std::string original(reinterpret_cast<const char*>(f->bytes()), f->file_size());
    EXPECT_TRUE(*again == original) << "Reserialize differs (" << again->size() << " vs "
                                    << original.size() << " bytes)";
    ++files;
  }
  std::printf("checked %d gguf-py files: %d values, %d tensors, byte-identical Reserialize\n",
              files, values, tensors);
}

// The set covers what the brief asks of it: both versions, custom alignment, nested arrays,
// every value type, quantized tensors, files without tensors.
TEST(GgufPyFiles, CoverageOfTheSet) {
  const nlohmann::json manifest = Manifest();
  std::set<std::string> value_types, elem_types;
  std::set<uint32_t> versions, tensor_types;
  std::set<uint64_t> alignments;
  bool nested = false;
  for (const auto& spec : manifest["files"]) {
    versions.insert(spec["version"].get<uint32_t>());
    alignments.insert(spec["alignment"].get<uint64_t>());
    for (const auto& kv : spec["metadata"]) {
      value_types.insert(kv["type"].get<std::string>());
      if (kv.contains("elem_type")) {
        elem_types.insert(kv["elem_type"].get<std::string>());
        nested |= kv["elem_type"] == "ARRAY";
      }
    }
    for (const auto& t : spec["tensors"]) tensor_types.insert(t["type"].get<uint32_t>());
  }
  EXPECT_EQ(versions, (std::set<uint32_t>{2, 3}));
  EXPECT_EQ(value_types.size(), 13u);
  EXPECT_GE(elem_types.size(), 12u);
  EXPECT_TRUE(nested);
  EXPECT_TRUE(alignments.count(64));
  EXPECT_GE(tensor_types.size(), 8u);
}

}  // namespace
}  // namespace lockstep::gguf
