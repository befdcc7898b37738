// The forward's invariances (docs/design.md §1), driven through models::Runner directly over a
// shared, fragmented paged pool (SeqCache):
//   batch:   a request's logits and tokens alone == inside a batch of random neighbours at random
//            depths, in any slot;
//   chunk:   prefill in random chunks == one pass, logits bit for bit;
//   threads: the cpu backend with 1..8 threads == 1 thread, logits bit for bit;
//   rollback: after random rounds of "append K, keep a prefix", the live KV cache equals, bit
//            for bit, the cache of one-token-at-a-time decode over the kept tokens.
// The ref backend is drawn too where cheap: its contract is the same.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "properties/property_support.h"

namespace lockstep::props {
namespace {

std::string GenArch() {
  static const std::vector<std::string> archs(std::begin(kTinyArchs), std::end(kTinyArchs));
  return *rc::gen::elementOf(archs);
}

// The tiny models plus the hybrid GDN ones (batch, chunk and threads; not KV rollback).
std::string GenArchOrHybrid() {
  static const std::vector<std::string> archs = [] {
    std::vector<std::string> a(std::begin(kTinyArchs), std::end(kTinyArchs));
    a.insert(a.end(), std::begin(kHybridArchs), std::end(kHybridArchs));
    return a;
  }();
  return *rc::gen::elementOf(archs);
}

// cpu with 1 or 2 threads, or ref: the backends a case runs on.
backend::Backend& GenBackend(std::string* label) {
  const int which = *rc::gen::element(0, 1, 2, 2);
  *label = which == 0 ? "ref" : absl::StrCat("cpu/", which);
  return which == 0 ? Ref() : Cpu(which);
}

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Property 4 on model `m`: a request (prompt, then `steps` greedy decode steps) gives the same
// logits bits and tokens alone as inside a batch whose neighbours have random history depths
// and feed random token counts per step. Neighbour lengths are bounded by `max_len`.
void CheckBatchInvariance(const models::Model& m, backend::Backend& be, int max_prompt,
                          int max_steps, int max_neighbours, int max_len) {
  const int64_t n_vocab = m.config().n_vocab;
  const std::vector<int32_t> prompt = GenTokens(*rc::gen::inRange(1, max_prompt + 1), n_vocab);
  const int steps = *rc::gen::inRange(1, max_steps + 1);
  const int n_neighbours = *rc::gen::inRange(1, max_neighbours + 1);
  const int slot = *rc::gen::inRange(0, n_neighbours + 1);
  // Neighbours: max_len of history, then up to max_len / 2 tokens per step.

  // Alone: prefill, then one token per step (the argmax of the previous row).
  std::vector<std::vector<float>> alone_rows;
  std::vector<int32_t> alone_tokens;
  {
    SeqCache cache(m, be);
    std::vector<int32_t> step = prompt;
    for (int s = 0; s <= steps; ++s) {
      alone_rows.push_back(ForwardOne(cache, step, false));
      alone_tokens.push_back(Argmax(alone_rows.back().data(), n_vocab));
      step.assign(1, alone_tokens.back());
    }
  }

  // Batched: neighbours first get a random history of their own (so they sit at other
  // depths), then every step runs the request at `slot` beside them.
  std::vector<std::unique_ptr<SeqCache>> caches;
  std::vector<SeqCache*> seqs;
  for (int i = 0; i <= n_neighbours; ++i) {
    caches.push_back(std::make_unique<SeqCache>(m, be));
    seqs.push_back(caches.back().get());
  }
  for (int i = 0; i <= n_neighbours; ++i) {
    if (i == slot) continue;
    const int depth = *rc::gen::inRange(0, max_len + 1);
    if (depth > 0) ForwardOne(*caches[i], GenTokens(depth, n_vocab), false);
  }
  std::vector<int32_t> step = prompt;
  for (int s = 0; s <= steps; ++s) {
    std::vector<std::vector<int32_t>> feeds(n_neighbours + 1);
    std::vector<std::span<const int32_t>> spans;
    for (int i = 0; i <= n_neighbours; ++i) {
      feeds[i] = i == slot ? step : GenTokens(*rc::gen::inRange(1, std::max(2, max_len / 2)), n_vocab);
      spans.push_back(feeds[i]);
    }
    const std::vector<float> logits = ForwardSeqs(seqs, spans, false);
    const float* row = logits.data() + slot * n_vocab;  // one row per entry
    if (!BitEqual(row, alone_rows[s].data(), n_vocab)) {
      RC_FAIL(absl::StrCat("step ", s, ": slot ", slot, " of ", n_neighbours + 1,
                           " differs from the request alone, ",
                           FirstDifference(row, alone_rows[s].data(), n_vocab)));
    }
    const int32_t token = Argmax(row, n_vocab);
    RC_ASSERT(token == alone_tokens[s]);
    step.assign(1, token);
  }
  Count(absl::StrCat("batch of ", n_neighbours + 1));
}

// Property 4, tiny models: batches of 2..5, neighbours up to 24 tokens deep.
LOCKSTEP_PROPERTY(Batch, RequestAloneEqualsInBatchTiny, 1000, Weight::kTiny, ()) {
  const TinyModel& t = Tiny(GenArchOrHybrid());
  std::string be_label;
  backend::Backend& be = GenBackend(&be_label);
  Count(absl::StrCat(t.arch, " on ", be_label));
  CheckBatchInvariance(*t.model, be, 12, 8, 4, 24);
}

// Property 4, SmolLM2: one short request beside one or two short neighbours.
LOCKSTEP_PROPERTY(Batch, RequestAloneEqualsInBatchSmolLm2, 4, Weight::kSmol, ()) {
  const models::Model* m = Must(SmolLm2());
  CheckBatchInvariance(*m, Cpu(2), 5, 3, 2, 6);
}

// Property 5: prefill split into random chunks gives the one-pass logits, row for row, bit for bit.
LOCKSTEP_PROPERTY(Chunk, ChunkedPrefillEqualsOnePass, 1000, Weight::kTiny, ()) {
  const TinyModel& t = Tiny(GenArchOrHybrid());
  std::string be_label;
  backend::Backend& be = GenBackend(&be_label);
  const int64_t n_vocab = t.model->config().n_vocab;
  const std::vector<int32_t> ids = GenTokens(*rc::gen::inRange(2, 49), n_vocab);
  SeqCache one_cache(*t.model, be);
  const std::vector<float> one = ForwardOne(one_cache, ids, true);

  SeqCache cache(*t.model, be);
  std::vector<float> chunked;
  std::vector<size_t> sizes;
  for (size_t lo = 0; lo < ids.size();) {
    const size_t n = std::min<size_t>(ids.size() - lo, *rc::gen::inRange<size_t>(1, ids.size() + 1));
    const std::vector<float> part =
        ForwardOne(cache, std::span<const int32_t>(ids).subspan(lo, n), true);
    chunked.insert(chunked.end(), part.begin(), part.end());
    sizes.push_back(n);
    lo += n;
  }
  if (!BitEqual(chunked, one)) {
    RC_FAIL(absl::StrCat(t.arch, " on ", be_label, ", chunks [", absl::StrJoin(sizes, ","),
                         "] of ", ids.size(), " tokens: ",
                         FirstDifference(chunked.data(), one.data(), one.size())));
  }
  // The cache the chunks built is the one the single pass built.
  for (int64_t l = 0; l < t.model->config().n_layer; ++l) {
    RC_ASSERT(cache.KvBytes(l, false) == one_cache.KvBytes(l, false));
    RC_ASSERT(cache.KvBytes(l, true) == one_cache.KvBytes(l, true));
  }
  Count(absl::StrCat(sizes.size(), sizes.size() == 1 ? " chunk" : " chunks"));
}

// Property 6: the cpu backend's logits do not depend on its thread count (1..8), for a prefill
// followed by decode steps.
LOCKSTEP_PROPERTY(Threads, CpuLogitsIndependentOfThreadCount, 500, Weight::kTiny, ()) {
  const TinyModel& t = Tiny(GenArchOrHybrid());
  const int threads = *rc::gen::inRange(2, 9);
  const int64_t n_vocab = t.model->config().n_vocab;
  const std::vector<int32_t> prompt = GenTokens(*rc::gen::inRange(1, 65), n_vocab);
  const std::vector<int32_t> decode = GenTokens(*rc::gen::inRange(0, 4), n_vocab);
  auto run = [&](backend::Backend& be) {
    SeqCache cache(*t.model, be);
    std::vector<float> all = ForwardOne(cache, prompt, true);
    for (int32_t id : decode) {
      const std::vector<float> row = ForwardOne(cache, std::span(&id, 1), false);
      all.insert(all.end(), row.begin(), row.end());
    }
    return all;
  };
  const std::vector<float> base = run(Cpu(1));
  const std::vector<float> got = run(Cpu(threads));
  if (!BitEqual(got, base)) {
    RC_FAIL(absl::StrCat(t.arch, ", ", threads, " threads vs 1, prompt ", prompt.size(), ": ",
                         FirstDifference(got.data(), base.data(), base.size())));
  }
  Count(absl::StrCat(threads, " threads"));
}

// Property 7: speculative-style rounds on one cache — append K random tokens in one forward,
// keep a random prefix of them (n_past moves back), repeat — leave the live positions [0, n_past)
// equal, bit for bit, to one-token-at-a-time decode over the kept tokens; and the next forward
// after the last rollback (which must not see the stale rejected entries) gives the same logits.
LOCKSTEP_PROPERTY(KvRollback, LiveCacheEqualsPlainDecode, 1000, Weight::kTiny, ()) {
  const TinyModel& t = Tiny(GenArch());
  const models::Config& c = t.model->config();
  std::string be_label;
  backend::Backend& be = GenBackend(&be_label);
  SeqCache cache(*t.model, be);
  std::vector<int32_t> kept = GenTokens(*rc::gen::inRange(1, 13), c.n_vocab);
  ForwardOne(cache, kept, false);
  const int rounds = *rc::gen::inRange(1, 11);
  int64_t rolled_back = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::vector<int32_t> step = GenTokens(*rc::gen::inRange(1, 10), c.n_vocab);
    const int64_t base = cache.n_past();
    ForwardOne(cache, step, true);
    const int keep = *rc::gen::inRange(0, static_cast<int>(step.size()) + 1);
    cache.Truncate(base + keep);
    rolled_back += static_cast<int64_t>(step.size()) - keep;
    kept.insert(kept.end(), step.begin(), step.begin() + keep);
  }
  RC_ASSERT(cache.n_past() == static_cast<int64_t>(kept.size()));

  SeqCache plain(*t.model, be);
  for (const int32_t& id : kept) ForwardOne(plain, std::span(&id, 1), false);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (bool v : {false, true}) {
      if (cache.KvBytes(l, v) != plain.KvBytes(l, v)) {
        RC_FAIL(absl::StrCat(t.arch, " on ", be_label, ": layer ", l, v ? " V" : " K", " after ",
                             rounds, " rounds (", kept.size(), " kept, ", rolled_back,
                             " rolled back) differs from plain decode"));
      }
    }
  }
  const int32_t next = GenTokens(1, c.n_vocab)[0];
  const std::vector<float> after = ForwardOne(cache, std::span(&next, 1), false);
  const std::vector<float> want = ForwardOne(plain, std::span(&next, 1), false);
  if (!BitEqual(after, want)) {
    RC_FAIL(absl::StrCat(t.arch, " on ", be_label, ": the forward after rollback differs, ",
                         FirstDifference(after.data(), want.data(), want.size())));
  }
  Count(rolled_back > 0 ? "cases with rolled-back tokens" : "cases without rollback");
  Count("tokens rolled back", rolled_back);
}

}  // namespace
}  // namespace lockstep::props
