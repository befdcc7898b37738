// `lockstep bench`: prefill and decode speed of a model on a backend, with the memory
// bandwidth measured in the same run (host backends: read bandwidth; cuda: device copy), so decode speed is reported as a fraction of the weight
// wall (bandwidth / bytes of weights read per decoded token). Medians of interleaved reps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "engine/cli/bench_support.h"
#include "engine/cli/commands.h"
#include "engine/cli/model_io.h"
#include "nlohmann/json.hpp"
#include "engine/backend/backend.h"
#include "engine/cli/engine_flags.h"
#include "engine/runtime/engine.h"
#include "absl/strings/numbers.h"
#include <sstream>

namespace lockstep::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> ParseConcurrency(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1 || v > 1024) {
      throw CliError(2, "--concurrency: \"" + item + "\" is not a count in [1, 1024]");
    }
    out.push_back(v);
  }
  if (out.empty()) throw CliError(2, "--concurrency needs at least one count");
  return out;
}

}  // namespace

void RegisterBench(CLI::App& app) {
  struct Args {
    std::string model, backend = "cpu", concurrency = "1";
    int threads = 0, prompt_tokens = 64, gen_tokens = 32, reps = 3;
    bool json = false, profile_ops = false, host_greedy = false;
    EngineFlags engine;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("bench", "Prefill/decode tok/s vs the weight wall");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name")->required();
  sub->add_option("--backend", args->backend, "Backend: " + BackendChoices());
  sub->add_option("--threads", args->threads, "Threads (0 = all cores)");
  sub->add_option("--prompt-tokens", args->prompt_tokens, "Prefill length")->check(CLI::Range(1, 8192));
  sub->add_option("--gen-tokens", args->gen_tokens, "Decoded tokens per rep")->check(CLI::Range(2, 8192));
  sub->add_option("--reps", args->reps, "Interleaved repetitions (median reported)")->check(CLI::Range(1, 100));
  sub->add_option("--concurrency", args->concurrency,
                  "Comma-separated counts of concurrent sequences, e.g. 1,4,8 (aggregate decode)")
      ->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->add_flag("--profile-ops", args->profile_ops,
                "cuda: time every op (graphs off); a per-op table on stderr at the end");
  sub->add_flag("--host-greedy", args->host_greedy,
                "Pick the greedy tokens on the host from downloaded logits rows instead of on the "
                "backend (the same tokens; measures what the backend pick saves)");
  AddEngineFlags(sub, args->engine);
  sub->callback([args] {
    LoadedModel m = LoadModel(args->model, false);
    const int threads = args->threads > 0 ? args->threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::vector<int> conc = ParseConcurrency(args->concurrency);
    auto be = backend::MakeBackend(args->backend,
                                   {.threads = threads, .graphs = true, .profile = args->profile_ops});
    ThrowIfError(be.status());
    const models::Config& c = m.model->config();
    runtime::EngineOptions eo = ToEngineOptions(args->engine);
    eo.backend_greedy = !args->host_greedy;
    eo.max_running = *std::max_element(conc.begin(), conc.end());
    eo.max_step_tokens = std::max<int64_t>(eo.max_step_tokens,
                                           int64_t{eo.max_running} * args->prompt_tokens);
    if (eo.ctx == 0) eo.ctx = args->prompt_tokens + args->gen_tokens;
    if (StartPipeline(args->engine, *m.model, **be, &eo)) return;  // this process was a stage
    auto engine = runtime::Engine::Create(*m.model, *m.tok, **be, eo);
    ThrowIfError(engine.status());
    PrintStages(**engine);
    if (!(*engine)->stage_lines().empty()) {
      // What the transport adds to a decode step: one row's residual down the chain and back.
      auto rt = (*engine)->ChainRoundTrip(c.n_embd, 50);
      ThrowIfError(rt.status());
      std::printf("pipeline   %zu stages: a decode row's residual (%lld floats) down every stage and "
                  "back: %.1f us (median of 50)\n", (*engine)->stage_lines().size(),
                  static_cast<long long>(c.n_embd), *rt * 1e6);
    }
    std::mt19937 rng(42);
    std::vector<int32_t> prompt(args->prompt_tokens);
    for (auto& id : prompt) id = static_cast<int32_t>(rng() % c.n_vocab);
    std::vector<float> buf(size_t{256} << 20);  // 1 GiB
    std::iota(buf.begin(), buf.begin() + 1024, 0.0f);
    std::vector<double> bw;
    std::vector<std::vector<double>> prefill(conc.size()), decode(conc.size());
    // Host backends: read bandwidth of the cores; a device backend: its copy bandwidth.
    const bool host = (*be)->name() == "cpu" || (*be)->name() == "ref";
    if (!host) buf = {};
    for (int r = 0; r < args->reps; ++r) {
      bw.push_back(host ? ReadBandwidth(buf, threads) : CopyBandwidth(**be));
      for (size_t i = 0; i < conc.size(); ++i) {
        const auto [pre, dec] = RunConcurrent(**engine, prompt, conc[i], args->gen_tokens);
        prefill[i].push_back(pre);
        decode[i].push_back(dec);
      }
    }
    const double bw_med = Median(bw), wbytes = WeightBytesPerToken(*m.model);
    const double wall = bw_med / wbytes;
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < conc.size(); ++i) {
      // Every rep's figure beside the median, so a report can give the spread.
      rows.push_back({{"concurrency", conc[i]}, {"prefill_tok_s", Median(prefill[i])},
                      {"decode_tok_s", Median(decode[i])},
                      {"decode_fraction_of_wall", Median(decode[i]) / wall},
                      {"prefill_tok_s_reps", prefill[i]}, {"decode_tok_s_reps", decode[i]}});
    }
    nlohmann::json out = {{"model", m.path}, {"backend", args->backend}, {"threads", threads},
                          {"isa", (*be)->Describe()}, {"bandwidth_kind", host ? "read" : "device copy"},
                          {"reps", args->reps}, {"greedy_pick", args->host_greedy ? "host" : "backend"}, {"prompt_tokens", args->prompt_tokens},
                          {"gen_tokens", args->gen_tokens}, {"read_bandwidth_GBps", bw_med / 1e9},
                          {"read_bandwidth_GBps_reps", [&] {
                             std::vector<double> g;
                             for (double b : bw) g.push_back(b / 1e9);
                             return g;
                           }()},
                          {"weight_bytes_per_token", wbytes}, {"weight_wall_tok_s", wall},
                          {"prefill_tok_s", rows[0]["prefill_tok_s"]},
                          {"decode_tok_s", rows[0]["decode_tok_s"]},
                          {"decode_fraction_of_wall", rows[0]["decode_fraction_of_wall"]},
                          {"by_concurrency", rows}};
    if (args->json) {
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%s", absl::StrFormat(
        "model      %s (%s, median of %d interleaved reps)\n"
        "bandwidth  %.2f GB/s %s (1 GiB buffer, same run)\n"
        "weights    %.1f MB read per decoded token -> weight wall %.1f tok/s (one sequence)\n",
        m.path, (*be)->Describe(), args->reps, bw_med / 1e9,
        host ? "read" : "device-to-device copy (read + write)", wbytes / 1e6, wall).c_str());
    for (size_t i = 0; i < conc.size(); ++i) {
      const auto [dmin, dmax] = std::minmax_element(decode[i].begin(), decode[i].end());
      std::printf("%s", absl::StrFormat(
          "c=%-3d      prefill %.1f tok/s (%d-token prompts)  decode %.2f tok/s aggregate "
          "(%d tokens each; reps %.2f..%.2f) = %.1f%% of the one-sequence weight wall\n",
          conc[i], Median(prefill[i]), args->prompt_tokens, Median(decode[i]), args->gen_tokens,
          *dmin, *dmax, 100.0 * Median(decode[i]) / wall).c_str());
    }
  });
}

}  // namespace lockstep::cli
