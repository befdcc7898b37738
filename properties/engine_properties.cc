// The engine's invariances (docs/design.md §1, docs/runtime.md), driven through Engine::Step:
//   batch:   N requests with random arrival steps, prompt lengths, sampling (greedy, sampled,
//            speculative greedy / coupled / reject with n-gram and draft-model drafters), stop
//            tokens, stop strings and max_tokens, served together under a random step budget
//            (chunked prefill), a random KV block size and pool, with random cancellations and
//            forced preemptions: every request that was not cancelled yields the tokens, bytes
//            and finish reason of the same request run alone;
//   cache:   a prefix-cache hit and a resumed session yield what a cold prefill yields;
//   kv:      all of the above with quantized KV formats (each format against itself);
//   leaks:   after every case, with the caches dropped, every block of the pool is free;
//   greedy:  a plain greedy request whose tokens the backend picks (GreedyTokens) yields what the
//            host sampler picks from the same rows.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/quant/quant.h"
#include "engine/runtime/engine.h"
#include "properties/property_support.h"

namespace lockstep::props {
namespace {

void Ignore(std::string_view) {}

struct Env {
  const models::Model* model;
  const tokenizer::Tokenizer* tok;
  backend::Backend* be;
  std::vector<quant::KvFormat> formats;  // the KV formats the model's head_dim allows
};

std::vector<quant::KvFormat> FormatsFor(const models::Model& m) {
  std::vector<quant::KvFormat> out;
  for (int f = 0; f < quant::kKvFormatCount; ++f) {
    const auto fmt = static_cast<quant::KvFormat>(f);
    if (models::CheckKvFormats(m.config(), fmt, fmt).ok()) out.push_back(fmt);
  }
  return out;
}

struct Case {
  runtime::Request req;
  std::string label;
  int arrival = 0;     // the step before which it is submitted
  int cancel_at = -1;  // the step before which it is cancelled (-1: never)
};

sampling::SamplingParams GenParams(int max_tokens, bool greedy) {
  sampling::SamplingParams p;
  p.max_tokens = max_tokens;
  if (greedy) {
    p.temperature = 0.0f;
  } else {
    p.temperature = static_cast<float>(*rc::gen::element(50, 80, 100, 130)) / 100.0f;
    p.top_k = *rc::gen::element(0, 0, 5, 40);
    p.top_p = *rc::gen::element(1.0f, 0.9f);
    p.presence_penalty = *rc::gen::element(0.0f, 0.5f);
  }
  return p;
}

// Draws N requests for `env`; drafters are owned by `drafters`.
std::vector<Case> GenCases(const Env& env, int max_n, int max_prompt, int max_gen,
                           std::vector<std::unique_ptr<spec::Drafter>>* drafters,
                           const std::string& arch) {
  const int64_t n_vocab = env.model->config().n_vocab;
  drafters->push_back(spec::MakeNgramDrafter(n_vocab));
  if (!arch.empty()) drafters->push_back(Must(spec::MakeModelDrafter(*env.model, TinyCopy(arch), *env.be, 4096)));
  const int n = *rc::gen::inRange(1, max_n + 1);
  std::vector<Case> cases(n);
  for (int i = 0; i < n; ++i) {
    Case& c = cases[i];
    // Prompts share a prefix now and then, so the prefix cache and CoW are exercised.
    c.req.prompt = GenTokens(*rc::gen::inRange(1, max_prompt + 1), n_vocab);
    if (i > 0 && *rc::gen::inRange(0, 3) == 0) {
      const auto& other = cases[*rc::gen::inRange(0, i)].req.prompt;
      c.req.prompt.insert(c.req.prompt.begin(), other.begin(), other.end());
    }
    const int mode = *rc::gen::inRange(0, 5);  // plain greedy, plain sampled, spec g/c/r
    const bool greedy = mode == 0 || mode == 2;
    c.req.params = GenParams(*rc::gen::inRange(1, max_gen + 1), greedy);
    c.req.seed = *rc::gen::inRange<uint64_t>(0, 1000);
    if (*rc::gen::inRange(0, 4) == 0) c.req.params.stop_token_ids.push_back(*rc::gen::inRange<int32_t>(0, n_vocab));
    if (*rc::gen::inRange(0, 4) == 0) c.req.params.stop.push_back(std::string(1, static_cast<char>(*rc::gen::inRange(97, 123))));
    c.label = greedy ? "greedy" : "sampled";
    if (mode >= 2) {
      c.req.drafter = (*drafters)[*rc::gen::inRange<size_t>(0, drafters->size())].get();
      c.req.spec.mode = mode == 2 ? spec::SpecMode::kGreedy
                                  : (mode == 3 ? spec::SpecMode::kCoupled : spec::SpecMode::kReject);
      c.req.spec.k = *rc::gen::inRange(1, 6);
      c.req.spec.adaptive = *rc::gen::element(false, true);
      c.label = absl::StrCat("spec ", spec::SpecModeName(c.req.spec.mode), " ", c.req.drafter->name());
    }
    c.arrival = *rc::gen::inRange(0, 6);
    if (*rc::gen::inRange(0, 8) == 0) c.cancel_at = c.arrival + *rc::gen::inRange(0, 6);
  }
  return cases;
}

runtime::EngineOptions GenEngineOptions(const Env& env, int64_t ctx, int n_requests) {
  runtime::EngineOptions o;
  o.ctx = ctx;
  o.block_size = *rc::gen::element<int64_t>(1, 4, 16);
  o.max_step_tokens = *rc::gen::element<int64_t>(8, 13, 64, 512);
  o.max_running = *rc::gen::inRange<int64_t>(1, n_requests + 2);
  o.max_spec_k = 5;
  o.k_format = *rc::gen::elementOf(env.formats);
  o.v_format = *rc::gen::elementOf(env.formats);
  const int64_t block_bytes = models::KvBlockBytes(env.model->config(), o.k_format, o.v_format,
                                                   o.block_size);
  // From one context (forcing preemption when several run) to plenty.
  const int64_t one = (ctx + o.block_size - 1) / o.block_size;
  o.kv_bytes = block_bytes * (one + *rc::gen::element<int64_t>(0, 1, one, 4 * one));
  o.prefix_cache_bytes = block_bytes * *rc::gen::element<int64_t>(0, 8, 64);
  // Hybrid models refuse the prefix cache by name (their recurrent state is not cached yet).
  if (env.model->config().gdn.present()) o.prefix_cache_bytes = 0;
  return o;
}

// The request alone: its own engine with the same context and KV formats (a cold cache, one
// sequence, a pool as large as the batched engine's).
absl::StatusOr<runtime::RequestResult> TryAlone(const Env& env, const runtime::EngineOptions& base,
                                                runtime::Request r) {
  runtime::EngineOptions o;
  o.ctx = base.ctx;
  o.k_format = base.k_format;
  o.v_format = base.v_format;
  o.max_running = 1;
  o.max_step_tokens = 512;
  o.max_spec_k = base.max_spec_k;
  o.block_size = base.block_size;
  o.kv_bytes = base.kv_bytes;
  auto engine = Must(runtime::Engine::Create(*env.model, *env.tok, *env.be, o));
  r.on_text = Ignore;
  return engine->Run(std::move(r));
}

runtime::RequestResult RunAlone(const Env& env, const runtime::EngineOptions& base, runtime::Request r) {
  return Must(TryAlone(env, base, std::move(r)));
}

void CheckEngineBatch(const Env& env, int max_n, int max_prompt, int max_gen, const std::string& arch) {
  std::vector<std::unique_ptr<spec::Drafter>> drafters;
  std::vector<Case> cases = GenCases(env, max_n, max_prompt, max_gen, &drafters, arch);
  const int64_t ctx = 2 * max_prompt + max_gen + 1;
  const runtime::EngineOptions o = GenEngineOptions(env, ctx, static_cast<int>(cases.size()));
  auto engine = Must(runtime::Engine::Create(*env.model, *env.tok, *env.be, o));
  Count(absl::StrCat("kv ", quant::KvFormatName(o.k_format), "/", quant::KvFormatName(o.v_format)));

  std::vector<int64_t> ids(cases.size(), -1);
  std::vector<std::string> streamed(cases.size());
  std::vector<std::optional<runtime::RequestResult>> results(cases.size());
  std::vector<absl::Status> refused(cases.size());
  auto collect = [&](std::vector<runtime::RequestResult> done) {
    for (auto& d : done) {
      for (size_t i = 0; i < cases.size(); ++i) {
        if (ids[i] == d.id) results[i] = std::move(d);
      }
    }
  };
  for (int step = 0; step < 10000; ++step) {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].arrival == step) {
        runtime::Request r = cases[i].req;
        r.on_text = [&streamed, i](std::string_view s) { streamed[i] += s; };
        // A plain greedy request without logprobs gets its tokens picked on the backend
        // (Engine::BackendGreedy); with them, the host sampler picks from the downloaded rows.
        // Alone it runs without: the two paths must agree token for token.
        if (*rc::gen::inRange(0, 2) == 0) {
          r.on_token = [](const runtime::TokenEvent&) {};
          r.logprobs = true;
          if (r.drafter == nullptr && r.params.greedy()) Count("greedy: host sampler vs backend pick");
        }
        absl::StatusOr<int64_t> id = engine->Submit(std::move(r));
        if (id.ok()) {
          ids[i] = *id;
        } else {
          refused[i] = id.status();  // e.g. beyond the context: alone must refuse it too
          ids[i] = -2;
        }
      }
        if (cases[i].cancel_at == step && ids[i] >= 0) engine->Cancel(ids[i]);
    }
    // Now and then, preempt a running request (as a dry pool would).
    if (*rc::gen::inRange(0, 10) == 0) {
      const size_t i = *rc::gen::inRange<size_t>(0, cases.size());
      if (ids[i] >= 0 && engine->Preempt(ids[i])) Count("forced preemptions");
    }
    collect(Must(engine->Step()));
    collect(engine->TakeFinished());
    bool all_submitted = true;
    for (size_t i = 0; i < cases.size(); ++i) all_submitted &= ids[i] != -1;
    if (all_submitted && engine->Idle()) break;
  }
  RC_ASSERT(engine->Idle());
  if (engine->stats().preemptions > 0) Count("cases with preemption");
  if (engine->stats().prefix_hits > 0) Count("cases with prefix-cache hits");

  for (size_t i = 0; i < cases.size(); ++i) {
    if (!refused[i].ok()) {
      const absl::StatusOr<runtime::RequestResult> alone = TryAlone(env, o, cases[i].req);
      RC_ASSERT(!alone.ok());
      RC_ASSERT(alone.status() == refused[i]);
      Count("refused (context limit or pool)");
      continue;
    }
    RC_ASSERT(results[i].has_value());
    const runtime::RequestResult& got = *results[i];
    if (got.cancelled) {
      Count("cancelled");
      continue;
    }
    const runtime::RequestResult want = RunAlone(env, o, cases[i].req);
    const std::string where = absl::StrCat("request ", i, " (", cases[i].label, ", prompt ",
                                           cases[i].req.prompt.size(), ", max_tokens ",
                                           cases[i].req.params.max_tokens, ") of ", cases.size());
    if (got.gen.tokens != want.gen.tokens) RC_FAIL(where + ": tokens differ from the request alone");
    if (got.gen.text != want.gen.text) RC_FAIL(where + ": text differs from the request alone");
    if (streamed[i] != want.gen.text) RC_FAIL(where + ": streamed text differs");
    RC_ASSERT(got.gen.finish == want.gen.finish);
    Count(cases[i].label);
  }
  engine->ClearCaches();
  RC_ASSERT(engine->pool().n_free() == engine->pool().n_blocks());
}

Env TinyEnv(const std::string& arch, backend::Backend& be) {
  const TinyModel& t = Tiny(arch);
  return {t.model.get(), t.tok.get(), &be, FormatsFor(*t.model)};
}

LOCKSTEP_PROPERTY(Engine, RequestsInTheLoopEqualAloneTiny, 150, Weight::kTiny, ()) {
  static const std::vector<std::string> archs(std::begin(kTinyArchs), std::end(kTinyArchs));
  const std::string arch = *rc::gen::elementOf(archs);
  backend::Backend& be = *rc::gen::element(0, 1) == 0 ? Cpu(1) : Cpu(3);
  CheckEngineBatch(TinyEnv(arch, be), 6, 20, 12, arch);
}

// The hybrid GDN models: batched, chunked (random step budgets), preempted, cancelled and
// speculative (n-gram; greedy, coupled, reject) requests equal alone, through the state lanes
// and the checkpoint restore of a rejected draft (docs/models.md).
LOCKSTEP_PROPERTY(Engine, RequestsInTheLoopEqualAloneHybrid, 100, Weight::kTiny, ()) {
  static const std::vector<std::string> archs(std::begin(kHybridArchs), std::end(kHybridArchs));
  const std::string arch = *rc::gen::elementOf(archs);
  backend::Backend& be = *rc::gen::element(0, 1) == 0 ? Cpu(1) : Cpu(3);
  CheckEngineBatch(TinyEnv(arch, be), 5, 20, 12, "");
}

// The real model, with the cpu backend splitting rows over threads, and every KV format.
LOCKSTEP_PROPERTY(Engine, RequestsInTheLoopEqualAloneSmolLm2, 3, Weight::kSmol, ()) {
  const models::Model* m = Must(SmolLm2());
  Env env{m, &SmolLm2Tokenizer(), &Cpu(2), FormatsFor(*m)};
  CheckEngineBatch(env, 3, 6, 4, "");
}

// A prefix-cache hit and a resumed session give a cold run's bytes, and compute less.
LOCKSTEP_PROPERTY(Engine, PrefixHitAndResumedSessionEqualCold, 200, Weight::kTiny, ()) {
  static const std::vector<std::string> archs(std::begin(kTinyArchs), std::end(kTinyArchs));
  const std::string arch = *rc::gen::elementOf(archs);
  const Env env = TinyEnv(arch, Cpu(2));
  const int64_t n_vocab = env.model->config().n_vocab;
  runtime::EngineOptions o;
  o.ctx = 128;
  o.block_size = *rc::gen::element<int64_t>(1, 4, 8);
  o.max_step_tokens = *rc::gen::element<int64_t>(7, 64);
  o.k_format = *rc::gen::elementOf(env.formats);
  o.v_format = *rc::gen::elementOf(env.formats);
  o.prefix_cache_bytes = int64_t{1} << 24;
  o.max_spec_k = 4;
  auto engine = Must(runtime::Engine::Create(*env.model, *env.tok, *env.be, o));

  // Turn 1 parks a session; turn 2 extends the conversation and resumes it.
  runtime::Request t1;
  t1.prompt = GenTokens(*rc::gen::inRange(2, 40), n_vocab);
  t1.params = GenParams(*rc::gen::inRange(1, 10), *rc::gen::element(true, false));
  t1.seed = 11;
  t1.session = "s";
  const runtime::RequestResult r1 = Must(engine->Run(t1));
  runtime::Request t2 = t1;
  t2.prompt.insert(t2.prompt.end(), r1.gen.tokens.begin(), r1.gen.tokens.end());
  const std::vector<int32_t> more = GenTokens(*rc::gen::inRange(1, 20), n_vocab);
  t2.prompt.insert(t2.prompt.end(), more.begin(), more.end());
  const runtime::RequestResult r2 = Must(engine->Run(t2));
  const runtime::RequestResult cold2 = RunAlone(env, o, t2);
  RC_ASSERT(r2.gen.tokens == cold2.gen.tokens);
  RC_ASSERT(r2.gen.text == cold2.gen.text);
  RC_ASSERT(r2.prefill_computed < cold2.prefill_computed);
  Count("session resumed");

  // The same prompt again, without a session: the prefix cache serves its full blocks.
  runtime::Request t3 = t2;
  t3.session.clear();
  const runtime::RequestResult r3 = Must(engine->Run(t3));
  RC_ASSERT(r3.gen.tokens == cold2.gen.tokens);
  RC_ASSERT(r3.gen.text == cold2.gen.text);
  if (engine->stats().prefix_hits > 0) Count("prefix hits");
  engine->ClearCaches();
  RC_ASSERT(engine->pool().n_free() == engine->pool().n_blocks());
}

}  // namespace
}  // namespace lockstep::props
