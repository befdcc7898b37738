// The run seed of the randomized tests: LOCKSTEP_SEED when set, else fresh, printed once so a
// run can be replayed (STYLE.md rule 7).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace lockstep::testing {

inline uint64_t RunSeed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("LOCKSTEP_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 0) : std::random_device{}();
    std::printf("[ seed     ] LOCKSTEP_SEED=%llu (set it to replay this run)\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// One generator per test, keyed by the run seed and the test's name, so a single test replays
// alone (--gtest_filter) with the same inputs.
inline std::mt19937_64 TestRng() {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::mt19937_64(RunSeed() ^ std::hash<std::string>{}(name));
}

}  // namespace lockstep::testing
