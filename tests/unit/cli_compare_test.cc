// `lockstep compare` as a gate script runs it: a bound that could never fail (negative, NaN, a
// fraction above 1) is refused with exit 2 naming the flag, and a shape mismatch names both
// shapes (issue 9). Each case failed before the fix: `--max-nmse -1`, `--max-nmse nan` and
// `--min-top1 nan` printed PASS with exit 0 on all-different logits.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

struct Ran {
  int exit_code = -1;
  std::string out;
};

Ran RunLockstep(const std::string& args) {
  const std::string cmd = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep " + args + " 2>&1";
  Ran r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/tiny/";
// Two files of one shape with different logits (two architectures' first prompt).
const std::string kPair = kDir + "llama/logits1.npy " + kDir + "qwen3/logits1.npy";

TEST(CliCompare, DifferentLogitsFailAUsableBound) {
  const Ran r = RunLockstep("compare " + kPair + " --max-nmse 1e-8");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("nmse"), std::string::npos) << r.out;
}

TEST(CliCompare, BoundsThatCannotFailAreRefusedNamingTheFlag) {
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

TEST(CliCompare, ShapeMismatchNamesBothShapes) {
  const Ran r = RunLockstep("compare " + kDir + "llama/logits0.npy " + kDir + "llama/logits1.npy");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is [1, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is [7, "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lockstep
