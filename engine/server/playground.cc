// The playground at / (docs/serving.md): static files compiled into the binary.
#include "engine/server/server.h"

namespace lockstep::server {

const std::vector<StaticFile>& PlaygroundFiles() {
  static const std::vector<StaticFile> files = {
      {"/", "text/html; charset=utf-8", "<!doctype html><title>lockstep</title><p>lockstep serve</p>"},
  };
  return files;
}

}  // namespace lockstep::server
