// FR-Spec vocabulary trimming (engine/spec/frspec.h): rank order and its tie rule, the ranks
// file's checks, and a trimmed tiny llama whose kept logits equal the untrimmed model's bit for
// bit (same weight rows, same reduction order per output element).
#include "engine/spec/frspec.h"

#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "engine/models/model.h"
#include "engine/quant/quant.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep::spec {
namespace {

using ::testing::HasSubstr;

const std::string kTinyLlama = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/llama/llama.gguf";

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(FrSpecRanks, CountDescendingTiesByIdAscending) {
  TokenCounts c(8);
  ASSERT_TRUE(c.Set(5, 3).ok());
  ASSERT_TRUE(c.Set(2, 3).ok());  // ties with 5: the lower id ranks first
  ASSERT_TRUE(c.Set(7, 1).ok());
  ASSERT_TRUE(c.Set(0, 5).ok());
  EXPECT_EQ(c.total(), 12);
  EXPECT_EQ(c.distinct(), 4);
  // Never-counted ids (1, 3, 4, 6) follow every counted one, by id.
  EXPECT_EQ(RankByCount(c), (std::vector<int32_t>{0, 2, 5, 7, 1, 3, 4, 6}));
  const std::vector<int32_t> ranks = RankByCount(c);
  EXPECT_DOUBLE_EQ(Coverage(c, ranks, 1), 5.0 / 12);
  EXPECT_DOUBLE_EQ(Coverage(c, ranks, 3), 11.0 / 12);
  EXPECT_DOUBLE_EQ(Coverage(c, ranks, 1000), 1.0);  // clamped to the vocabulary
  EXPECT_DOUBLE_EQ(Coverage(TokenCounts(8), ranks, 4), 0.0);
}

TEST(FrSpecRanks, AddCountsAndRejectsOutOfRangeIds) {
  TokenCounts c(4);
  const std::vector<int32_t> ids = {3, 1, 3, 3};
  ASSERT_TRUE(c.Add(ids).ok());
  EXPECT_EQ(RankByCount(c), (std::vector<int32_t>{3, 1, 0, 2}));
  const std::vector<int32_t> bad = {0, 4};
  const absl::Status s = c.Add(bad);
  EXPECT_THAT(Message(s), HasSubstr("token id 4 at index 1"));
  EXPECT_EQ(c.total(), 4);  // a rejected batch counts nothing
  EXPECT_THAT(Message(c.Set(-1, 2)), HasSubstr("token id -1"));
}

TEST(FrSpecRanks, FormatParseRoundTrip) {
  const std::vector<int32_t> ranks = {4, 0, 3, 1, 2};
  const std::string text = FormatRanks(ranks);
  EXPECT_EQ(text, "4\n0\n3\n1\n2\n");
  auto back = ParseRanks(text, 5, 5);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, ranks);
  // CRLF line ends and a missing final line end are accepted.
  auto crlf = ParseRanks("4\r\n0\r\n3", 5, 2);
  ASSERT_TRUE(crlf.ok()) << crlf.status();
  EXPECT_EQ(*crlf, (std::vector<int32_t>{4, 0, 3}));
}

TEST(FrSpecRanks, ParseErrorsNameTheLine) {
  EXPECT_THAT(Message(ParseRanks("1\n2\nx7\n", 10, 1).status()),
              HasSubstr("ranks line 3: \"x7\" is not a token id"));
  EXPECT_THAT(Message(ParseRanks("1\n\n2\n", 10, 1).status()), HasSubstr("ranks line 2: \"\""));
  EXPECT_THAT(Message(ParseRanks("1\n-2\n", 10, 1).status()), HasSubstr("ranks line 2"));
  EXPECT_THAT(Message(ParseRanks("1\n 2\n", 10, 1).status()), HasSubstr("ranks line 2"));
  EXPECT_THAT(Message(ParseRanks("1\n10\n", 10, 1).status()),
              HasSubstr("ranks line 2: id 10 is outside the vocabulary [0, 10)"));
  EXPECT_THAT(Message(ParseRanks("3\n1\n2\n3\n", 10, 1).status()),
              HasSubstr("ranks line 4: id 3 already appeared on line 1"));
  EXPECT_THAT(Message(ParseRanks("3\n1\n", 10, 3).status()),
              HasSubstr("the ranks file has 2 lines, fewer than the 3 ids to keep"));
  EXPECT_THAT(Message(ParseRanks("", 10, 1).status()), HasSubstr("has 0 lines"));
}

// The tiny llama's ids in a seeded shuffled order: a ranking unrelated to id order, so a row
// taken from the wrong place cannot pass by accident.
std::vector<int32_t> ShuffledRanks(int64_t n_vocab, uint32_t seed) {
  std::vector<int32_t> ranks(static_cast<size_t>(n_vocab));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  return ranks;
}

absl::StatusOr<std::unique_ptr<models::Model>> LoadBytes(const std::string& bytes) {
  auto file = gguf::File::FromBytes(bytes);
  if (!file.ok()) return file.status();
  return models::Model::FromFile(std::move(*file));
}

std::vector<float> AllLogits(const models::Model& m, backend::Backend& be,
                             const std::vector<int32_t>& ids) {
  auto logits = models::PromptLogits(m, be, ids, /*all=*/true);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : std::vector<float>{};
}

TEST(FrSpecTrim, TinyLlamaKeptLogitsAreBitIdentical) {
  auto file = gguf::File::Open(kTinyLlama);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->FindTensor("output.weight"), nullptr) << "the tiny llama has tied embeddings";
  auto n_vocab = DraftVocabSize(*file);
  ASSERT_TRUE(n_vocab.ok());
  ASSERT_EQ(*n_vocab, 320);
  const uint32_t seed = 20250301;
  std::printf("[ seed ] %u\n", seed);
  const std::vector<int32_t> ranks = ShuffledRanks(*n_vocab, seed);
  TrimOptions opt;
  opt.n = 64;
  opt.source_name = "llama.gguf";
  auto trimmed = TrimDraft(*file, ranks, opt);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status();
  EXPECT_TRUE(trimmed->summary.tied);
  EXPECT_EQ(trimmed->summary.n_kept, 64);

  auto full = models::Model::Load(kTinyLlama);
  ASSERT_TRUE(full.ok()) << full.status();
  auto small = LoadBytes(trimmed->bytes);
  ASSERT_TRUE(small.ok()) << small.status();
  const models::Weights& w = (*small)->weights();
  EXPECT_EQ(w.output.rows, 64);
  EXPECT_EQ(w.tok_embd.rows, 320);  // the input embedding stays whole
  EXPECT_EQ(w.output_ids, std::vector<int32_t>(ranks.begin(), ranks.begin() + 64));
  const gguf::Value* src = (*small)->file().Find(kTrimSourceKey);
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(src->str, "llama.gguf");
  EXPECT_TRUE(CheckTrimOf(*file, (*small)->file()).ok());

  auto be = backend::MakeBackend("cpu", {1});
  ASSERT_TRUE(be.ok());
  const std::vector<int32_t> tokens = {1, 17, 250, 3, 99, 318, 42};
  const std::vector<float> a = AllLogits(**full, **be, tokens);
  const std::vector<float> b = AllLogits(**small, **be, tokens);
  ASSERT_EQ(a.size(), tokens.size() * 320);
  // The runner places a trimmed head's rows at their token ids (every other logit -inf), so a
  // trimmed draft's logits are indexed by token id like any model's (issue 7: `run` on a
  // trimmed draft once took row numbers for token ids).
  ASSERT_EQ(b.size(), tokens.size() * 320);
  std::vector<bool> kept(320, false);
  for (int32_t id : w.output_ids) kept[id] = true;
  int mismatches = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (size_t id = 0; id < 320; ++id) {
      const float x = kept[id] ? a[t * 320 + id] : -INFINITY, y = b[t * 320 + id];
      if (std::memcmp(&x, &y, sizeof(float)) != 0) {
        if (++mismatches < 5) ADD_FAILURE() << "row " << t << " id " << id << ": " << x << " vs " << y;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(FrSpecTrim, RequantizedHeadHoldsTheReencodedRows) {
  auto file = gguf::File::Open(kTinyLlama);
  ASSERT_TRUE(file.ok()) << file.status();
  const gguf::TensorInfo* emb = file->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  const int64_t n_embd = emb->shape[0];
  const std::vector<int32_t> ranks = ShuffledRanks(320, 7);
  TrimOptions opt;
  opt.n = 16;
  opt.type = quant::Type::Q8_0;
  auto trimmed = TrimDraft(*file, ranks, opt);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status();
  auto out = gguf::File::FromBytes(trimmed->bytes);
  ASSERT_TRUE(out.ok());
  const gguf::TensorInfo* head = out->FindTensor("output.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->type, quant::Type::Q8_0);
  EXPECT_EQ(head->shape, (std::vector<int64_t>{n_embd, 16}));
  const quant::TypeTraits src = quant::Traits(emb->type), dst = quant::Traits(quant::Type::Q8_0);
  const size_t src_row = n_embd / src.block_size * src.type_size;
  const size_t dst_row = n_embd / dst.block_size * dst.type_size;
  std::vector<float> f(n_embd);
  std::string want(dst_row, '\0');
  for (int r = 0; r < 16; ++r) {
    ASSERT_TRUE(quant::Dequantize(emb->type, file->TensorData(*emb) + ranks[r] * src_row, n_embd, f.data()).ok());
    ASSERT_TRUE(quant::Quantize(quant::Type::Q8_0, f.data(), n_embd, want.data()).ok());
    EXPECT_EQ(std::memcmp(out->TensorData(*head) + r * dst_row, want.data(), dst_row), 0) << "row " << r;
  }
  auto model = LoadBytes(trimmed->bytes);
  EXPECT_TRUE(model.ok()) << model.status();
}

TEST(FrSpecTrim, ErrorsNameTheField) {
  auto file = gguf::File::Open(kTinyLlama);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<int32_t> ranks = ShuffledRanks(320, 1);
  TrimOptions opt;
  opt.n = 0;
  EXPECT_THAT(Message(TrimDraft(*file, ranks, opt).status()), HasSubstr("N = 0 must be in [1, 320]"));
  opt.n = 321;
  EXPECT_THAT(Message(TrimDraft(*file, ranks, opt).status()), HasSubstr("N = 321 must be in [1, 320]"));
  opt.n = 64;
  EXPECT_THAT(Message(TrimDraft(*file, std::span(ranks).first(10), opt).status()),
              HasSubstr("has 10 ids, fewer than N = 64"));
  std::vector<int32_t> dup = ranks;
  dup[5] = dup[2];
  EXPECT_THAT(Message(TrimDraft(*file, dup, opt).status()), HasSubstr("ranks[5]"));
  opt.type = quant::Type::Q4_K;  // 256-element blocks; the tiny llama's rows are 64 long
  EXPECT_THAT(Message(TrimDraft(*file, ranks, opt).status()),
              HasSubstr("n_embd 64 is not a multiple of its block size 256"));
  opt.type.reset();
  auto trimmed = TrimDraft(*file, ranks, opt);
  ASSERT_TRUE(trimmed.ok());
  auto again = gguf::File::FromBytes(trimmed->bytes);
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(Message(TrimDraft(*again, ranks, opt).status()), HasSubstr("already trimmed"));
  EXPECT_THAT(Message(CheckTrimOf(*file, *file)), HasSubstr("has no lockstep.trim.ids"));
  EXPECT_THAT(Message(CheckTrimOf(*again, *again)), HasSubstr("the untrimmed draft has"));
}

}  // namespace
}  // namespace lockstep::spec
