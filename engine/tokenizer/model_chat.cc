#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace lockstep::tokenizer {
namespace {

// U+FDD0 and U+FDD1, Unicode noncharacters ("for internal use"): they bracket each message's
// content while the template renders, so the rendered prompt says which bytes are content.
constexpr std::string_view kOpen = "\xEF\xB7\x90";
constexpr std::string_view kClose = "\xEF\xB7\x91";
constexpr std::string_view kSpace = " \t\n\r\v\f";

absl::StatusOr<ChatTemplate> ParseModelTemplate(const gguf::File& file,
                                                std::string_view template_source) {
  std::string source(template_source);
  if (source.empty()) {
    const gguf::Value* v = file.Find("tokenizer.chat_template");
    if (v == nullptr || v->type != gguf::ValueType::STRING) {
      return absl::NotFoundError(
          "the model file has no tokenizer.chat_template; pass a template with --template FILE");
    }
    source = v->str;
  }
  return ChatTemplate::Parse(source);
}

}  // namespace

absl::StatusOr<std::string> RenderModelChat(const gguf::File& file, const Tokenizer& tok,
                                            std::string_view template_source,
                                            const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) {
  ASSIGN_OR_RETURN(ChatTemplate tpl, ParseModelTemplate(file, template_source));
  return tpl.Render(messages, add_generation_prompt, tok.TokenText(tok.bos_id()),
                    tok.TokenText(tok.eos_id()));
}

absl::StatusOr<std::vector<int32_t>> RenderModelChatTokens(const gguf::File& file,
                                                           const Tokenizer& tok,
                                                           std::string_view template_source,
                                                           const std::vector<ChatMessage>& messages,
                                                           bool add_generation_prompt) {
  ASSIGN_OR_RETURN(ChatTemplate tpl, ParseModelTemplate(file, template_source));
  const std::string bos = tok.TokenText(tok.bos_id()), eos = tok.TokenText(tok.eos_id());
  ASSIGN_OR_RETURN(const std::string plain,
                   tpl.Render(messages, add_generation_prompt, bos, eos));
  // The markers go inside the content's outer whitespace, so a template that trims the content
  // trims the same bytes with or without them.
  std::vector<ChatMessage> marked = messages;
  for (size_t i = 0; i < marked.size(); ++i) {
    std::string& c = marked[i].content;
    if (c.find(kOpen) != std::string::npos || c.find(kClose) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "].content holds U+FDD0 or U+FDD1 (Unicode noncharacters), which the "
          "chat prompt reserves"));
    }
    const size_t b = c.find_first_not_of(kSpace);
    if (b == std::string::npos) continue;  // only whitespace: no control token can hide there
    const size_t e = c.find_last_not_of(kSpace) + 1;
    c = c.substr(0, b) + std::string(kOpen) + c.substr(b, e - b) + std::string(kClose) + c.substr(e);
  }
  ASSIGN_OR_RETURN(const std::string rendered,
                   tpl.Render(marked, add_generation_prompt, bos, eos));
  std::string text;
  std::vector<std::pair<size_t, size_t>> literal;
  text.reserve(rendered.size());
  for (size_t pos = 0; pos < rendered.size();) {
    if (rendered.compare(pos, kOpen.size(), kOpen) == 0) {
      literal.push_back({text.size(), text.size()});
      pos += kOpen.size();
    } else if (rendered.compare(pos, kClose.size(), kClose) == 0) {
      if (literal.empty()) return absl::InternalError("the chat template split a content marker");
      literal.back().second = text.size();
      pos += kClose.size();
    } else {
      text.push_back(rendered[pos++]);
    }
  }
  if (text != plain) {
    return absl::InvalidArgumentError(
        "the chat template rewrites message contents in a way the prompt cannot mark as text "
        "(it renders differently with content markers); control tokens in contents cannot be "
        "kept literal with this template");
  }
  return tok.EncodeWithLiteral(text, /*add_bos=*/false, literal);
}

}  // namespace lockstep::tokenizer
