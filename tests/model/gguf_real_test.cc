// The real models lockstep targets first: parse, check known facts, and byte-identical
// Reserialize. A missing model is a failure (a gate that skipped did not pass).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/gguf/inspect.h"

namespace lockstep::gguf {
namespace {

struct Known {
  const char* file;
  const char* pull_name;  // `lockstep pull <name>` fetches it
  const char* arch;
  int64_t block_count;
  int64_t embedding_length;
  size_t vocab;
  const char* embd_type;  // token_embd.weight's type
};

std::string ModelPath(const Known& k) {
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/lockstep/models/" + k.file;
}

void CheckModel(const Known& k) {
  const std::string path = ModelPath(k);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0)
      << path << " is missing: run `build/bin/lockstep pull " << k.pull_name << "` first";

  timespec t0, t1;  // thread CPU time: a shared machine's load must not fail the speed check
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  auto f = File::Open(path);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  const double s = static_cast<double>(t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_LT(s, 1.0) << "parse took " << s << " s";

  const Value* arch = f->Find("general.architecture");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ(arch->str, k.arch);
  const std::string a = k.arch;
  ASSERT_NE(f->Find(a + ".block_count"), nullptr);
  EXPECT_EQ(f->Find(a + ".block_count")->AsInt(), k.block_count);
  EXPECT_EQ(f->Find(a + ".embedding_length")->AsInt(), k.embedding_length);
  const Value* tokens = f->Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->elem_type, ValueType::STRING);
  EXPECT_EQ(tokens->arr.size(), k.vocab);

  ASSERT_GT(f->tensors().size(), 0u);
  uint64_t bytes = 0;
  for (const TensorInfo& t : f->tensors()) {
    EXPECT_NE(quant::Traits(t.type).name, nullptr) << t.name;
    bytes += t.n_bytes;
  }
  const TensorInfo* embd = f->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{k.embedding_length, static_cast<int64_t>(k.vocab)}));
  EXPECT_STREQ(quant::Traits(embd->type).name, k.embd_type);
  EXPECT_LE(f->data_offset() + bytes, f->file_size());

  auto again = Reserialize(*f);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), f->file_size());
  EXPECT_EQ(std::memcmp(again->data(), f->bytes(), again->size()), 0)
      << "Reserialize is not byte-identical";

  const std::string text = InspectText(*f, false);
  EXPECT_NE(text.find("items)"), std::string::npos);  // the vocabulary is abbreviated
  EXPECT_LT(text.size(), 64u * 1024);
  EXPECT_NO_THROW(InspectJson(*f, false).dump());
  std::printf("%s: %s, %zu keys, %zu tensors, %llu bytes, parsed in %.3f s of CPU, Reserialize "
              "byte-identical\n",
              k.file, k.arch, f->metadata().size(), f->tensors().size(),
              static_cast<unsigned long long>(f->file_size()), s);
}

TEST(GgufReal, SmolLM2_135M_Q4_1) {
  CheckModel({"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m", "llama", 30, 576, 49152,
              "Q8_0"});
}

TEST(GgufReal, Gemma3_270M_Q4_K_M) {
  CheckModel({"gemma-3-270m-q4_k_m.gguf", "gemma3-270m", "gemma3", 18, 640, 262144, "Q8_0"});
}

}  // namespace
}  // namespace lockstep::gguf
