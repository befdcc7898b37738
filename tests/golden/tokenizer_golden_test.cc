// Tokenizer goldens: every corpus string of golden/tokenizer/<model>.json (Hugging Face
// `tokenizers` ids, oracle/gen_tokenizer_golden.py) must encode to exactly the same ids, with and
// without special-token parsing, and decode back to the same bytes. Needs the real model files
// in the cache; an absent file fails (with the `lockstep pull` line to fix it), never skips.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/store/model_store.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/golden_manifest.h"
#include "nlohmann/json.hpp"

namespace lockstep::tokenizer {
namespace {

std::string Describe(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += std::to_string(id) + ":" + tok.TokenText(id) + " ";
  return out;
}

nlohmann::json ReadGolden(const std::string& file) {
  const std::string path = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tokenizer/" + file;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

void CheckGolden(const std::string& name, const std::string& end_of_turn) {
  const store::KnownModel* known = store::FindKnownModel(name);
  ASSERT_NE(known, nullptr) << name << " is not a known model";
  const std::string path = store::CachedPath(*known);
  if (!std::filesystem::exists(path)) {
    FAIL() << "model file " << path << " is absent; run `build/bin/lockstep pull " << name
           << "` (the tokenizer golden needs the real vocabulary)";
  }
  const nlohmann::json golden = ReadGolden(name + ".json");
  ASSERT_FALSE(golden.is_null());
  ASSERT_EQ(golden["model_sha256"].get<std::string>(), known->sha256)
      << name << ".json was generated from a different file than " << name
      << " names; rerun oracle/gen_tokenizer_golden.py";

  absl::StatusOr<gguf::File> file = gguf::File::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->add_bos_default(), golden["tokenizer"]["add_bos"].get<bool>());
  EXPECT_EQ(tok->vocab_size(), golden["tokenizer"]["vocab_size"].get<int32_t>());

  EXPECT_TRUE(tok->IsEndOfTurn(tok->FindToken(end_of_turn))) << end_of_turn;
  EXPECT_TRUE(tok->IsEndOfTurn(tok->eos_id()));

  size_t n_strings = 0, n_tokens = 0, n_roundtrip = 0, n_exempt = 0;
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string text = c["text"].get<std::string>();
    for (const bool parse_special : {true, false}) {
      const auto want =
          c[parse_special ? "ids_parse_special" : "ids_plain"].get<std::vector<int32_t>>();
      const std::vector<int32_t> got = tok->Encode(text, tok->add_bos_default(), parse_special);
      EXPECT_EQ(got, want) << name << " parse_special=" << parse_special << " text=\"" << text
                           << "\"\n  got:  " << Describe(*tok, got)
                           << "\n  want: " << Describe(*tok, want);
      n_tokens += want.size();
      // Decode without the BOS Encode added.
      const size_t skip = tok->add_bos_default() && !got.empty() ? 1 : 0;
      absl::StatusOr<std::string> back =
          tok->Decode(std::span<const int32_t>(got).subspan(skip));
      ASSERT_TRUE(back.ok()) << back.status();
      // The exceptions (RoundTrips() says which): SmolLM2 has no symbol for 21 bytes, which
      // Encode drops like HF; Gemma decodes a literal U+2581 as a space like HF.
      if (!tok->RoundTrips(text)) {
        ++n_exempt;
      } else {
        EXPECT_EQ(*back, text) << name << " parse_special=" << parse_special;
        ++n_roundtrip;
      }
    }
    ++n_strings;
  }
  std::printf("[%s] %zu strings x {parse_special, plain}: %zu tokens matched exactly; "
              "%zu decode round trips checked, %zu exempt (RoundTrips() false)\n",
              name.c_str(), n_strings, n_tokens, n_roundtrip, n_exempt);

  // Throughput on real text: ~1 MB of the corpus, encoded once. Quadratic merging of a long
  // word would take minutes here; the bound leaves room for sanitizer builds. Only the cases
  // that round-trip are joined, so the round trip below is asserted, not excused (issue 9:
  // joining every case made RoundTrips(big) false and the check a tautology).
  std::string big;
  size_t joined = 0;
  while (big.size() < (1u << 20)) {
    for (const nlohmann::json& c : golden["cases"]) {
      const std::string text = c["text"].get<std::string>();
      if (!tok->RoundTrips(text)) continue;
      big += text + "\n";
      ++joined;
    }
    ASSERT_GT(joined, 0u) << "no corpus case round-trips";
  }
  ASSERT_TRUE(tok->RoundTrips(big));
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->Encode(big, false, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[%s] encoded %zu bytes into %zu tokens in %.3f s\n", name.c_str(), big.size(),
              ids.size(), s);
  EXPECT_LT(s, 10.0);
  absl::StatusOr<std::string> back = tok->Decode(ids);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == big) << "the joined round-tripping corpus did not decode to itself";
}

// The hand-written pre-tokenizer matchers against the `tokenizers` regex engine
// (golden/tokenizer/pretokenize.json), so Llama 3 and Qwen2 splits are pinned without a model.
TEST(TokenizerGolden, PreTokenizerRegexes) {
  const nlohmann::json golden = ReadGolden("pretokenize.json");
  ASSERT_FALSE(golden.is_null());
  const PreTokenizer kinds[] = {PreTokenizer::kGpt2, PreTokenizer::kGpt2IsolatedDigits,
                                PreTokenizer::kLlama3, PreTokenizer::kQwen2};
  size_t n_words = 0, n_checks = 0;
  std::vector<std::string_view> words;
  for (const nlohmann::json& c : golden["cases"]) {
    const std::string text = c["text"].get<std::string>();
    for (PreTokenizer kind : kinds) {
      const auto want = c["words"][PreTokenizerName(kind)].get<std::vector<std::string>>();
      SplitWords(text, kind, &words);
      EXPECT_EQ(std::vector<std::string>(words.begin(), words.end()), want)
          << PreTokenizerName(kind) << " text=\"" << text << "\"";
      n_words += want.size();
      ++n_checks;
    }
  }
  std::printf("[pretokenize] %zu (string, pre-tokenizer) pairs, %zu words matched; Unicode "
              "tables %s\n", n_checks, n_words, kUnicodeTablesVersion);
}

TEST(TokenizerGolden, SmolLM2ByteLevelBpe) { CheckGolden("smollm2-135m", "<|im_end|>"); }
TEST(TokenizerGolden, Gemma3SentencePieceBpe) { CheckGolden("gemma3-270m", "<end_of_turn>"); }

// Every file of golden/tokenizer hashes to its MANIFEST.json entry and nothing is unlisted.
TEST(TokenizerGoldenManifest, EveryFileMatchesItsSha256) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tokenizer";
  for (const std::string& f : ::lockstep::testing::CheckManifest(dir)) {
    ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace lockstep::tokenizer
