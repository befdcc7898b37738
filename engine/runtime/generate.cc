#include "engine/runtime/generate.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/sampling/sampler.h"

namespace lockstep::runtime {
namespace {

// Length of the UTF-8 sequence a lead byte starts; 1 for bytes that cannot lead (emitted as is).
size_t SequenceLength(unsigned char c) {
  if (c >= 0xF0 && c <= 0xF4) return 4;
  if (c >= 0xE0) return c <= 0xEF ? 3 : 1;
  if (c >= 0xC2) return 2;
  return 1;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string Utf8Stream::Push(std::string_view bytes) {
  held_.append(bytes);
  // Find the last lead byte within the final 3 bytes; keep it back if its sequence is short.
  size_t cut = held_.size();
  for (size_t back = 1; back <= 4 && back <= held_.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(held_[held_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    if (SequenceLength(c) > back) cut = held_.size() - back;
    break;
  }
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string Utf8Stream::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

absl::StatusOr<GenerateResult> Generate(const models::Model& model, backend::Backend& be,
                                        const tokenizer::Tokenizer& tok,
                                        const std::vector<int32_t>& prompt,
                                        const sampling::SamplingParams& params, uint64_t seed,
                                        const std::function<void(std::string_view)>& on_text) {
  const models::Config& c = model.config();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  RETURN_IF_ERROR(params.ValidateForVocab(static_cast<int32_t>(c.n_vocab)));
  ASSIGN_OR_RETURN(sampling::Sampler sampler, sampling::Sampler::Create(params));
  sampling::SamplingParams stop_params = params;
  for (int32_t id : tok.eot_ids()) stop_params.stop_token_ids.push_back(id);
  sampling::StopConditions stop(stop_params);

  const int64_t capacity = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (c.n_ctx_train > 0 && capacity > c.n_ctx_train) {
    return absl::OutOfRangeError(absl::StrCat("prompt (", prompt.size(), " tokens) + max_tokens (",
                                              params.max_tokens, ") exceeds the model's context length ",
                                              c.n_ctx_train));
  }
  models::KvCache cache(c, capacity);
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> history = prompt;  // what the penalties see: prompt + generated
  std::vector<float> logits;
  Utf8Stream utf8;
  auto emit = [&](const std::string& s) {
    if (s.empty()) return;
    r.text += s;
    on_text(s);
  };

  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> step = prompt;
  while (true) {
    models::BatchEntry e{&cache, step};
    RETURN_IF_ERROR(models::Forward(model, be, std::span(&e, 1), false, &logits));
    if (r.tokens.empty()) {
      auto t1 = std::chrono::steady_clock::now();
      r.prefill_seconds = Seconds(t0, t1);
      t0 = t1;
    }
    const int64_t position = cache.n_past;  // the position of the token being drawn
    ASSIGN_OR_RETURN(sampling::SampledToken s,
                     sampler.Sample(logits, seed, position, history));
    r.tokens.push_back(s.token);
    history.push_back(s.token);
    ASSIGN_OR_RETURN(std::string_view raw, tok.TokenPiece(s.token));
    const std::string piece = utf8.Push(raw);
    sampling::StopConditions::Step st = stop.OnToken(s.token, piece);
    emit(st.emit);
    if (st.finish != sampling::FinishReason::kNone) {
      r.finish = st.finish;
      break;
    }
    step.assign(1, s.token);
  }
  if (r.finish != sampling::FinishReason::kStopString &&
      r.finish != sampling::FinishReason::kStopToken) {
    emit(utf8.Flush());
  }
  r.decode_seconds = Seconds(t0, std::chrono::steady_clock::now());
  return r;
}

}  // namespace lockstep::runtime
