#include "engine/sampling/stop.h"

#include <algorithm>

namespace lockstep::sampling {
namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string: those bytes
// may still turn into a match and must be held back.
size_t LongestPendingSuffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    for (size_t len = std::min(s.size() - 1, text.size()); len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  // Empty stop strings are rejected by SamplingParams::Validate; here they would match
  // everywhere, so they are dropped rather than stopping at byte 0.
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopStringMatcher::Step StopStringMatcher::Push(std::string_view piece) {
  if (stopped_) return {"", true};
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(piece);

  // The match that ends first wins (ties: the one that starts first, i.e. the longer one). For
  // one stop string its first occurrence is also its earliest-ending one.
  size_t best_start = std::string::npos, best_end = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = buf.find(s);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (end < best_end || (end == best_end && at < best_start)) {
      best_start = at;
      best_end = end;
    }
  }
  if (best_start != std::string::npos) {
    stopped_ = true;
    buf.resize(best_start);
    return {std::move(buf), true};
  }
  const size_t hold = LongestPendingSuffix(buf, stops_);
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  return {std::move(buf), false};
}

std::string StopStringMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

std::string_view OpenAIFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kMaxTokens:
      return "length";
    case FinishReason::kNone:
      break;
  }
  return "";
}

StopConditions::StopConditions(const SamplingParams& params)
    : stop_token_ids_(params.stop_token_ids.begin(), params.stop_token_ids.end()),
      matcher_(params.stop),
      max_tokens_(params.max_tokens) {}

StopConditions::Step StopConditions::OnToken(int32_t token, std::string_view piece) {
  if (finish_ != FinishReason::kNone) return {"", finish_};
  ++generated_;
  if (stop_token_ids_.contains(token)) {
    // The held-back bytes never completed a stop string: they are real text.
    finish_ = FinishReason::kStopToken;
    return {matcher_.Flush(), finish_};
  }
  StopStringMatcher::Step step = matcher_.Push(piece);
  if (step.stopped) {
    finish_ = FinishReason::kStopString;
    return {std::move(step.emit), finish_};
  }
  if (generated_ >= max_tokens_) {
    finish_ = FinishReason::kMaxTokens;
    step.emit += matcher_.Flush();
    return {std::move(step.emit), finish_};
  }
  return {std::move(step.emit), FinishReason::kNone};
}

}  // namespace lockstep::sampling
