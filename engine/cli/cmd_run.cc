// `lockstep run`: generate from a prompt, streaming text to stdout; stats go to stderr.
#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/cli/model_io.h"
#include "engine/runtime/generate.h"
#include "engine/runtime/model_store.h"
#include "oracle/make_backend.h"

namespace lockstep::cli {

void RegisterRun(CLI::App& app) {
  struct Args {
    std::string model, prompt, system, template_file, backend = "cpu";
    bool chat = false, quiet = false;
    int threads = 0;
    uint64_t seed = 0;
    sampling::SamplingParams params;
  };
  auto args = std::make_shared<Args>();
  args->params.max_tokens = 128;
  args->params.temperature = 0.0f;
  CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name (default: " +
                                            runtime::DefaultModel().name + ")")
      ->envname("LOCKSTEP_MODEL");
  sub->add_option("--model", args->model, "Same as MODEL");
  sub->add_option("-p,--prompt", args->prompt, "Prompt text")->required();
  sub->add_flag("--chat", args->chat, "Wrap the prompt as a user turn with the chat template");
  sub->add_option("--system", args->system, "System message (with --chat)");
  sub->add_option("--template", args->template_file, "Chat template file (default: the model's)");
  sub->add_option("-n,--max-tokens", args->params.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  sub->add_option("--temp", args->params.temperature, "Temperature; 0 = greedy")
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Sampling seed (noise is keyed by seed and position)")
      ->capture_default_str()->envname("LOCKSTEP_SEED");
  sub->add_option("--top-k", args->params.top_k, "Keep the k most likely tokens (0 = off)");
  sub->add_option("--top-p", args->params.top_p, "Nucleus: keep the smallest set with mass >= p");
  sub->add_option("--min-p", args->params.min_p, "Keep tokens with p >= min_p * p_max");
  sub->add_option("--repeat-penalty", args->params.repetition_penalty, "Repetition penalty (1 = off)");
  sub->add_option("--presence-penalty", args->params.presence_penalty, "OpenAI presence penalty");
  sub->add_option("--frequency-penalty", args->params.frequency_penalty, "OpenAI frequency penalty");
  sub->add_option("--stop", args->params.stop, "Stop string (repeatable)");
  sub->add_option("--backend", args->backend, "ref | cpu")->envname("LOCKSTEP_BACKEND");
  sub->add_option("--threads", args->threads, "cpu backend threads (0 = all cores)")
      ->envname("LOCKSTEP_THREADS");
  sub->add_flag("-q,--quiet", args->quiet, "No progress or stats on stderr");
  sub->callback([args] {
    if (args->model.empty()) args->model = runtime::DefaultModel().name;
    LoadedModel m = LoadModel(args->model, !args->quiet);
    std::vector<int32_t> prompt;
    if (args->chat) {
      std::vector<tokenizer::ChatMessage> messages;
      if (!args->system.empty()) messages.push_back({"system", args->system});
      messages.push_back({"user", args->prompt});
      const std::string text = RenderChat(m, args->template_file, messages, true);
      prompt = m.tok->Encode(text, /*add_bos=*/false, /*parse_special=*/true);
    } else {
      prompt = m.tok->Encode(args->prompt, m.tok->add_bos_default(), /*parse_special=*/true);
    }
    auto be = oracle::MakeBackend(args->backend, args->threads);
    ThrowIfError(be.status());
    auto r = runtime::Generate(*m.model, **be, *m.tok, prompt, args->params, args->seed,
                               [](std::string_view s) {
                                 std::fwrite(s.data(), 1, s.size(), stdout);
                                 std::fflush(stdout);
                               });
    ThrowIfError(r.status());
    std::fputc('\n', stdout);
    if (!args->quiet) {
      const double n_dec = static_cast<double>(r->tokens.size());
      std::fprintf(stderr,
                   "prefill: %lld tokens in %.3f s (%.1f tok/s)  decode: %.0f tokens in %.3f s "
                   "(%.1f tok/s)  finish: %s  backend: %s\n",
                   static_cast<long long>(r->prompt_tokens), r->prefill_seconds,
                   r->prompt_tokens / r->prefill_seconds, n_dec, r->decode_seconds,
                   n_dec > 1 ? (n_dec - 1) / r->decode_seconds : 0.0,
                   std::string(sampling::OpenAIFinishReason(r->finish)).c_str(),
                   args->backend.c_str());
    }
  });
}

}  // namespace lockstep::cli
