// Measurements shared by `lockstep bench` and `lockstep qualify`: medians, the memory bandwidth
// that sets the weight wall (docs/performance.md), the bytes of weights one decoded token reads,
// and aggregate decode of concurrent requests through the engine loop.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/runtime/engine.h"

namespace lockstep::cli {

double Median(std::vector<double> v);  // 0 for an empty list
// Read bandwidth in bytes/s: `threads` threads each sum a disjoint part of `buf` (far larger than
// the last-level cache).
double ReadBandwidth(const std::vector<float>& buf, int threads);
// Copy bandwidth of a device backend in bytes/s (bytes read + written). Throws CliError.
double CopyBandwidth(backend::Backend& be);
// Bytes of weights one decoded token reads: every matrix once, plus one embedding row.
double WeightBytesPerToken(const models::Model& m);
// Aggregate decode of `c` concurrent greedy requests (prompt[0] varied per request, ignore_eos):
// {prefill tok/s, decode tok/s}. Throws CliError on an engine error.
std::pair<double, double> RunConcurrent(runtime::Engine& engine, const std::vector<int32_t>& prompt,
                                        int c, int gen_tokens);

// The FR-Spec verdict (docs/frspec.md) from the trimmed/untrimmed median tok/s ratio: "GOOD" at
// >= 1.03 with identical output, "BAD" below 0.97 or on any output difference, else "WASH".
inline constexpr double kFrSpecGood = 1.03, kFrSpecBad = 0.97;
const char* FrSpecVerdict(bool identical, double ratio);
// "(GOOD >= 1.03 with identical output, BAD < 0.97 or any difference)".
std::string FrSpecRule();

}  // namespace lockstep::cli
