// /metrics in Prometheus text format (docs/serving.md lists every series). Counters and
// histograms are fed by the HTTP handlers and the engine threads; gauges of each model's engine
// (queue, KV blocks, prefix cache) are published by its worker after every step.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace lockstep::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size()) {}
  void Observe(double v);
  void Render(const std::string& name, const std::string& labels, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bound, not cumulative
  int64_t count_ = 0;
  double sum_ = 0;
};

// Speculative sequences that drafted with one K, and the rounds they ran.
struct SpecByK {
  int64_t sequences = 0, rounds = 0;
};

struct EngineGauges {
  int64_t waiting = 0, running = 0, kv_blocks_used = 0, kv_blocks_free = 0;
  int64_t prefix_hits = 0, prefix_misses = 0, session_resumes = 0, in_flight = 0;
  std::vector<int64_t> drafted_at, accepted_at;  // speculative, per draft position (0-based)
  int spec_k = 0;                                // --spec-k of a model with a draft, else 0
  std::map<int, SpecByK> spec_by_k;              // by the K the load-aware policy picked
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& endpoint, int status);
  void ObserveTtft(double seconds);
  void ObserveItl(double seconds);
  void AddTokens(int64_t prompt, int64_t generated);
  void SetEngine(const std::string& model, const EngineGauges& g);
  std::string Render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  Histogram ttft_, itl_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  std::map<std::string, EngineGauges> engines_;
};

}  // namespace lockstep::server
