// The model loader on crafted files (issue 9): the tiny llama golden GGUF, rewritten with one
// defect each through lockstep's GGUF writer, must be refused with an error that names what is
// wrong (the tensor, the key, the architecture), never load or crash.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/models/model.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

const std::string kTiny = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/llama/llama.gguf";

struct Parts {
  std::vector<gguf::KeyValue> metadata;
  std::vector<gguf::WriteTensor> tensors;
};

// Loads the tiny model rewritten by `edit`; returns the loader's status.
absl::Status LoadEdited(const std::function<void(Parts&)>& edit) {
  auto file = gguf::File::Open(kTiny);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return file.status();
  Parts p;
  p.metadata = file->metadata();
  for (const gguf::TensorInfo& t : file->tensors()) {
    p.tensors.push_back({t.name, t.shape, t.type,
                         std::string_view(reinterpret_cast<const char*>(file->TensorData(t)),
                                          t.n_bytes)});
  }
  edit(p);
  const std::string path = std::filesystem::temp_directory_path() /
                           ("lockstep-loader-" + std::to_string(getpid()) + ".gguf");
  if (absl::Status s = gguf::WriteFile(path, p.metadata, p.tensors); !s.ok()) return s;
  auto model = models::Model::Load(path);
  std::filesystem::remove(path);
  return model.status();
}

void SetKey(Parts& p, const std::string& key, gguf::Value v) {
  for (auto& kv : p.metadata) {
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  }
  p.metadata.push_back({key, std::move(v)});
}

void ExpectError(const absl::Status& s, const std::string& names) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(names), std::string_view::npos) << s;
}

TEST(ModelLoaderErrors, TheUneditedFileLoads) {
  EXPECT_TRUE(LoadEdited([](Parts&) {}).ok());
}

TEST(ModelLoaderErrors, UnknownArchitectureIsNamed) {
  const absl::Status s = LoadEdited([](Parts& p) {
    SetKey(p, "general.architecture", gguf::Value::String("mamba9"));
  });
  ExpectError(s, "mamba9");
}

TEST(ModelLoaderErrors, MissingTensorIsNamed) {
  const absl::Status s = LoadEdited([](Parts& p) {
    std::erase_if(p.tensors,
                  [](const gguf::WriteTensor& t) { return t.name == "blk.1.ffn_up.weight"; });
  });
  ExpectError(s, "blk.1.ffn_up.weight");
}

TEST(ModelLoaderErrors, WrongShapeIsNamed) {
  const absl::Status s = LoadEdited([](Parts& p) {
    for (auto& t : p.tensors) {
      if (t.name == "blk.0.ffn_down.weight") t.shape = {64, 96};  // transposed
    }
  });
  ExpectError(s, "blk.0.ffn_down.weight");
}

TEST(ModelLoaderErrors, MissingHyperparameterIsNamed) {
  const absl::Status s = LoadEdited([](Parts& p) {
    std::erase_if(p.metadata,
                  [](const gguf::KeyValue& kv) { return kv.key == "llama.embedding_length"; });
  });
  ExpectError(s, "llama.embedding_length");
}

TEST(ModelLoaderErrors, ImplausibleHyperparametersAreRefused) {
  ExpectError(LoadEdited([](Parts& p) {
                SetKey(p, "llama.block_count", gguf::Value::Int(gguf::ValueType::UINT32, 100000));
              }),
              "implausible hyperparameters");
  ExpectError(LoadEdited([](Parts& p) {
                SetKey(p, "llama.attention.head_count_kv", gguf::Value::Int(gguf::ValueType::UINT32, 3));
              }),
              "llama.attention.head_count");
  ExpectError(LoadEdited([](Parts& p) {
                SetKey(p, "llama.rope.dimension_count", gguf::Value::Int(gguf::ValueType::UINT32, 17));
              }),
              "llama.rope.dimension_count");
}

TEST(ModelLoaderErrors, MistypedKeyIsNamed) {
  const absl::Status s = LoadEdited([](Parts& p) {
    SetKey(p, "llama.feed_forward_length", gguf::Value::String("96"));
  });
  ExpectError(s, "llama.feed_forward_length");
}

}  // namespace
}  // namespace lockstep
