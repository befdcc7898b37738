// ci/gpu-ab, the side-by-side GPU benchmark (docs/performance.md), planned without a GPU: its
// --dry-run prints the commands it would run. Every round runs every variant in turn (so a drift of
// the machine reaches all of them alike), each variant's environment reaches its runs, the gate and
// ncu take the named variant's binary, and a malformed argument exits 2 naming it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/run_command.h"

namespace lockstep::testing {
namespace {

Ran GpuAb(const std::string& args) { return RunCommand(std::string(LOCKSTEP_SOURCE_DIR) + "/ci/gpu-ab " + args); }

TEST(GpuAb, DryRunInterleavesEveryVariantInEachRound) {
  const Ran r = GpuAb("--dry-run --rounds 2 --out /tmp/ab --gate B --ncu B A:/a/lockstep B:/b/lockstep:LOCKSTEP_PDL=1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  size_t at = 0;
  for (const char* row : {"/tmp/ab/A-c1-r1.json", "/tmp/ab/B-c1-r1.json", "/tmp/ab/A-c1-r2.json", "/tmp/ab/B-c1-r2.json",
                          "/tmp/ab/A-d8k.json", "/tmp/ab/B-d8k.json", "/tmp/ab/A-conc.json", "/tmp/ab/B-conc.json"}) {
    const size_t p = r.out.find(row, at);
    ASSERT_NE(p, std::string::npos) << row << " missing or out of order in:\n" << r.out;
    at = p;
  }
  EXPECT_NE(r.out.find("env LOCKSTEP_PDL=1 /b/lockstep bench"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("env /a/lockstep bench"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("LOCKSTEP_PDL=1 /a/lockstep"), std::string::npos) << "B's environment reached A:\n" << r.out;
  EXPECT_NE(r.out.find("/a/lockstep synth --arch llama --shape 8b --quant q4_k_m --seed 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ci/gpu-gate --no-bench --bin /b/kernel_check"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("env LOCKSTEP_PDL=1 ncu --metrics gpu__time_duration.sum --csv /b/lockstep bench"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--prompt-tokens 512 --gen-tokens 128 --reps 5"), std::string::npos) << r.out;
}

TEST(GpuAb, MalformedArgumentsExitTwoNamingThem) {
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"--dry-run A", "variant 'A' is not NAME:BINARY"},
      {"--dry-run A:/a/lockstep:FOO", "'FOO' is not VAR=VALUE"},
      {"--dry-run --gate Z A:/a/lockstep", "'Z' names no variant"},
      {"--dry-run --ncu Z A:/a/lockstep", "'Z' names no variant"},
      {"--dry-run --rounds 0 A:/a/lockstep", "--rounds '0' is not a positive integer"},
      {"A:/nonexistent/lockstep", "/nonexistent/lockstep is not an executable"},
      {"--dry-run", "usage: ci/gpu-ab"},
  };
  for (const Case& c : cases) {
    const Ran r = GpuAb(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace lockstep::testing
