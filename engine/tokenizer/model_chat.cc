#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace lockstep::tokenizer {

absl::StatusOr<std::string> RenderModelChat(const gguf::File& file, const Tokenizer& tok,
                                            std::string_view template_source,
                                            const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) {
  std::string source(template_source);
  if (source.empty()) {
    const gguf::Value* v = file.Find("tokenizer.chat_template");
    if (v == nullptr || v->type != gguf::ValueType::STRING) {
      return absl::NotFoundError(
          "the model file has no tokenizer.chat_template; pass a template with --template FILE");
    }
    source = v->str;
  }
  ASSIGN_OR_RETURN(ChatTemplate tpl, ChatTemplate::Parse(source));
  return tpl.Render(messages, add_generation_prompt, tok.TokenText(tok.bos_id()),
                    tok.TokenText(tok.eos_id()));
}

}  // namespace lockstep::tokenizer
