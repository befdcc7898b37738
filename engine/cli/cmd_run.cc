// `lockstep run`: generate from a prompt, streaming text to stdout; stats go to stderr.
#include <cstdio>

#include "absl/strings/str_format.h"

#include "engine/cli/commands.h"
#include "engine/cli/model_io.h"
#include "engine/runtime/generate.h"
#include "engine/runtime/model_store.h"
#include "engine/spec/speculative.h"
#include "oracle/make_backend.h"

namespace lockstep::cli {
namespace {

std::string drafter_name_for_stats(bool ngram) { return ngram ? "ngram" : "draft model"; }

}  // namespace

void RegisterRun(CLI::App& app) {
  struct Args {
    std::string model, prompt, system, template_file, backend = "cpu", draft, spec_mode;
    bool chat = false, quiet = false, ngram = false, spec_adaptive = false;
    int spec_k = 4;
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
  auto* draft = sub->add_option("--draft", args->draft,
                                "Draft model (GGUF path or known name) for speculative decoding");
  auto* ngram = sub->add_flag("--ngram", args->ngram, "Speculative decoding with prompt lookup");
  draft->excludes(ngram);
  sub->add_option("--spec-k", args->spec_k, "Draft tokens per round (the maximum with --spec-adaptive)")
      ->capture_default_str();
  sub->add_flag("--spec-adaptive", args->spec_adaptive, "Choose K per round (up to --spec-k)");
  sub->add_option("--spec-mode", args->spec_mode,
                  "greedy | reject | coupled (default: greedy at --temp 0, else coupled)");
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
    auto print = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
    const bool speculative = !args->draft.empty() || args->ngram;
    if (!speculative && !args->spec_mode.empty()) {
      throw CliError(2, "--spec-mode needs --draft or --ngram");
    }
    absl::StatusOr<runtime::GenerateResult> r;
    spec::SpecStats stats;
    if (speculative) {
      spec::SpecOptions so;
      so.k = args->spec_k;
      so.adaptive = args->spec_adaptive;
      if (args->spec_mode.empty()) {
        so.mode = args->params.greedy() ? spec::SpecMode::kGreedy : spec::SpecMode::kCoupled;
      } else {
        auto mode = spec::ParseSpecMode(args->spec_mode);
        ThrowIfError(mode.status());
        so.mode = *mode;
      }
      std::unique_ptr<spec::Drafter> drafter;
      if (args->ngram) {
        drafter = spec::MakeNgramDrafter(m.model->config().n_vocab);
      } else {
        LoadedModel d = LoadModel(args->draft, !args->quiet);
        auto md = spec::MakeModelDrafter(*m.model, std::move(d.model), **be);
        ThrowIfError(md.status());
        drafter = std::move(*md);
      }
      auto sr = spec::GenerateSpeculative(*m.model, **be, *m.tok, *drafter, prompt, args->params,
                                          args->seed, so, print);
      ThrowIfError(sr.status());
      stats = sr->stats;
      r = std::move(sr->gen);
    } else {
      r = runtime::Generate(*m.model, **be, *m.tok, prompt, args->params, args->seed, print);
    }
    ThrowIfError(r.status());
    std::fputc('\n', stdout);
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
                   drafter_name_for_stats(args->ngram).c_str(), static_cast<long long>(stats.rounds),
                   static_cast<long long>(stats.drafted), static_cast<long long>(stats.accepted),
                   stats.drafted ? 100.0 * stats.accepted / stats.drafted : 0.0,
                   stats.mean_accepted_length(), per.c_str());
    }
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
