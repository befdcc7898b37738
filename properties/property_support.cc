#include "properties/property_support.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/gguf/gguf.h"
#include "engine/store/model_store.h"
#include "engine/tokenizer/unicode.h"
#include "engine/backend/backend.h"
#include "engine/models/runner.h"

namespace lockstep::props {
namespace {

using gguf::KeyValue;
using gguf::Value;
using gguf::ValueType;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1) {
    std::fprintf(stderr, "%s=%s is not a positive integer\n", name, v);
    std::exit(2);
  }
  return static_cast<int>(n);
}

// GPT-2's byte alphabet spelling of byte b (the byte-level BPE vocabulary's first 256 tokens).
std::string ByteSymbol(int b) {
  auto printable = [](int k) { return (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE; };
  uint32_t cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int k = 0; k < b; ++k) cp += printable(k) ? 0 : 1;
  }
  std::string s;
  tokenizer::AppendUtf8(cp, &s);
  return s;
}

// tokenizer.ggml.* keys of the synthetic vocabulary described in the header.
std::vector<KeyValue> SyntheticTokenizerKeys() {
  std::vector<Value> tokens, types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(Value::String(ByteSymbol(b)));
    types.push_back(Value::I32(1));  // NORMAL
  }
  for (int i = 0; i < kTinyVocab - 256; ++i) {
    tokens.push_back(Value::String(absl::StrCat("t", i)));
    types.push_back(Value::I32(1));
  }
  tokens.push_back(Value::String("<|endoftext|>"));
  types.push_back(Value::I32(3));  // CONTROL
  return {
      {"tokenizer.ggml.model", Value::String("gpt2")},
      {"tokenizer.ggml.pre", Value::String("gpt2")},
      {"tokenizer.ggml.tokens", Value::Array(ValueType::STRING, std::move(tokens))},
      {"tokenizer.ggml.token_type", Value::Array(ValueType::INT32, std::move(types))},
      {"tokenizer.ggml.merges", Value::Array(ValueType::STRING, {})},
      {"tokenizer.ggml.bos_token_id", Value::U32(kTinyVocab)},
      {"tokenizer.ggml.eos_token_id", Value::U32(kTinyVocab)},
  };
}

absl::StatusOr<std::string> TinyBytesWithVocab(const std::string& arch) {
  const bool family = std::find(std::begin(kFamilyGoldenArchs), std::end(kFamilyGoldenArchs),
                                arch) != std::end(kFamilyGoldenArchs);
  const std::string path = absl::StrCat(LOCKSTEP_SOURCE_DIR, family ? "/golden/families/" : "/golden/tiny/",
                                        arch, "/", arch, ".gguf");
  absl::StatusOr<gguf::File> f = gguf::File::Open(path);
  if (!f.ok()) return absl::Status(f.status().code(), absl::StrCat(path, ": ", f.status().message()));
  std::vector<KeyValue> md;
  for (const KeyValue& kv : f->metadata()) {
    if (!kv.key.starts_with("tokenizer.")) md.push_back(kv);
  }
  for (KeyValue& kv : SyntheticTokenizerKeys()) md.push_back(std::move(kv));
  std::vector<gguf::WriteTensor> tensors;
  for (const gguf::TensorInfo& t : f->tensors()) {
    tensors.push_back({t.name, t.shape, t.type,
                       std::string_view(reinterpret_cast<const char*>(f->TensorData(t)), t.n_bytes)});
  }
  return gguf::Serialize(md, tensors);
}

absl::StatusOr<TinyModel> LoadTiny(const std::string& arch) {
  TinyModel t;
  t.arch = arch;
  auto bytes = TinyBytesWithVocab(arch);
  if (!bytes.ok()) return bytes.status();
  t.bytes = *std::move(bytes);
  auto file = gguf::File::FromBytes(t.bytes);
  if (!file.ok()) return file.status();
  auto model = models::Model::FromFile(*std::move(file));
  if (!model.ok()) return model.status();
  t.model = *std::move(model);
  if (t.model->config().n_vocab != kTinyVocab) {
    return absl::FailedPreconditionError(absl::StrCat(
        arch, " tiny model has ", t.model->config().n_vocab, " vocab rows, expected ", kTinyVocab));
  }
  auto tok = tokenizer::Tokenizer::FromGguf(t.model->file());
  if (!tok.ok()) return tok.status();
  t.tok = std::make_unique<tokenizer::Tokenizer>(*std::move(tok));
  return t;
}

struct SmolState {
  absl::Status status;
  std::string path;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

const SmolState& Smol() {
  static const SmolState* state = [] {
    auto* s = new SmolState;
    const store::KnownModel* known = store::FindKnownModel("smollm2-135m");
    if (known == nullptr) {
      s->status = absl::NotFoundError("smollm2-135m is not a known model of this build");
      return s;
    }
    s->path = store::CachedPath(*known);
    if (!store::IsCached(*known)) {
      s->status = absl::NotFoundError(absl::StrCat(
          "the SmolLM2 properties need ", s->path,
          "; run `build/bin/lockstep pull smollm2-135m` (make test pulls it). A property that "
          "cannot run has not passed."));
      return s;
    }
    auto m = models::Model::Load(s->path);
    if (!m.ok()) {
      s->status = m.status();
      return s;
    }
    s->model = *std::move(m);
    auto tok = tokenizer::Tokenizer::FromGguf(s->model->file());
    if (!tok.ok()) {
      s->status = tok.status();
      return s;
    }
    s->tok = std::make_unique<tokenizer::Tokenizer>(*std::move(tok));
    return s;
  }();
  return *state;
}

class RandomDraftState : public spec::DraftState {
 public:
  RandomDraftState(int64_t n_vocab, uint64_t seed) : n_vocab_(n_vocab), rng_(seed) {}
  absl::StatusOr<spec::Draft> Propose(const spec::DraftRequest& req) override {
    spec::Draft d;
    for (int i = 0; i < req.k; ++i) {
      d.tokens.push_back(static_cast<int32_t>(rng_() % static_cast<uint64_t>(n_vocab_)));
      if (req.mode == spec::SpecMode::kReject) {
        d.q.emplace_back(n_vocab_, 0.0);  // deterministic given the state: one-hot law
        d.q.back()[d.tokens.back()] = 1.0;
      }
    }
    return d;
  }

 private:
  int64_t n_vocab_;
  std::mt19937_64 rng_;
};

// Each sequence drafts from its own generator, seeded from the drafter's seed and the order in
// which sequences started.
class RandomDrafter : public spec::Drafter {
 public:
  RandomDrafter(int64_t n_vocab, uint64_t seed) : n_vocab_(n_vocab), seed_(seed) {}
  std::string name() const override { return "random"; }
  absl::StatusOr<std::unique_ptr<spec::DraftState>> Start() override {
    return std::unique_ptr<spec::DraftState>(new RandomDraftState(n_vocab_, seed_ + started_++));
  }

 private:
  int64_t n_vocab_;
  uint64_t seed_;
  uint64_t started_ = 0;
};

struct Coverage {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, int64_t>> spec;  // label -> (drafted, accepted)
  std::map<std::string, int64_t> counts;
};
Coverage& TheCoverage() {
  static Coverage c;
  return c;
}

}  // namespace

void CountSpec(const std::string& label, int64_t drafted, int64_t accepted) {
  Coverage& c = TheCoverage();
  std::lock_guard<std::mutex> lock(c.mu);
  c.spec[label].first += drafted;
  c.spec[label].second += accepted;
}

void Count(const std::string& label, int64_t n) {
  Coverage& c = TheCoverage();
  std::lock_guard<std::mutex> lock(c.mu);
  c.counts[label] += n;
}

std::string TakeCoverageReport() {
  Coverage& c = TheCoverage();
  std::lock_guard<std::mutex> lock(c.mu);
  std::string out;
  for (const auto& [label, da] : c.spec) {
    absl::StrAppendFormat(&out, "    %-40s drafted %7d  accepted %7d (%.0f%%)\n", label, da.first,
                          da.second, da.first > 0 ? 100.0 * da.second / da.first : 0.0);
  }
  for (const auto& [label, n] : c.counts) absl::StrAppendFormat(&out, "    %-40s %d\n", label, n);
  c.spec.clear();
  c.counts.clear();
  return out;
}

int CaseCount(int ci_cases, Weight weight) {
  const char* rc = std::getenv("RC_PARAMS");
  if (rc != nullptr && std::strstr(rc, "max_success") != nullptr) {
    return rc::detail::configuration().testParams.maxSuccess;
  }
  if (weight == Weight::kSmol) return EnvInt("LOCKSTEP_PROPERTY_SMOL_CASES", ci_cases);
  return EnvInt("LOCKSTEP_PROPERTY_CASES", std::max(ci_cases, EnvInt("LOCKSTEP_PROPERTY_MIN_CASES", 1)));
}

uint64_t MixSeed(uint64_t run_seed, const std::string& id) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : id) h = (h ^ ch) * 0x100000001b3ull;
  return run_seed ^ h;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const TinyModel& Tiny(const std::string& arch) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TinyModel>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(arch);
  if (it == cache.end()) {
    absl::StatusOr<TinyModel> t = LoadTiny(arch);
    if (!t.ok()) RC_FAIL(absl::StrCat("tiny ", arch, ": ", t.status().ToString()));
    it = cache.emplace(arch, std::make_unique<TinyModel>(*std::move(t))).first;
  }
  return *it->second;
}

std::unique_ptr<models::Model> TinyCopy(const std::string& arch) {
  auto file = Must(gguf::File::FromBytes(Tiny(arch).bytes));
  return Must(models::Model::FromFile(std::move(file)));
}

absl::Status SmolLm2Available() { return Smol().status; }

absl::StatusOr<const models::Model*> SmolLm2() {
  if (!Smol().status.ok()) return Smol().status;
  return Smol().model.get();
}

absl::StatusOr<std::unique_ptr<models::Model>> SmolLm2Copy() {
  if (!Smol().status.ok()) return Smol().status;
  return models::Model::Load(Smol().path);
}

const tokenizer::Tokenizer& SmolLm2Tokenizer() { return *Smol().tok; }

backend::Backend& Cpu(int threads) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<backend::Backend>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(threads);
  if (it == cache.end()) {
    auto be = backend::MakeBackend(threads == 0 ? "ref" : "cpu", {threads});
    if (!be.ok()) RC_FAIL(be.status().ToString());
    it = cache.emplace(threads, *std::move(be)).first;
  }
  return *it->second;
}

backend::Backend& Ref() { return Cpu(0); }

const char* DraftKindName(DraftKind k) {
  switch (k) {
    case DraftKind::kNgram: return "ngram";
    case DraftKind::kOtherArch: return "other-arch draft";
    case DraftKind::kWrong: return "always-wrong";
    case DraftKind::kSelf: return "self-draft";
  }
  return "?";
}

std::unique_ptr<spec::Drafter> MakeRandomDrafter(int64_t n_vocab, uint64_t seed) {
  return std::make_unique<RandomDrafter>(n_vocab, seed);
}

std::unique_ptr<spec::Drafter> MakeTinyDrafter(DraftKind kind, const std::string& arch,
                                               const std::string& other_arch, uint64_t seed,
                                               backend::Backend& be) {
  const models::Model& target = *Tiny(arch).model;
  switch (kind) {
    case DraftKind::kNgram: return spec::MakeNgramDrafter(kTinyVocab);
    case DraftKind::kWrong: return MakeRandomDrafter(kTinyVocab, seed);
    case DraftKind::kOtherArch: return Must(spec::MakeModelDrafter(target, TinyCopy(other_arch), be));
    case DraftKind::kSelf: return Must(spec::MakeModelDrafter(target, TinyCopy(arch), be));
  }
  RC_FAIL("unknown drafter kind");
  return nullptr;
}

bool BitEqual(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && BitEqual(a.data(), b.data(), a.size());
}

std::string FirstDifference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t x, y;
    std::memcpy(&x, a + i, 4);
    std::memcpy(&y, b + i, 4);
    if (x != y) {
      return absl::StrFormat("first difference at [%d]: %.9g (0x%08x) vs %.9g (0x%08x)", i, a[i],
                             x, b[i], y);
    }
  }
  return "equal";
}

std::string FirstDifference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) return absl::StrCat("first difference at token ", i, ": ", a[i], " vs ", b[i]);
  }
  if (a.size() != b.size()) return absl::StrCat("lengths ", a.size(), " vs ", b.size());
  return "equal";
}

std::vector<int32_t> GenTokens(int n, int alphabet) {
  return *rc::gen::container<std::vector<int32_t>>(n, rc::gen::inRange<int32_t>(0, alphabet));
}

SeqCache::SeqCache(const models::Model& m, backend::Backend& be) {
  struct Key {
    const models::Model* m;
    backend::Backend* be;
    bool operator<(const Key& o) const { return std::tie(m, be) < std::tie(o.m, o.be); }
  };
  struct Entry {
    std::unique_ptr<models::Runner> runner;
    std::unique_ptr<models::KvPool> pool;
    std::vector<int32_t> free_slots;  // recurrent-state slots (hybrid models)
  };
  static std::mutex mu;
  static std::map<Key, Entry>* runners = new std::map<Key, Entry>;
  std::lock_guard<std::mutex> lock(mu);
  Entry& e = (*runners)[Key{&m, &be}];
  if (!e.runner) {
    models::RunnerOptions o;
    o.max_step_tokens = 512;
    o.max_logit_rows = 512;
    o.block_size = 8;
    o.n_blocks = 2048;
    o.n_state_slots = m.config().gdn.present() ? 64 : 0;
    e.runner = Must(models::Runner::Create(m, be, o));
    e.pool = std::make_unique<models::KvPool>(o.n_blocks, o.block_size);
    for (int32_t s = static_cast<int32_t>(o.n_state_slots) - 1; s >= 0; --s) e.free_slots.push_back(s);
  }
  runner_ = e.runner.get();
  pool_ = e.pool.get();
  if (m.config().gdn.present()) {
    if (e.free_slots.empty()) throw std::runtime_error("SeqCache: 64 hybrid sequences alive at once");
    slot_ = e.free_slots.back();
    e.free_slots.pop_back();
    free_slots_ = &e.free_slots;
    mu_ = &mu;
  }
}

SeqCache::~SeqCache() {
  models::ReleaseKv(*pool_, kv_);
  if (free_slots_ != nullptr) {
    std::lock_guard<std::mutex> lock(*mu_);
    free_slots_->push_back(slot_);
  }
}

void SeqCache::Truncate(int64_t n) {
  // A recurrent state cannot be cut back by dropping blocks (the engine restores checkpoints).
  if (slot_ >= 0 && n < kv_.n_tokens) throw std::runtime_error("SeqCache::Truncate on a hybrid model");
  models::TruncateKv(*pool_, kv_, n);
}

std::vector<float> ForwardSeqs(std::span<SeqCache* const> seqs,
                               std::span<const std::span<const int32_t>> feeds, bool all_logits) {
  std::vector<models::StepEntry> batch;
  models::Runner* runner = seqs.empty() ? nullptr : seqs[0]->runner_;
  for (size_t i = 0; i < seqs.size(); ++i) {
    SeqCache& s = *seqs[i];
    const int64_t n = static_cast<int64_t>(feeds[i].size());
    Must(models::ReserveKv(*s.pool_, s.kv_, s.kv_.n_tokens + n,
                           [&](int32_t a, int32_t b) { return s.runner_->CopyBlock(a, b); }));
    batch.push_back({feeds[i], s.kv_.n_tokens, s.kv_.blocks, all_logits ? n : 1});
    batch.back().state_slot = s.slot_;
  }
  std::vector<float> logits;
  Must(runner->Forward(batch, &logits));
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->kv_.n_tokens += static_cast<int64_t>(feeds[i].size());
  return logits;
}

std::vector<float> ForwardOne(SeqCache& cache, std::span<const int32_t> tokens, bool all_logits) {
  SeqCache* one = &cache;
  return ForwardSeqs(std::span(&one, 1), std::span(&tokens, 1), all_logits);
}

std::vector<uint8_t> SeqCache::KvBytes(int64_t layer, bool v) const {
  return Must(runner_->DownloadKv(layer, kv_.blocks, kv_.n_tokens, v));
}

}  // namespace lockstep::props
