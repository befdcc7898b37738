// Chat templates: a Jinja-subset interpreter that renders a model's own `tokenizer.chat_template`
// byte-identically to Hugging Face transformers, which renders with jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), a `raise_exception` global
// and a `tojson` filter that is json.dumps(ensure_ascii=False).
//
// The contract is "exact or an error": a construct this interpreter does not implement exactly
// (a filter, a tag, a float, case mapping of non-ASCII text, ...) is an error naming the construct
// and its line:column, never a silently different prompt. Errors read like
//   chat template line 3:14: unsupported filter "wordcount"
//   chat template line 7:5: raise_exception: Conversation roles must alternate user/assistant/...
// Rendering is bounded (steps, output bytes, container sizes) so a hostile template cannot hang
// or exhaust memory; exceeding a bound is an error too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lockstep::tokenizer {

struct ChatMessage {
  std::string role;
  std::string content;
};

// Bounds on one render. The defaults are far above what real templates need (a few thousand
// steps per message); the fuzzer lowers them.
struct RenderLimits {
  uint64_t max_output_bytes = uint64_t{16} << 20;  // the prompt, and any one string value
  uint64_t max_steps = 5'000'000;  // nodes evaluated + loop iterations + elements touched
  uint64_t max_container_elements = uint64_t{1} << 20;  // elements of any one list or dict
};

struct RenderOptions {
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  // More top-level variables (e.g. "tools", "date_string"); an object. `tools` and `documents`
  // default to None, as transformers passes them.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  RenderLimits limits;
};

namespace chat_template_internal {
struct Program;
}

class ChatTemplate {
 public:
  // Parses a template; the error names the construct and its line:column.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, const std::string& bos_token,
                                     const std::string& eos_token) const;
  // `messages` is a JSON array of message objects as an API request carries them (content may
  // be a string or a list of parts); integers, strings, bools, null, arrays and objects only.
  absl::StatusOr<std::string> RenderJson(const nlohmann::ordered_json& messages,
                                         const RenderOptions& options) const;

 private:
  std::shared_ptr<const chat_template_internal::Program> program_;
};

// Reads `[{"role": "...", "content": "..."}, ...]`; errors name the index and field
// (`messages[2].content: expected a string, got number`).
absl::StatusOr<std::vector<ChatMessage>> ParseChatMessagesJson(std::string_view json_text);

}  // namespace lockstep::tokenizer
