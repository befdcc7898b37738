// `lockstep ranks` and `lockstep trim-draft` (FR-Spec, docs/frspec.md): rank token ids by how
// often a model generates them, write a draft whose LM head keeps the top N, and A/B the
// trimmed draft against the untrimmed one (same output, byte for byte; speed and acceptance).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "engine/cli/bench_support.h"
#include "engine/cli/commands.h"
#include "engine/cli/model_io.h"
#include "engine/models/requantize.h"
#include "engine/runtime/generate.h"
#include "engine/store/model_store.h"
#include "engine/spec/frspec.h"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep::cli {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CliError(2, std::string("cannot read ") + what + " " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The prompts file: one prompt per line (a trailing '\r' is dropped); empty lines are skipped.
std::vector<std::string> ReadPrompts(const std::string& path) {
  const std::string text = ReadWholeFile(path, "--prompts file");
  std::vector<std::string> prompts;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) throw CliError(2, "--prompts file " + path + " holds no prompt (one per line)");
  return prompts;
}

std::vector<int32_t> EncodePrompt(const LoadedModel& m, const std::string& prompt, bool chat) {
  if (!chat) return m.tok->Encode(prompt, m.tok->add_bos_default(), /*parse_special=*/true);
  const std::string text = RenderChat(m, "", {{"user", prompt}}, true);
  return m.tok->Encode(text, /*add_bos=*/false, /*parse_special=*/true);
}

// One progress line on stderr: redrawn in place on a terminal, one line per update otherwise.
void Progress(const std::string& label, int64_t done, int64_t total, const std::string& tail) {
  const bool tty = isatty(STDERR_FILENO);
  const int width = 30, filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "%s%s %lld/%lld [%-*s] %s%s", tty ? "\r" : "", label.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), width,
               std::string(filled, '#').c_str(), tail.c_str(), tty ? "\033[K" : "\n");
  if (tty && done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void WriteFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = absl::StrFormat("%s.tmp.%d", path, static_cast<int>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw CliError(2, "cannot write " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::filesystem::remove(tmp);
      throw CliError(2, "writing " + tmp + " failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    throw CliError(2, "cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
}

// ---- ranks ----

struct RanksArgs {
  std::string model, prompts, out, backend = "cpu";
  int n = 32, threads = 0;
  bool chat = false;
  float temp = 0.0f;
  uint64_t seed = 0;
};

void RunRanks(const RanksArgs& a) {
  if (a.n < 1) throw CliError(2, "-n must be >= 1");
  const std::vector<std::string> prompts = ReadPrompts(a.prompts);
  LoadedModel m = LoadModel(a.model, true);
  if (!m.model->weights().output_ids.empty()) {
    throw CliError(2, "ranks needs an untrimmed model (" + m.path + " has lockstep.trim.ids)");
  }
  auto be = backend::MakeBackend(a.backend, {a.threads});
  ThrowIfError(be.status());
  sampling::SamplingParams params;
  params.max_tokens = a.n;
  params.temperature = a.temp;
  ThrowIfError(params.Validate());
  spec::TokenCounts counts(m.model->config().n_vocab);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> prompt = EncodePrompt(m, prompts[i], a.chat);
    auto r = runtime::Generate(*m.model, **be, *m.tok, prompt, params, a.seed,
                               [](std::string_view) {});
    if (!r.ok()) throw CliError(2, absl::StrFormat("prompt %zu: %s", i + 1, r.status().message()));
    ThrowIfError(counts.Add(r->tokens));
    Progress("prompt", static_cast<int64_t>(i + 1), static_cast<int64_t>(prompts.size()),
             absl::StrFormat("%lld tokens, %.1f tok/s", static_cast<long long>(counts.total()),
                             counts.total() / SecondsSince(t0)));
  }
  const std::vector<int32_t> ranks = spec::RankByCount(counts);
  WriteFileAtomically(a.out, spec::FormatRanks(ranks));
  std::printf("ranks: %s (%lld ids, rank order)\n", a.out.c_str(),
              static_cast<long long>(ranks.size()));
  std::printf("prompts %zu, tokens counted %lld (up to %d each, %s), distinct ids %lld of %lld\n",
              prompts.size(), static_cast<long long>(counts.total()), a.n,
              a.temp == 0.0f ? "greedy" : absl::StrFormat("temp %g seed %llu", a.temp,
                                                           static_cast<unsigned long long>(a.seed)).c_str(),
              static_cast<long long>(counts.distinct()), static_cast<long long>(counts.n_vocab()));
  std::string cov;
  for (int64_t top : {1024, 4096, 16384}) {
    absl::StrAppendFormat(&cov, "  top %lld: %.2f%%", static_cast<long long>(top),
                          100.0 * spec::Coverage(counts, ranks, top));
  }
  std::printf("coverage of the counted tokens:%s\n", cov.c_str());
}

// ---- trim-draft ----

struct TrimArgs {
  std::string draft, ranks, out, type;
  int64_t n = 0;
  bool validate = false, chat = false;
  // --validate
  std::string target, untrimmed, trimmed, prompts, backend = "cpu";
  int tokens = 64, spec_k = 4, reps = 3, threads = 0;
};

void RunTrim(const TrimArgs& a) {
  if (a.draft.empty() || a.ranks.empty() || a.n == 0 || a.out.empty()) {
    throw CliError(2, "trim-draft needs DRAFT RANKS N --out OUT (or --validate ...)");
  }
  auto path = store::ResolveModel(a.draft);
  ThrowIfError(path.status());
  std::error_code ec;
  if (std::filesystem::exists(a.out) && std::filesystem::equivalent(*path, a.out, ec)) {
    throw CliError(2, "--out " + a.out + " is the draft itself; write the trimmed copy elsewhere");
  }
  auto file = gguf::File::Open(*path);
  ThrowIfError(file.status());
  auto n_vocab = spec::DraftVocabSize(*file);
  ThrowIfError(n_vocab.status());
  if (a.n < 1 || a.n > *n_vocab) {
    throw CliError(2, absl::StrFormat("N = %lld must be in [1, %lld] (the draft's vocabulary)",
                                      static_cast<long long>(a.n), static_cast<long long>(*n_vocab)));
  }
  auto ranks = spec::ParseRanks(ReadWholeFile(a.ranks, "ranks file"), *n_vocab, a.n);
  if (!ranks.ok()) throw CliError(2, a.ranks + ": " + std::string(ranks.status().message()));
  spec::TrimOptions options;
  options.n = a.n;
  options.source_name = std::filesystem::path(*path).filename().string();
  if (!a.type.empty()) {
    auto t = models::ParseTargetType(a.type);
    if (!t.ok()) throw CliError(2, "--type: " + std::string(t.status().message()));
    options.type = *t;
  }
  auto trimmed = spec::TrimDraft(*file, *ranks, options);
  ThrowIfError(trimmed.status());
  WriteFileAtomically(a.out, trimmed->bytes);
  // The loader's own checks (ids distinct and in range, head shape) on what was written.
  auto check = models::Model::Load(a.out);
  if (!check.ok()) {
    throw CliError(2, "the written file " + a.out + " does not load: " +
                          std::string(check.status().message()));
  }
  const spec::TrimSummary& s = trimmed->summary;
  std::fprintf(stderr,
               "head: %s %lld x %lld (%s) -> %s %lld x %lld, %.2f MiB -> %.2f MiB; "
               "token_embd.weight kept whole for input embedding%s\n",
               quant::Traits(s.source_type).name, static_cast<long long>(s.n_vocab),
               static_cast<long long>(s.n_embd), s.tied ? "tied: token_embd.weight" : "output.weight",
               quant::Traits(s.head_type).name, static_cast<long long>(s.n_kept),
               static_cast<long long>(s.n_embd), s.head_bytes_before / 1048576.0,
               s.head_bytes_after / 1048576.0, s.tied ? "" : " (unchanged)");
  std::printf("%s\n", a.out.c_str());
}

// Greedy output of each variant for every prompt, and the time each run took.
struct VariantRun {
  std::vector<std::vector<int32_t>> tokens;  // [prompt] generated ids
  std::vector<std::string> text;             // [prompt]
  std::vector<double> rep_tok_s;             // [rep] generated tokens / wall seconds (all prompts)
  spec::SpecStats stats;                     // summed over the prompts of the first rep
};

// Milliseconds per single-token draft forward after a `ctx`-token context: the cost a drafter
// pays per proposed token, where the head's share shows.
double DraftStepMs(const models::Model& m, backend::Backend& be, int ctx, int steps) {
  models::RunnerOptions o;
  o.max_step_tokens = std::max(ctx, 1);
  o.max_logit_rows = 1;
  o.n_blocks = (ctx + steps + o.block_size - 1) / o.block_size;
  auto runner = models::Runner::Create(m, be, o);
  ThrowIfError(runner.status());
  std::vector<int32_t> blocks(o.n_blocks);
  for (int64_t b = 0; b < o.n_blocks; ++b) blocks[b] = static_cast<int32_t>(b);
  std::vector<int32_t> prefix(ctx, 1);
  models::StepEntry e{prefix, 0, blocks, 1};
  std::vector<float> logits;
  ThrowIfError((*runner)->Forward(std::span(&e, 1), &logits));
  std::vector<int32_t> one = {1};
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    models::StepEntry s{one, ctx + i, blocks, 1};
    ThrowIfError((*runner)->Forward(std::span(&s, 1), &logits));
  }
  return 1000.0 * SecondsSince(t0) / steps;
}

// First position where two greedy outputs differ, as a sentence.
std::string FirstDifference(const std::vector<int32_t>& want, const std::vector<int32_t>& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  return absl::StrFormat("first difference at generated token %zu (plain %s, spec %s; lengths %zu vs %zu)",
                         i, i < want.size() ? std::to_string(want[i]) : "end",
                         i < got.size() ? std::to_string(got[i]) : "end", want.size(), got.size());
}

void RunValidate(const TrimArgs& a) {
  if (!a.draft.empty() || !a.ranks.empty() || a.n != 0 || !a.out.empty() || !a.type.empty()) {
    throw CliError(2, "--validate takes --target --draft --trimmed --prompts, not DRAFT RANKS N --out --type");
  }
  if (a.target.empty() || a.untrimmed.empty() || a.trimmed.empty() || a.prompts.empty()) {
    throw CliError(2, "--validate needs --target, --draft, --trimmed and --prompts");
  }
  if (a.tokens < 1 || a.spec_k < 1 || a.reps < 3) {
    throw CliError(2, "--validate needs -n >= 1, --spec-k >= 1 and --reps >= 3 (tok/s is a median)");
  }
  const std::vector<std::string> prompts = ReadPrompts(a.prompts);
  LoadedModel target = LoadModel(a.target, true);
  LoadedModel untrimmed = LoadModel(a.untrimmed, true);
  LoadedModel trimmed = LoadModel(a.trimmed, true);
  ThrowIfError(spec::CheckTrimOf(untrimmed.model->file(), trimmed.model->file()));
  auto be = backend::MakeBackend(a.backend, {a.threads});
  ThrowIfError(be.status());
  const int64_t kept = static_cast<int64_t>(trimmed.model->weights().output_ids.size());
  const double step_full = DraftStepMs(*untrimmed.model, **be, 32, 32);
  const double step_trim = DraftStepMs(*trimmed.model, **be, 32, 32);

  auto d_full = spec::MakeModelDrafter(*target.model, std::move(untrimmed.model), **be);
  ThrowIfError(d_full.status());
  auto d_trim = spec::MakeModelDrafter(*target.model, std::move(trimmed.model), **be);
  ThrowIfError(d_trim.status());
  spec::Drafter* drafters[3] = {nullptr, d_full->get(), d_trim->get()};
  const char* names[3] = {"plain target", "spec, untrimmed draft", "spec, trimmed draft"};

  std::vector<std::vector<int32_t>> encoded;
  for (const std::string& p : prompts) encoded.push_back(EncodePrompt(target, p, a.chat));
  sampling::SamplingParams params;
  params.max_tokens = a.tokens;
  params.temperature = 0.0f;
  spec::SpecOptions so;
  so.mode = spec::SpecMode::kGreedy;
  so.k = a.spec_k;

  VariantRun runs[3];
  std::vector<std::string> failures;
  const int64_t total_runs = static_cast<int64_t>(a.reps) * 3 * static_cast<int64_t>(prompts.size());
  int64_t done = 0;
  for (int rep = 0; rep < a.reps; ++rep) {
    // Interleaved, and the variant that goes first rotates, so drift (thermal, page cache) is
    // shared rather than charged to one variant.
    for (int j = 0; j < 3; ++j) {
      const int v = (rep + j) % 3;
      VariantRun& run = runs[v];
      int64_t generated = 0;
      double seconds = 0;
      for (size_t p = 0; p < encoded.size(); ++p) {
        const auto t0 = Clock::now();
        runtime::GenerateResult g;
        if (v == 0) {
          auto r = runtime::Generate(*target.model, **be, *target.tok, encoded[p], params, 0,
                                     [](std::string_view) {});
          ThrowIfError(r.status());
          g = std::move(*r);
        } else {
          spec::SpecStats st;
          auto r = runtime::Generate(*target.model, **be, *target.tok, encoded[p], params, 0,
                                     [](std::string_view) {}, drafters[v], so, &st);
          ThrowIfError(r.status());
          if (rep == 0) run.stats.Add(st);
          g = std::move(*r);
        }
        seconds += SecondsSince(t0);
        generated += static_cast<int64_t>(g.tokens.size());
        if (run.tokens.size() <= p) {
          run.tokens.push_back(g.tokens);
          run.text.push_back(g.text);
        } else if (run.tokens[p] != g.tokens || run.text[p] != g.text) {
          failures.push_back(absl::StrFormat("%s, prompt %zu: rep %d differs from rep 1 (%s)",
                                             names[v], p + 1, rep + 1,
                                             FirstDifference(run.tokens[p], g.tokens)));
        }
        Progress(absl::StrFormat("rep %d/%d %-22s", rep + 1, a.reps, names[v]), ++done, total_runs,
                 "");
      }
      run.rep_tok_s.push_back(generated / seconds);
    }
  }
  for (int v = 1; v < 3; ++v) {
    for (size_t p = 0; p < prompts.size(); ++p) {
      if (runs[v].tokens[p] != runs[0].tokens[p] || runs[v].text[p] != runs[0].text[p]) {
        failures.push_back(absl::StrFormat("%s, prompt %zu: output differs from plain decode (%s)",
                                           names[v], p + 1,
                                           FirstDifference(runs[0].tokens[p], runs[v].tokens[p])));
      }
    }
  }

  int64_t plain_tokens = 0;
  for (const auto& t : runs[0].tokens) plain_tokens += static_cast<int64_t>(t.size());
  std::printf("A/B over %zu prompts x %d reps, %lld generated tokens per pass (greedy, up to %d "
              "each), spec K = %d, trimmed head %lld of %lld ids\n",
              prompts.size(), a.reps, static_cast<long long>(plain_tokens), a.tokens, a.spec_k,
              static_cast<long long>(kept), static_cast<long long>(target.model->config().n_vocab));
  double med[3];
  for (int v = 0; v < 3; ++v) {
    med[v] = Median(runs[v].rep_tok_s);
    std::string reps;
    for (double x : runs[v].rep_tok_s) absl::StrAppendFormat(&reps, " %.1f", x);
    std::printf("  %-22s %7.1f tok/s (median; reps:%s)", names[v], med[v], reps.c_str());
    if (v > 0) {
      const spec::SpecStats& s = runs[v].stats;
      std::string per;
      for (size_t i = 0; i < s.proposed_at.size(); ++i) {
        if (s.proposed_at[i] > 0) {
          absl::StrAppendFormat(&per, " %zu:%.2f", i + 1,
                                static_cast<double>(s.accepted_at[i]) / s.proposed_at[i]);
        }
      }
      std::printf("  acceptance %.1f%% (%lld/%lld), %.2f tokens per target forward, by position:%s",
                  s.drafted ? 100.0 * s.accepted / s.drafted : 0.0,
                  static_cast<long long>(s.accepted), static_cast<long long>(s.drafted),
                  s.mean_accepted_length(), per.c_str());
    }
    std::printf("\n");
  }
  std::printf("  draft forward, 1 token after 32: untrimmed %.3f ms, trimmed %.3f ms (%.1f%% less)\n",
              step_full, step_trim, 100.0 * (step_full - step_trim) / step_full);
  const bool identical = failures.empty();
  std::printf("  identical output: %s\n", identical ? "yes (every spec output == plain, every rep)"
                                                     : "NO");
  for (const std::string& f : failures) std::printf("    %s\n", f.c_str());
  const double ratio = med[2] / med[1];
  const char* verdict = FrSpecVerdict(identical, ratio);
  std::printf("%s: trimmed/untrimmed tok/s = %.1f / %.1f = %.3f %s; trimmed vs plain %.3fx\n",
              verdict, med[2], med[1], ratio, FrSpecRule().c_str(),
              med[2] / med[0]);
  // The verdict reads medians only; say so when the reps themselves do not separate.
  const auto [lo_f, hi_f] = std::minmax_element(runs[1].rep_tok_s.begin(), runs[1].rep_tok_s.end());
  const auto [lo_t, hi_t] = std::minmax_element(runs[2].rep_tok_s.begin(), runs[2].rep_tok_s.end());
  if (*lo_t <= *hi_f && *lo_f <= *hi_t) {
    std::printf("  note: the reps' ranges overlap (untrimmed %.1f..%.1f, trimmed %.1f..%.1f tok/s): "
                "the difference is within run-to-run noise\n",
                *lo_f, *hi_f, *lo_t, *hi_t);
  }
  std::fflush(stdout);
  if (verdict[0] == 'B') throw CliError(1, identical ? "the trimmed draft is slower" : "outputs differ");
}

}  // namespace

void RegisterFrSpec(CLI::App& app) {
  auto r = std::make_shared<RanksArgs>();
  CLI::App* ranks = app.add_subcommand(
      "ranks", "Rank token ids by how often a model generates them (FR-Spec, docs/frspec.md)");
  ranks->add_option("MODEL", r->model, "GGUF file path or known model name")->required();
  ranks->add_option("--prompts", r->prompts, "Prompts file: one prompt per line")->required();
  ranks->add_option("--out", r->out, "Ranks file to write: every id, one per line, rank order")
      ->required();
  ranks->add_option("-n,--max-tokens", r->n, "Tokens to generate per prompt")->capture_default_str();
  ranks->add_flag("--chat", r->chat, "Wrap each prompt as a user turn with the chat template");
  ranks->add_option("--temp", r->temp, "Temperature; 0 = greedy")->capture_default_str();
  ranks->add_option("--seed", r->seed, "Sampling seed")
      ->check(SeedCheck())->capture_default_str();
  ranks->add_option("--backend", r->backend, "Backend: " + BackendChoices())->capture_default_str();
  ranks->add_option("--threads", r->threads, "cpu backend threads (0 = all cores)");
  ranks->callback([r] { RunRanks(*r); });

  auto t = std::make_shared<TrimArgs>();
  CLI::App* trim = app.add_subcommand(
      "trim-draft", "Write a draft whose LM head keeps the top-N ranked ids, or --validate one "
                    "(FR-Spec, docs/frspec.md)");
  trim->add_option("DRAFT", t->draft, "Draft GGUF file path or known model name");
  trim->add_option("RANKS", t->ranks, "Ranks file (from `lockstep ranks`)");
  trim->add_option("N", t->n, "Ids to keep: the first N of RANKS, in [1, n_vocab]");
  trim->add_option("--out", t->out, "Trimmed GGUF to write");
  trim->add_option("--type", t->type, "Re-encode the new head to this type (default: keep its type)");
  trim->add_flag("--validate", t->validate,
                 "A/B: plain target vs spec with --draft vs spec with --trimmed");
  trim->add_option("--target", t->target, "--validate: target model");
  trim->add_option("--draft", t->untrimmed, "--validate: the untrimmed draft");
  trim->add_option("--trimmed", t->trimmed, "--validate: the trimmed draft");
  trim->add_option("--prompts", t->prompts, "--validate: prompts file, one prompt per line");
  trim->add_option("-n,--max-tokens", t->tokens, "--validate: tokens per prompt")
      ->capture_default_str();
  trim->add_option("--spec-k", t->spec_k, "--validate: draft tokens per round")->capture_default_str();
  trim->add_option("--reps", t->reps, "--validate: interleaved reps (>= 3)")->capture_default_str();
  trim->add_flag("--chat", t->chat, "--validate: wrap each prompt with the chat template");
  trim->add_option("--backend", t->backend, "--validate: ref | cpu")->capture_default_str();
  trim->add_option("--threads", t->threads, "--validate: cpu backend threads (0 = all cores)");
  trim->callback([t] { t->validate ? RunValidate(*t) : RunTrim(*t); });
}

}  // namespace lockstep::cli
