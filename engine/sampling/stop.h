// Stop conditions: stop token ids, stop strings on the detokenized stream, max tokens.
//
// Stop strings are matched on bytes of the decoded text, across token boundaries. The stream
// stops at the stop string whose match *ends* first (on a tie, the longer one); everything before
// that match's start is emitted and nothing after. Text that could still be the beginning of a
// stop string is held back until it can't, so the emitted bytes never depend on how the text was
// cut into pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/sampling/sampling_params.h"

namespace lockstep::sampling {

// Streaming stop-string detector: push decoded pieces, emit what it returns.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Step {
    std::string emit;      // bytes that are safe to send now
    bool stopped = false;  // a stop string completed; nothing more will be emitted
  };

  // Appends `piece` to the stream. After a stop every push returns {"", true}.
  Step Push(std::string_view piece);

  // End of stream without a stop: releases the held-back tail (empty after a stop).
  std::string Flush();

  bool stopped() const { return stopped_; }
  const std::string& held() const { return held_; }  // bytes withheld so far

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

enum class FinishReason {
  kNone,        // still generating
  kStopToken,   // a stop token id was generated (not emitted)
  kStopString,  // a stop string completed (not emitted)
  kMaxTokens,   // max_tokens tokens were generated
};

// "stop" / "length" / "" as the OpenAI API reports finish_reason.
std::string_view OpenAIFinishReason(FinishReason reason);

// All three conditions for one sequence, fed one generated token at a time.
class StopConditions {
 public:
  explicit StopConditions(const SamplingParams& params);

  struct Step {
    std::string emit;  // text to stream for this token (may be empty while text is held back)
    FinishReason finish = FinishReason::kNone;
  };

  // `token` was just generated and `piece` is its decoded text (empty while the detokenizer holds
  // back an incomplete UTF-8 sequence). Checked in order: stop token, stop string, max_tokens.
  // After a finish every call returns {"", that reason}.
  Step OnToken(int32_t token, std::string_view piece);

  int32_t generated() const { return generated_; }
  FinishReason finish() const { return finish_; }

 private:
  absl::flat_hash_set<int32_t> stop_token_ids_;
  StopStringMatcher matcher_;
  int32_t max_tokens_;
  int32_t generated_ = 0;
  FinishReason finish_ = FinishReason::kNone;
};

}  // namespace lockstep::sampling
