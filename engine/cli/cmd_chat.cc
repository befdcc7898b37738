// `lockstep chat MODEL`: an interactive multi-turn chat in the terminal. The conversation is
// parked as an engine session after each reply, so each turn computes only its new suffix; the
// count is shown per turn (docs/runtime.md).
#include <cstdio>
#include <iostream>
#include <string>

#include "engine/backend/backend.h"
#include "engine/cli/commands.h"
#include "engine/cli/engine_flags.h"
#include "engine/cli/model_io.h"
#include "engine/runtime/engine.h"
#include "engine/store/model_store.h"

namespace lockstep::cli {

void RegisterChat(CLI::App& app) {
  struct Args {
    std::string model, system, template_file, backend = "cpu";
    int threads = 0;
    uint64_t seed = 0;
    sampling::SamplingParams params;
    EngineFlags engine;
  };
  auto args = std::make_shared<Args>();
  args->params.max_tokens = 256;
  args->params.temperature = 0.0f;
  CLI::App* sub = app.add_subcommand("chat", "Chat with a model in the terminal (one line per turn)");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name")
      ->envname("LOCKSTEP_MODEL");
  sub->add_option("--system", args->system, "System message");
  sub->add_option("--template", args->template_file, "Chat template file (default: the model's)");
  sub->add_option("-n,--max-tokens", args->params.max_tokens, "Tokens per reply at most")
      ->capture_default_str();
  sub->add_option("--temp", args->params.temperature, "Temperature; 0 = greedy")->capture_default_str();
  sub->add_option("--seed", args->seed, "Sampling seed")
      ->check(SeedCheck())->envname("LOCKSTEP_SEED");
  sub->add_option("--backend", args->backend, "Backend: " + BackendChoices())->envname("LOCKSTEP_BACKEND");
  sub->add_option("--threads", args->threads, "cpu backend threads (0 = all cores)")
      ->envname("LOCKSTEP_THREADS");
  AddEngineFlags(sub, args->engine);
  sub->callback([args] {
    if (args->model.empty()) args->model = store::DefaultModel().name;
    LoadedModel m = LoadModel(args->model, true);
    auto be = backend::MakeBackend(args->backend, {args->threads});
    ThrowIfError(be.status());
    runtime::EngineOptions eo = ToEngineOptions(args->engine);
    eo.max_running = 1;
    auto engine = runtime::Engine::Create(*m.model, *m.tok, **be, eo);
    ThrowIfError(engine.status());
    std::vector<tokenizer::ChatMessage> messages;
    if (!args->system.empty()) messages.push_back({"system", args->system});
    std::fprintf(stderr, "chat with %s; an empty line or end of input ends it\n", m.path.c_str());
    std::string line;
    int turn = 0;
    while (true) {
      std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line) || line.empty()) break;
      if (absl::Status s = m.tok->CheckEncodable(line); !s.ok()) {
        std::fprintf(stderr, "error: this line was not sent: %s\n", std::string(s.message()).c_str());
        continue;
      }
      messages.push_back({"user", line});
      runtime::Request req;
      req.prompt = RenderChatTokens(m, args->template_file, messages, true);
      req.params = args->params;
      req.seed = args->seed;
      req.session = "chat";
      req.on_text = [](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      };
      auto r = (*engine)->Run(std::move(req));
      ThrowIfError(r.status());
      std::fputc('\n', stdout);
      std::fflush(stdout);
      ++turn;
      std::fprintf(stderr, "[turn %d: prompt %lld tokens, prefill computed %lld, %zu generated]\n",
                   turn, static_cast<long long>(r->gen.prompt_tokens),
                   static_cast<long long>(r->prefill_computed), r->gen.tokens.size());
      messages.push_back({"assistant", r->gen.text});
    }
  });
}

}  // namespace lockstep::cli
