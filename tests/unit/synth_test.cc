// `lockstep synth` (engine/models/synth.h): tiny synthetic models of every family load and run;
// the bytes depend on the seed and not on the thread count; the quantization mix is llama.cpp's;
// the shape table gives the real models' parameter counts; gguf-py reads what lockstep reads.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/models/synth.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/run_command.h"
#include "nlohmann/json.hpp"

namespace lockstep::models {
namespace {

namespace fs = std::filesystem;
using quant::Type;

SynthOptions Options(const std::string& arch, const std::string& shape, const std::string& quant,
                     uint64_t seed, int threads = 2) {
  SynthOptions o;
  o.arch = arch;
  o.shape = shape;
  o.quant = quant;
  o.seed = seed;
  o.threads = threads;
  return o;
}

std::string Synth(const SynthOptions& o) {
  auto bytes = SynthBytes(o);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

std::string_view TensorBytes(const gguf::File& f, const gguf::TensorInfo& t) {
  return {reinterpret_cast<const char*>(f.TensorData(t)), t.n_bytes};
}

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "synth_test.XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}


using ::lockstep::testing::Ran;
using ::lockstep::testing::RunCommand;

TEST(Synth, TinyModelsOfEveryFamilyLoadTokenizeAndRun) {
  auto be = backend::MakeBackend("cpu", {2});
  ASSERT_TRUE(be.ok()) << be.status();
  for (const char* arch : {"llama", "qwen3", "gemma3"}) {
    for (const char* q : {"q4_k_m", "q8_0", "f16"}) {
      SCOPED_TRACE(std::string(arch) + " " + q);
      auto file = gguf::File::FromBytes(Synth(Options(arch, "tiny", q, 11)));
      ASSERT_TRUE(file.ok()) << file.status();
      auto tok = tokenizer::Tokenizer::FromGguf(*file);
      ASSERT_TRUE(tok.ok()) << tok.status();
      auto model = Model::FromFile(*std::move(file));
      ASSERT_TRUE(model.ok()) << model.status();
      const Config& c = (*model)->config();
      EXPECT_EQ(c.arch, arch);
      EXPECT_EQ(c.n_vocab, 512);
      EXPECT_EQ(tok->vocab_size(), c.n_vocab);
      EXPECT_EQ(c.qk_norm, std::string(arch) != "llama");
      EXPECT_EQ(c.post_norms, std::string(arch) == "gemma3");
      if (std::string(arch) == "gemma3") {
        ASSERT_EQ(c.n_layer, 6);
        for (int il = 0; il < 6; ++il) EXPECT_EQ(c.layers[il].sliding, il != 5) << il;
        EXPECT_EQ(c.layers[0].window, 32);
      }
      // BPE merges and the special tokens work: "hi" is one merged token, BOS comes first, and
      // plain text round-trips.
      const std::string text = "hi there, the end.\n";
      const std::vector<int32_t> ids = tok->Encode(text, /*add_bos=*/true, false);
      ASSERT_GE(ids.size(), 3u);
      EXPECT_EQ(ids[0], tok->bos_id());
      EXPECT_EQ(tok->TokenText(ids[1]), "hi");
      EXPECT_TRUE(tok->IsEndOfTurn(tok->eos_id()));
      auto decoded = tok->Decode(std::span<const int32_t>(ids).subspan(1));
      ASSERT_TRUE(decoded.ok());
      EXPECT_EQ(*decoded, text);

      auto logits = PromptLogits(**model, **be, ids, /*all=*/true);
      ASSERT_TRUE(logits.ok()) << logits.status();
      ASSERT_EQ(logits->size(), ids.size() * 512);
      double sum = 0, sum2 = 0;
      for (float v : *logits) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sum2 += double(v) * v;
      }
      const double n = static_cast<double>(logits->size());
      const double sd = std::sqrt(std::max(0.0, sum2 / n - (sum / n) * (sum / n)));
      EXPECT_GT(sd, 1e-3) << "logits are (nearly) constant";
      EXPECT_LT(sd, 100.0);
      // Positions see different inputs, so their logits differ.
      EXPECT_NE(std::memcmp(logits->data(), logits->data() + 512, 512 * sizeof(float)), 0);
    }
  }
}

TEST(Synth, BytesDependOnTheSeedNotTheThreads) {
  for (const char* arch : {"llama", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string one = Synth(Options(arch, "tiny", "q4_k_m", 5, 1));
    ASSERT_FALSE(one.empty());
    // (EXPECT_TRUE: a failure should not print megabytes of bytes.)
    EXPECT_TRUE(Synth(Options(arch, "tiny", "q4_k_m", 5, 2)) == one) << "threads 2 vs 1";
    EXPECT_TRUE(Synth(Options(arch, "tiny", "q4_k_m", 5, 3)) == one) << "threads 3 vs 1";

    // Another seed changes every tensor's bytes (not just general.name's seed).
    const std::string other = Synth(Options(arch, "tiny", "q4_k_m", 6, 2));
    auto a = gguf::File::FromBytes(one);
    auto b = gguf::File::FromBytes(other);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->tensors().size(), b->tensors().size());
    for (size_t i = 0; i < a->tensors().size(); ++i) {
      const gguf::TensorInfo& ta = a->tensors()[i];
      const gguf::TensorInfo& tb = b->tensors()[i];
      ASSERT_EQ(ta.name, tb.name);
      ASSERT_EQ(ta.type, tb.type);
      EXPECT_TRUE(TensorBytes(*a, ta) != TensorBytes(*b, tb)) << ta.name;
    }
  }
}

TEST(Synth, DrawnValuesHaveTheStatedMeanAndSpread) {
  SynthTensor t{"blk.0.ffn_up.weight", {1 << 16, 4}, Type::F32, 0.5f, 0.25f};
  std::vector<float> row(1 << 16), row2(1 << 16);
  SynthRow(3, t, 0, row);
  SynthRow(3, t, 1, row2);
  double sum = 0, sum2 = 0, sum4 = 0;
  for (float v : row) {
    const double z = (v - 0.5) / 0.25;
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
  }
  const double n = row.size();
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sum2 / n, 1.0, 0.03);
  EXPECT_NEAR(sum4 / n, 2.9, 0.15);  // Irwin-Hall(12): 3 - 1.2/12 = 2.9 (normal: 3)
  EXPECT_NE(row, row2);
  std::vector<float> again(1 << 16);
  SynthRow(3, t, 0, again);
  EXPECT_EQ(row, again);
}

// llama.cpp's Q4_K_M rule, with the layers written out by hand for 32 blocks: use_more_bits is
// i < 4 || i >= 28 || (i - 4) % 3 == 2.
TEST(Synth, Q4KMixIsLlamaCppsRule) {
  const std::set<int> more_bits_32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  auto plan = PlanSynth(Options("llama", "8b", "q4_k_m", 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  int checked = 0;
  for (const SynthTensor& t : plan->tensors) {
    SCOPED_TRACE(t.name);
    Type want = Type::Q4_K;
    int il = -1;
    std::sscanf(t.name.c_str(), "blk.%d.", &il);
    if (t.shape.size() == 1) want = Type::F32;
    else if (t.name == "output.weight") want = Type::Q6_K;
    else if ((t.name.find(".attn_v.") != std::string::npos ||
              t.name.find(".ffn_down.") != std::string::npos) && more_bits_32.count(il) != 0) {
      want = Type::Q6_K;
    }
    EXPECT_EQ(t.type, want);
    ++checked;
  }
  EXPECT_EQ(checked, 1 + 32 * 9 + 2);

  // Tied head: token_embd is quantized as the head. Rows that do not fit 256-element blocks
  // (Gemma-3-1B: n_embd 1152) fall back: Q4_K -> Q5_0, Q6_K -> Q8_0, head -> Q8_0.
  auto tied = PlanSynth(Options("llama", "1b", "q4_k_m", 1));
  ASSERT_TRUE(tied.ok());
  EXPECT_EQ(tied->tensors.front().type, Type::Q6_K);
  EXPECT_NE(tied->tensors.back().name, "output.weight");
  EXPECT_EQ(Q4KMType("token_embd.weight", 1152, 26, true), Type::Q8_0);
  EXPECT_EQ(Q4KMType("blk.0.attn_q.weight", 1152, 26, true), Type::Q5_0);
  EXPECT_EQ(Q4KMType("blk.0.attn_v.weight", 1152, 26, true), Type::Q8_0);   // 0 < 26/8
  EXPECT_EQ(Q4KMType("blk.4.attn_v.weight", 1152, 26, true), Type::Q5_0);
  EXPECT_EQ(Q4KMType("blk.5.attn_v.weight", 1152, 26, true), Type::Q8_0);   // (5-3)%3 == 2
  EXPECT_EQ(Q4KMType("blk.0.ffn_down.weight", 6912, 26, true), Type::Q6_K);
  EXPECT_EQ(Q4KMType("blk.4.ffn_down.weight", 6912, 26, true), Type::Q4_K);
  EXPECT_EQ(Q4KMType("blk.22.ffn_down.weight", 6912, 26, true), Type::Q6_K);  // >= 7*26/8
  EXPECT_EQ(Q4KMType("blk.4.attn_output.weight", 1024, 26, true), Type::Q4_K);

  for (const char* q : {"q8_0", "f16"}) {
    auto p = PlanSynth(Options("qwen3", "1b", q, 1));
    ASSERT_TRUE(p.ok());
    const Type want = std::string(q) == "q8_0" ? Type::Q8_0 : Type::F16;
    for (const SynthTensor& t : p->tensors) {
      EXPECT_EQ(t.type, t.shape.size() == 1 ? Type::F32 : want) << q << " " << t.name;
    }
  }
}

// The table reproduces the real models' parameter counts (embeddings included; an untied head
// counted too).
TEST(Synth, ShapesHaveTheRealModelsParameterCounts) {
  const std::map<std::pair<std::string, std::string>, uint64_t> want = {
      {{"llama", "8b"}, 8030261248ull},   // Llama-3-8B
      {{"llama", "1b"}, 1235814400ull},   // Llama-3.2-1B
      {{"qwen3", "8b"}, 8190735360ull},   // Qwen3-8B
      {{"qwen3", "1b"}, 1720574976ull},   // Qwen3-1.7B (tied: the embeddings counted once)
      {{"gemma3", "1b"}, 999885952ull},   // Gemma-3-1B
  };
  for (const auto& [key, params] : want) {
    auto plan = PlanSynth(Options(key.first, key.second, "q8_0", 1));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->n_params, params) << key.first << " " << key.second;
  }
  // Metadata a loader reads, with llama.cpp's key names.
  auto plan = PlanSynth(Options("gemma3", "8b", "q4_k_m", 42));
  ASSERT_TRUE(plan.ok());
  std::map<std::string, gguf::Value> md;
  for (const gguf::KeyValue& kv : plan->metadata) md[kv.key] = kv.value;
  EXPECT_EQ(md["general.name"].str, "lockstep-synth gemma3-8b-q4_k_m seed 42");
  EXPECT_EQ(md["general.file_type"].AsInt(), 15);
  EXPECT_EQ(md["gemma3.embedding_length"].AsInt(), 2560);
  EXPECT_EQ(md["gemma3.block_count"].AsInt(), 34);
  EXPECT_EQ(md["gemma3.feed_forward_length"].AsInt(), 10240);
  EXPECT_EQ(md["gemma3.attention.head_count"].AsInt(), 8);
  EXPECT_EQ(md["gemma3.attention.head_count_kv"].AsInt(), 4);
  EXPECT_EQ(md["gemma3.attention.key_length"].AsInt(), 256);
  EXPECT_EQ(md["gemma3.attention.sliding_window"].AsInt(), 1024);
  EXPECT_EQ(md["tokenizer.ggml.tokens"].arr.size(), 262208u);
  EXPECT_EQ(md["lockstep.synth.seed"].u, 42u);
}

TEST(Synth, OverridesAndErrorsNameTheValidChoices) {
  SynthOptions o = Options("qwen3", "tiny", "q8_0", 1);
  o.layers = 2;
  o.vocab = 300;
  auto file = gguf::File::FromBytes(Synth(o));
  ASSERT_TRUE(file.ok());
  auto model = Model::FromFile(*std::move(file));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_layer, 2);
  EXPECT_EQ((*model)->config().n_vocab, 300);

  auto message = [](const SynthOptions& bad) {
    auto p = PlanSynth(bad);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string() : std::string(p.status().message());
  };
  EXPECT_NE(message(Options("mistral", "8b", "q8_0", 1)).find("valid: llama, qwen3, gemma3"),
            std::string::npos);
  EXPECT_NE(message(Options("llama", "70b", "q8_0", 1)).find("valid: tiny, 1b, 8b"),
            std::string::npos);
  EXPECT_NE(message(Options("llama", "8b", "q5_k_m", 1)).find("valid: q4_k_m, q8_0, f16"),
            std::string::npos);
  o.vocab = SynthMinVocab() - 1;
  EXPECT_NE(message(o).find("--vocab"), std::string::npos);
  o.vocab = 0;
  o.layers = -1;
  EXPECT_NE(message(o).find("--layers"), std::string::npos);
  // Case does not matter.
  EXPECT_TRUE(PlanSynth(Options("LLaMA", "TINY", "Q4_K_M", 1)).ok());
}

TEST(Synth, WriteGoesThroughATempFileAndNeedsForceToOverwrite) {
  TempDir dir;
  const std::string out = dir / "m.gguf";
  const SynthOptions o = Options("llama", "tiny", "q4_k_m", 9);
  auto s = WriteSynth(o, out, /*force=*/false);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string bytes = ReadAll(out);
  EXPECT_TRUE(bytes == Synth(o));
  EXPECT_EQ(bytes.size(), s->plan.file_bytes);
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"m.gguf"});

  auto again = WriteSynth(Options("llama", "tiny", "q4_k_m", 10), out, /*force=*/false);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("--force"), std::string::npos) << again.status();
  EXPECT_TRUE(ReadAll(out) == bytes) << "overwritten without --force";

  auto forced = WriteSynth(Options("llama", "tiny", "q4_k_m", 10), out, /*force=*/true);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_TRUE(ReadAll(out) != bytes) << "not overwritten with --force";
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"m.gguf"});

  // A failed write leaves neither the output nor the temp file.
  const std::string missing = dir / "no/such/dir/m.gguf";
  EXPECT_FALSE(WriteSynth(o, missing, false).ok());
  EXPECT_EQ(dir.Names(), std::vector<std::string>{"m.gguf"});
}

TEST(Synth, CliWritesAndRefusesWithOneSentence) {
  TempDir dir;
  const std::string bin = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep synth ";
  const std::string out = dir / "c.gguf";
  const std::string args = "--arch gemma3 --shape tiny --quant q8_0 --seed 3 -q --out " + out;
  Ran r = RunCommand(bin + args + " --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(ReadAll(out) == Synth(Options("gemma3", "tiny", "q8_0", 3)))
      << "the CLI (1 thread) and the library (2 threads) wrote different bytes";
  r = RunCommand(bin + args);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("error: " + out + " exists; pass --force to overwrite it"),
            std::string::npos) << r.out;
  r = RunCommand(bin + "--arch falcon --shape tiny --quant f16 --seed 1 --out " + (dir / "x.gguf"));
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("error: unknown architecture \"falcon\"; valid: llama, qwen3, gemma3"),
            std::string::npos) << r.out;
}

// An independent reader (gguf-py, installed into .venv by ci/deps) sees the tensors lockstep's
// reader sees: names, types, shapes, sizes, and the first and last bytes at its offsets.
TEST(Synth, GgufPyReadsTheSameFile) {
  const std::string python = std::string(LOCKSTEP_SOURCE_DIR) + "/.venv/bin/python";
  // make test runs ci/deps, which creates the venv: a missing one fails, it does not skip.
  ASSERT_TRUE(fs::exists(python)) << python << " is missing: run ci/deps";
  TempDir dir;
  const std::string model = dir / "g.gguf";
  ASSERT_TRUE(WriteSynth(Options("gemma3", "tiny", "q4_k_m", 4), model, false).ok());
  const std::string script = dir / "read.py";
  std::ofstream(script) << R"(import json, sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
def hexes(t):
    b = t.data.tobytes()
    return [b[:16].hex(), b[-16:].hex(), len(b)]
print(json.dumps({
    "arch": r.fields["general.architecture"].contents(),
    "tokens": len(r.fields["tokenizer.ggml.tokens"].data),
    "tensors": [[t.name, t.tensor_type.name, [int(x) for x in t.shape]] + hexes(t)
                for t in r.tensors],
}))
)";
  const Ran r = RunCommand(python + " " + script + " " + model);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  auto f = gguf::File::Open(model);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(j["arch"], "gemma3");
  EXPECT_EQ(j["tokens"], 512);
  ASSERT_EQ(j["tensors"].size(), f->tensors().size());
  auto hex = [](std::string_view b) {
    std::string s;
    char buf[3];
    for (unsigned char c : b) {
      std::snprintf(buf, sizeof buf, "%02x", c);
      s += buf;
    }
    return s;
  };
  std::set<std::string> types;
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const gguf::TensorInfo& t = f->tensors()[i];
    const nlohmann::json& p = j["tensors"][i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(p[0], t.name);
    EXPECT_EQ(p[1], quant::Traits(t.type).name);
    EXPECT_EQ(p[2].get<std::vector<int64_t>>(), t.shape);
    const std::string_view data = TensorBytes(*f, t);
    EXPECT_EQ(p[3], hex(data.substr(0, 16)));
    EXPECT_EQ(p[4], hex(data.substr(data.size() - 16)));
    EXPECT_EQ(p[5].get<uint64_t>(), t.n_bytes);
    types.insert(p[1].get<std::string>());
  }
  // The tiny gemma3 q4_k_m has every type the mix can produce.
  EXPECT_EQ(types, (std::set<std::string>{"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}));
}

}  // namespace
}  // namespace lockstep::models
