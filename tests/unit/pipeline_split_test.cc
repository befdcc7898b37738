// Pipeline stages (docs/pipeline.md) in one process: stage 0 in the test's thread, the other
// stages in threads over LocalStageLinks. A seeded ragged workload (prefill chunks, decode rows,
// verify rows with every row's logits, copy-on-write block copies) runs through the unsplit
// runner and through 2- and 3-stage splits at balanced and random boundaries with 1 to 3
// micro-batches: every f32 logit of every step must be bitwise the unsplit one.
#include <cstring>
#include <random>
#include <thread>

#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/models/runner.h"
#include "engine/models/stage_link.h"
#include "engine/models/stage_wire.h"
#include "gtest/gtest.h"
#include "tests/support/test_seed.h"

namespace lockstep::models {
namespace {

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/";

struct Seq {
  std::vector<int32_t> tokens, blocks;
  int64_t done = 0;  // tokens whose KV is written
};

// The stages of one split: rank 0's runner here, the others serving in threads.
class Split {
 public:
  Split(const Model& m, const RunnerOptions& base, std::vector<int64_t> split, int64_t micro)
      : links_(static_cast<int>(split.size()) - 1) {
    const int n = static_cast<int>(split.size()) - 1;
    for (int r = 0; r < n; ++r) bes_.push_back(*backend::MakeBackend("cpu", {1}));
    for (int r = 1; r < n; ++r) {
      threads_.emplace_back([this, &m, r] { status_[r] = RunStage(m, *bes_[r], links_.rank(r)); });
    }
    RunnerOptions o = base;
    o.split = std::move(split);
    o.link = &links_.rank(0);
    o.micro_batches = micro;
    o.timeout_ms = 30000;
    auto r = Runner::Create(m, *bes_[0], o);
    create_ = r.status();
    if (r.ok()) runner_ = std::move(*r);
  }
  ~Split() {
    runner_.reset();  // sends stop down the chain
    if (!create_.ok()) links_.Close();
    for (auto& t : threads_) t.join();
  }
  Runner* runner() { return runner_.get(); }
  const absl::Status& create_status() const { return create_; }
  LocalStageLinks& links() { return links_; }

 private:
  LocalStageLinks links_;
  std::vector<std::unique_ptr<backend::Backend>> bes_;
  std::vector<std::thread> threads_;
  absl::Status status_[8];
  absl::Status create_;
  std::unique_ptr<Runner> runner_;
};

// Runs `steps` random steps on both runners; returns the number of logits compared.
int64_t RunWorkload(const Model& m, Runner& plain, Runner& split, uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  const int64_t V = m.config().n_vocab, bs = plain.options().block_size;
  std::vector<Seq> seqs(5);
  int32_t next_block = 0;
  for (Seq& s : seqs) {
    const int64_t len = 20 + rng() % 60;
    for (int64_t i = 0; i < len; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % V));
  }
  int64_t compared = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<StepEntry> batch;
    for (Seq& s : seqs) {
      if (rng() % 4 == 0) continue;  // not in this step
      const int64_t left = static_cast<int64_t>(s.tokens.size()) - s.done;
      int64_t n = 0, n_logits = 0;
      if (left > 0) {  // prefill chunk, the last one asks for its next token
        n = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(left, 24));
        n_logits = n == left ? 1 : 0;
      } else {  // a decode row, or a verify row block of 2-5 tokens with every row's logits
        n = rng() % 3 == 0 ? 2 + static_cast<int64_t>(rng() % 4) : 1;
        for (int64_t i = 0; i < n; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % V));
        n_logits = n;
      }
      while (static_cast<int64_t>(s.blocks.size()) * bs < s.done + n) s.blocks.push_back(next_block++);
      batch.push_back({std::span(s.tokens).subspan(s.done, n), s.done, s.blocks, n_logits});
    }
    if (batch.empty()) continue;
    std::vector<float> a, b;
    EXPECT_TRUE(plain.Forward(batch, &a).ok());
    const absl::Status st = split.Forward(batch, &b);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_EQ(a.size(), b.size());
    if (a.size() == b.size() && !a.empty()) {
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "step " << step << ": split logits differ from unsplit";
    }
    compared += static_cast<int64_t>(a.size());
    for (StepEntry& e : batch) {
      for (Seq& s : seqs) {
        if (e.tokens.data() == s.tokens.data() + s.done) s.done += static_cast<int64_t>(e.tokens.size());
      }
    }
    // Copy-on-write: a new block gets a copy of a written one, on every stage.
    if (step % 5 == 4 && next_block + 1 < plain.options().n_blocks) {
      const int32_t src = static_cast<int32_t>(rng() % std::max(1, next_block)), dst = next_block++;
      EXPECT_TRUE(plain.CopyBlock(src, dst).ok());
      EXPECT_TRUE(split.CopyBlock(src, dst).ok());
    }
  }
  return compared;
}

class PipelineSplit : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineSplit, EveryLogitOfEveryStepIsBitwiseTheUnsplitOne) {
  auto model = Model::Load(kDir + GetParam() + "/" + GetParam() + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const int64_t L = m.config().n_layer;  // tiny llama and qwen3 have 2 layers, gemma3 has 6
  ASSERT_GE(L, 2);
  RunnerOptions base;
  base.max_step_tokens = 160;
  base.max_logit_rows = 64;
  base.block_size = 8;
  base.n_blocks = 256;
  const uint64_t seed = lockstep::testing::RunSeed();
  std::mt19937_64 rng(seed);
  auto be = backend::MakeBackend("cpu", {1});
  ASSERT_TRUE(be.ok());
  int64_t total = 0;
  for (int64_t stages : {2, 3}) {
    if (stages > L) continue;
    auto balanced = BalancedSplit(m, stages);
    ASSERT_TRUE(balanced.ok()) << balanced.status();
    std::vector<int64_t> random = {0};
    for (int64_t s = 1; s < stages; ++s) {
      const int64_t lo = random.back() + 1, hi = L - (stages - s);
      random.push_back(lo + static_cast<int64_t>(rng() % (hi - lo + 1)));
    }
    random.push_back(L);
    for (const auto& split : {*balanced, random}) {
      for (int64_t micro : {1, 2, 3}) {
        auto plain = Runner::Create(m, **be, base);
        ASSERT_TRUE(plain.ok()) << plain.status();
        Split sp(m, base, split, micro);
        ASSERT_TRUE(sp.create_status().ok()) << sp.create_status();
        ASSERT_EQ(sp.runner()->stage_lines().size(), static_cast<size_t>(stages));
        const int64_t n = RunWorkload(m, **plain, *sp.runner(), seed + stages * 10 + micro, 24);
        EXPECT_GT(n, 0);
        total += n;
      }
    }
  }
  std::printf("[ pipeline ] %s: %lld logits compared bitwise, seed %llu\n", GetParam().c_str(),
              static_cast<long long>(total), static_cast<unsigned long long>(seed));
}

INSTANTIATE_TEST_SUITE_P(Tiny, PipelineSplit, ::testing::Values("llama", "qwen3", "gemma3"));

TEST(PipelineSplit, BadSplitsAreRefusedNamingTheirEntry) {
  auto model = Model::Load(kDir + "llama/llama.gguf");
  ASSERT_TRUE(model.ok());
  const int64_t L = (*model)->config().n_layer;
  EXPECT_FALSE(ParseSplit("0", L, 2).ok());
  EXPECT_FALSE(ParseSplit(std::to_string(L), L, 2).ok());
  EXPECT_FALSE(ParseSplit("1,1", L, 3).ok());
  EXPECT_FALSE(ParseSplit("x", L, 2).ok());
  const auto wrong_count = ParseSplit("1", L, 3);
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(wrong_count.status().message().find("--pp-stages asks for 3"), std::string::npos);
  auto ok = ParseSplit("1", L, 2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (std::vector<int64_t>{0, 1, L}));
  EXPECT_FALSE(BalancedSplit(**model, L + 1).ok());
  EXPECT_FALSE(BalancedSplit(**model, 1).ok());
  auto b = BalancedSplit(**model, L);  // one layer per stage
  ASSERT_TRUE(b.ok());
  for (int64_t i = 0; i <= L; ++i) EXPECT_EQ((*b)[i], i);
}

TEST(PipelineSplit, ADeadStageEndsTheStepWithAnErrorNotAHang) {
  auto model = Model::Load(kDir + "llama/llama.gguf");
  ASSERT_TRUE(model.ok());
  RunnerOptions base;
  base.max_step_tokens = 16;
  base.max_logit_rows = 16;
  base.block_size = 8;
  base.n_blocks = 8;
  Split sp(**model, base, {0, 1, (*model)->config().n_layer}, 1);
  ASSERT_TRUE(sp.create_status().ok()) << sp.create_status();
  sp.links().Close();  // stage 1 is gone
  std::vector<int32_t> toks = {1, 2, 3}, blocks = {0};
  StepEntry e{toks, 0, blocks, 1};
  std::vector<float> logits;
  const absl::Status st = sp.runner()->Forward(std::span(&e, 1), &logits);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("stage 1"), std::string::npos) << st;
}

TEST(PipelineSplit, AGarbledMessageComesBackAsAnErrorNamingTheStage) {
  auto model = Model::Load(kDir + "gemma3/gemma3.gguf");
  ASSERT_TRUE(model.ok());
  const int64_t L = (*model)->config().n_layer;
  LocalStageLinks links(3);
  auto be1 = backend::MakeBackend("cpu", {1});
  auto be2 = backend::MakeBackend("cpu", {1});
  std::thread t1([&] { (void)RunStage(**model, **be1, links.rank(1)); });
  std::thread t2([&] { (void)RunStage(**model, **be2, links.rank(2)); });
  wire::Message cfg;
  cfg.kind = wire::Kind::kConfig;
  cfg.config = {16, 16, 8, 8, 0, 0, 1, 30000, {0, 2, 4, L}};
  ASSERT_TRUE(links.rank(0).Send(1, wire::Encode(cfg)).ok());
  for (int r = 1; r < 3; ++r) {
    auto hello = links.rank(0).Recv(r, 30000);
    ASSERT_TRUE(hello.ok()) << hello.status();
    auto h = wire::Decode(*hello);
    ASSERT_TRUE(h.ok() && h->kind == wire::Kind::kHello) << (h.ok() ? h->text : "undecodable");
  }
  ASSERT_TRUE(links.rank(0).Send(1, {3, 0, 0, 0, 9}).ok());  // kForward, then 1 stray byte
  auto reply = links.rank(0).Recv(2, 30000);
  ASSERT_TRUE(reply.ok()) << reply.status();
  auto m = wire::Decode(*reply);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, wire::Kind::kError);
  EXPECT_NE(m->text.find("stage 1: from stage 0: stage message"), std::string::npos) << m->text;
  EXPECT_NE(m->text.find("byte 4"), std::string::npos) << m->text;
  wire::Message stop;
  stop.kind = wire::Kind::kStop;
  ASSERT_TRUE(links.rank(0).Send(1, wire::Encode(stop)).ok());
  t1.join();
  t2.join();
}

TEST(StageWire, EveryKindRoundTripsAndEveryTruncationIsAnError) {
  std::vector<wire::Message> ms(6);
  ms[5].kind = wire::Kind::kPing;
  ms[5].rows = 1;
  ms[5].cols = 2;
  ms[5].floats = {1, 1};
  ms[0].kind = wire::Kind::kConfig;
  ms[0].config = {256, 64, 16, 100, 1, 2, 3, 5000, {0, 4, 9, 30}};
  ms[1].kind = wire::Kind::kHello;
  ms[1].text = "stage1=host:cpu layers [4, 9)";
  ms[2].kind = wire::Kind::kForward;
  ms[2].entries = {{{1, 2, 3}, {7}, 5, 1}, {{4}, {2, 3}, 17, 1}};
  ms[2].rows = 4;
  ms[2].cols = 2;
  ms[2].floats = {1, 2, 3, 4, 5, 6, 7, -0.0f};
  ms[3].kind = wire::Kind::kCopy;
  ms[3].src = 3;
  ms[3].dst = 9;
  ms[4].kind = wire::Kind::kLogits;
  ms[4].rows = 1;
  ms[4].cols = 3;
  ms[4].floats = {0.5f, -INFINITY, 2};
  for (const wire::Message& m : ms) {
    const std::vector<uint8_t> b = wire::Encode(m);
    auto back = wire::Decode(b);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(wire::Encode(*back), b);
    for (size_t cut = 0; cut < b.size(); ++cut) {
      EXPECT_FALSE(wire::Decode(std::span(b.data(), cut)).ok()) << "kind "
          << static_cast<int>(m.kind) << " cut at " << cut;
    }
  }
}

}  // namespace
}  // namespace lockstep::models
