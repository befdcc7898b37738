#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/cli/commands.h"
#include "engine/core/npy.h"
#include "engine/pipeline/pipeline.h"
#include "engine/models/model.h"
#include "engine/store/model_store.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"
#include "engine/quant/quant.h"

namespace lockstep::cli {

// "1,2,3" -> ids; errors name the offending item.
std::vector<int32_t> ParseTokenList(const std::string& text) {
  std::vector<int32_t> ids;
  int index = 0;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int32_t id;
    if (!absl::SimpleAtoi(item, &id)) {
      throw CliError(2, absl::StrCat("--tokens item #", index, " (\"", std::string(item),
                                     "\") is not an integer"));
    }
    ids.push_back(id);
    ++index;
  }
  return ids;
}

void RegisterLogits(CLI::App& app) {
  struct Args {
    std::string model, prompt, tokens, out, backend = "cpu", dump_dir, kv_k = "f32", kv_v = "f32";
    int threads = 0;
    int64_t pp_stages = 1;
    std::string pp_split;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("logits", "Write the logits of every prompt position to .npy");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name")->required();
  auto* prompt = sub->add_option("--prompt", args->prompt, "Prompt text (tokenized with BOS per the model)");
  auto* tokens = sub->add_option("--tokens", args->tokens, "Comma-separated token ids");
  prompt->excludes(tokens);
  sub->add_option("--out", args->out, "Output .npy, float32 [n_positions, n_vocab]")->required();
  sub->add_option("--backend", args->backend, "Backend: " + BackendChoices())->envname("LOCKSTEP_BACKEND");
  sub->add_option("--kv-k", args->kv_k, "K cache format (f32 f16 bf16 q8_0 q5_1 q4_0 fp8)")
      ->capture_default_str()->envname("LOCKSTEP_KV_K");
  sub->add_option("--kv-v", args->kv_v, "V cache format (f32 f16 bf16 q8_0 q5_1 q4_0 fp8)")
      ->capture_default_str()->envname("LOCKSTEP_KV_V");
  sub->add_option("--threads", args->threads, "cpu backend threads (0 = all cores)")
      ->envname("LOCKSTEP_THREADS");
  sub->add_option("--pp-stages", args->pp_stages,
                  "Pipeline stages, one process each: mpirun -np N lockstep logits ... --pp-stages N")
      ->capture_default_str()->envname("LOCKSTEP_PP_STAGES");
  sub->add_option("--pp-split", args->pp_split, "Layer boundaries of the stages, e.g. 10,20")
      ->envname("LOCKSTEP_PP_SPLIT");
  sub->add_option("--dump-layers", args->dump_dir,
                  "Directory to write every named intermediate as <name>.npy");
  sub->callback([args, prompt, tokens] {
    if (prompt->count() == 0 && tokens->count() == 0) {
      throw CliError(2, "logits needs --prompt or --tokens");
    }
    auto path = store::ResolveModel(args->model);
    ThrowIfError(path.status());
    auto model = models::Model::Load(*path);
    ThrowIfError(model.status());
    std::vector<int32_t> ids;
    if (tokens->count() > 0) {
      ids = ParseTokenList(args->tokens);
    } else {
      auto tok = tokenizer::Tokenizer::FromGguf((*model)->file());
      ThrowIfError(tok.status());
      if (absl::Status s = tok->CheckEncodable(args->prompt); !s.ok()) {
        throw CliError(2, "--prompt: " + std::string(s.message()));
      }
      ids = tok->Encode(args->prompt, tok->add_bos_default(), /*parse_special=*/true);
    }
    if (ids.empty()) throw CliError(2, "the prompt has no tokens");
    auto be = backend::MakeBackend(args->backend, {args->threads});
    ThrowIfError(be.status());
    models::DumpFn dump = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
      ThrowIfError(npy::Write(args->dump_dir + "/" + name + ".npy", {rows, cols}, data));
    };
    if (!args->dump_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(args->dump_dir, ec);
      if (ec || !std::filesystem::is_directory(args->dump_dir)) {
        throw CliError(2, "--dump-layers: cannot use '" + args->dump_dir + "' as a directory: " +
                              (ec ? ec.message() : std::string("it exists and is not one")));
      }
    }
    auto kf = quant::ParseKvFormat(args->kv_k);
    if (!kf.ok()) throw CliError(2, "--kv-k: " + std::string(kf.status().message()));
    auto vf = quant::ParseKvFormat(args->kv_v);
    if (!vf.ok()) throw CliError(2, "--kv-v: " + std::string(vf.status().message()));
    auto pp = pipeline::Start(**model, **be, args->pp_stages, args->pp_split);
    ThrowIfError(pp.status());
    if (pp->served) return;  // this process was a stage (docs/pipeline.md)
    if (pp->link != nullptr && !args->dump_dir.empty()) {
      throw CliError(2, "--dump-layers needs an unsplit model (drop --pp-stages)");
    }
    auto result = models::PromptLogits(**model, **be, ids, /*all=*/true,
                                       args->dump_dir.empty() ? nullptr : &dump, *kf, *vf,
                                       pp->split, pp->link.get());
    ThrowIfError(result.status());
    const std::vector<float>& logits = *result;
    const int64_t n_vocab = (*model)->config().n_vocab;
    ThrowIfError(npy::Write(args->out, {static_cast<int64_t>(ids.size()), n_vocab}, logits.data()));
    std::fprintf(stderr, "wrote %s [%zu, %lld] (%s backend)\n", args->out.c_str(), ids.size(),
                 static_cast<long long>(n_vocab), args->backend.c_str());
  });
}

}  // namespace lockstep::cli
