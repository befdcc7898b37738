// Speculative decoding never changes what is emitted (DESIGN.md §1, "spec decode, greedy" and
// "spec decode, coupled mode"): for every drafter and every K, adaptive or not,
//   Generate(drafter, kGreedy)  == Generate(temperature 0)             token for token, and
//   Generate(drafter, kCoupled) == Generate(same params, same seed)    token for token,
// on the tiny models of every family (the bulk of the cases) and on the real SmolLM2.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/generate.h"
#include "properties/property_support.h"

namespace lockstep::props {
namespace {

void Ignore(std::string_view) {}

// Random sampling parameters: every processor exercised on its own and together. Values are
// picked from lists (uniformly, whatever RapidCheck's size) so that every combination is as
// likely in the first case as in the last.
sampling::SamplingParams GenSampledParams(int max_tokens) {
  sampling::SamplingParams p;
  p.temperature = static_cast<float>(*rc::gen::element(31, 50, 70, 100, 120, 150)) / 100.0f;
  p.temperature += static_cast<float>(*rc::gen::element(0, 1, 7)) / 1000.0f;  // off the grid
  if (p.temperature > 1.5f) p.temperature = 1.5f;
  p.top_k = *rc::gen::element(0, 0, 1, 5, 40, 1000);
  p.top_p = *rc::gen::element(1.0f, 1.0f, 0.95f, 0.8f, 0.5f);
  p.min_p = *rc::gen::element(0.0f, 0.0f, 0.05f, 0.2f);
  p.repetition_penalty = *rc::gen::element(1.0f, 1.0f, 1.1f, 1.5f, 0.9f);
  p.presence_penalty = *rc::gen::element(0.0f, 0.0f, 0.5f, -0.5f);
  p.frequency_penalty = *rc::gen::element(0.0f, 0.0f, 0.3f);
  p.penalty_window = *rc::gen::element(-1, -1, 4);
  p.max_tokens = max_tokens;
  return p;
}

struct SpecCase {
  const models::Model* target;
  const tokenizer::Tokenizer* tok;
  backend::Backend* be;
  std::vector<int32_t> prompt;
  sampling::SamplingParams params;
  uint64_t seed;
};

// Runs plain decode once, then speculative decode with `drafter`, and fails the case on the
// first difference (tokens, text bytes or finish reason).
void ExpectSpecMatchesPlain(const SpecCase& c, const runtime::GenerateResult& plain,
                            spec::Drafter& drafter, const char* drafter_label, spec::SpecMode mode,
                            int k, bool adaptive, bool all_accepted) {
  struct {
    runtime::GenerateResult gen;
    spec::SpecStats stats;
  } got;
  got.gen = Must(runtime::Generate(*c.target, *c.be, *c.tok, c.prompt, c.params, c.seed, Ignore,
                                   &drafter, spec::SpecOptions{mode, k, adaptive}, &got.stats));
  CountSpec(drafter_label, got.stats.drafted, got.stats.accepted);
  const std::string where =
      absl::StrCat(spec::SpecModeName(mode), " spec with ", drafter_label, ", K=", k,
                   adaptive ? " adaptive" : " fixed", ", prompt ", c.prompt.size(),
                   " tokens, max_tokens ", c.params.max_tokens, ", seed ", c.seed, ": ");
  if (got.gen.tokens != plain.tokens) {
    RC_FAIL(absl::StrCat(where, "tokens differ from plain decode, ",
                         FirstDifference(got.gen.tokens, plain.tokens)));
  }
  if (got.gen.text != plain.text || got.gen.finish != plain.finish) {
    RC_FAIL(absl::StrCat(where, "same tokens but the text or finish reason differs"));
  }
  // The target drafting for itself proposes exactly what the target then computes (chunk
  // invariance: one-token draft forwards == the batched verify forward, bit for bit).
  if (all_accepted && got.stats.accepted != got.stats.drafted) {
    RC_FAIL(absl::StrCat(where, "the target as its own draft had ", got.stats.drafted - got.stats.accepted,
                         " of ", got.stats.drafted, " drafts rejected"));
  }
}

// One tiny-model case of the drafter matrix in `mode`.
void RunTinyMatrix(spec::SpecMode mode) {
  const std::string arch = *rc::gen::elementOf(std::vector<std::string>(std::begin(kTinyArchs), std::end(kTinyArchs)));
  std::vector<std::string> others;
  for (const char* a : kTinyArchs) {
    if (a != arch) others.push_back(a);
  }
  const TinyModel& t = Tiny(arch);
  SpecCase c;
  c.target = t.model.get();
  c.tok = t.tok.get();
  c.be = &Cpu(*rc::gen::element(1, 2));
  const int alphabet = *rc::gen::element(3, 12, kTinyVocab);
  c.prompt = GenTokens(*rc::gen::inRange(1, 13), alphabet);
  const int max_tokens = *rc::gen::inRange(1, 25);
  if (mode == spec::SpecMode::kGreedy) {
    c.params.temperature = 0.0f;
    c.params.max_tokens = max_tokens;
  } else {
    c.params = GenSampledParams(max_tokens);
  }
  c.seed = *rc::gen::arbitrary<uint64_t>();
  const runtime::GenerateResult plain =
      Must(runtime::Generate(*c.target, *c.be, *c.tok, c.prompt, c.params, c.seed, Ignore));
  for (DraftKind kind : kAllDraftKinds) {
    const std::string other = *rc::gen::elementOf(others);
    const int k = *rc::gen::inRange(1, 9);
    const bool adaptive = *rc::gen::arbitrary<bool>();
    std::unique_ptr<spec::Drafter> drafter =
        MakeTinyDrafter(kind, arch, other, *rc::gen::arbitrary<uint64_t>(), *c.be);
    const std::string label = kind == DraftKind::kOtherArch
                                  ? absl::StrCat(DraftKindName(kind), " (", other, " for ", arch, ")")
                                  : absl::StrCat(DraftKindName(kind), " (", arch, ")");
    ExpectSpecMatchesPlain(c, plain, *drafter, label.c_str(), mode, k, adaptive,
                           kind == DraftKind::kSelf);
  }
}

// Prompts for SmolLM2: real text with repeats, so the n-gram drafter has something to find.
std::vector<int32_t> GenSmolPrompt(const tokenizer::Tokenizer& tok) {
  const std::string text = *rc::gen::element(
      std::string("The cat sat on the mat. The cat sat on the"),
      std::string("1, 2, 3, 4, 1, 2, 3,"),
      std::string("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"),
      std::string("Hello! Hello!"));
  return tok.Encode(text, false, false);
}

// One SmolLM2 case: the n-gram drafter and the model drafting for itself.
void RunSmolMatrix(spec::SpecMode mode) {
  const models::Model* target = Must(SmolLm2());
  SpecCase c;
  c.target = target;
  c.tok = &SmolLm2Tokenizer();
  c.be = &Cpu(2);
  c.prompt = GenSmolPrompt(*c.tok);
  const int max_tokens = *rc::gen::resize(100, rc::gen::inRange(3, 7));
  if (mode == spec::SpecMode::kGreedy) {
    c.params.temperature = 0.0f;
    c.params.max_tokens = max_tokens;
  } else {
    c.params = GenSampledParams(max_tokens);
  }
  c.seed = *rc::gen::arbitrary<uint64_t>();
  const runtime::GenerateResult plain =
      Must(runtime::Generate(*c.target, *c.be, *c.tok, c.prompt, c.params, c.seed, Ignore));
  const int k_ngram = *rc::gen::resize(100, rc::gen::inRange(1, 6));
  std::unique_ptr<spec::Drafter> ngram = spec::MakeNgramDrafter(target->config().n_vocab);
  ExpectSpecMatchesPlain(c, plain, *ngram, "ngram (smollm2)", mode, k_ngram,
                         *rc::gen::arbitrary<bool>(), false);
  const int k_self = *rc::gen::resize(100, rc::gen::inRange(1, 5));
  std::unique_ptr<spec::Drafter> self =
      Must(spec::MakeModelDrafter(*target, Must(SmolLm2Copy()), *c.be));
  ExpectSpecMatchesPlain(c, plain, *self, "self-draft (smollm2)", mode, k_self,
                         *rc::gen::arbitrary<bool>(), true);
}

// Property 1: greedy speculative output == plain greedy decode, every drafter, every K.
LOCKSTEP_PROPERTY(SpecGreedy, EqualsPlainGreedyTiny, 1000, Weight::kTiny, ()) {
  RunTinyMatrix(spec::SpecMode::kGreedy);
}

LOCKSTEP_PROPERTY(SpecGreedy, EqualsPlainGreedySmolLm2, 4, Weight::kSmol, ()) {
  RunSmolMatrix(spec::SpecMode::kGreedy);
}

// Property 2: coupled speculative output == plain sampled decode with the same seed.
LOCKSTEP_PROPERTY(SpecCoupled, EqualsPlainSampledTiny, 1000, Weight::kTiny, ()) {
  RunTinyMatrix(spec::SpecMode::kCoupled);
}

LOCKSTEP_PROPERTY(SpecCoupled, EqualsPlainSampledSmolLm2, 4, Weight::kSmol, ()) {
  RunSmolMatrix(spec::SpecMode::kCoupled);
}

}  // namespace
}  // namespace lockstep::props
