// libFuzzer target: request parsing and validation of `lockstep serve` (engine/server/api.h).
// Input: byte 0 picks the endpoint (chat or completions); the rest is the HTTP body. Aborts when
// the parser throws, when an accepted request carries sampling parameters the sampler would
// refuse (the parser must check every field it passes on), or when an error has no message or
// does not serialize (docs/serving.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/server/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using lockstep::server::Endpoint;
  const Endpoint ep = (data[0] & 1) ? Endpoint::kCompletions : Endpoint::kChat;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  lockstep::server::ParsedRequest r;
  const auto err = lockstep::server::ParseRequest(ep, body, {}, &r);
  if (err) {
    if (err->message.empty() || err->http_status != 400 || err->Body().empty()) {
      std::fprintf(stderr, "an error without a message or status 400\n");
      std::abort();
    }
    return 0;
  }
  if (r.params.max_tokens == 0) r.params.max_tokens = 1;  // the server fills the default
  if (const absl::Status s = r.params.Validate(); !s.ok()) {
    std::fprintf(stderr, "accepted parameters the sampler refuses: %s\n",
                 std::string(s.message()).c_str());
    std::abort();
  }
  if (r.n < 1 || r.n > 16 || (ep == Endpoint::kChat && r.messages.empty()) ||
      (r.prompt_is_tokens && r.prompt_tokens.empty())) {
    std::fprintf(stderr, "accepted an impossible request\n");
    std::abort();
  }
  return 0;
}
