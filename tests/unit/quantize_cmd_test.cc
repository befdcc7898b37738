// `lockstep quantize` (engine/models/requantize.h): which tensors change and to what, that every
// re-encoded tensor is exactly Quantize(Dequantize(source)), the metadata it rewrites, the
// errors it names, the file it writes, and that a Q8_0 copy of the tiny llama still predicts
// what the F32 model predicts.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/core/compare.h"
#include "engine/models/model.h"
#include "engine/models/requantize.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep {
namespace {

using quant::Type;
namespace fs = std::filesystem;

const std::string kTinyDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/llama/";
const std::string kTiny = kTinyDir + "llama.gguf";

gguf::File OpenTiny() {
  auto f = gguf::File::Open(kTiny);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

absl::StatusOr<gguf::File> RequantizeToFile(const gguf::File& in, models::RequantizeOptions o) {
  if (o.source_name.empty()) o.source_name = "llama.gguf";
  auto r = models::Requantize(in, o);
  if (!r.ok()) return r.status();
  return gguf::File::FromBytes(r->bytes);
}

std::vector<float> DequantizeTensor(const gguf::File& f, const gguf::TensorInfo& t) {
  std::vector<float> out(t.n_elements, NAN);
  const absl::Status s =
      quant::Dequantize(t.type, f.TensorData(t), static_cast<int64_t>(t.n_elements), out.data());
  EXPECT_TRUE(s.ok()) << t.name << ": " << s;
  return out;
}

// Every output tensor against its source: same name, shape and order; a tensor that changed
// type holds exactly Quantize(type, Dequantize(source) * scale2) (one call over the whole tensor,
// whereas the requantizer works a row at a time), and one that did not holds the source bytes.
// Counts the re-encoded tensors in *changed.
void CheckExactRequantization(const gguf::File& src, const gguf::File& out, int* changed) {
  *changed = 0;
  size_t j = 0;
  for (const gguf::TensorInfo& s : src.tensors()) {
    if (absl::EndsWith(s.name, ".scale2") && out.FindTensor(s.name) == nullptr) continue;
    ASSERT_LT(j, out.tensors().size());
    const gguf::TensorInfo& o = out.tensors()[j++];
    SCOPED_TRACE(o.name);
    EXPECT_EQ(o.name, s.name);
    EXPECT_EQ(o.shape, s.shape);
    if (o.type == s.type) {
      ASSERT_EQ(o.n_bytes, s.n_bytes);
      EXPECT_EQ(0, std::memcmp(out.TensorData(o), src.TensorData(s), s.n_bytes));
      continue;
    }
    ++*changed;
    std::vector<float> x = DequantizeTensor(src, s);
    if (const gguf::TensorInfo* s2 = src.FindTensor(s.name + ".scale2")) {
      float scale2;
      std::memcpy(&scale2, src.TensorData(*s2), 4);
      for (float& v : x) v *= scale2;
    }
    auto bytes = gguf::TensorBytes(s.shape, o.type);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(o.n_bytes, *bytes);
    std::string expected(*bytes, '\0');
    ASSERT_TRUE(quant::Quantize(o.type, x.data(), static_cast<int64_t>(x.size()), expected.data())
                    .ok());
    EXPECT_EQ(0, std::memcmp(expected.data(), out.TensorData(o), *bytes)) << "encoded bytes";
    std::vector<float> want(x.size()), got = DequantizeTensor(out, o);
    ASSERT_TRUE(quant::Dequantize(o.type, expected.data(), static_cast<int64_t>(x.size()),
                                  want.data()).ok());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << "dequantized values";
  }
  EXPECT_EQ(j, out.tensors().size());
}

int ExpectExactRequantization(const gguf::File& src, const gguf::File& out) {
  int changed = -1;
  CheckExactRequantization(src, out, &changed);
  return changed;
}

// Metadata equal key by key and in order, except general.file_type and lockstep.requantize.
void ExpectMetadataPreserved(const gguf::File& src, const gguf::File& out, Type type,
                             uint32_t file_type) {
  std::vector<std::string> src_keys, out_keys;
  for (const auto& kv : src.metadata()) {
    if (kv.key == "general.file_type" || kv.key == "lockstep.requantize") continue;
    src_keys.push_back(kv.key);
    const gguf::Value* v = out.Find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->type, kv.value.type) << kv.key;
    EXPECT_EQ(v->u, kv.value.u) << kv.key;
    EXPECT_EQ(v->str, kv.value.str) << kv.key;
    EXPECT_EQ(v->arr.size(), kv.value.arr.size()) << kv.key;
  }
  for (const auto& kv : out.metadata()) {
    if (kv.key == "general.file_type" || kv.key == "lockstep.requantize") continue;
    out_keys.push_back(kv.key);
  }
  EXPECT_EQ(out_keys, src_keys);
  const gguf::Value* ft = out.Find("general.file_type");
  ASSERT_NE(ft, nullptr);
  EXPECT_EQ(ft->AsInt(), file_type);
  const gguf::Value* prov = out.Find("lockstep.requantize");
  ASSERT_NE(prov, nullptr);
  EXPECT_EQ(prov->str, std::string("llama.gguf -> ") + quant::Traits(type).name);
}

struct TinyCase {
  Type type;
  uint32_t file_type;
};

class TinyRequantize : public ::testing::TestWithParam<TinyCase> {};

TEST_P(TinyRequantize, ReencodesEveryWeightExactlyAndKeepsTheRest) {
  const TinyCase& c = GetParam();
  gguf::File src = OpenTiny();
  models::RequantizeOptions o;
  o.type = c.type;
  auto out = RequantizeToFile(src, o);
  ASSERT_TRUE(out.ok()) << out.status();
  int weights = 0;
  for (const gguf::TensorInfo& t : out->tensors()) {
    const bool weight = t.shape.size() == 2;
    weights += weight;
    EXPECT_EQ(t.type, weight ? c.type : src.FindTensor(t.name)->type) << t.name;
  }
  EXPECT_GT(weights, 0);
  EXPECT_EQ(ExpectExactRequantization(src, *out), weights);
  ExpectMetadataPreserved(src, *out, c.type, c.file_type);
  std::printf("[ covered ] %s: %zu tensors, %d re-encoded\n", quant::Traits(c.type).name,
              out->tensors().size(), weights);
}

INSTANTIATE_TEST_SUITE_P(Types, TinyRequantize,
                         ::testing::Values(TinyCase{Type::Q8_0, 7}, TinyCase{Type::Q4_0, 2},
                                           TinyCase{Type::F16, 1}, TinyCase{Type::IQ4_NL, 25}),
                         [](const auto& info) { return quant::Traits(info.param.type).name; });

// The tiny llama's rows are 64 and 96 long: no Q4_K block (256) fits, so Q4_K needs a fallback.
TEST(Requantize, RowLengthNotAMultipleIsAnErrorNamingTensorAndNumbers) {
  gguf::File src = OpenTiny();
  models::RequantizeOptions o;
  o.type = Type::Q4_K;
  auto out = models::Requantize(src, o);
  ASSERT_FALSE(out.ok());
  const std::string msg(out.status().message());
  const gguf::TensorInfo* first = nullptr;  // the first 2-D weight in file order is reported
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (first == nullptr && t.shape.size() == 2) first = &t;
  }
  ASSERT_NE(first, nullptr);
  EXPECT_NE(msg.find("tensor " + first->name + " has rows of " + std::to_string(first->shape[0])),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--fallback"), std::string::npos) << msg;

  o.fallback = Type::Q4_K;  // a fallback that does not fit either
  out = models::Requantize(src, o);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("neither"), std::string::npos) << out.status();
}

TEST(Requantize, FallbackIsUsedAndListed) {
  gguf::File src = OpenTiny();
  models::RequantizeOptions o;
  o.type = Type::Q4_K;
  o.fallback = Type::Q8_0;
  auto r = models::Requantize(src, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto out = gguf::File::FromBytes(r->bytes);
  ASSERT_TRUE(out.ok());
  int weights = 0;
  for (const gguf::TensorInfo& t : out->tensors()) {
    if (t.shape.size() != 2) continue;
    ++weights;
    EXPECT_EQ(t.type, Type::Q8_0) << t.name;
  }
  EXPECT_EQ(static_cast<int>(r->summary.fallback_names.size()), weights);
  EXPECT_EQ(ExpectExactRequantization(src, *out), weights);
  const std::string text = models::DescribeSummary(r->summary, o);
  EXPECT_NE(text.find("fallback Q8_0"), std::string::npos) << text;
  EXPECT_NE(text.find("blk.0.ffn_down.weight"), std::string::npos) << text;
}

TEST(Requantize, TargetTypeNamesAreCheckedWithReasons) {
  auto expect_error = [](const char* name, const char* needle) {
    auto t = models::ParseTargetType(name);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status();
  };
  expect_error("Q9_0", "unknown type \"Q9_0\"");
  expect_error("Q9_0", "Q4_K");             // lists what is writable
  expect_error("Q8_1", "activation-only");
  expect_error("Q8_K", "activation-only");
  expect_error("IQ2_XXS", "cannot encode");
  expect_error("NVFP4", "scale2");
  auto t = models::ParseTargetType("q4_k");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, Type::Q4_K);
  // Options built directly get the same checks.
  models::RequantizeOptions o;
  o.type = Type::Q8_1;
  auto r = models::Requantize(OpenTiny(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("activation-only"), std::string::npos) << r.status();
}

// A synthetic file covering what the tiny llama lacks: a row length that fits Q4_K, an
// already-quantized source (lossy -> lossy), an NVFP4 source with its .scale2, an F16 embedding
// (kept by keep_embeddings), and a source type lockstep cannot decode.
struct Synthetic {
  std::vector<gguf::KeyValue> md;
  std::vector<std::string> blobs;
  std::vector<gguf::WriteTensor> tensors;
  void Add(const std::string& name, std::vector<int64_t> shape, Type type, std::mt19937& rng,
           float scale = 0.05f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::string b(*gguf::TensorBytes(shape, type), '\0');
    EXPECT_TRUE(quant::Quantize(type, x.data(), n, b.data()).ok()) << name;
    blobs.push_back(std::move(b));
    tensors.push_back({name, std::move(shape), type, {}});
  }
  gguf::File Build() {
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = blobs[i];
    auto bytes = gguf::Serialize(md, tensors);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    auto f = gguf::File::FromBytes(*bytes);
    EXPECT_TRUE(f.ok()) << f.status();
    return *std::move(f);
  }
};

gguf::File MakeSynthetic(uint32_t seed) {
  std::printf("[ seed    ] %u\n", seed);
  std::mt19937 rng(seed);
  Synthetic s;
  s.md = {{"general.architecture", gguf::Value::String("llama")},
          {"general.file_type", gguf::Value::U32(3)}};
  s.Add("token_embd.weight", {256, 4}, Type::F16, rng);
  s.Add("a.weight", {256, 3}, Type::F32, rng);
  s.Add("b.weight", {512, 2}, Type::Q4_1, rng);
  s.Add("c.weight", {256, 2}, Type::NVFP4, rng, 50.0f);
  s.blobs.push_back(std::string("\x0a\xd7\x23\x3c", 4));  // 0.01f, little-endian
  s.tensors.push_back({"c.weight.scale2", {1}, Type::F32, {}});
  s.Add("d.weight", {96, 2}, Type::F32, rng);
  s.Add("n.weight", {256}, Type::F32, rng);
  return s.Build();
}

TEST(Requantize, SyntheticQ4KCoversLossyNvfp4FallbackAndKeepEmbeddings) {
  gguf::File src = MakeSynthetic(20261203);
  models::RequantizeOptions o;
  o.type = Type::Q4_K;
  o.fallback = Type::Q8_0;
  o.keep_embeddings = true;
  o.source_name = "llama.gguf";
  std::vector<std::string> lines;
  o.progress = [&](const std::string& l) { lines.push_back(l); };
  auto r = models::Requantize(src, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto out = gguf::File::FromBytes(r->bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  auto type_of = [&](const char* n) {
    const gguf::TensorInfo* t = out->FindTensor(n);
    return t == nullptr ? Type::I64 : t->type;  // I64 marks "absent"
  };
  EXPECT_EQ(type_of("token_embd.weight"), Type::F16);
  EXPECT_EQ(type_of("a.weight"), Type::Q4_K);
  EXPECT_EQ(type_of("b.weight"), Type::Q4_K);
  EXPECT_EQ(type_of("c.weight"), Type::Q4_K);
  EXPECT_EQ(type_of("c.weight.scale2"), Type::I64);  // folded into c.weight, then dropped
  EXPECT_EQ(type_of("d.weight"), Type::Q8_0);
  EXPECT_EQ(type_of("n.weight"), Type::F32);
  EXPECT_EQ(ExpectExactRequantization(src, *out), 4);
  EXPECT_EQ(out->Find("general.file_type")->AsInt(), 15);
  EXPECT_EQ(out->Find("general.file_type")->type, gguf::ValueType::UINT32);
  const models::RequantizeSummary& s = r->summary;
  EXPECT_EQ(s.requantized, 4);
  EXPECT_EQ(s.kept_embeddings, 1);
  EXPECT_EQ(s.kept_not_weight, 1);
  EXPECT_EQ(s.dropped_scale2, 1);
  ASSERT_EQ(s.lossy_to_lossy.size(), 2u);
  EXPECT_EQ(s.lossy_to_lossy[0].first, "b.weight");
  EXPECT_EQ(s.lossy_to_lossy[1].first, "c.weight");
  ASSERT_EQ(lines.size(), src.tensors().size());
  EXPECT_EQ(lines[2], "[3/7] b.weight Q4_1 -> Q4_K");
  const std::string text = models::DescribeSummary(s, o);
  EXPECT_NE(text.find("lossy -> lossy"), std::string::npos) << text;
  EXPECT_NE(text.find("Q4_1: 1"), std::string::npos) << text;

  // Without keep_embeddings the F16 embedding is re-encoded too.
  o.keep_embeddings = false;
  o.progress = nullptr;
  auto all = RequantizeToFile(src, o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->FindTensor("token_embd.weight")->type, Type::Q4_K);
  EXPECT_EQ(ExpectExactRequantization(src, *all), 5);
}

TEST(Requantize, UndecodableSourceIsAnErrorNamingTensorAndType) {
  Synthetic s;
  std::mt19937 rng(1);
  s.Add("a.weight", {32, 2}, Type::F32, rng);
  s.blobs.push_back(std::string(66, '\0'));  // one IQ2_XXS block
  s.tensors.push_back({"x.weight", {256, 1}, Type::IQ2_XXS, {}});
  gguf::File src = s.Build();
  models::RequantizeOptions o;
  o.type = Type::Q8_0;
  auto r = models::Requantize(src, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("x.weight has type IQ2_XXS"), std::string::npos)
      << r.status();
}

TEST(RequantizeFile, WritesWholeFileRefusesInPlaceAndLeavesNothingOnError) {
  const fs::path dir = fs::path(::testing::TempDir()) / "quantize_cmd_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string in = (dir / "llama.gguf").string(), out = (dir / "q8.gguf").string();
  fs::copy_file(kTiny, in);
  models::RequantizeOptions o;
  o.type = Type::Q8_0;

  auto same = models::RequantizeFile(in, (dir / "." / "llama.gguf").string(), o);
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("is the input file"), std::string::npos) << same.status();

  auto ok = models::RequantizeFile(in, out, o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->bytes_after, fs::file_size(out));
  EXPECT_EQ(ok->bytes_before, fs::file_size(in));
  auto written = gguf::File::Open(out);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->Find("lockstep.requantize")->str, "llama.gguf -> Q8_0");

  // A refused type leaves the previous output untouched and no temporary file behind.
  const auto before = fs::file_size(out);
  o.type = Type::Q4_K;
  auto bad = models::RequantizeFile(in, out, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(fs::file_size(out), before);
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 2);  // llama.gguf and q8.gguf
  fs::remove_all(dir);
}

// What a Q8_0 copy of the tiny random llama may change. Q8_0 moves each weight by at most half
// a step, amax / 254 of its 32-block; for Gaussian weights (block amax ~2.3 sigma) that is an
// rms error of ~0.5% per weight. Through the 15 matrices a token's logits pass (2 layers x 7,
// plus the tied output) such errors add roughly in quadrature: ~2% rms relative error in the
// logits, NMSE ~4e-4 (measured: 1.5e-4, max |d logit| 0.4). The gates, each with room for that
// and none for a broken requantizer (a wrong scale or row order gives NMSE ~1 and top-1
// agreement near 1/n_vocab = 0.3%):
//   NMSE <= 1e-2 per prompt (25x the estimate);
//   every position whose F32 top-1 leads top-2 by more than kDecisiveMargin = 1.0 (2.5x the
//   measured max |d logit|, so a flip there would be a real fault) agrees;
//   at least 90% of all positions agree (a near-tie may flip; measured 21 of 21).
constexpr double kMaxNmse = 1e-2;
constexpr double kDecisiveMargin = 1.0;
constexpr double kMinTop1 = 0.9;

std::vector<int32_t> ReadPrompt(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).get<std::vector<int32_t>>();
}

std::vector<float> AllLogits(const models::Model& m, backend::Backend& be,
                             const std::vector<int32_t>& ids) {
  auto logits = models::PromptLogits(m, be, ids, /*all=*/true);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : std::vector<float>(ids.size() * m.config().n_vocab, NAN);
}

TEST(Requantize, Q8TinyLlamaPredictsWhatF32Predicts) {
  gguf::File src = OpenTiny();
  models::RequantizeOptions o;
  o.type = Type::Q8_0;
  o.source_name = "llama.gguf";
  auto r = models::Requantize(src, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto q8_file = gguf::File::FromBytes(r->bytes);
  ASSERT_TRUE(q8_file.ok()) << q8_file.status();
  auto q8 = models::Model::FromFile(*std::move(q8_file));
  ASSERT_TRUE(q8.ok()) << q8.status();
  auto f32 = models::Model::Load(kTiny);
  ASSERT_TRUE(f32.ok()) << f32.status();
  auto be = backend::MakeBackend("cpu", {1});
  ASSERT_TRUE(be.ok()) << be.status();
  const int64_t n_vocab = (*f32)->config().n_vocab;
  int64_t positions = 0, agree = 0, decisive = 0, decisive_agree = 0;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> ids =
        ReadPrompt(kTinyDir + "prompt" + std::to_string(i) + ".json");
    const std::vector<float> want = AllLogits(**f32, **be, ids);
    const std::vector<float> got = AllLogits(**q8, **be, ids);
    auto s = compare::Logits(got.data(), want.data(), static_cast<int64_t>(ids.size()), n_vocab,
                             kDecisiveMargin);
    ASSERT_TRUE(s.ok()) << s.status();
    std::printf("prompt %d: %s", i, compare::Describe(*s).c_str());
    EXPECT_EQ(s->nan_a + s->nan_b, 0);
    EXPECT_LE(s->nmse, kMaxNmse);
    positions += s->positions;
    agree += s->top1_agree;
    decisive += s->decisive;
    decisive_agree += s->decisive_agree;
  }
  std::printf("[ covered ] Q8_0 tiny llama on cpu: %lld positions, top-1 agrees on %lld; "
              "%lld decisive (margin %.2f), %lld agree\n",
              static_cast<long long>(positions), static_cast<long long>(agree),
              static_cast<long long>(decisive), kDecisiveMargin,
              static_cast<long long>(decisive_agree));
  EXPECT_EQ(decisive_agree, decisive);
  EXPECT_GE(static_cast<double>(agree), kMinTop1 * static_cast<double>(positions));
}

// MoE and hybrid files (golden/families, written by llama.cpp's converter): the 3-D expert
// stacks are requantized row by row like any matrix, and what llama.cpp's quantizer keeps
// (src/llama-quant.cpp: the router ffn_gate_inp, the GDN ssm_conv1d kernel) stays as it is.
// The Q8_0 MoE model then predicts what the F32 one predicts (the bounds above).
TEST(Requantize, ExpertStacksRequantizedRouterAndConvKept) {
  const std::string fam = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/families/";
  for (const std::string name : {"qwen3_moe", "qwen3_5"}) {
    SCOPED_TRACE(name);
    auto src = gguf::File::Open(fam + name + "/" + name + ".gguf");
    ASSERT_TRUE(src.ok()) << src.status();
    models::RequantizeOptions o;
    o.type = Type::Q8_0;
    o.fallback = Type::F16;
    auto out = RequantizeToFile(*src, o);
    ASSERT_TRUE(out.ok()) << out.status();
    int stacks = 0, kept = 0;
    for (const gguf::TensorInfo& t : out->tensors()) {
      const Type was = src->FindTensor(t.name)->type;
      if (absl::StrContains(t.name, "ffn_gate_inp.weight") ||
          absl::StrContains(t.name, "ssm_conv1d")) {
        EXPECT_EQ(t.type, was) << t.name;
        ++kept;
      } else if (t.shape.size() == 3) {
        EXPECT_EQ(t.type, Type::Q8_0) << t.name;
        ++stacks;
      }
    }
    EXPECT_GT(kept, 0);
    if (name == "qwen3_moe") EXPECT_GT(stacks, 0);
    EXPECT_GT(ExpectExactRequantization(*src, *out), 0);
    auto q8 = models::Model::FromFile(*std::move(out));
    ASSERT_TRUE(q8.ok()) << q8.status();
    if (name != "qwen3_moe") continue;
    auto f32 = models::Model::Load(fam + name + "/" + name + ".gguf");
    ASSERT_TRUE(f32.ok()) << f32.status();
    auto be = backend::MakeBackend("cpu", {1});
    ASSERT_TRUE(be.ok()) << be.status();
    const std::vector<int32_t> ids = ReadPrompt(fam + name + "/prompt2.json");
    const std::vector<float> want = AllLogits(**f32, **be, ids);
    const std::vector<float> got = AllLogits(**q8, **be, ids);
    auto s = compare::Logits(got.data(), want.data(), static_cast<int64_t>(ids.size()),
                             (*f32)->config().n_vocab, kDecisiveMargin);
    ASSERT_TRUE(s.ok()) << s.status();
    std::printf("[ covered ] Q8_0 %s on cpu: %s", name.c_str(), compare::Describe(*s).c_str());
    EXPECT_LE(s->nmse, kMaxNmse);
    EXPECT_EQ(s->decisive_agree, s->decisive);
  }
}

}  // namespace
}  // namespace lockstep
