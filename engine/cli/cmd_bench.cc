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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Read bandwidth in bytes/s: `threads` threads each sum a disjoint part of a buffer far larger
// than the last-level cache.
double ReadBandwidth(const std::vector<float>& buf, int threads) {
  std::vector<double> sums(threads);
  const size_t n = buf.size(), per = n / threads;
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      float acc[16] = {0};
      const float* p = buf.data() + t * per;
      for (size_t i = 0; i + 16 <= per; i += 16) {
        for (int l = 0; l < 16; ++l) acc[l] += p[i + l];
      }
      sums[t] = std::accumulate(acc, acc + 16, 0.0);
    });
  }
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  volatile double sink = std::accumulate(sums.begin(), sums.end(), 0.0);
  (void)sink;
  return static_cast<double>(per * threads * sizeof(float)) / s;
}

// Copy bandwidth of a device backend in bytes/s (bytes read + written): a 1 GiB backend-to-
// backend copy, median of 5 after a warm-up. The device's weight wall (docs/performance.md).
double CopyBandwidth(backend::Backend& be) {
  constexpr int64_t kBytes = int64_t{1} << 30;
  auto a = be.Allocate(kBytes, "bandwidth probe");
  ThrowIfError(a.status());
  auto b = be.Allocate(kBytes, "bandwidth probe");
  ThrowIfError(b.status());
  std::vector<double> v;
  for (int i = 0; i < 6; ++i) {
    ThrowIfError(be.Synchronize());
    const auto t0 = Clock::now();
    ThrowIfError(be.Copy(*b, *a, kBytes));
    ThrowIfError(be.Synchronize());
    if (i > 0) v.push_back(2.0 * kBytes / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  be.Free(*a);
  be.Free(*b);
  return Median(v);
}

// Bytes of weights one decoded token reads: every matrix once, plus one embedding row (the
// embedding table is read whole only when it doubles as the output head).
double WeightBytesPerToken(const models::Model& m) {
  double bytes = 0;
  const models::Weights& w = m.weights();
  for (const gguf::TensorInfo& t : m.file().tensors()) {
    if (t.name == "token_embd.weight" && w.output.data != w.tok_embd.data) {
      bytes += static_cast<double>(t.n_bytes) / static_cast<double>(w.tok_embd.rows);
      continue;
    }
    bytes += static_cast<double>(t.n_bytes);
  }
  return bytes;
}


// Aggregate decode of `c` concurrent greedy requests through the scheduler: tokens generated
// after every request's prefill, over the time that took. Returns {prefill tok/s, decode tok/s}.
std::pair<double, double> RunConcurrent(runtime::Engine& engine, const std::vector<int32_t>& prompt,
                                        int c, int gen_tokens) {
  for (int i = 0; i < c; ++i) {
    runtime::Request r;
    r.prompt = prompt;
    r.prompt[0] = (prompt[0] + i) % 256;  // distinct requests, same length
    r.params.temperature = 0.0f;
    r.params.max_tokens = gen_tokens;
    r.ignore_eos = true;
    ThrowIfError(engine.Submit(std::move(r)).status());
  }
  const auto t0 = Clock::now();
  int64_t generated = 0;
  while (!engine.AllDecoding()) {
    auto done = engine.Step();
    ThrowIfError(done.status());
    for (const auto& d : *done) generated += static_cast<int64_t>(d.gen.tokens.size());
  }
  const auto t1 = Clock::now();
  // The step budget holds every prompt (see the caller), so the first step prefilled them all
  // and drew exactly one token each.
  const int64_t first_tokens = c;
  while (!engine.Idle()) {
    auto done = engine.Step();
    ThrowIfError(done.status());
    for (const auto& d : *done) generated += static_cast<int64_t>(d.gen.tokens.size());
  }
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  engine.ClearCaches();
  return {c * static_cast<double>(prompt.size()) / prefill_s,
          static_cast<double>(generated - first_tokens) / decode_s};
}

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
    bool json = false, profile_ops = false;
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
      rows.push_back({{"concurrency", conc[i]}, {"prefill_tok_s", Median(prefill[i])},
                      {"decode_tok_s", Median(decode[i])},
                      {"decode_fraction_of_wall", Median(decode[i]) / wall}});
    }
    nlohmann::json out = {{"model", m.path}, {"backend", args->backend}, {"threads", threads},
                          {"isa", (*be)->Describe()}, {"bandwidth_kind", host ? "read" : "device copy"},
                          {"reps", args->reps}, {"prompt_tokens", args->prompt_tokens},
                          {"gen_tokens", args->gen_tokens}, {"read_bandwidth_GBps", bw_med / 1e9},
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
      std::printf("%s", absl::StrFormat(
          "c=%-3d      prefill %.1f tok/s (%d-token prompts)  decode %.2f tok/s aggregate "
          "(%d tokens each) = %.1f%% of the one-sequence weight wall\n",
          conc[i], Median(prefill[i]), args->prompt_tokens, Median(decode[i]), args->gen_tokens,
          100.0 * Median(decode[i]) / wall).c_str());
    }
  });
}

}  // namespace lockstep::cli
