// `lockstep run`: generate from a prompt through the engine's step loop, streaming text to
// stdout; stats go to stderr (or everything as one JSON object with --json).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

#include "engine/backend/backend.h"
#include "engine/cli/commands.h"
#include "engine/cli/engine_flags.h"
#include "engine/pipeline/pipeline.h"
#include "engine/cli/model_io.h"
#include "engine/runtime/engine.h"
#include "engine/store/model_store.h"

namespace lockstep::cli {
namespace {

// The prompt from --prompt-file, from stdin (--prompt - or a pipe), or from --prompt.
std::string ReadPromptText(const std::string& prompt, const std::string& prompt_file) {
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file, std::ios::binary);
    if (!in) throw CliError(2, "cannot read --prompt-file " + prompt_file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  if (prompt == "-" || (prompt.empty() && !isatty(STDIN_FILENO))) {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  if (prompt.empty()) {
    throw CliError(2, "no prompt: pass --prompt TEXT, --prompt-file FILE, or pipe it on stdin");
  }
  return prompt;
}

}  // namespace

void RegisterRun(CLI::App& app) {
  struct Args {
    std::string model, prompt, prompt_file, system, template_file, backend = "cpu", draft, spec_mode;
    bool chat = false, quiet = false, ngram = false, spec_adaptive = false, json = false;
    int spec_k = 4;
    int threads = 0;
    uint64_t seed = 0;
    sampling::SamplingParams params;
    EngineFlags engine;
  };
  auto args = std::make_shared<Args>();
  args->params.max_tokens = 128;
  args->params.temperature = 0.0f;
  CLI::App* sub = app.add_subcommand("run", "Generate text from a prompt");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name (default: " +
                                            store::DefaultModel().name + ")")
      ->envname("LOCKSTEP_MODEL");
  sub->add_option("--model", args->model, "Same as MODEL");
  sub->add_option("-p,--prompt", args->prompt, "Prompt text ('-' = read stdin)");
  sub->add_option("--prompt-file", args->prompt_file, "Read the prompt from a file");
  sub->add_flag("--chat", args->chat, "Wrap the prompt as a user turn with the chat template");
  sub->add_option("--system", args->system, "System message (with --chat)");
  sub->add_option("--template", args->template_file, "Chat template file (default: the model's)");
  sub->add_option("-n,--max-tokens", args->params.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  sub->add_option("--temp", args->params.temperature, "Temperature; 0 = greedy")
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Sampling seed (noise is keyed by seed and position)")
      ->check(SeedCheck())
      ->capture_default_str()->envname("LOCKSTEP_SEED");
  sub->add_option("--top-k", args->params.top_k, "Keep the k most likely tokens (0 = off)");
  sub->add_option("--top-p", args->params.top_p, "Nucleus: keep the smallest set with mass >= p");
  sub->add_option("--min-p", args->params.min_p, "Keep tokens with p >= min_p * p_max");
  sub->add_option("--repeat-penalty", args->params.repetition_penalty, "Repetition penalty (1 = off)");
  sub->add_option("--presence-penalty", args->params.presence_penalty, "OpenAI presence penalty");
  sub->add_option("--frequency-penalty", args->params.frequency_penalty, "OpenAI frequency penalty");
  sub->add_option("--stop", args->params.stop, "Stop string (repeatable)");
  sub->add_option("--backend", args->backend, "Backend: " + BackendChoices())->envname("LOCKSTEP_BACKEND");
  sub->add_option("--threads", args->threads, "cpu backend threads (0 = all cores)")
      ->envname("LOCKSTEP_THREADS");
  sub->add_flag("-q,--quiet", args->quiet, "No progress or stats on stderr");
  sub->add_flag("--json", args->json,
                "Print one JSON object (text, tokens, finish reason, timings) instead of streaming");
  auto* draft = sub->add_option("--draft", args->draft,
                                "Draft model (GGUF path or known name) for speculative decoding, or "
                                "self: the model's own MTP head");
  auto* ngram = sub->add_flag("--ngram", args->ngram, "Speculative decoding with prompt lookup");
  draft->excludes(ngram);
  sub->add_option("--spec-k", args->spec_k, "Draft tokens per round (the maximum with --spec-adaptive)")
      ->capture_default_str();
  sub->add_flag("--spec-adaptive", args->spec_adaptive, "Choose K per round (up to --spec-k)");
  sub->add_option("--spec-mode", args->spec_mode,
                  "greedy | reject | coupled (default: greedy at --temp 0, else coupled)");
  AddEngineFlags(sub, args->engine);
  sub->callback([args] {
    if (args->model.empty()) args->model = store::DefaultModel().name;
    const std::string prompt_text = ReadPromptText(args->prompt, args->prompt_file);
    const bool speculative = !args->draft.empty() || args->ngram;
    if (!speculative && !args->spec_mode.empty()) {
      throw CliError(2, "--spec-mode needs --draft or --ngram");
    }
    LoadedModel m =
        LoadModel(args->model, !args->quiet && !args->json && pipeline::LaunchRank() == 0);
    std::vector<int32_t> prompt;
    if (absl::Status s = m.tok->CheckEncodable(prompt_text); !s.ok()) {
      throw CliError(2, "the prompt: " + std::string(s.message()));
    }
    if (absl::Status s = m.tok->CheckEncodable(args->system); !s.ok()) {
      throw CliError(2, "--system: " + std::string(s.message()));
    }
    if (args->chat) {
      std::vector<tokenizer::ChatMessage> messages;
      if (!args->system.empty()) messages.push_back({"system", args->system});
      messages.push_back({"user", prompt_text});
      prompt = RenderChatTokens(m, args->template_file, messages, true);
    } else {
      prompt = m.tok->Encode(prompt_text, m.tok->add_bos_default(), /*parse_special=*/true);
    }
    auto be = backend::MakeBackend(args->backend, {args->threads});
    ThrowIfError(be.status());

    runtime::EngineOptions eo = ToEngineOptions(args->engine);
    eo.max_running = 1;
    eo.max_spec_k = std::max(1, args->spec_k);
    if (StartPipeline(args->engine, *m.model, **be, &eo)) return;  // this process was a stage
    auto engine = runtime::Engine::Create(*m.model, *m.tok, **be, eo);
    ThrowIfError(engine.status());
    PrintStages(**engine);

    runtime::Request req;
    req.prompt = prompt;
    req.params = args->params;
    req.seed = args->seed;
    std::unique_ptr<spec::Drafter> drafter;
    if (speculative) {
      req.spec.k = args->spec_k;
      req.spec.adaptive = args->spec_adaptive;
      if (args->spec_mode.empty()) {
        req.spec.mode = spec::DefaultSpecMode(args->params.greedy());
      } else {
        auto mode = spec::ParseSpecMode(args->spec_mode);
        ThrowIfError(mode.status());
        req.spec.mode = *mode;
      }
      std::string draft_path = "ngram";
      if (args->draft == "self") {
        draft_path = "self";  // the model's own MTP block (docs/speculative.md)
      } else if (!args->ngram) {
        auto path = store::ResolveModel(args->draft);
        ThrowIfError(path.status());
        draft_path = *path;
      }
      auto d = spec::MakeDrafter(*m.model, **be, draft_path, (*engine)->ctx());
      if (!d.ok() && draft_path == "self") {
        throw CliError(2, args->model + ": " + std::string(d.status().message()));
      }
      ThrowIfError(d.status());
      drafter = std::move(*d);
      req.drafter = drafter.get();
      if (draft_path == "self" && !args->quiet) {
        const models::Config& c = m.model->config();
        std::fprintf(stderr, "drafter: the model drafts for itself with its MTP head (%s "
                     "blk.%lld.nextn, %lld block), K = %d\n", c.arch.c_str(),
                     static_cast<long long>(c.n_layer), static_cast<long long>(c.n_nextn),
                     args->spec_k);
      }
    }
    if (!args->json) {
      req.on_text = [](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      };
    }
    const std::string mode_name = speculative ? spec::SpecModeName(req.spec.mode) : "";
    auto r = (*engine)->Run(std::move(req));
    ThrowIfError(r.status());
    const runtime::GenerateResult& g = r->gen;
    const spec::SpecStats& stats = r->stats;
    const double n_dec = static_cast<double>(g.tokens.size());
    const double decode_tps = n_dec > 1 ? (n_dec - 1) / g.decode_seconds : 0.0;
    if (args->json) {
      nlohmann::json j;
      j["text"] = g.text;
      j["tokens"] = g.tokens;
      j["prompt_tokens"] = g.prompt_tokens;
      j["finish_reason"] = std::string(sampling::OpenAIFinishReason(g.finish));
      j["timings"] = {{"prefill_seconds", g.prefill_seconds},
                      {"decode_seconds", g.decode_seconds},
                      {"decode_tokens_per_second", decode_tps}};
      j["backend"] = args->backend;
      if (speculative) {
        j["speculative"] = {{"drafter", drafter->name()},
                            {"mode", mode_name},
                            {"rounds", stats.rounds},
                            {"drafted", stats.drafted},
                            {"accepted", stats.accepted},
                            {"accepted_at", stats.accepted_at},
                            {"proposed_at", stats.proposed_at}};
      }
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      std::fflush(stdout);
      return;
    }
    // The text ends with a newline on stdout, flushed before any stats reach stderr, so the two
    // never run together in a terminal or a shared pipe.
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (speculative && !args->quiet) {
      std::string per;
      for (size_t i = 0; i < stats.proposed_at.size(); ++i) {
        if (stats.proposed_at[i] == 0) continue;
        per += absl::StrFormat(" %zu:%.2f", i + 1,
                               static_cast<double>(stats.accepted_at[i]) / stats.proposed_at[i]);
      }
      std::fprintf(stderr,
                   "speculative (%s): %lld rounds, drafted %lld, accepted %lld (%.1f%%), "
                   "%.2f tokens per target forward; acceptance by draft position:%s\n",
                   drafter->name().c_str(), static_cast<long long>(stats.rounds),
                   static_cast<long long>(stats.drafted), static_cast<long long>(stats.accepted),
                   stats.drafted ? 100.0 * stats.accepted / stats.drafted : 0.0,
                   stats.mean_accepted_length(), per.c_str());
    }
    if (!args->quiet) {
      std::fprintf(stderr,
                   "prefill: %lld tokens in %.3f s (%.1f tok/s)  decode: %.0f tokens in %.3f s "
                   "(%.1f tok/s)  finish: %s  backend: %s\n",
                   static_cast<long long>(g.prompt_tokens), g.prefill_seconds,
                   g.prompt_tokens / g.prefill_seconds, n_dec, g.decode_seconds, decode_tps,
                   std::string(sampling::OpenAIFinishReason(g.finish)).c_str(),
                   args->backend.c_str());
    }
  });
}

}  // namespace lockstep::cli
