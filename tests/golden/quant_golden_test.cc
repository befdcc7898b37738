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
#include "nlohmann/json.hpp"

namespace lockstep::quant {
namespace {

const std::string kGoldenDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/quant/";

// SHA-256 (FIPS 180-4), enough to check the manifest without another dependency.
std::string Sha256Hex(const std::string& data) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string msg = data;
  const uint64_t bits = (uint64_t)data.size() * 8;
  msg.push_back((char)0x80);
  while (msg.size() % 64 != 56) msg.push_back(0);
  for (int i = 7; i >= 0; --i) msg.push_back((char)(bits >> (8 * i)));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < msg.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const unsigned char* p = reinterpret_cast<const unsigned char*>(msg.data() + off + 4 * i);
      w[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  char hex[65];
  for (int i = 0; i < 8; ++i) snprintf(hex + 8 * i, 9, "%08x", h[i]);
  return std::string(hex, 64);
}

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

}  // namespace
}  // namespace lockstep::quant
