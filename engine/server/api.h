// The OpenAI-shaped request surface of `lockstep serve` (docs/serving.md): JSON bodies of
// /v1/chat/completions and /v1/completions parsed and validated into one ParsedRequest, and
// errors in OpenAI's shape {"error": {"message", "type", "param", "code"}} naming the field.
// Pure functions of the body (no model, no engine): the fuzz target drives them directly
// (fuzz/server_request_fuzz.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "engine/sampling/sampling_params.h"
#include "engine/tokenizer/chat_template.h"

namespace lockstep::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" = none): JSON null
  std::string code;   // "" = JSON null
  nlohmann::json ToJson() const;
  std::string Body() const {
    return ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
};

ApiError BadField(const std::string& param, const std::string& message,
                  const std::string& code = "invalid_value");

enum class Endpoint { kChat, kCompletions };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                           // an alias; "" = the first served model
  std::vector<tokenizer::ChatMessage> messages;  // chat
  std::string prompt;                          // completions, as text
  std::vector<int32_t> prompt_tokens;          // completions given as token ids
  bool prompt_is_tokens = false;
  sampling::SamplingParams params;             // max_tokens is 0 when the request gave none
  std::optional<uint64_t> seed;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // chat: logprobs; completions: logprobs given (its value = top count)
  std::string session;    // "session_id" field (or the X-Session-Id header, set by the server)
};

struct ParseLimits {
  int max_n = 16;
  int max_stop = 4;
  size_t max_messages = 4096;
};

// Parses and validates `body` for `endpoint`. On failure returns the error (HTTP 400) naming
// the field; never throws, whatever the bytes.
std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     const ParseLimits& limits, ParsedRequest* out);

}  // namespace lockstep::server
