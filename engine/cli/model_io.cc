#include "engine/cli/model_io.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/cli/commands.h"
#include "engine/store/model_store.h"

namespace lockstep::cli {
namespace {

void Prefault(const gguf::File& f) {
  const uint64_t size = f.file_size();
  const uint64_t step = 4096, report = size / 50 + 1;
  uint8_t acc = 0;
  uint64_t next = 0;
  const bool tty = isatty(STDERR_FILENO);
  for (uint64_t off = 0; off < size; off += step) {
    acc ^= f.bytes()[off];
    if (off >= next) {
      const int pct = static_cast<int>(100.0 * off / size);
      std::fprintf(stderr, tty ? "\rloading [%-50s] %3d%%" : "", std::string(pct / 2, '#').c_str(), pct);
      next += report;
    }
  }
  std::fprintf(stderr, tty ? "\rloading [%s] 100%%\n" : "", std::string(50, '#').c_str());
  volatile uint8_t sink = acc;  // keeps the reads
  (void)sink;
}

std::unique_ptr<tokenizer::Tokenizer> MakeTokenizer(const gguf::File& f) {
  auto tok = tokenizer::Tokenizer::FromGguf(f);
  ThrowIfError(tok.status());
  return std::make_unique<tokenizer::Tokenizer>(std::move(*tok));
}

}  // namespace

LoadedModel LoadModel(const std::string& name_or_path, bool progress, bool tokenizer) {
  LoadedModel m;
  auto path = store::ResolveModel(name_or_path);
  ThrowIfError(path.status());
  m.path = *path;
  auto model = models::Model::Load(m.path);
  ThrowIfError(model.status());
  m.model = std::move(*model);
  if (progress) Prefault(m.model->file());
  if (tokenizer) m.tok = MakeTokenizer(m.model->file());
  return m;
}

LoadedModel LoadTokenizerOnly(const std::string& name_or_path) {
  LoadedModel m;
  auto path = store::ResolveModel(name_or_path);
  ThrowIfError(path.status());
  m.path = *path;
  auto file = gguf::File::Open(m.path);
  ThrowIfError(file.status());
  m.tok = MakeTokenizer(*file);
  m.file = std::make_unique<gguf::File>(std::move(*file));
  return m;
}

namespace {

std::string ReadTemplate(const std::string& template_file) {
  if (template_file.empty()) return "";
  std::ifstream in(template_file);
  if (!in) throw CliError(2, "cannot read --template file " + template_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename T>
T OrThrow(const LoadedModel& m, absl::StatusOr<T> v) {
  if (!v.ok() && absl::IsNotFound(v.status())) {
    throw CliError(2, m.path + ": " + std::string(v.status().message()));
  }
  ThrowIfError(v.status());
  return *std::move(v);
}

}  // namespace

std::string RenderChat(const LoadedModel& m, const std::string& template_file,
                       const std::vector<tokenizer::ChatMessage>& messages,
                       bool add_generation_prompt) {
  return OrThrow(m, tokenizer::RenderModelChat(m.model ? m.model->file() : *m.file, *m.tok,
                                               ReadTemplate(template_file), messages,
                                               add_generation_prompt));
}

std::vector<int32_t> RenderChatTokens(const LoadedModel& m, const std::string& template_file,
                                      const std::vector<tokenizer::ChatMessage>& messages,
                                      bool add_generation_prompt) {
  return OrThrow(m, tokenizer::RenderModelChatTokens(m.model ? m.model->file() : *m.file, *m.tok,
                                                     ReadTemplate(template_file), messages,
                                                     add_generation_prompt));
}

}  // namespace lockstep::cli
