#include "engine/server/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep::server {

void Histogram::Observe(double v) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (v <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  }
  ++count_;
  sum_ += v;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string* out) const {
  const std::string sep = labels.empty() ? "" : ",";
  int64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    absl::StrAppend(out, name, "_bucket{", labels, sep, "le=\"", absl::StrFormat("%g", bounds_[i]),
                    "\"} ", cum, "\n");
  }
  absl::StrAppend(out, name, "_bucket{", labels, sep, "le=\"+Inf\"} ", count_, "\n");
  absl::StrAppend(out, name, "_sum", labels.empty() ? "" : "{" + labels + "}", " ",
                  absl::StrFormat("%.6f", sum_), "\n");
  absl::StrAppend(out, name, "_count", labels.empty() ? "" : "{" + labels + "}", " ", count_, "\n");
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::ObserveTtft(double s) {
  std::lock_guard<std::mutex> l(mu_);
  ttft_.Observe(s);
}

void Metrics::ObserveItl(double s) {
  std::lock_guard<std::mutex> l(mu_);
  itl_.Observe(s);
}

void Metrics::AddTokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::SetEngine(const std::string& model, const EngineGauges& g) {
  std::lock_guard<std::mutex> l(mu_);
  engines_[model] = g;
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string o;
  o += "# HELP lockstep_requests_total HTTP requests by endpoint and status code.\n"
       "# TYPE lockstep_requests_total counter\n";
  for (const auto& [k, n] : requests_) {
    absl::StrAppend(&o, "lockstep_requests_total{endpoint=\"", k.first, "\",status=\"", k.second,
                    "\"} ", n, "\n");
  }
  o += "# HELP lockstep_time_to_first_token_seconds Submission to first sampled token.\n"
       "# TYPE lockstep_time_to_first_token_seconds histogram\n";
  ttft_.Render("lockstep_time_to_first_token_seconds", "", &o);
  o += "# HELP lockstep_inter_token_latency_seconds Between consecutive sampled tokens of a sequence.\n"
       "# TYPE lockstep_inter_token_latency_seconds histogram\n";
  itl_.Render("lockstep_inter_token_latency_seconds", "", &o);
  absl::StrAppend(&o, "# TYPE lockstep_prompt_tokens_total counter\nlockstep_prompt_tokens_total ",
                  prompt_tokens_, "\n# TYPE lockstep_generated_tokens_total counter\n",
                  "lockstep_generated_tokens_total ", generated_tokens_, "\n");
  auto gauge = [&](const char* name, const char* type, auto field) {
    absl::StrAppend(&o, "# TYPE ", name, " ", type, "\n");
    for (const auto& [model, g] : engines_) {
      absl::StrAppend(&o, name, "{model=\"", model, "\"} ", field(g), "\n");
    }
  };
  gauge("lockstep_queue_depth", "gauge", [](const EngineGauges& g) { return g.waiting; });
  gauge("lockstep_running_sequences", "gauge", [](const EngineGauges& g) { return g.running; });
  gauge("lockstep_admitted_sequences", "gauge", [](const EngineGauges& g) { return g.in_flight; });
  gauge("lockstep_kv_blocks_used", "gauge", [](const EngineGauges& g) { return g.kv_blocks_used; });
  gauge("lockstep_kv_blocks_free", "gauge", [](const EngineGauges& g) { return g.kv_blocks_free; });
  gauge("lockstep_prefix_cache_hits_total", "counter",
        [](const EngineGauges& g) { return g.prefix_hits; });
  gauge("lockstep_prefix_cache_misses_total", "counter",
        [](const EngineGauges& g) { return g.prefix_misses; });
  gauge("lockstep_session_resumes_total", "counter",
        [](const EngineGauges& g) { return g.session_resumes; });
  o += "# TYPE lockstep_spec_drafted_total counter\n";
  for (const auto& [model, g] : engines_) {
    for (size_t i = 0; i < g.drafted_at.size(); ++i) {
      absl::StrAppend(&o, "lockstep_spec_drafted_total{model=\"", model, "\",position=\"", i + 1,
                      "\"} ", g.drafted_at[i], "\n");
    }
  }
  o += "# TYPE lockstep_spec_accepted_total counter\n";
  for (const auto& [model, g] : engines_) {
    for (size_t i = 0; i < g.accepted_at.size(); ++i) {
      absl::StrAppend(&o, "lockstep_spec_accepted_total{model=\"", model, "\",position=\"", i + 1,
                      "\"} ", g.accepted_at[i], "\n");
    }
  }
  // The load-aware K policy (docs/serving.md): the K served, and what each sequence drafted
  // with; rounds at a k below lockstep_spec_k ran with a lowered K.
  o += "# HELP lockstep_spec_k The K (--spec-k) of a model served with a draft.\n"
       "# TYPE lockstep_spec_k gauge\n";
  for (const auto& [model, g] : engines_) {
    if (g.spec_k > 0) absl::StrAppend(&o, "lockstep_spec_k{model=\"", model, "\"} ", g.spec_k, "\n");
  }
  o += "# HELP lockstep_spec_sequences_total Finished speculative sequences by the K they drafted with.\n"
       "# TYPE lockstep_spec_sequences_total counter\n";
  for (const auto& [model, g] : engines_) {
    for (const auto& [k, n] : g.spec_by_k) {
      absl::StrAppend(&o, "lockstep_spec_sequences_total{model=\"", model, "\",k=\"", k, "\"} ",
                      n.sequences, "\n");
    }
  }
  o += "# HELP lockstep_spec_rounds_total Speculative rounds (target forwards) by the K drafted with.\n"
       "# TYPE lockstep_spec_rounds_total counter\n";
  for (const auto& [model, g] : engines_) {
    for (const auto& [k, n] : g.spec_by_k) {
      absl::StrAppend(&o, "lockstep_spec_rounds_total{model=\"", model, "\",k=\"", k, "\"} ",
                      n.rounds, "\n");
    }
  }
  return o;
}

}  // namespace lockstep::server
