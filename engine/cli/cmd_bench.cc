// `lockstep bench`: prefill and decode speed of a model on a CPU-side backend, with the memory
// bandwidth measured in the same run, so decode speed is reported as a fraction of the weight
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
#include "oracle/make_backend.h"

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

}  // namespace

void RegisterBench(CLI::App& app) {
  struct Args {
    std::string model, backend = "cpu";
    int threads = 0, prompt_tokens = 64, gen_tokens = 32, reps = 3;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("bench", "Prefill/decode tok/s vs the weight wall");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name")->required();
  sub->add_option("--backend", args->backend, "ref | cpu");
  sub->add_option("--threads", args->threads, "Threads (0 = all cores)");
  sub->add_option("--prompt-tokens", args->prompt_tokens, "Prefill length")->check(CLI::Range(1, 8192));
  sub->add_option("--gen-tokens", args->gen_tokens, "Decoded tokens per rep")->check(CLI::Range(2, 8192));
  sub->add_option("--reps", args->reps, "Interleaved repetitions (median reported)")->check(CLI::Range(1, 100));
  sub->add_flag("--json", args->json, "Print one JSON object");
  sub->callback([args] {
    LoadedModel m = LoadModel(args->model, false);
    const int threads = args->threads > 0 ? args->threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    auto be = oracle::MakeBackend(args->backend, threads);
    ThrowIfError(be.status());
    const models::Config& c = m.model->config();
    std::mt19937 rng(42);
    std::vector<int32_t> prompt(args->prompt_tokens);
    for (auto& id : prompt) id = static_cast<int32_t>(rng() % c.n_vocab);
    std::vector<float> buf(size_t{256} << 20);  // 1 GiB
    std::iota(buf.begin(), buf.begin() + 1024, 0.0f);
    std::vector<double> bw, prefill, decode;
    for (int r = 0; r < args->reps; ++r) {
      bw.push_back(ReadBandwidth(buf, threads));
      models::KvCache cache(c, args->prompt_tokens + args->gen_tokens);
      std::vector<float> logits;
      models::BatchEntry e{&cache, prompt};
      auto t0 = Clock::now();
      ThrowIfError(models::Forward(*m.model, **be, std::span(&e, 1), false, &logits));
      auto t1 = Clock::now();
      prefill.push_back(args->prompt_tokens / std::chrono::duration<double>(t1 - t0).count());
      int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      for (int i = 0; i < args->gen_tokens; ++i) {
        models::BatchEntry d{&cache, std::span<const int32_t>(&tok, 1)};
        ThrowIfError(models::Forward(*m.model, **be, std::span(&d, 1), false, &logits));
        tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      decode.push_back(args->gen_tokens / std::chrono::duration<double>(Clock::now() - t1).count());
    }
    const double bw_med = Median(bw), wbytes = WeightBytesPerToken(*m.model);
    const double wall = bw_med / wbytes, dec = Median(decode), pre = Median(prefill);
    nlohmann::json out = {{"model", m.path}, {"backend", args->backend}, {"threads", threads},
                          {"reps", args->reps}, {"prompt_tokens", args->prompt_tokens},
                          {"gen_tokens", args->gen_tokens}, {"read_bandwidth_GBps", bw_med / 1e9},
                          {"weight_bytes_per_token", wbytes}, {"weight_wall_tok_s", wall},
                          {"prefill_tok_s", pre}, {"decode_tok_s", dec},
                          {"decode_fraction_of_wall", dec / wall}};
    if (args->json) {
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    std::printf("%s", absl::StrFormat(
        "model      %s (%s backend, %d threads, median of %d interleaved reps)\n"
        "bandwidth  %.2f GB/s read (1 GiB buffer, same run)\n"
        "weights    %.1f MB read per decoded token -> weight wall %.1f tok/s\n"
        "prefill    %.1f tok/s (%d-token prompt)\n"
        "decode     %.2f tok/s (%d tokens after the prompt) = %.1f%% of the weight wall\n",
        m.path, args->backend, threads, args->reps, bw_med / 1e9, wbytes / 1e6, wall, pre,
        args->prompt_tokens, dec, args->gen_tokens, 100.0 * dec / wall).c_str());
  });
}

}  // namespace lockstep::cli
