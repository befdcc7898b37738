// The qualification policy of a cell (docs/qualify.md): the thresholds, each with its reason,
// and the verdict QUALIFIED / NOT QUALIFIED computed from a qualification record (the JSON that
// `lockstep qualify` writes to qualify/<cell>.json). It reads only the record, so a server or a
// CI script can re-decide a committed record without running anything. It depends on nothing
// but nlohmann::json, so it can move into a library folder unchanged.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace lockstep::cli::qualify {

// Every bound of the policy. The values and their reasons are in docs/qualify.md ("Thresholds");
// Describe() prints them into each record and report, so a verdict says what it was held to.
struct Thresholds {
  // Quality against the reference on the golden text (natural log, per position).
  double max_kl_mean = 0.01;   // nats
  double max_kl_p99 = 0.10;    // nats
  double min_top1 = 0.95;      // fraction of positions whose argmax agrees
  double max_ppl_ratio = 1.02; // perplexity / reference perplexity
  // The reject-mode law: the G-test's p-value must not fall below this (a false alarm rate).
  double min_law_p_value = 1e-3;
  // A drafter must not make decoding slower: median spec tok/s / median plain tok/s.
  double min_spec_speedup = 1.0;
};

nlohmann::json Describe(const Thresholds& t);

struct Verdict {
  bool qualified = false;
  std::vector<std::string> reasons;      // why NOT QUALIFIED (empty when qualified)
  std::vector<std::string> not_covered;  // checks recorded "not available" / "not applicable"
};

// The verdict of `record`. A section or field the policy needs that is missing or not a number
// is itself a reason (a record that lacks a measurement cannot qualify).
Verdict Decide(const nlohmann::json& record, const Thresholds& t);

nlohmann::json ToJson(const Verdict& v);

}  // namespace lockstep::cli::qualify
