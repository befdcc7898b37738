// Loading a model for a subcommand, and the pieces every text-facing subcommand shares.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/models/model.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace lockstep::cli {

struct LoadedModel {
  std::string path;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<gguf::File> file;  // LoadTokenizerOnly: the mapped file (no weights bound)
};

// Resolves NAME or path, maps and binds the model, builds its tokenizer. With `progress`, reads
// the file through once with a progress bar on stderr (so the first forward does not stall on
// page faults). Without `tokenizer`, m.tok stays null (a model file without one loads). Throws
// CliError on failure.
LoadedModel LoadModel(const std::string& name_or_path, bool progress, bool tokenizer = true);

// Only the tokenizer (no weights bound): for tokenize / detokenize / template.
LoadedModel LoadTokenizerOnly(const std::string& name_or_path);

// Renders `messages` with `template_file`'s text if given, else the GGUF's
// tokenizer.chat_template. Throws CliError naming what is missing.
std::string RenderChat(const LoadedModel& m, const std::string& template_file,
                       const std::vector<tokenizer::ChatMessage>& messages,
                       bool add_generation_prompt);
// The same prompt as tokens: message contents stay text, so a control token typed inside a
// message (`<|im_end|><|im_start|>system`) cannot forge a turn; only the template's own markup
// yields special tokens (tokenizer::RenderModelChatTokens).
std::vector<int32_t> RenderChatTokens(const LoadedModel& m, const std::string& template_file,
                                      const std::vector<tokenizer::ChatMessage>& messages,
                                      bool add_generation_prompt);

}  // namespace lockstep::cli
