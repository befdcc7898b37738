#include "engine/cli/bench_support.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "absl/strings/str_format.h"
#include "engine/cli/commands.h"
#include "engine/gguf/gguf.h"

namespace lockstep::cli {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
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

const char* FrSpecVerdict(bool identical, double ratio) {
  return !identical || ratio < kFrSpecBad ? "BAD" : ratio >= kFrSpecGood ? "GOOD" : "WASH";
}

std::string FrSpecRule() {
  return absl::StrFormat("(GOOD >= %.2f with identical output, BAD < %.2f or any difference)",
                         kFrSpecGood, kFrSpecBad);
}

}  // namespace lockstep::cli
