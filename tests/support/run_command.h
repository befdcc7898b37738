// Runs a shell command as a user would and keeps what they would see: the exit code and stdout
// and stderr together, in the order they were written. For tests of the lockstep binary.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace lockstep::testing {

struct Ran {
  int exit_code = -1;  // -1: the command could not start or was killed by a signal
  std::string out;     // stdout and stderr together
};

inline Ran RunCommand(const std::string& cmd) {
  Ran r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `lockstep ARGS` from the build tree under test (tests add_dependencies on the binary).
inline Ran RunLockstep(const std::string& args) {
  return RunCommand(std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep " + args);
}

}  // namespace lockstep::testing
