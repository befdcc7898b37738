// `lockstep run` as a user runs it: the binary, its exit code, its stdout and stderr. Needs the
// cached SmolLM2 (make models); a missing model fails, it does not skip.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/spec/frspec.h"
#include "engine/store/model_store.h"
#include "gtest/gtest.h"
#include "tests/support/run_command.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace {


using ::lockstep::testing::Ran;
using ::lockstep::testing::RunLockstep;

std::string SmolPath() {
  const store::KnownModel& m = store::DefaultModel();
  EXPECT_TRUE(store::IsCached(m)) << store::CachedPath(m) << " is missing: run `make models`";
  return store::CachedPath(m);
}

// Issue 7: the stats line once came out glued to the last word when stdout and stderr shared a
// pipe (the closing newline sat in stdout's buffer while stderr was written).
TEST(CliRun, StatsLineStartsOnItsOwnLine) {
  const Ran r = RunLockstep("run " + SmolPath() + " --prompt 'The capital of France is' -n 6");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t stats = r.out.find("prefill:");
  ASSERT_NE(stats, std::string::npos) << r.out;
  ASSERT_GT(stats, 0u);
  EXPECT_EQ(r.out[stats - 1], '\n') << r.out;
}

// Issue 7: plain and speculative decoding refuse prompt + max_tokens beyond the context with
// the same sentence (one loop, one rule).
TEST(CliRun, ContextLimitIsOneRuleForEveryMode) {
  const std::string base = "run " + SmolPath() + " --prompt 'Hello there' --ctx 32 -n 40";
  const Ran plain = RunLockstep(base);
  const Ran spec = RunLockstep(base + " --ngram --spec-k 4");
  EXPECT_EQ(plain.exit_code, 2) << plain.out;
  EXPECT_EQ(spec.exit_code, 2) << spec.out;
  EXPECT_NE(plain.out.find("exceeds the context length 32"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out, spec.out);
}

// Issue 7: `run` on a trimmed-head draft once emitted logits row numbers as token ids. Every
// generated token must be one the trimmed head kept (ids are shuffled, so row numbers are not).
TEST(CliRun, TrimmedDraftEmitsOnlyKeptTokenIds) {
  auto file = gguf::File::Open(SmolPath());
  ASSERT_TRUE(file.ok()) << file.status();
  auto n_vocab = spec::DraftVocabSize(*file);
  ASSERT_TRUE(n_vocab.ok());
  std::vector<int32_t> ranks(*n_vocab);
  std::iota(ranks.begin(), ranks.end(), 0);
  std::mt19937 rng(20261203);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  spec::TrimOptions opt;
  opt.n = 2000;
  auto trimmed = spec::TrimDraft(*file, ranks, opt);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status();
  const std::string path =
      (std::filesystem::temp_directory_path() / "lockstep-cli-trimmed.gguf").string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(trimmed->bytes.data(), static_cast<std::streamsize>(trimmed->bytes.size()));
  }
  const Ran r = RunLockstep("run " + path + " --prompt 'Once upon a time' -n 16 --json");
  std::filesystem::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const std::vector<int32_t> kept(ranks.begin(), ranks.begin() + opt.n);
  ASSERT_FALSE(j["tokens"].empty());
  for (int32_t t : j["tokens"].get<std::vector<int32_t>>()) {
    EXPECT_NE(std::find(kept.begin(), kept.end(), t), kept.end()) << "token " << t << " was trimmed";
  }
}

TEST(CliRun, PromptFromStdinAndFileEqualsArgument) {
  const std::string m = SmolPath();
  const std::string path =
      (std::filesystem::temp_directory_path() / "lockstep-cli-prompt.txt").string();
  {
    std::ofstream out(path);
    out << "Once upon a time there was";
  }
  const Ran arg = RunLockstep("run " + m + " --prompt 'Once upon a time there was' -n 8 --json");
  const Ran file = RunLockstep("run " + m + " --prompt-file " + path + " -n 8 --json");
  const Ran in = RunLockstep("run " + m + " -n 8 --json < " + path);
  std::filesystem::remove(path);
  ASSERT_EQ(arg.exit_code, 0) << arg.out;
  const nlohmann::json a = nlohmann::json::parse(arg.out);
  EXPECT_FALSE(a["tokens"].empty());
  EXPECT_EQ(nlohmann::json::parse(file.out)["tokens"], a["tokens"]) << file.out;
  EXPECT_EQ(nlohmann::json::parse(in.out)["tokens"], a["tokens"]) << in.out;
}

TEST(CliRun, BadKvFormatNamesTheFlag) {
  const Ran r = RunLockstep("run " + SmolPath() + " --prompt x --kv-k q7");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--kv-k"), std::string::npos) << r.out;
}

// Pipeline launches that do not match --pp-stages stop with a sentence (docs/pipeline.md):
// nothing runs unsplit in their place.
TEST(CliRun, PipelineLaunchThatDoesNotMatchIsRefused) {
  const std::string run = " run " + SmolPath() + " --prompt x -n 2";
  const std::string mpi = "mpirun --allow-run-as-root --oversubscribe -np ";
  Ran r = RunLockstep(run.substr(1) + " --pp-stages 2");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--pp-stages 2 needs 2 processes; this one was not started by a launcher"),
            std::string::npos) << r.out;
  const std::string bin = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep";
  r = ::lockstep::testing::RunCommand(mpi + "3 " + bin + run + " --pp-stages 2");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("the launcher started 3"), std::string::npos) << r.out;
  r = ::lockstep::testing::RunCommand(mpi + "2 " + bin + run);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--pp-stages is 1: pass --pp-stages 2"), std::string::npos) << r.out;
  r = ::lockstep::testing::RunCommand(mpi + "2 " + bin + run + " --pp-stages 2 --pp-split 30");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--pp-split entry 1 '30'"), std::string::npos) << r.out;
}

// `lockstep bench --json` gives every rep's figure beside the median it reports, so a
// performance table can state the spread (docs/performance.md).
TEST(CliRun, BenchJsonGivesEveryRepBesideItsMedian) {
  const Ran r = RunLockstep("bench " + SmolPath() +
                            " --json --reps 3 --prompt-tokens 8 --gen-tokens 4 --concurrency 1,2 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t a = r.out.find('{'), b = r.out.rfind('}');
  ASSERT_NE(a, std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(a, b - a + 1), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];  // 3 reps
  };
  const auto bw = j["read_bandwidth_GBps_reps"].get<std::vector<double>>();
  ASSERT_EQ(bw.size(), 3u);
  EXPECT_DOUBLE_EQ(j["read_bandwidth_GBps"].get<double>(), median(bw));
  ASSERT_EQ(j["by_concurrency"].size(), 2u);
  for (const auto& c : j["by_concurrency"]) {
    const auto pre = c["prefill_tok_s_reps"].get<std::vector<double>>();
    const auto dec = c["decode_tok_s_reps"].get<std::vector<double>>();
    ASSERT_EQ(pre.size(), 3u);
    ASSERT_EQ(dec.size(), 3u);
    EXPECT_DOUBLE_EQ(c["prefill_tok_s"].get<double>(), median(pre));
    EXPECT_DOUBLE_EQ(c["decode_tok_s"].get<double>(), median(dec));
    for (double d : dec) EXPECT_GT(d, 0.0);
  }
}

}  // namespace
}  // namespace lockstep
