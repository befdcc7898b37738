// Pipeline stages (docs/pipeline.md) through the engine loop: the same requests, submitted at the
// same steps, run through an unsplit engine and through an engine whose runner is split into 2-3
// stages (random layer boundaries and micro-batch counts; stages in threads over LocalStageLinks).
// Every f32 logit of every step must be bitwise equal, and so every token. The requests mix
// greedy and sampled decoding, speculative greedy / coupled / reject with an n-gram drafter,
// shared prefixes under a prefix cache, and parked sessions resumed by a second turn.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/runner.h"
#include "engine/models/stage_link.h"
#include "engine/runtime/engine.h"
#include "properties/property_support.h"

namespace lockstep::props {
namespace {

struct Turn {
  runtime::Request req;  // drafter set per engine
  int mode = 0;          // 0 greedy, 1 sampled, 2-4 spec greedy / coupled / reject
  int arrival = 0;
};

struct Outcome {
  std::vector<float> logits;                   // every step's rows, in step order
  std::vector<std::vector<int32_t>> tokens;    // per request, in submission order
};

// Runs rounds of turns through `engine`: each round's turns are submitted at their arrival step
// and the engine steps until idle. A second-round turn continues its first-round session.
Outcome Drive(runtime::Engine& engine, std::vector<std::vector<Turn>> rounds, spec::Drafter* ngram,
              std::vector<float>* sink) {
  Outcome out;
  std::vector<std::pair<int64_t, size_t>> ids;  // engine id -> index in out.tokens
  for (auto& round : rounds) {
    int step = 0;
    size_t next = 0;
    while (next < round.size() || !engine.Idle()) {
      while (next < round.size() && round[next].arrival <= step) {
        runtime::Request r = round[next].req;
        if (round[next].mode >= 2) r.drafter = ngram;
        r.on_text = [](std::string_view) {};
        auto id = engine.Submit(std::move(r));
        Must(id.status());
        ids.push_back({*id, out.tokens.size()});
        out.tokens.emplace_back();
        ++next;
      }
      auto done = engine.Step();
      Must(done.status());
      for (const auto& d : *done) {
        for (const auto& [id, at] : ids) {
          if (id == d.id) out.tokens[at] = d.gen.tokens;
        }
      }
      ++step;
    }
  }
  out.logits = std::move(*sink);
  return out;
}

LOCKSTEP_PROPERTY(Pipeline, SplitEngineEqualsUnsplitBitwise, 200, Weight::kTiny, ()) {
  const std::string arch = *rc::gen::elementOf(
      std::vector<std::string>(std::begin(kPipelineArchs), std::end(kPipelineArchs)));
  const TinyModel& tm = Tiny(arch);
  const models::Model& m = *tm.model;
  const int64_t L = m.config().n_layer;
  const int stages = *rc::gen::inRange<int>(2, static_cast<int>(std::min<int64_t>(3, L)) + 1);
  std::vector<int64_t> split = {0};
  for (int s = 1; s < stages; ++s) {
    split.push_back(*rc::gen::inRange<int64_t>(split.back() + 1, L - (stages - s) + 1));
  }
  split.push_back(L);
  const int64_t micro = *rc::gen::inRange<int64_t>(1, 4);

  runtime::EngineOptions o;
  o.ctx = 128;
  o.block_size = *rc::gen::element<int64_t>(1, 4, 16);
  o.max_step_tokens = *rc::gen::element<int64_t>(8, 13, 64);
  o.max_spec_k = 5;
  const int n = *rc::gen::inRange(1, 6);
  o.max_running = *rc::gen::inRange<int64_t>(1, n + 2);
  o.prefix_cache_bytes = *rc::gen::element<int64_t>(0, int64_t{64} << 20);
  o.max_sessions = 8;

  std::vector<std::vector<Turn>> rounds(2);
  for (int i = 0; i < n; ++i) {
    Turn t;
    t.req.prompt = GenTokens(*rc::gen::inRange(1, 25), kTinyVocab - 1);
    if (i > 0 && *rc::gen::inRange(0, 3) == 0) {  // a shared prefix for the prefix cache
      const auto& other = rounds[0][*rc::gen::inRange(0, i)].req.prompt;
      t.req.prompt.insert(t.req.prompt.begin(), other.begin(), other.end());
    }
    t.mode = *rc::gen::inRange(0, 5);
    t.req.params.max_tokens = *rc::gen::inRange(1, 12);
    t.req.params.temperature = (t.mode == 0 || t.mode == 2) ? 0.0f : 0.8f;
    t.req.seed = *rc::gen::inRange<uint64_t>(0, 1000);
    if (t.mode >= 2) {
      t.req.spec.mode = t.mode == 2 ? spec::SpecMode::kGreedy
                                    : (t.mode == 3 ? spec::SpecMode::kCoupled : spec::SpecMode::kReject);
      t.req.spec.k = *rc::gen::inRange(1, 6);
    }
    t.arrival = *rc::gen::inRange(0, 4);
    if (*rc::gen::inRange(0, 2) == 0) t.req.session = absl::StrCat("s", i);
    rounds[0].push_back(t);
  }
  std::sort(rounds[0].begin(), rounds[0].end(),
            [](const Turn& a, const Turn& b) { return a.arrival < b.arrival; });

  auto run = [&](bool split_it) -> Outcome {
    std::vector<float> sink;
    runtime::EngineOptions eo = o;
    eo.on_step_logits = [&sink](std::span<const float> l) { sink.insert(sink.end(), l.begin(), l.end()); };
    std::unique_ptr<models::LocalStageLinks> links;
    std::vector<std::unique_ptr<backend::Backend>> stage_be;
    std::vector<std::thread> threads;
    // Joins the stage threads on every exit, a failed case's exception included.
    struct Joiner {
      std::unique_ptr<models::LocalStageLinks>& links;
      std::vector<std::thread>& threads;
      ~Joiner() {
        if (links) links->Close();
        for (auto& t : threads) t.join();
      }
    } joiner{links, threads};
    if (split_it) {
      links = std::make_unique<models::LocalStageLinks>(stages);
      for (int r = 1; r < stages; ++r) {
        stage_be.push_back(Must(backend::MakeBackend("cpu", {1})));
        threads.emplace_back([&, r] { (void)models::RunStage(m, *stage_be[r - 1], links->rank(r)); });
      }
      eo.pp_split = split;
      eo.pp_link = &links->rank(0);
      eo.pp_micro_batches = micro;
      eo.pp_timeout_ms = 60000;
    }
    auto drafter = spec::MakeNgramDrafter(m.config().n_vocab);
    Outcome out;
    {
      auto engine = Must(runtime::Engine::Create(m, *tm.tok, Cpu(1), eo));
      // The first round, then a second turn for every session: its prompt continues the first.
      out = Drive(*engine, {rounds[0]}, drafter.get(), &sink);
      std::vector<Turn> second;
      for (size_t i = 0; i < rounds[0].size(); ++i) {
        if (rounds[0][i].req.session.empty()) continue;
        Turn t = rounds[0][i];
        t.req.prompt.insert(t.req.prompt.end(), out.tokens[i].begin(), out.tokens[i].end());
        t.req.prompt.push_back(static_cast<int32_t>(i + 1));
        t.arrival = 0;
        second.push_back(t);
      }
      Outcome more = Drive(*engine, {second}, drafter.get(), &sink);
      out.logits.insert(out.logits.end(), more.logits.begin(), more.logits.end());
      out.tokens.insert(out.tokens.end(), more.tokens.begin(), more.tokens.end());
    }  // the engine (and its runner) goes first: stage 0 sends stop down the chain
    return out;
  };
  const Outcome plain = run(false), piped = run(true);
  RC_TAG(absl::StrCat(stages, " stages"));
  RC_ASSERT(plain.tokens == piped.tokens);
  RC_ASSERT(plain.logits.size() == piped.logits.size());
  RC_ASSERT(plain.logits.empty() ||
            std::memcmp(plain.logits.data(), piped.logits.data(), plain.logits.size() * 4) == 0);
}

}  // namespace
}  // namespace lockstep::props
