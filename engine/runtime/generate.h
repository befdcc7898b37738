// Generation results, the UTF-8 stream, and Generate(): one request run alone on a fresh
// Engine (engine.h) — the convenience the CLI's batch tools and the tests use. It is the same
// Engine::Step loop that serves many requests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/sampling/sampling_params.h"
#include "engine/sampling/stop.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"

namespace lockstep::runtime {

// Holds back the tail of a byte stream that is an incomplete UTF-8 sequence, so that streamed
// text never splits a character (tokens may end mid-character).
class Utf8Stream {
 public:
  std::string Push(std::string_view bytes);  // the complete-character prefix of what is held
  std::string Flush();                        // whatever is left, complete or not
 private:
  std::string held_;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token, if any, included)
  std::string text;             // everything streamed
  sampling::FinishReason finish = sampling::FinishReason::kNone;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prompt_tokens = 0;
};

// `on_text` receives each streamed piece. Stops on an end-of-turn token of the tokenizer (in
// addition to params.stop_token_ids), a stop string, or params.max_tokens. With a drafter, runs
// speculative decoding with `spec` (and fills *stats when given).
absl::StatusOr<GenerateResult> Generate(const models::Model& model, backend::Backend& be,
                                        const tokenizer::Tokenizer& tok,
                                        const std::vector<int32_t>& prompt,
                                        const sampling::SamplingParams& params, uint64_t seed,
                                        const std::function<void(std::string_view)>& on_text,
                                        spec::Drafter* drafter = nullptr,
                                        const spec::SpecOptions& spec = {},
                                        spec::SpecStats* stats = nullptr);

}  // namespace lockstep::runtime
