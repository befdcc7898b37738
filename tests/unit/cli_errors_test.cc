// The lockstep binary on bad input, as a user or a gate script runs it: exit code and message
// (issue 9). Each case failed before its fix:
//   - compare: `--max-nmse -1`, `--max-nmse nan` and `--min-top1 nan` printed PASS with exit 0
//     on all-different logits; a shape mismatch did not name the shapes;
//   - logits --dump-layers on a file or an unwritable path aborted (uncaught filesystem_error,
//     exit 134);
//   - --seed -5 and seeds beyond 64 bits were accepted and wrapped;
//   - an unknown subcommand got "A subcommand is required".
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "engine/core/npy.h"
#include "gtest/gtest.h"
#include "tests/support/run_command.h"

namespace lockstep {
namespace {


using ::lockstep::testing::Ran;
using ::lockstep::testing::RunLockstep;

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/";
// Two files of one shape with different logits (two architectures' first prompt).
const std::string kPair = kDir + "llama/logits1.npy " + kDir + "qwen3/logits1.npy";

TEST(CliErrors, DifferentLogitsFailAUsableBound) {
  const Ran r = RunLockstep("compare " + kPair + " --max-nmse 1e-8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("nmse"), std::string::npos) << r.out;
}

TEST(CliErrors, BoundsThatCannotFailAreRefusedNamingTheFlag) {
  for (const std::string flag : {"--max-nmse -1", "--max-nmse nan", "--max-abs -1", "--max-kl inf",
                                 "--min-top1 nan", "--min-top1 1.5", "--min-decisive-top1 -0.1",
                                 "--margin nan"}) {
    const Ran r = RunLockstep("compare " + kPair + " " + flag);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find(flag.substr(0, flag.find(' ')) + ":"), std::string::npos)
        << flag << ": " << r.out;
    EXPECT_EQ(r.out.find("PASS"), std::string::npos) << flag << ": " << r.out;
  }
}

TEST(CliErrors, ShapeMismatchNamesBothShapes) {
  const Ran r = RunLockstep("compare " + kDir + "llama/logits0.npy " + kDir + "llama/logits1.npy");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is [1, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is [7, "), std::string::npos) << r.out;
}

// `compare --golden-topk` (a compact golden, as golden/real keeps): a row whose top-K logit is off
// by 0.5 breaches --max-abs 0.1 and names its position and token; full-row bounds are refused.
TEST(CliErrors, GoldenTopKBreachNamesPositionAndToken) {
  const std::string dir = ::testing::TempDir();
  // Vocabulary 4, K = 2; golden row 1 says token 3 has logit 0, ours says 0.5.
  const float ours[] = {0, 1, 0, 0, 2, 0, 0, 0.5f};
  const float golden[] = {1.7436683f, 1, 0, 1, 0, 2.3407530f, 0, 3, 2, 0};
  ASSERT_TRUE(npy::Write(dir + "ours.npy", {2, 4}, ours).ok());
  ASSERT_TRUE(npy::Write(dir + "golden.npy", {2, 5}, golden).ok());
  const std::string pair = dir + "ours.npy " + dir + "golden.npy --golden-topk";
  Ran r = RunLockstep("compare " + pair + " --max-abs 0.1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("top-K max_abs 0.5 > 0.1 at position 1 token 3"), std::string::npos) << r.out;
  r = RunLockstep("compare " + pair + " --max-abs 0.6");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  r = RunLockstep("compare " + pair + " --max-kl 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-kl needs full reference rows"), std::string::npos) << r.out;
  r = RunLockstep("compare " + kPair + " --max-lse-abs 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-lse-abs needs --golden-topk"), std::string::npos) << r.out;
}

TEST(CliErrors, DumpLayersIntoAFileOrAnUnwritablePathIsAnError) {
  for (const std::string& dir : {kDir + "llama/logits0.npy", std::string("/proc/lockstep-nope")}) {
    const Ran r = RunLockstep("logits " + kDir + "llama/llama.gguf --tokens 1,2 --out /dev/null "
                              "--dump-layers " + dir);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("--dump-layers: cannot use '" + dir + "'"), std::string::npos) << r.out;
  }
}

TEST(CliErrors, SeedsOutside64BitsAreRefused) {
  for (const std::string seed : {"-5", "18446744073709551616", "1e3", "0x10"}) {
    const Ran r = RunLockstep("run " + kDir + "llama/llama.gguf -p hi --seed " + seed);
    EXPECT_EQ(r.exit_code, 2) << seed << ": " << r.out;
    EXPECT_NE(r.out.find("--seed: must be an integer in [0, 2^64 - 1], got '" + seed + "'"),
              std::string::npos) << r.out;
  }
}

TEST(CliErrors, UnknownSubcommandIsNamed) {
  const Ran r = RunLockstep("frobnicate --x");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown subcommand 'frobnicate' (known: "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lockstep
