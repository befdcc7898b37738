// `lockstep bench-spec`: plain decode vs speculative decoding with each drafter and mode, on the
// same prompts: acceptance per draft position, mean accepted length, tok/s (median of
// interleaved reps) and whether the output is identical to plain decode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/str_format.h"
#include "engine/cli/commands.h"
#include "engine/cli/model_io.h"
#include "engine/runtime/generate.h"
#include "engine/backend/backend.h"

namespace lockstep::cli {
namespace {

struct Cell {
  std::string drafter, mode;
  std::vector<double> tok_s;
  spec::SpecStats stats;
  int64_t identical = 0, outputs = 0;
};

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<std::string> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw CliError(2, "cannot read --prompts file " + path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) throw CliError(2, path + " holds no prompts (one per line)");
  return out;
}

}  // namespace

void RegisterBenchSpec(CLI::App& app) {
  struct Args {
    std::string target, draft, prompts;
    int n = 48, k = 4, reps = 3, threads = 0;
    float temp = 0.8f;
    bool chat = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("bench-spec", "Plain vs speculative decoding, per drafter and mode");
  sub->add_option("TARGET", a->target, "Target model")->required();
  sub->add_option("--draft", a->draft,
                  "Draft model, or self: the target's MTP head (the n-gram drafter always runs too)");
  sub->add_option("--prompts", a->prompts, "File with one prompt per line")->required();
  sub->add_option("-n", a->n, "Tokens per prompt")->capture_default_str();
  sub->add_option("--spec-k", a->k, "Draft tokens per round")->capture_default_str();
  sub->add_option("--reps", a->reps, "Interleaved repetitions")->capture_default_str();
  sub->add_option("--temp", a->temp, "Temperature of the sampled modes (coupled, reject)")
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "cpu backend threads (0 = all)");
  sub->add_flag("--chat", a->chat, "Wrap each prompt with the chat template");
  sub->callback([a] {
    LoadedModel t = LoadModel(a->target, false);
    auto be = backend::MakeBackend("cpu", {a->threads});
    ThrowIfError(be.status());
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& p : ReadPrompts(a->prompts)) {
      if (a->chat) {
        prompts.push_back(t.tok->Encode(RenderChat(t, "", {{"user", p}}, true), false, true));
      } else {
        prompts.push_back(t.tok->Encode(p, t.tok->add_bos_default(), true));
      }
    }
    std::unique_ptr<spec::Drafter> model_drafter;
    if (a->draft == "self") {  // the target's own MTP head (docs/speculative.md)
      auto md = spec::MakeMtpDrafter(*t.model, **be);
      if (!md.ok()) throw CliError(2, a->target + ": " + std::string(md.status().message()));
      model_drafter = std::move(*md);
    } else if (!a->draft.empty()) {
      LoadedModel d = LoadModel(a->draft, false);
      auto md = spec::MakeModelDrafter(*t.model, std::move(d.model), **be);
      ThrowIfError(md.status());
      model_drafter = std::move(*md);
    }
    std::unique_ptr<spec::Drafter> ngram = spec::MakeNgramDrafter(t.model->config().n_vocab);
    std::vector<std::pair<std::string, spec::Drafter*>> drafters = {{"ngram", ngram.get()}};
    if (model_drafter) drafters.push_back({model_drafter->name(), model_drafter.get()});
    const std::vector<spec::SpecMode> modes = {spec::SpecMode::kGreedy, spec::SpecMode::kCoupled,
                                               spec::SpecMode::kReject};
    auto noop = [](std::string_view) {};
    std::map<std::string, std::vector<double>> plain_tok_s;
    std::map<std::string, std::vector<std::vector<int32_t>>> plain_out;
    std::vector<Cell> cells;
    for (const auto& [dn, _] : drafters) {
      for (spec::SpecMode m : modes) {
        cells.push_back(Cell{.drafter = dn, .mode = spec::SpecModeName(m), .tok_s = {}, .stats = {}});
      }
    }
    for (int rep = 0; rep < a->reps; ++rep) {
      for (const char* kind : {"greedy", "sampled"}) {
        sampling::SamplingParams params;
        params.max_tokens = a->n;
        params.temperature = std::string(kind) == "greedy" ? 0.0f : a->temp;
        int64_t toks = 0;
        double secs = 0;
        auto& outs = plain_out[kind];
        outs.clear();
        for (size_t i = 0; i < prompts.size(); ++i) {
          auto r = runtime::Generate(*t.model, **be, *t.tok, prompts[i], params, 1000 + i, noop);
          ThrowIfError(r.status());
          toks += static_cast<int64_t>(r->tokens.size());
          secs += r->prefill_seconds + r->decode_seconds;
          outs.push_back(r->tokens);
        }
        plain_tok_s[kind].push_back(toks / secs);
      }
      size_t ci = 0;
      for (const auto& [dn, drafter] : drafters) {
        for (spec::SpecMode m : modes) {
          Cell& cell = cells[ci++];
          sampling::SamplingParams params;
          params.max_tokens = a->n;
          params.temperature = m == spec::SpecMode::kGreedy ? 0.0f : a->temp;
          const auto& ref = plain_out[m == spec::SpecMode::kGreedy ? "greedy" : "sampled"];
          int64_t toks = 0;
          double secs = 0;
          for (size_t i = 0; i < prompts.size(); ++i) {
            spec::SpecStats st;
            auto g = runtime::Generate(*t.model, **be, *t.tok, prompts[i], params, 1000 + i, noop,
                                       drafter, {m, a->k, false}, &st);
            ThrowIfError(g.status());
            toks += static_cast<int64_t>(g->tokens.size());
            secs += g->prefill_seconds + g->decode_seconds;
            cell.identical += g->tokens == ref[i];
            ++cell.outputs;
            if (rep == 0) cell.stats.Add(st);
          }
          cell.tok_s.push_back(toks / secs);
        }
      }
    }
    std::printf("target %s, %zu prompts x %d tokens, K=%d, %d interleaved reps (median), cpu backend\n",
                t.path.c_str(), prompts.size(), a->n, a->k, a->reps);
    std::printf("%-12s %-8s %9s %8s %9s %8s  %-12s %s\n", "drafter", "mode", "tok/s", "speedup",
                "accept", "len", "identical", "acceptance by position");
    std::printf("%-12s %-8s %9.2f %8s\n", "plain", "greedy", MedianOf(plain_tok_s["greedy"]), "1.00");
    std::printf("%-12s %-8s %9.2f %8s\n", "plain", "sampled", MedianOf(plain_tok_s["sampled"]), "1.00");
    for (const Cell& c : cells) {
      const double base = MedianOf(plain_tok_s[c.mode == "greedy" ? "greedy" : "sampled"]);
      std::string per;
      for (size_t j = 0; j < c.stats.proposed_at.size(); ++j) {
        if (c.stats.proposed_at[j] > 0) {
          per += absl::StrFormat(" %.2f", static_cast<double>(c.stats.accepted_at[j]) / c.stats.proposed_at[j]);
        }
      }
      const std::string ident = c.mode == "reject"
                                    ? absl::StrFormat("%lld/%lld*", static_cast<long long>(c.identical),
                                                      static_cast<long long>(c.outputs))
                                    : absl::StrFormat("%lld/%lld", static_cast<long long>(c.identical),
                                                      static_cast<long long>(c.outputs));
      std::printf("%-12s %-8s %9.2f %8.2f %8.1f%% %8.2f  %-12s%s\n", c.drafter.c_str(), c.mode.c_str(),
                  MedianOf(c.tok_s), MedianOf(c.tok_s) / base,
                  c.stats.drafted ? 100.0 * c.stats.accepted / c.stats.drafted : 0.0,
                  c.stats.mean_accepted_length(), ident.c_str(), per.c_str());
    }
    std::printf("* reject mode guarantees the law of each token, not the bytes; identical counts are informative only\n");
    for (const Cell& c : cells) {
      if (c.mode != "reject" && c.identical != c.outputs) {
        throw CliError(1, "bench-spec: " + c.drafter + "/" + c.mode + " output differs from plain decode");
      }
    }
  });
}

}  // namespace lockstep::cli
