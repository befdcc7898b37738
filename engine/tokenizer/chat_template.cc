// The public face of the chat-template interpreter: parse once, render per request with the
// variables transformers passes (messages, add_generation_prompt, bos/eos tokens, tools=None,
// documents=None), and read request messages from JSON.
#include "engine/tokenizer/chat_template.h"

#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer {

namespace ct = chat_template_internal;

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  ASSIGN_OR_RETURN(std::vector<ct::Token> tokens, ct::Lex(source));
  ChatTemplate t;
  ASSIGN_OR_RETURN(t.program_, ct::ParseProgram(std::move(tokens)));
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 const std::string& bos_token,
                                                 const std::string& eos_token) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    list.push_back({{"role", m.role}, {"content", m.content}});
  }
  RenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = bos_token;
  options.eos_token = eos_token;
  return RenderJson(list, options);
}

absl::StatusOr<std::string> ChatTemplate::RenderJson(const nlohmann::ordered_json& messages,
                                                     const RenderOptions& options) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages: expected an array");
  if (!options.extra_context.is_object()) {
    return absl::InvalidArgumentError("extra_context: expected an object");
  }
  std::vector<std::pair<std::string, ct::Value>> context;
  ASSIGN_OR_RETURN(ct::Value msgs, ct::FromJson(messages, "messages", 0));
  context.emplace_back("messages", std::move(msgs));
  context.emplace_back("add_generation_prompt", ct::Value::MakeBool(options.add_generation_prompt));
  for (const auto& [name, token] : {std::pair{"bos_token", &options.bos_token},
                                    std::pair{"eos_token", &options.eos_token}}) {
    size_t bad = 0;
    if (!ct::IsValidUtf8(*token, &bad)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: invalid UTF-8 at byte %d", name, bad));
    }
    context.emplace_back(name, ct::Value::MakeStr(*token));
  }
  context.emplace_back("tools", ct::Value::MakeNone());
  context.emplace_back("documents", ct::Value::MakeNone());
  for (const auto& [key, value] : options.extra_context.items()) {
    ASSIGN_OR_RETURN(ct::Value v, ct::FromJson(value, key, 0));
    context.emplace_back(key, std::move(v));
  }
  return ct::Evaluate(*program_, std::move(context), options.limits);
}

absl::StatusOr<std::vector<ChatMessage>> ParseChatMessagesJson(std::string_view json_text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte at which parsing stopped.
    return absl::InvalidArgumentError(absl::StrFormat(
        "messages: not valid JSON at byte offset %d: %s", e.byte > 0 ? e.byte - 1 : 0, e.what()));
  }
  if (!j.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("messages: expected an array, got %s", j.type_name()));
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("messages[%d]: expected an object, got %s", i, m.type_name()));
    }
    ChatMessage msg;
    for (const auto& [field, dest] : {std::pair{"role", &msg.role}, std::pair{"content", &msg.content}}) {
      auto it = m.find(field);
      if (it == m.end()) {
        return absl::InvalidArgumentError(absl::StrFormat("messages[%d].%s: missing", i, field));
      }
      if (!it->is_string()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "messages[%d].%s: expected a string, got %s", i, field, it->type_name()));
      }
      *dest = it->get<std::string>();
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content") {
        return absl::InvalidArgumentError(
            absl::StrFormat("messages[%d].%s: unknown field", i, key));
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace lockstep::tokenizer
