// libFuzzer target: arbitrary bytes parsed as a chat template and rendered over a fixed
// conversation. Must never crash, hang or exhaust memory: errors are fine, and the render
// limits are lowered so that any input finishes quickly.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json& Messages() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi 👋 {{ x }}"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\nHello."},
    {"role": "user", "content": [{"type": "text", "text": " parts "}, {"type": "image"}]}
  ])");
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lockstep::tokenizer::ChatTemplate;
  auto tpl = ChatTemplate::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!tpl.ok()) return 0;
  lockstep::tokenizer::RenderOptions options;
  options.add_generation_prompt = size % 2 == 0;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.extra_context = {{"tools", nlohmann::ordered_json::array({{{"name", "f"}}})}};
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_steps = 200'000;
  options.limits.max_container_elements = 1 << 16;
  auto out = tpl->RenderJson(Messages(), options);
  (void)out;
  return 0;
}
