// libFuzzer target: the pipeline stages' message decoder (engine/models/stage_wire.h) on
// arbitrary bytes. A decoded message must re-encode to bytes that decode to the same encoding;
// a bad message must be an error (ASan/UBSan catch reads past the end and huge allocations).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "engine/models/stage_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep::models::wire;
  auto m = Decode(std::span(data, size));
  if (!m.ok()) return 0;
  const std::vector<uint8_t> once = Encode(*m);
  auto again = Decode(once);
  if (!again.ok() || Encode(*again) != once) std::abort();
  return 0;
}
