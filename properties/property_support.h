// Shared machinery of the invariance-contract property tests (DESIGN.md §1): how many cases a
// property runs, the models it runs on, and the drafters of the speculative matrix.
//
// Case counts. Each property states its CI count in its definition; the environment overrides it:
//   LOCKSTEP_PROPERTY_CASES=N       every property on tiny models or pure math runs N cases
//   LOCKSTEP_PROPERTY_MIN_CASES=N   ... runs at least N cases (its CI count if larger)
//   LOCKSTEP_PROPERTY_SMOL_CASES=N  every property on the real SmolLM2 runs N cases
//   RC_PARAMS="max_success=N"       (RapidCheck's own knob) every property runs N cases
// RC_PARAMS="seed=S" replays a whole run; RC_PARAMS="reproduce=..." (printed by RapidCheck after
// a failure) replays just the failing, shrunk case.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/models/kv_pool.h"
#include "engine/models/runner.h"
#include "engine/models/model.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace lockstep::props {

enum class Weight { kTiny, kSmol };  // which environment knob scales the count

// The number of cases a property runs (see the header comment); `ci_cases` when no knob is set.
int CaseCount(int ci_cases, Weight weight);

double NowSeconds();  // steady clock, seconds

// The SmolLM2 check shared by every kSmol property: the error says how to get the model.
absl::Status SmolLm2Available();

// The seed a property runs under: the run's seed mixed with the property id (FNV-1a, so the
// same on every platform and build).
uint64_t MixSeed(uint64_t run_seed, const std::string& id);

// Coverage counters, so that "green" says green over what: speculative tokens drafted and
// accepted per drafter label, and free-form counts. CheckProperty prints and clears them.
void CountSpec(const std::string& label, int64_t drafted, int64_t accepted);
void Count(const std::string& label, int64_t n = 1);
std::string TakeCoverageReport();

// Runs `testable` as a RapidCheck property under the current gtest test's id (so RapidCheck's
// reproduce strings apply), requiring CaseCount(ci_cases, weight) successes. Prints the seed, the count and the
// wall time; fails the gtest test with RapidCheck's counterexample report.
template <typename Testable>
void CheckProperty(int ci_cases, Weight weight, Testable&& testable) {
  if (weight == Weight::kSmol) {
    if (absl::Status s = SmolLm2Available(); !s.ok()) {
      ADD_FAILURE() << s.message();
      return;
    }
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  const uint64_t run_seed = params.seed;
  // RapidCheck gives every property the run's seed as is; mixing in the id keeps properties
  // with similar generators from drawing the same cases.
  params.seed = MixSeed(run_seed, metadata.id);
  params.maxSuccess = CaseCount(ci_cases, weight);
  // A SmolLM2 case costs seconds; shrinking would re-run it hundreds of times.
  if (weight == Weight::kSmol) params.disableShrinking = true;
  std::printf("[ property ] %s: %d cases, RC_PARAMS=\"seed=%llu\"\n", metadata.id.c_str(),
              params.maxSuccess, static_cast<unsigned long long>(run_seed));
  std::fflush(stdout);
  const double t0 = NowSeconds();
  const auto result =
      rc::detail::checkTestable(std::forward<Testable>(testable), metadata, params);
  if (result.template is<rc::detail::SuccessResult>()) {
    std::printf("[ property ] %s: %d cases passed in %.1f s\n%s", metadata.id.c_str(),
                params.maxSuccess, NowSeconds() - t0, TakeCoverageReport().c_str());
  } else {
    std::ostringstream ss;
    rc::detail::printResultMessage(result, ss);
    TakeCoverageReport();
    ADD_FAILURE() << ss.str() << "\nreplay the run: RC_PARAMS=\"seed=" << run_seed << "\"";
  }
  std::fflush(stdout);
}

// Aborts the current RapidCheck case with `s`'s message when it is an error.
template <typename T>
T Must(absl::StatusOr<T> s) {
  if (!s.ok()) RC_FAIL(std::string(s.status().ToString()));
  return *std::move(s);
}
inline void Must(const absl::Status& s) {
  if (!s.ok()) RC_FAIL(std::string(s.ToString()));
}

// --- Models ---------------------------------------------------------------------------------

// The tiny random transformers models (golden/tiny), re-serialized with a synthetic byte-level
// vocabulary so that they carry tokenizer.ggml.tokens (model drafters check vocabulary identity)
// and a Tokenizer can be built from them. The vocabulary: ids 0..255 the GPT-2 byte symbols,
// 256..319 normal tokens "t0".."t63", and id 320 "<|endoftext|>" as bos and eos. The models'
// embeddings have 320 rows, so the end-of-turn token can never be produced: generation always
// runs to max_tokens, which keeps every comparison as long as the case asked for.
// qwen3_moe (MoE FFN in every layer) comes from golden/families/ instead (its GGUF is llama.cpp's
// converter's; oracle/gen_family_golden.py), with the same 320-row vocabulary.
// gemma4_text (per-layer inputs, KV-shared layers, wider full-attention heads) comes from
// golden/families too.
inline constexpr const char* kTinyArchs[] = {"llama", "qwen3", "gemma3", "qwen3_moe", "gemma4_text"};
inline constexpr const char* kFamilyGoldenArchs[] = {"qwen3_moe", "qwen3_5", "qwen3_next",
                                                     "gemma4_text"};
// The tiny models pipeline stages run: gemma4_text's per-layer inputs and shared KV do not cross
// stages yet, and a split of it is refused by name (tests/model/family_golden_test.cc).
inline constexpr const char* kPipelineArchs[] = {"llama", "qwen3", "gemma3", "qwen3_moe"};
// Hybrid Gated DeltaNet models (golden/families): the engine property draws them (their state
// lanes) and the batch / chunk / threads properties (a SeqCache holds a state slot); not the KV
// rollback one, which truncates a cache by blocks (docs/models.md).
inline constexpr const char* kHybridArchs[] = {"qwen3_5", "qwen3_next"};
inline constexpr int kTinyVocab = 320;

struct TinyModel {
  std::string arch;
  std::string bytes;                     // the re-serialized GGUF
  std::unique_ptr<models::Model> model;  // parsed from `bytes`
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

// Loaded once per process; a load error fails the calling case with the error.
const TinyModel& Tiny(const std::string& arch);
// A fresh, independently owned Model from the same bytes (what a model drafter takes over).
std::unique_ptr<models::Model> TinyCopy(const std::string& arch);

// The real SmolLM2-135M-Instruct Q4_1 from the model cache, or an error that says how to get it
// (a property that needs it fails; it never skips).
absl::StatusOr<const models::Model*> SmolLm2();
absl::StatusOr<std::unique_ptr<models::Model>> SmolLm2Copy();
const tokenizer::Tokenizer& SmolLm2Tokenizer();  // after SmolLm2() succeeded

// The cpu backend with `threads` >= 1 workers and the scalar ref backend, one of each per process.
backend::Backend& Cpu(int threads);
backend::Backend& Ref();

// --- Paged sequences for forward-level properties --------------------------------------------
// One sequence's KV in a runner shared by every SeqCache of the same (model, backend): a pool of
// 2048 blocks of 8 tokens, so tables are fragmented by the other live sequences.
class SeqCache {
 public:
  SeqCache(const models::Model& m, backend::Backend& be);
  ~SeqCache();
  SeqCache(const SeqCache&) = delete;
  SeqCache& operator=(const SeqCache&) = delete;
  int64_t n_past() const { return kv_.n_tokens; }
  void Truncate(int64_t n);  // keeps positions [0, n) (speculative rollback)
  // The K (or V) rows of positions [0, n_past) of `layer`, in the pool's format.
  std::vector<uint8_t> KvBytes(int64_t layer, bool v) const;

 private:
  friend std::vector<float> ForwardSeqs(std::span<SeqCache* const>,
                                        std::span<const std::span<const int32_t>>, bool);
  models::Runner* runner_ = nullptr;
  models::KvPool* pool_ = nullptr;
  models::SeqKv kv_;
  int32_t slot_ = -1;  // hybrid models: this sequence's recurrent-state slot in the runner
  std::vector<int32_t>* free_slots_ = nullptr;
  std::mutex* mu_ = nullptr;
};
// One step over several sequences (same model and backend): feeds[i] appended to seqs[i].
// Logits per sequence in order: [T_i, n_vocab] when all_logits, else its last row.
std::vector<float> ForwardSeqs(std::span<SeqCache* const> seqs,
                               std::span<const std::span<const int32_t>> feeds, bool all_logits);
std::vector<float> ForwardOne(SeqCache& cache, std::span<const int32_t> tokens, bool all_logits);

// --- Drafters -------------------------------------------------------------------------------

enum class DraftKind {
  kNgram,      // prompt lookup
  kOtherArch,  // a tiny model of another architecture: seeded random weights, same vocabulary
  kWrong,      // proposes random tokens: wrong with high probability, every round rejects
  kSelf,       // the target model itself: every draft is accepted
};
inline constexpr DraftKind kAllDraftKinds[] = {DraftKind::kNgram, DraftKind::kOtherArch,
                                               DraftKind::kWrong, DraftKind::kSelf};
const char* DraftKindName(DraftKind k);

// Proposes k tokens drawn from a seeded generator over [0, n_vocab), whatever the context.
std::unique_ptr<spec::Drafter> MakeRandomDrafter(int64_t n_vocab, uint64_t seed);

// A drafter of `kind` for the tiny `arch` target (`other_arch` is the draft's architecture for
// kOtherArch).
std::unique_ptr<spec::Drafter> MakeTinyDrafter(DraftKind kind, const std::string& arch,
                                               const std::string& other_arch, uint64_t seed,
                                               backend::Backend& be);

// --- Comparisons ----------------------------------------------------------------------------

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b);
bool BitEqual(const float* a, const float* b, size_t n);
// "equal" or "first difference at [i]: a vs b (bits)" for failure messages.
std::string FirstDifference(const float* a, const float* b, size_t n);
std::string FirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// `n` ids in [0, alphabet); a small alphabet makes repetitive prompts (n-gram drafts hit).
std::vector<int32_t> GenTokens(int n, int alphabet);

}  // namespace lockstep::props

// A property over the arguments `ArgList` (RapidCheck generates them), run as gtest
// Suite.Name with `ci_cases` cases in CI (scaled by the environment, see above).
#define LOCKSTEP_PROPERTY(Suite, Name, ci_cases, weight, ArgList)                        \
  void lockstep_property_##Suite##_##Name ArgList;                                        \
  TEST(Suite, Name) {                                                                     \
    ::lockstep::props::CheckProperty(ci_cases, weight, &lockstep_property_##Suite##_##Name); \
  }                                                                                       \
  void lockstep_property_##Suite##_##Name ArgList
