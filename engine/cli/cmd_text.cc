// tokenize / detokenize / template: the text side of a model, without running it.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "engine/cli/commands.h"
#include "engine/cli/model_io.h"
#include "nlohmann/json.hpp"

namespace lockstep::cli {

std::vector<int32_t> ParseTokenList(const std::string& text);  // cmd_logits.cc

void RegisterText(CLI::App& app) {
  struct Args {
    std::string model, text, ids, messages, template_file;
    bool special = false, json = false, no_generation_prompt = false;
  };
  auto args = std::make_shared<Args>();

  CLI::App* tok = app.add_subcommand("tokenize", "Print the token ids of a text");
  tok->add_option("MODEL", args->model, "GGUF file path or known model name")->required();
  tok->add_option("--text", args->text, "Text to tokenize")->required();
  tok->add_flag("--special", args->special,
                "Add BOS (if the model does) and parse special tokens such as <|im_start|>");
  tok->add_flag("--json", args->json, "Print ids and pieces as JSON");
  tok->callback([args] {
    LoadedModel m = LoadTokenizerOnly(args->model);
    const tokenizer::Tokenizer& t = *m.tok;
    if (absl::Status s = t.CheckEncodable(args->text); !s.ok()) {
      throw CliError(2, "the text: " + std::string(s.message()));
    }
    std::vector<int32_t> ids =
        t.Encode(args->text, args->special && t.add_bos_default(), args->special);
    if (!args->json) {
      std::printf("%s\n", absl::StrJoin(ids, ",").c_str());
      return;
    }
    nlohmann::json out = nlohmann::json::array();
    for (int32_t id : ids) out.push_back({{"id", id}, {"text", t.TokenText(id)}});
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  });

  CLI::App* detok = app.add_subcommand("detokenize", "Print the text of token ids");
  detok->add_option("MODEL", args->model, "GGUF file path or known model name")->required();
  detok->add_option("--ids", args->ids, "Comma-separated token ids")->required();
  detok->callback([args] {
    LoadedModel m = LoadTokenizerOnly(args->model);
    auto text = m.tok->Decode(ParseTokenList(args->ids));
    ThrowIfError(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fputc('\n', stdout);
  });

  CLI::App* tpl = app.add_subcommand("template", "Render a chat with the model's chat template");
  tpl->add_option("MODEL", args->model, "GGUF file path or known model name")->required();
  tpl->add_option("--messages", args->messages,
                  "JSON file: [{\"role\": ..., \"content\": ...}, ...]")->required();
  tpl->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "Do not append the assistant turn opener");
  tpl->add_option("--template", args->template_file,
                  "Jinja template file to use instead of tokenizer.chat_template");
  tpl->callback([args] {
    std::ifstream in(args->messages);
    if (!in) throw CliError(2, "cannot read --messages file " + args->messages);
    std::stringstream ss;
    ss << in.rdbuf();
    auto messages = tokenizer::ParseChatMessagesJson(ss.str());
    ThrowIfError(messages.status());
    LoadedModel m = LoadTokenizerOnly(args->model);
    const std::string text =
        RenderChat(m, args->template_file, *messages, !args->no_generation_prompt);
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace lockstep::cli
