#include "engine/runtime/generate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"
#include "engine/runtime/engine.h"

namespace lockstep::runtime {
namespace {

// Length of the UTF-8 sequence a lead byte starts; 1 for bytes that cannot lead (emitted as is).
size_t SequenceLength(unsigned char c) {
  if (c >= 0xF0 && c <= 0xF4) return 4;
  if (c >= 0xE0) return c <= 0xEF ? 3 : 1;
  if (c >= 0xC2) return 2;
  return 1;
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
                                        const std::function<void(std::string_view)>& on_text,
                                        spec::Drafter* drafter, const spec::SpecOptions& spec,
                                        spec::SpecStats* stats) {
  EngineOptions o;
  const int64_t need = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  // The context is what this request needs (the model's limit still applies: Submit refuses a
  // request beyond it with both numbers).
  const int64_t train = model.config().n_ctx_train;
  o.ctx = train > 0 ? std::min(need, train) : need;
  o.max_running = 1;
  o.kv_bytes = models::KvBlockBytes(model.config(), o.k_format, o.v_format, o.block_size) *
               ((o.ctx + o.block_size - 1) / o.block_size + 1);
  o.max_spec_k = std::max(1, spec.k);
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, tok, be, o));
  Request r;
  r.prompt = prompt;
  r.params = params;
  r.seed = seed;
  r.drafter = drafter;
  r.spec = spec;
  r.on_text = on_text;
  ASSIGN_OR_RETURN(RequestResult res, engine->Run(std::move(r)));
  if (stats != nullptr) *stats = res.stats;
  return std::move(res.gen);
}

}  // namespace lockstep::runtime
