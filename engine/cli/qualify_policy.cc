#include "engine/cli/qualify_policy.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace lockstep::cli::qualify {
namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// The number at `path` ("quality/kl_mean") of `j`, or a reason in *why when absent.
bool Number(const nlohmann::json& j, const std::string& path, double* out, std::string* why) {
  const nlohmann::json* at = &j;
  size_t from = 0;
  while (from <= path.size()) {
    const size_t slash = path.find('/', from);
    const std::string key = path.substr(from, slash == std::string::npos ? std::string::npos
                                                                        : slash - from);
    if (!at->is_object() || !at->contains(key)) {
      *why = "the record has no " + path;
      return false;
    }
    at = &(*at)[key];
    if (slash == std::string::npos) break;
    from = slash + 1;
  }
  if (!at->is_number() || !std::isfinite(at->get<double>())) {
    *why = "the record's " + path + " is not a finite number";
    return false;
  }
  *out = at->get<double>();
  return true;
}

}  // namespace

nlohmann::json Describe(const Thresholds& t) {
  return {{"max_kl_mean_nats", t.max_kl_mean},     {"max_kl_p99_nats", t.max_kl_p99},
          {"min_top1", t.min_top1},                {"max_ppl_ratio", t.max_ppl_ratio},
          {"min_law_p_value", t.min_law_p_value},  {"min_spec_speedup", t.min_spec_speedup},
          {"source", "docs/qualify.md#thresholds"}};
}

Verdict Decide(const nlohmann::json& r, const Thresholds& t) {
  Verdict v;
  std::string why;
  auto need = [&](const std::string& path, double* out) {
    if (Number(r, path, out, &why)) return true;
    v.reasons.push_back(why);
    return false;
  };

  // Load and format checks: every one must have passed.
  if (!r.contains("load") || !r["load"].contains("checks") || r["load"]["checks"].empty()) {
    v.reasons.push_back("the record has no load checks");
  } else {
    for (const auto& c : r["load"]["checks"]) {
      if (!c.value("ok", false)) {
        v.reasons.push_back("load: " + c.value("name", std::string("?")) + " failed: " +
                            c.value("detail", std::string()));
      }
    }
  }

  // Quality against the reference.
  double x = 0;
  if (need("quality/nonfinite", &x) && x > 0) {
    v.reasons.push_back("quality: " + Num(x) + " logits rows hold NaN/Inf");
  }
  if (need("quality/kl_mean", &x) && !(x <= t.max_kl_mean)) {
    v.reasons.push_back("quality: mean KL " + Num(x) + " nats > " + Num(t.max_kl_mean));
  }
  if (need("quality/kl_p99", &x) && !(x <= t.max_kl_p99)) {
    v.reasons.push_back("quality: p99 KL " + Num(x) + " nats > " + Num(t.max_kl_p99));
  }
  if (need("quality/top1", &x) && !(x >= t.min_top1)) {
    v.reasons.push_back("quality: top-1 agreement " + Num(x) + " < " + Num(t.min_top1));
  }
  double ppl = 0, ppl_ref = 0;
  if (need("quality/ppl", &ppl) && need("quality/ppl_reference", &ppl_ref) &&
      !(ppl <= t.max_ppl_ratio * ppl_ref)) {
    v.reasons.push_back("quality: perplexity " + Num(ppl) + " > " + Num(t.max_ppl_ratio) +
                        " x the reference's " + Num(ppl_ref));
  }

  // The invariance battery: bitwise lines must compare rows and find none differing; the law
  // line must not reject; "not available" / "not applicable" lines are listed, never passed.
  if (!r.contains("invariance") || !r["invariance"].is_array() || r["invariance"].empty()) {
    v.reasons.push_back("the record has no invariance lines");
  } else {
    for (const auto& line : r["invariance"]) {
      const std::string name = line.value("name", std::string("?"));
      const std::string status = line.value("status", std::string("measured"));
      if (status == "not available" || status == "not applicable") {
        v.not_covered.push_back(name + ": " + status + " (" + line.value("detail", std::string()) +
                                ")");
        continue;
      }
      const std::string kind = line.value("kind", std::string("bitwise"));
      if (kind == "law") {
        double p = 0;
        double drafted = 0;
        if (!Number(line, "drafted", &drafted, &why) || drafted <= 0) {
          // Without a single draft token no verify round ran: the law of plain sampling only.
          v.reasons.push_back("invariance: " + name + ": no draft token was verified");
        } else if (double df = 0; !Number(line, "df", &df, &why) || df < 1) {
          // Every path's expected count fell below 5 and was pooled into one category.
          v.reasons.push_back("invariance: " + name + ": too few samples for a G-test (no degree "
                              "of freedom; raise --law-samples)");
        } else if (!Number(line, "p_value", &p, &why)) {
          v.reasons.push_back("invariance: " + name + ": " + why);
        } else if (!(p >= t.min_law_p_value)) {
          v.reasons.push_back("invariance: " + name + ": G-test p-value " + Num(p) + " < " +
                              Num(t.min_law_p_value) + " (" + line.value("detail", std::string()) +
                              ")");
        }
        continue;
      }
      const int64_t rows = line.value("rows", int64_t{0});
      const int64_t differing = line.value("differing", int64_t{-1});
      if (rows <= 0) {
        v.reasons.push_back("invariance: " + name + " compared nothing");
      } else if (differing != 0) {
        v.reasons.push_back("invariance: " + name + ": " + std::to_string(differing) + " of " +
                            std::to_string(rows) + " differ (" +
                            line.value("detail", std::string()) + ")");
      }
    }
  }

  // Speculative decoding: a drafter must not slow decoding; an FR-Spec BAD fails.
  if (!r.contains("spec")) {
    v.reasons.push_back("the record has no spec section");
  } else if (r["spec"].value("status", std::string()) == "not applicable") {
    v.not_covered.push_back("speculative decoding: not applicable (" +
                            r["spec"].value("detail", std::string()) + ")");
  } else {
    if (need("spec/speedup", &x) && !(x >= t.min_spec_speedup)) {
      v.reasons.push_back("spec: median speedup " + Num(x) + "x < " + Num(t.min_spec_speedup) +
                          "x (the drafter makes decoding slower)");
    }
    const std::string fr = r["spec"].contains("frspec")
                               ? r["spec"]["frspec"].value("verdict", std::string())
                               : std::string();
    if (fr == "BAD") {
      v.reasons.push_back("spec: FR-Spec verdict BAD (" +
                          r["spec"]["frspec"].value("detail", std::string()) + ")");
    } else if (fr == "not applicable") {
      v.not_covered.push_back("FR-Spec: not applicable (" +
                              r["spec"]["frspec"].value("detail", std::string()) + ")");
    } else if (fr != "GOOD" && fr != "WASH") {
      v.reasons.push_back("the record has no FR-Spec verdict");
    }
  }

  // Throughput is reported, not gated (it depends on the machine), but it must have run.
  if (need("throughput/weight_wall_tok_s", &x) && !(x > 0)) {
    v.reasons.push_back("throughput: weight wall " + Num(x) + " tok/s is not positive");
  }
  v.qualified = v.reasons.empty();
  return v;
}

nlohmann::json ToJson(const Verdict& v) {
  return {{"qualified", v.qualified},
          {"verdict", v.qualified ? "QUALIFIED" : "NOT QUALIFIED"},
          {"reasons", v.reasons},
          {"not_covered", v.not_covered}};
}

}  // namespace lockstep::cli::qualify
