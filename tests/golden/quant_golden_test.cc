// Dequantize and Quantize against the gguf Python package (golden/quant, written by
// oracle/gen_quant_golden.py; layout in its docstring).
//
// Comparison rule: float outputs must match bit for bit (uint32 patterns), with one exception:
// where the package produced a NaN, any NaN is accepted, and only a NaN. NaN payloads are not
// portable (x86 gives the first NaN operand's payload or the negative default NaN, CUDA a
// canonical 0x7FFFFFFF), and payloads never carry meaning in a weight. Quantized bytes must match
// exactly, NaN payload bits of f16 fields included.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "engine/quant/decode.h"
#include "engine/quant/quant.h"
#include "gtest/gtest.h"
#include "tests/support/golden_manifest.h"
#include "nlohmann/json.hpp"

namespace lockstep::quant {
namespace {

using ::lockstep::testing::Sha256Hex;

const std::string kGoldenDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/quant/";

// SHA-256 (FIPS 180-4), enough to check the manifest without another dependency.

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// One parsed golden file; the sections point into `bytes`.
struct Golden {
  std::string name, bytes;
  uint32_t type_id = 0, block_size = 0, type_size = 0, n_deq = 0, n_q = 0;
  const char* deq_in = nullptr;   // [n_deq * type_size]
  const char* deq_out = nullptr;  // f32 [n_deq * block_size]
  const char* q_in = nullptr;     // f32 [n_q * block_size]
  const char* q_out = nullptr;    // [n_q * type_size]
};

uint32_t U32At(const std::string& s, size_t off) {
  uint32_t v;
  memcpy(&v, s.data() + off, 4);
  return v;
}

// Parses a golden; fails the test (and returns false) on a bad header or size.
bool ParseGolden(const std::string& name, std::string bytes, Golden* g) {
  g->name = name;
  g->bytes = std::move(bytes);
  const std::string& b = g->bytes;
  if (b.size() < 32 || b.compare(0, 4, "LSQG") != 0 || U32At(b, 4) != 1) {
    ADD_FAILURE() << name << ": not an LSQG v1 golden";
    return false;
  }
  g->type_id = U32At(b, 8);
  g->block_size = U32At(b, 12);
  g->type_size = U32At(b, 16);
  g->n_deq = U32At(b, 20);
  g->n_q = U32At(b, 24);
  const size_t need = 32 + (size_t)g->n_deq * (g->type_size + 4 * g->block_size) +
                      (size_t)g->n_q * (g->type_size + 4 * g->block_size);
  if (b.size() != need) {
    ADD_FAILURE() << name << ": size " << b.size() << " but header implies " << need;
    return false;
  }
  g->deq_in = b.data() + 32;
  g->deq_out = g->deq_in + (size_t)g->n_deq * g->type_size;
  g->q_in = g->deq_out + (size_t)g->n_deq * g->block_size * 4;
  g->q_out = g->q_in + (size_t)g->n_q * g->block_size * 4;
  return true;
}

// Expected vs got float bits under the NaN rule above; reports the first few mismatches.
int64_t CountFloatMismatches(const std::string& what, const char* expected, const float* got,
                             int64_t n, uint32_t block_size) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t e, g;
    memcpy(&e, expected + 4 * i, 4);
    memcpy(&g, got + i, 4);
    const bool e_nan = (e & 0x7FFFFFFFu) > 0x7F800000u, g_nan = (g & 0x7FFFFFFFu) > 0x7F800000u;
    if (e_nan ? g_nan : e == g) continue;
    if (++bad <= 5) {
      ADD_FAILURE() << what << ": block " << i / block_size << " element " << i % block_size
                    << ": package 0x" << std::hex << e << " lockstep 0x" << g << std::dec;
    }
  }
  return bad;
}

std::vector<Golden> LoadAllGoldens() {
  std::vector<Golden> out;
  const std::string manifest_text = ReadFile(kGoldenDir + "MANIFEST.json");
  if (manifest_text.empty()) {
    ADD_FAILURE() << "missing " << kGoldenDir << "MANIFEST.json";
    return out;
  }
  const nlohmann::json manifest = nlohmann::json::parse(manifest_text);
  for (const auto& entry : manifest.at("files")) {
    const std::string file = entry.at("file").get<std::string>();
    std::string bytes = ReadFile(kGoldenDir + file);
    const std::string sha = Sha256Hex(bytes);
    if (sha != entry.at("sha256").get<std::string>()) {
      ADD_FAILURE() << file << ": sha256 " << sha << " differs from MANIFEST.json "
                    << entry.at("sha256").get<std::string>() << " (tampered or regenerated)";
      continue;
    }
    Golden g;
    if (ParseGolden(file, std::move(bytes), &g)) out.push_back(std::move(g));
  }
  return out;
}

TEST(QuantGolden, DequantizeAndQuantizeMatchPackage) {
  const std::vector<Golden> goldens = LoadAllGoldens();
  std::set<uint32_t> seen;
  int64_t total_deq_blocks = 0, total_q_blocks = 0;
  for (const Golden& g : goldens) {
    TypeTraits t;
    ASSERT_TRUE(LookupType(g.type_id, &t)) << g.name << ": unknown type id " << g.type_id;
    ASSERT_EQ(t.block_size, g.block_size) << g.name;
    ASSERT_EQ(t.type_size, g.type_size) << g.name;
    seen.insert(g.type_id);
    const Type type = static_cast<Type>(g.type_id);
    const int64_t n_deq = (int64_t)g.n_deq * g.block_size;

    // Host Dequantize over the whole row; output poisoned so an unwritten element fails.
    std::vector<float> out(n_deq, std::nanf(""));
    ASSERT_TRUE(Dequantize(type, g.deq_in, n_deq, out.data()).ok()) << g.name;
    const int64_t bad_row = CountFloatMismatches(std::string(t.name) + " Dequantize", g.deq_out,
                                                 out.data(), n_deq, g.block_size);

    // The block decoder the CUDA kernel runs (DecodeBlock), from 4-byte-aligned storage.
    std::vector<float> aligned((size_t)g.n_deq * g.type_size / 4 + 1);
    memcpy(aligned.data(), g.deq_in, (size_t)g.n_deq * g.type_size);
    std::vector<float> out2(n_deq, std::nanf(""));
    for (int64_t i = 0; i < (int64_t)g.n_deq; ++i) {
      ASSERT_TRUE(DecodeBlock(g.type_id, aligned.data(), i, out2.data() + i * g.block_size));
    }
    const int64_t bad_block = CountFloatMismatches(std::string(t.name) + " DecodeBlock",
                                                   g.deq_out, out2.data(), n_deq, g.block_size);

    int64_t bad_q = 0;
    if (g.n_q > 0) {
      const int64_t n_q = (int64_t)g.n_q * g.block_size;
      std::vector<float> in(n_q);
      memcpy(in.data(), g.q_in, (size_t)n_q * 4);
      std::vector<unsigned char> q((size_t)g.n_q * g.type_size, 0xAB);
      ASSERT_TRUE(Quantize(type, in.data(), n_q, q.data()).ok()) << g.name;
      for (int64_t b = 0; b < (int64_t)g.n_q; ++b) {
        if (memcmp(q.data() + b * g.type_size, g.q_out + b * g.type_size, g.type_size) == 0) continue;
        if (++bad_q <= 5) {
          std::string exp_hex, got_hex;
          char buf[4];
          for (uint32_t k = 0; k < g.type_size && k < 24; ++k) {
            snprintf(buf, sizeof buf, "%02x", (unsigned char)g.q_out[b * g.type_size + k]);
            exp_hex += buf;
            snprintf(buf, sizeof buf, "%02x", q[b * g.type_size + k]);
            got_hex += buf;
          }
          ADD_FAILURE() << t.name << " Quantize block " << b << ": package " << exp_hex
                        << " lockstep " << got_hex;
        }
      }
    }
    printf("[quant golden] %-7s dequant %6u blocks (%lld values): %lld row / %lld block-decoder "
           "mismatches; quantize %6u blocks: %lld mismatches\n",
           t.name, g.n_deq, (long long)n_deq, (long long)bad_row, (long long)bad_block, g.n_q,
           (long long)bad_q);
    total_deq_blocks += g.n_deq;
    total_q_blocks += g.n_q;
  }
  // Every codec type the package implements must be covered: a missing golden is a failure.
  for (uint32_t id = 0; id < 64; ++id) {
    TypeTraits t;
    if (!LookupType(id, &t) || !t.lockstep_codec) continue;
    if (id == (uint32_t)Type::Q8_1 || id == (uint32_t)Type::Q8_K) continue;  // not in gguf-py
    EXPECT_TRUE(seen.count(id)) << "no golden for " << t.name;
  }
  printf("[quant golden] covered %zu types, %lld dequant blocks, %lld quantize blocks "
         "(Q8_1, Q8_K: not in gguf-py; see tests/unit for their references)\n",
         seen.size(), (long long)total_deq_blocks, (long long)total_q_blocks);
}

TEST(QuantGolden, TamperedGoldenIsDetected) {
  const std::string bytes = ReadFile(kGoldenDir + "Q4_0.bin");
  ASSERT_FALSE(bytes.empty());
  std::string tampered = bytes;
  tampered[40] ^= 1;
  EXPECT_NE(Sha256Hex(bytes), Sha256Hex(tampered));
  // Known-answer check of the hash itself (FIPS 180-2 example "abc").
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(QuantDispatch, ErrorsNameTheTypeAndCount) {
  float out[256];
  unsigned char in[512] = {};
  absl::Status s = Dequantize(Type::Q4_K, in, 100, out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Q4_K"), std::string::npos) << s;
  EXPECT_NE(s.message().find("100"), std::string::npos) << s;
  s = Quantize(Type::Q8_0, out, 33, in);
  EXPECT_NE(s.message().find("Q8_0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("33"), std::string::npos) << s;
  s = Dequantize(Type::IQ2_XXS, in, 256, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("IQ2_XXS"), std::string::npos) << s;
  s = Quantize(Type::TQ1_0, out, 256, in);
  EXPECT_NE(s.message().find("TQ1_0"), std::string::npos) << s;
  s = Dequantize(static_cast<Type>(99), in, 32, out);
  EXPECT_NE(s.message().find("99"), std::string::npos) << s;
  EXPECT_FALSE(Dequantize(Type::Q8_0, in, -32, out).ok());
  EXPECT_TRUE(Dequantize(Type::Q8_0, nullptr, 0, nullptr).ok());
}

// Every file of golden/quant hashes to its MANIFEST.json entry and nothing is unlisted.
TEST(QuantGoldenManifest, EveryFileMatchesItsSha256) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/quant";
  for (const std::string& f : ::lockstep::testing::CheckManifest(dir)) {
    ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace lockstep::quant
