#include "engine/cli/qualify_stages.h"

#include "engine/cli/bench_support.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>

#include "absl/strings/str_format.h"
#include "engine/cli/bench_support.h"
#include "engine/cli/model_check.h"
#include "engine/core/compare.h"
#include "engine/core/status.h"
#include "engine/models/runner.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/law_stats.h"
#include "engine/sampling/sampler.h"

namespace lockstep::cli::qualify {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// log-sum-exp of a row, in double.
double LogSumExp(const float* row, int64_t n) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(row[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(row[i]) - mx);
  return mx + std::log(s);
}

json Line(const std::string& name, const std::string& kind, int64_t rows, int64_t differing,
          const std::string& detail) {
  return {{"name", name}, {"kind", kind}, {"rows", rows}, {"differing", differing},
          {"detail", detail}, {"status", rows > 0 && differing == 0 ? "passed" : "failed"}};
}

// An Engine on the cell's KV formats, sized for `running` requests of `ctx` tokens.
absl::StatusOr<std::unique_ptr<runtime::Engine>> MakeEngine(const Cell& c, int64_t running,
                                                            int64_t ctx, int64_t prefix_bytes) {
  runtime::EngineOptions eo;
  eo.k_format = c.k;
  eo.v_format = c.v;
  eo.ctx = ctx;
  eo.max_running = running;
  eo.max_step_tokens = 256;
  eo.prefix_cache_bytes = prefix_bytes;
  eo.kv_bytes = (running + 2) * ((ctx + 15) / 16) *
                models::KvBlockBytes(c.model->config(), c.k, c.v, 16);
  return runtime::Engine::Create(*c.model, *c.tok, *c.be, eo);
}

runtime::Request MakeRequest(const std::vector<int32_t>& prompt, int64_t n, float temp,
                             uint64_t seed) {
  runtime::Request r;
  r.prompt = prompt;
  r.params.max_tokens = static_cast<int32_t>(n);
  r.params.temperature = temp;
  r.seed = seed;
  return r;
}

// Positions where two token sequences differ (a length difference counts each missing one).
int64_t Differing(const std::vector<int32_t>& a, const std::vector<int32_t>& b, std::string* first) {
  int64_t d = 0;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const bool same = i < a.size() && i < b.size() && a[i] == b[i];
    if (!same && d++ == 0 && first->empty()) {
      *first = absl::StrFormat("first difference at generated token %zu", i);
    }
  }
  return d;
}

}  // namespace

absl::StatusOr<json> MeasureQuality(const Cell& c, const models::Model& reference,
                                    const std::vector<int32_t>& tokens, int64_t chunk) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t V = c.model->config().n_vocab;
  if (reference.config().n_vocab != V) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--reference has %d vocabulary entries, the model %d: not the same model",
        reference.config().n_vocab, V));
  }
  if (T < 2) return absl::InvalidArgumentError("quality: the text has fewer than 2 tokens");
  models::RunnerOptions ro;
  ro.max_step_tokens = chunk;
  ro.max_logit_rows = chunk;
  ro.block_size = 16;
  ro.n_blocks = (T + 15) / 16 + 1;
  ro.k_format = c.k;
  ro.v_format = c.v;
  ASSIGN_OR_RETURN(auto mine, models::Runner::Create(*c.model, *c.be, ro));
  ro.k_format = ro.v_format = quant::KvFormat::kF32;
  ASSIGN_OR_RETURN(auto ref, models::Runner::Create(reference, *c.be, ro));
  std::vector<int32_t> blocks(ro.n_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<double> kl;
  int64_t top1 = 0, nonfinite = 0;
  double nll = 0, nll_ref = 0;
  std::vector<float> la, lb;
  for (int64_t s = 0; s < T - 1; s += chunk) {
    const int64_t n = std::min(chunk, T - 1 - s);
    models::StepEntry e{std::span<const int32_t>(tokens).subspan(s, n), s, blocks, n};
    RETURN_IF_ERROR(mine->Forward(std::span(&e, 1), &la));
    RETURN_IF_ERROR(ref->Forward(std::span(&e, 1), &lb));
    for (int64_t i = 0; i < n; ++i) {
      const float* a = la.data() + i * V;
      const float* b = lb.data() + i * V;
      ASSIGN_OR_RETURN(compare::Stats st, compare::Logits(a, b, 1, V, 0.0));
      if (st.nan_a > 0 || st.nan_b > 0) {
        ++nonfinite;
        continue;
      }
      kl.push_back(st.mean_kl);
      top1 += st.top1_agree;
      const int32_t next = tokens[s + i + 1];
      nll += LogSumExp(a, V) - a[next];
      nll_ref += LogSumExp(b, V) - b[next];
    }
    if (c.progress) c.progress("quality: positions", s + n, T - 1);
  }
  const int64_t P = static_cast<int64_t>(kl.size());
  std::vector<double> sorted = kl;
  std::sort(sorted.begin(), sorted.end());
  const auto pct = [&](double q) {
    if (sorted.empty()) return 0.0;
    const auto idx = static_cast<int64_t>(std::ceil(q * static_cast<double>(P))) - 1;
    return sorted[std::clamp<int64_t>(idx, 0, P - 1)];
  };
  // Histogram over log10(KL): [0, 1e-6) then half-decades up to 1e2, then [1e2, inf).
  std::vector<double> edges = {0.0};
  for (int e = -12; e <= 4; ++e) edges.push_back(std::pow(10.0, e / 2.0));
  std::vector<int64_t> counts(edges.size(), 0);  // the last bin is [edges.back(), inf)
  for (double x : kl) {
    size_t b = std::upper_bound(edges.begin(), edges.end(), x) - edges.begin() - 1;
    ++counts[std::min(b, counts.size() - 1)];
  }
  const double denom = std::max<int64_t>(P, 1);
  return json{{"positions", T - 1},
              {"scored", P},
              {"nonfinite", nonfinite},
              {"kl_mean", std::accumulate(kl.begin(), kl.end(), 0.0) / denom},
              {"kl_p50", pct(0.5)},
              {"kl_p99", pct(0.99)},
              {"kl_max", sorted.empty() ? 0.0 : sorted.back()},
              {"top1", static_cast<double>(top1) / denom},
              {"top1_agree", top1},
              {"ppl", std::exp(nll / denom)},
              {"ppl_reference", std::exp(nll_ref / denom)},
              {"kl_histogram", {{"edges", edges}, {"counts", counts}}}};
}

absl::StatusOr<json> RunInvariance(const Cell& c, const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<std::vector<int32_t>>& long_prompts,
                                   const std::vector<int64_t>& batches, int64_t max_prompt,
                                   int64_t gen_tokens) {
  json lines = json::array();
  ModelCheckOptions mo;
  mo.seed = c.seed;
  mo.batches = batches;
  mo.max_prompt = max_prompt;
  mo.k_format = c.k;
  mo.v_format = c.v;
  if (c.progress) c.progress("invariance: forward lines (model_check)", 0, 1);
  ASSIGN_OR_RETURN(auto check, CheckModelInvariance(*c.model, *c.be, mo));
  for (const ModelCheckLine& l : check) {
    lines.push_back(Line("forward: " + l.name, "bitwise", l.rows, l.differing, l.detail));
  }
  if (c.progress) c.progress("invariance: forward lines (model_check)", 1, 1);

  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  for (const auto& p : long_prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  const int64_t ctx = longest + gen_tokens + 16;
  const int64_t B = static_cast<int64_t>(prompts.size());
  for (const float temp : {0.0f, 0.8f}) {
    const std::string mode = temp == 0.0f ? "greedy" : "sampled";
    // Alone: one request at a time on a fresh engine.
    std::vector<std::vector<int32_t>> alone;
    for (int64_t i = 0; i < B; ++i) {
      ASSIGN_OR_RETURN(auto e, MakeEngine(c, 1, ctx, 0));
      ASSIGN_OR_RETURN(auto r, e->Run(MakeRequest(prompts[i], gen_tokens, temp, c.seed + i)));
      alone.push_back(r.gen.tokens);
      if (c.progress) c.progress("invariance: engine " + mode + ", alone", i + 1, B);
    }
    {  // Batched: every request submitted at once to one engine.
      ASSIGN_OR_RETURN(auto e, MakeEngine(c, B, ctx, 0));
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < B; ++i) {
        ASSIGN_OR_RETURN(int64_t id, e->Submit(MakeRequest(prompts[i], gen_tokens, temp, c.seed + i)));
        ids.push_back(id);
      }
      std::map<int64_t, std::vector<int32_t>> got;
      while (!e->Idle()) {
        ASSIGN_OR_RETURN(auto done, e->Step());
        for (auto& d : done) got[d.id] = d.gen.tokens;
      }
      int64_t rows = 0, diff = 0;
      std::string first;
      for (int64_t i = 0; i < B; ++i) {
        rows += static_cast<int64_t>(alone[i].size());
        diff += Differing(alone[i], got[ids[i]], &first);
      }
      lines.push_back(Line(absl::StrFormat("engine: %d requests batched == alone (%s)", B, mode),
                           "bitwise", rows, diff,
                           absl::StrFormat("%d prompts x %d tokens; generated tokens compared%s",
                                           B, gen_tokens, first.empty() ? "" : "; " + first)));
    }
    {  // Prefix cache: each long prompt cold on a fresh engine, then twice on one engine with a
       // prefix cache (the second run reuses the first one's full blocks).
      ASSIGN_OR_RETURN(auto e, MakeEngine(c, 1, ctx, int64_t{64} << 20));
      int64_t rows = 0, diff = 0;
      std::string first;
      const int64_t L = static_cast<int64_t>(long_prompts.size());
      for (int64_t i = 0; i < L; ++i) {
        const uint64_t seed = c.seed + 50 + i;
        ASSIGN_OR_RETURN(auto fresh, MakeEngine(c, 1, ctx, 0));
        ASSIGN_OR_RETURN(auto cold, fresh->Run(MakeRequest(long_prompts[i], gen_tokens, temp, seed)));
        ASSIGN_OR_RETURN(auto again, e->Run(MakeRequest(long_prompts[i], gen_tokens, temp, seed)));
        ASSIGN_OR_RETURN(auto warm, e->Run(MakeRequest(long_prompts[i], gen_tokens, temp, seed)));
        rows += 2 * static_cast<int64_t>(cold.gen.tokens.size());
        diff += Differing(cold.gen.tokens, again.gen.tokens, &first);
        diff += Differing(cold.gen.tokens, warm.gen.tokens, &first);
        if (c.progress) c.progress("invariance: prefix cache " + mode, i + 1, L);
      }
      const int64_t hit = e->stats().prefix_hit_tokens;
      // A run in which no prefix was reused compared nothing that this line is about.
      lines.push_back(Line(absl::StrFormat("engine: prefix-cache hit == cold (%s)", mode), "bitwise",
                           hit > 0 ? rows : 0, diff,
                           absl::StrFormat("%d prompts of %d+ tokens; %d prompt tokens served "
                                           "from the cache%s", L,
                                           long_prompts.empty() ? 0 : long_prompts[0].size(), hit,
                                           first.empty() ? "" : "; " + first)));
    }
  }
  return lines;
}

absl::StatusOr<json> MeasureSpec(const Cell& c, const std::vector<std::vector<int32_t>>& prompts,
                                 const SpecSettings& s, json* invariance) {
  if (c.drafter == nullptr) {
    for (const char* n : {"spec greedy == plain greedy", "spec coupled == plain sampled",
                          "reject-mode law"}) {
      invariance->push_back({{"name", n}, {"kind", "bitwise"}, {"status", "not applicable"},
                             {"detail", "a plain cell has no drafter"}});
    }
    return json{{"status", "not applicable"}, {"detail", "a plain cell has no drafter"}};
  }
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  ASSIGN_OR_RETURN(auto engine, MakeEngine(c, 1, longest + s.tokens + s.k + 16, 0));
  // Variants: 0 plain, 1 spec with the cell's drafter, 2 spec with the untrimmed source.
  std::vector<spec::Drafter*> variants = {nullptr, c.drafter};
  if (c.untrimmed_drafter != nullptr) variants.push_back(c.untrimmed_drafter);
  const int nv = static_cast<int>(variants.size());
  std::vector<std::vector<double>> tok_s(nv);
  std::vector<spec::SpecStats> stats(nv);
  std::vector<std::vector<std::vector<int32_t>>> first_rep(nv);
  int64_t rows = 0, diff = 0;
  std::string first;
  const int64_t total = static_cast<int64_t>(s.reps) * nv;
  for (int rep = 0; rep < s.reps; ++rep) {
    for (int j = 0; j < nv; ++j) {
      const int v = (rep + j) % nv;  // the variant that goes first rotates
      int64_t generated = 0;
      double secs = 0;
      for (size_t p = 0; p < prompts.size(); ++p) {
        runtime::Request r = MakeRequest(prompts[p], s.tokens, 0.0f, c.seed);
        r.drafter = variants[v];
        r.spec = {spec::SpecMode::kGreedy, s.k, false};
        const auto t0 = Clock::now();
        ASSIGN_OR_RETURN(auto res, engine->Run(std::move(r)));
        secs += Seconds(t0);
        generated += static_cast<int64_t>(res.gen.tokens.size());
        if (rep == 0) {
          first_rep[v].push_back(res.gen.tokens);
          stats[v].Add(res.stats);
        }
        // Every run of every variant, every rep, is held to the plain output of rep 1 (which
        // runs first in rep 1: the rotation starts at variant 0).
        if (v != 0 || rep > 0) {
          const auto& want = first_rep[0][p];
          rows += static_cast<int64_t>(want.size());
          diff += Differing(want, res.gen.tokens, &first);
        }
      }
      tok_s[v].push_back(static_cast<double>(generated) / secs);
      if (c.progress) c.progress("spec: interleaved reps", rep * nv + j + 1, total);
    }
  }
  invariance->push_back(Line("spec greedy == plain greedy", "bitwise", rows, diff,
                             absl::StrFormat("%zu prompts x %d tokens x %d reps, K=%d%s",
                                             prompts.size(), s.tokens, s.reps, s.k,
                                             first.empty() ? "" : "; " + first)));
  {  // Coupled: sampled spec == plain sampled, same seeds.
    int64_t crows = 0, cdiff = 0;
    std::string cfirst;
    for (size_t p = 0; p < prompts.size(); ++p) {
      ASSIGN_OR_RETURN(auto plain, engine->Run(MakeRequest(prompts[p], s.tokens, s.temperature,
                                                           c.seed + 100 + p)));
      runtime::Request r = MakeRequest(prompts[p], s.tokens, s.temperature, c.seed + 100 + p);
      r.drafter = c.drafter;
      r.spec = {spec::SpecMode::kCoupled, s.k, false};
      ASSIGN_OR_RETURN(auto sp, engine->Run(std::move(r)));
      crows += static_cast<int64_t>(plain.gen.tokens.size());
      cdiff += Differing(plain.gen.tokens, sp.gen.tokens, &cfirst);
      if (c.progress) c.progress("spec: coupled vs plain sampled", p + 1, prompts.size());
    }
    invariance->push_back(Line("spec coupled == plain sampled", "bitwise", crows, cdiff,
                               absl::StrFormat("%zu prompts x %d tokens, temperature %.2f, K=%d%s",
                                               prompts.size(), s.tokens, s.temperature, s.k,
                                               cfirst.empty() ? "" : "; " + cfirst)));
  }
  auto per_position = [](const spec::SpecStats& st) {
    json out = json::array();
    for (size_t i = 0; i < st.proposed_at.size(); ++i) {
      out.push_back({{"position", i + 1}, {"proposed", st.proposed_at[i]},
                     {"accepted", st.accepted_at[i]},
                     {"rate", st.proposed_at[i] ? static_cast<double>(st.accepted_at[i]) /
                                                      st.proposed_at[i]
                                                : 0.0}});
    }
    return out;
  };
  const spec::SpecStats& st = stats[1];
  json out = {{"k", s.k}, {"prompts", prompts.size()}, {"tokens_per_prompt", s.tokens},
              {"reps", s.reps}, {"mode", "greedy"},
              {"plain_tok_s", tok_s[0]}, {"spec_tok_s", tok_s[1]},
              {"plain_median_tok_s", Median(tok_s[0])}, {"spec_median_tok_s", Median(tok_s[1])},
              {"speedup", Median(tok_s[1]) / Median(tok_s[0])},
              {"drafted", st.drafted}, {"accepted", st.accepted},
              {"acceptance", st.drafted ? static_cast<double>(st.accepted) / st.drafted : 0.0},
              {"mean_accepted_length", st.mean_accepted_length()},
              {"per_position", per_position(st)}};
  if (nv == 3) {
    // docs/frspec.md: the verdict from the trimmed/untrimmed median tok/s (bench_support.h).
    const double ratio = Median(tok_s[1]) / Median(tok_s[2]);
    const char* verdict = FrSpecVerdict(diff == 0, ratio);
    out["frspec"] = {{"verdict", verdict}, {"ratio", ratio},
                     {"untrimmed_tok_s", tok_s[2]}, {"untrimmed_median_tok_s", Median(tok_s[2])},
                     {"untrimmed_acceptance", stats[2].drafted ? static_cast<double>(stats[2].accepted) /
                                                                     stats[2].drafted : 0.0},
                     {"untrimmed_per_position", per_position(stats[2])},
                     {"detail", absl::StrFormat("trimmed/untrimmed median tok/s = %.3f %s", ratio,
                                                FrSpecRule())}};
  } else {
    out["frspec"] = {{"verdict", "not applicable"}, {"detail", "the draft is not trimmed"}};
  }
  return out;
}

absl::StatusOr<json> CheckRejectLaw(const Cell& c, const std::vector<int32_t>& prompt,
                                    int64_t samples) {
  sampling::SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 3;
  params.max_tokens = 3;
  ASSIGN_OR_RETURN(sampling::Sampler sampler, sampling::Sampler::Create(params));
  // The exact law of the 3-token path: P(t1) P(t2 | t1) P(t3 | t1 t2), each the processed
  // distribution of the target's own row (cell KV formats); an end-of-turn token ends a path.
  std::map<std::vector<int32_t>, double> law;
  int64_t forwards = 0;
  std::function<absl::Status(std::vector<int32_t>, double)> expand =
      [&](std::vector<int32_t> path, double prob) -> absl::Status {
    if (path.size() == 3 || (!path.empty() && c.tok->IsEndOfTurn(path.back()))) {
      law[path] += prob;
      return absl::OkStatus();
    }
    std::vector<int32_t> ctx = prompt;
    ctx.insert(ctx.end(), path.begin(), path.end());
    ASSIGN_OR_RETURN(auto row, models::PromptLogits(*c.model, *c.be, ctx, false, nullptr, c.k, c.v));
    ++forwards;
    ASSIGN_OR_RETURN(auto p, sampler.ProcessedDistribution(row, ctx));
    for (size_t t = 0; t < p.size(); ++t) {
      if (p[t] <= 0) continue;
      std::vector<int32_t> next = path;
      next.push_back(static_cast<int32_t>(t));
      RETURN_IF_ERROR(expand(next, prob * p[t]));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(expand({}, 1.0));
  // A prefix cache serves the prompt's full blocks after the first run (bitwise the same as a
  // cold prefill: the prefix-cache line of the battery), so a sample costs about one round.
  ASSIGN_OR_RETURN(auto engine, MakeEngine(c, 1, static_cast<int64_t>(prompt.size()) + 16,
                                           int64_t{16} << 20));
  std::map<std::vector<int32_t>, int64_t> seen;
  int64_t drafted = 0;
  for (int64_t i = 0; i < samples; ++i) {
    runtime::Request r = MakeRequest(prompt, 3, 1.0f, c.seed * 1000003 + i);
    r.params.top_k = 3;
    r.drafter = c.drafter;
    r.spec = {spec::SpecMode::kReject, 2, false};
    ASSIGN_OR_RETURN(auto res, engine->Run(std::move(r)));
    ++seen[res.gen.tokens];
    drafted += res.stats.drafted;
    if (c.progress && (i + 1) % 16 == 0) c.progress("reject-mode law: samples", i + 1, samples);
  }
  // Categories: each path with expected count >= 5, the rest pooled; a path the law gives
  // probability 0 that was observed makes its own category (the G-test's p becomes 0).
  std::vector<int64_t> observed;
  std::vector<double> expected;
  int64_t pooled_obs = 0, impossible = 0;
  double pooled_p = 0;
  for (const auto& [path, p] : law) {
    const int64_t o = seen.count(path) ? seen[path] : 0;
    if (p * samples >= 5) {
      observed.push_back(o);
      expected.push_back(p);
    } else {
      pooled_obs += o;
      pooled_p += p;
    }
  }
  for (const auto& [path, o] : seen) impossible += law.count(path) ? 0 : o;
  if (pooled_p > 0 || pooled_obs > 0) {
    observed.push_back(pooled_obs);
    expected.push_back(pooled_p);
  }
  if (impossible > 0) {
    observed.push_back(impossible);
    expected.push_back(0.0);
  }
  const sampling::GTestResult g = sampling::GTest(observed, expected);
  return json{{"name", "reject-mode law (3 tokens, one verify round of K=2)"},
              {"kind", "law"},
              {"status", "measured"},
              {"samples", samples},
              {"drafted", drafted},
              {"paths", law.size()},
              {"categories", observed.size()},
              {"g", g.g},
              {"df", g.df},
              {"p_value", g.p_value},
              {"min_expected", g.min_expected},
              {"impossible_paths_seen", impossible},
              {"exact_law_forwards", forwards},
              {"detail", absl::StrFormat(
                   "%d reject-mode runs (top-k 3, temperature 1; %d draft tokens verified) vs "
                   "the exact law of %d paths from the target's rows; G = %.3g, df %d, p = %.3g",
                   samples, drafted, static_cast<int64_t>(law.size()), g.g, g.df, g.p_value)}};
}

absl::StatusOr<json> MeasureThroughput(const Cell& c, const ThroughputSettings& s) {
  const int max_c = *std::max_element(s.concurrency.begin(), s.concurrency.end());
  ASSIGN_OR_RETURN(auto engine, MakeEngine(c, max_c, s.prompt_tokens + s.gen_tokens + 16, 0));
  std::vector<int32_t> prompt(s.prompt_tokens);
  for (int64_t i = 0; i < s.prompt_tokens; ++i) {
    prompt[i] = static_cast<int32_t>((i * 7919 + 13) % c.model->config().n_vocab);
  }
  // Read bandwidth of the host: `threads` threads sum disjoint parts of a 512 MiB buffer.
  std::vector<float> buf(size_t{128} << 20, 1.0f);
  auto bandwidth = [&] { return ReadBandwidth(buf, std::max(1, c.threads)); };
  std::vector<double> bw;
  std::vector<std::vector<double>> dec(s.concurrency.size()), pre(s.concurrency.size());
  for (int rep = 0; rep < s.reps; ++rep) {
    bw.push_back(bandwidth());
    for (size_t ci = 0; ci < s.concurrency.size(); ++ci) {
      const int n = s.concurrency[ci];
      for (int i = 0; i < n; ++i) {
        runtime::Request r = MakeRequest(prompt, s.gen_tokens, 0.0f, 1);
        r.prompt[0] = (prompt[0] + i) % 256;
        r.ignore_eos = true;
        RETURN_IF_ERROR(engine->Submit(std::move(r)).status());
      }
      const auto t0 = Clock::now();
      while (!engine->AllDecoding()) RETURN_IF_ERROR(engine->Step().status());
      const auto t1 = Clock::now();
      int64_t generated = 0;
      while (!engine->Idle()) {
        ASSIGN_OR_RETURN(auto done, engine->Step());
        for (const auto& d : done) generated += static_cast<int64_t>(d.gen.tokens.size());
      }
      // Every request drew its first token in the prefill steps; decode is the rest.
      const double ds = Seconds(t1);
      pre[ci].push_back(n * static_cast<double>(s.prompt_tokens) /
                        std::chrono::duration<double>(t1 - t0).count());
      dec[ci].push_back(static_cast<double>(generated - n) / ds);
      engine->ClearCaches();
      if (c.progress) {
        c.progress("throughput: reps x concurrency", rep * s.concurrency.size() + ci + 1,
                   s.reps * s.concurrency.size());
      }
    }
  }
  const double bw_med = Median(bw), wbytes = WeightBytesPerToken(*c.model);
  const double wall = bw_med / wbytes;
  json rows = json::array();
  for (size_t ci = 0; ci < s.concurrency.size(); ++ci) {
    rows.push_back({{"concurrency", s.concurrency[ci]}, {"decode_tok_s", Median(dec[ci])},
                    {"decode_tok_s_reps", dec[ci]}, {"prefill_tok_s", Median(pre[ci])},
                    {"fraction_of_wall", Median(dec[ci]) / wall}});
  }
  return json{{"backend", c.be->Describe()}, {"threads", c.threads}, {"reps", s.reps},
              {"prompt_tokens", s.prompt_tokens}, {"gen_tokens", s.gen_tokens},
              {"read_bandwidth_GBps", bw_med / 1e9}, {"weight_bytes_per_token", wbytes},
              {"weight_wall_tok_s", wall}, {"decode_tok_s", rows[0]["decode_tok_s"]},
              {"fraction_of_wall", rows[0]["fraction_of_wall"]}, {"by_concurrency", rows}};
}

}  // namespace lockstep::cli::qualify
