// libFuzzer target for the GGUF reader. Any input either parses or is rejected with a status;
// a parsed file must inspect (text and JSON, abbreviated and full, JSON dump included),
// re-serialize, re-parse, and its re-serialization must be a fixed point.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/gguf/gguf.h"
#include "engine/gguf/inspect.h"

namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "gguf_fuzz: %s: %s\n", what, std::string(s.message()).c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep::gguf;
  auto file = File::FromBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) {
    if (file.status().message().empty()) Fail("error without a message", file.status());
    return 0;
  }
  for (bool full : {false, true}) {
    const std::string text = InspectText(*file, full);
    if (text.empty()) std::abort();
    const std::string json = InspectJson(*file, full).dump();  // throws on invalid UTF-8
    if (json.empty()) std::abort();
  }
  auto again = Reserialize(*file);
  if (!again.ok()) Fail("Reserialize of a parsed file failed", again.status());
  auto reparsed = File::FromBytes(*again);
  if (!reparsed.ok()) Fail("re-parse of a Reserialized file failed", reparsed.status());
  if (reparsed->metadata().size() != file->metadata().size() ||
      reparsed->tensors().size() != file->tensors().size()) {
    std::fprintf(stderr, "gguf_fuzz: Reserialize changed the key or tensor count\n");
    std::abort();
  }
  auto twice = Reserialize(*reparsed);
  if (!twice.ok()) Fail("second Reserialize failed", twice.status());
  if (*twice != *again) {
    std::fprintf(stderr, "gguf_fuzz: Reserialize is not a fixed point\n");
    std::abort();
  }
  return 0;
}
