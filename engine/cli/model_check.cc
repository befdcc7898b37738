#include "engine/cli/model_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/models/runner.h"

namespace lockstep::cli {
namespace {

constexpr int64_t kBlock = 16;
constexpr int64_t kStepRows = 512;  // tokens (and logits rows) per step at most

struct Row {
  uint64_t hash = 0;
  int32_t argmax = 0;
  bool operator==(const Row&) const = default;
};

Row Summarize(const float* row, int64_t n) {
  Row r;
  uint64_t h = 0xcbf29ce484222325ull;
  uint32_t w;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&w, row + i, 4);
    h = (h ^ w) * 0x100000001b3ull;
  }
  r.hash = h;
  r.argmax = static_cast<int32_t>(std::max_element(row, row + n) - row);
  return r;
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int64_t done = 0;  // positions whose KV is written
  int32_t slot = -1;  // hybrid models: the recurrent-state slot (fresh at position 0)
};

// Hybrid (Gated DeltaNet) models keep a recurrent state per sequence besides its KV blocks.
bool IsHybrid(const models::Model& m) { return m.config().gdn.present(); }

// A runner, a block pool handed out in random order (fragmented tables), and one step over a
// ragged batch that returns every fed row's summary.
class Rig {
 public:
  static absl::StatusOr<std::unique_ptr<Rig>> Create(const models::Model& m, backend::Backend& be,
                                                     int64_t n_blocks, uint64_t seed,
                                                     quant::KvFormat k = quant::KvFormat::kF32,
                                                     quant::KvFormat v = quant::KvFormat::kF32,
                                                     int64_t n_state_slots = 1) {
    models::RunnerOptions ro;
    if (IsHybrid(m)) ro.n_state_slots = n_state_slots;
    ro.k_format = k;
    ro.v_format = v;
    ro.max_step_tokens = kStepRows;
    ro.max_logit_rows = kStepRows;
    ro.block_size = kBlock;
    ro.n_blocks = n_blocks;
    ASSIGN_OR_RETURN(auto runner, models::Runner::Create(m, be, ro));
    auto rig = std::unique_ptr<Rig>(new Rig(std::move(runner), seed));
    for (int32_t b = 0; b < n_blocks; ++b) rig->free_.push_back(b);
    return rig;
  }

  absl::Status Reserve(Seq& s, int64_t upto) {
    while (static_cast<int64_t>(s.blocks.size()) * kBlock < upto) {
      if (free_.empty()) return absl::ResourceExhaustedError("model check: KV pool exhausted");
      const size_t i = std::uniform_int_distribution<size_t>(0, free_.size() - 1)(rng_);
      s.blocks.push_back(free_[i]);
      free_[i] = free_.back();
      free_.pop_back();
    }
    return absl::OkStatus();
  }
  void Release(Seq& s, size_t keep_blocks = 0) {
    for (size_t i = keep_blocks; i < s.blocks.size(); ++i) free_.push_back(s.blocks[i]);
    s.blocks.clear();
    s.done = 0;
  }

  // Feeds n[i] next tokens of seqs[i]; returns the summaries of every fed row, per sequence
  // (none when !rows: the step only writes KV).
  absl::StatusOr<std::vector<std::vector<Row>>> Step(const std::vector<Seq*>& seqs,
                                                     const std::vector<int64_t>& n,
                                                     bool rows_wanted = true) {
    std::vector<models::StepEntry> entries;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = *seqs[i];
      RETURN_IF_ERROR(Reserve(s, s.done + n[i]));
      models::StepEntry e{std::span<const int32_t>(s.tokens).subspan(s.done, n[i]), s.done,
                          s.blocks, rows_wanted ? n[i] : 0};
      e.state_slot = s.slot;
      entries.push_back(e);
    }
    RETURN_IF_ERROR(runner_->Forward(entries, &logits_));
    const int64_t V = runner_->n_vocab();
    std::vector<std::vector<Row>> out(seqs.size());
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (int64_t t = 0; rows_wanted && t < n[i]; ++t, ++row) {
        out[i].push_back(Summarize(logits_.data() + row * V, V));
      }
      seqs[i]->done += n[i];
    }
    return out;
  }
  // Feeds the next token of each sequence with StepEntry::greedy set: the backend's greedy pick
  // of each row (models::Runner::Forward), no logits.
  absl::StatusOr<std::vector<int32_t>> StepGreedy(const std::vector<Seq*>& seqs) {
    std::vector<models::StepEntry> entries;
    for (Seq* s : seqs) {
      RETURN_IF_ERROR(Reserve(*s, s->done + 1));
      models::StepEntry e{std::span<const int32_t>(s->tokens).subspan(s->done, 1), s->done, s->blocks, 1};
      e.state_slot = s->slot;
      e.greedy = true;
      entries.push_back(e);
    }
    std::vector<int32_t> picks;
    RETURN_IF_ERROR(runner_->Forward(entries, &logits_, nullptr, &picks));
    for (Seq* s : seqs) ++s->done;
    return picks;
  }
  const std::vector<float>& last_logits() const { return logits_; }
  int64_t n_vocab() const { return runner_->n_vocab(); }

 private:
  Rig(std::unique_ptr<models::Runner> r, uint64_t seed) : runner_(std::move(r)), rng_(seed) {}
  std::unique_ptr<models::Runner> runner_;
  std::vector<int32_t> free_;
  std::vector<float> logits_;
  std::mt19937_64 rng_;
};

// Compares rows [from, from + got.size()) of a sequence's reference with `got`.
void Compare(ModelCheckLine& line, const std::vector<Row>& ref, int64_t from,
             const std::vector<Row>& got) {
  for (size_t i = 0; i < got.size(); ++i) {
    ++line.rows;
    if (!(got[i] == ref[from + i])) {
      if (line.differing++ == 0) {
        line.detail += absl::StrFormat(" first difference at position %d (argmax %d vs %d)",
                                       from + static_cast<int64_t>(i), got[i].argmax,
                                       ref[from + i].argmax);
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<ModelCheckLine>> CheckModelInvariance(const models::Model& model,
                                                                  backend::Backend& be,
                                                                  const ModelCheckOptions& o) {
  std::mt19937_64 rng(o.seed);
  const int64_t V = model.config().n_vocab;
  const int64_t n_seqs = std::max<int64_t>(*std::max_element(o.batches.begin(), o.batches.end()), 8);
  const int64_t max_len = std::max<int64_t>(o.max_prompt, 8);
  // Enough blocks for every sequence at once plus a prefix-sharing pair.
  const int64_t n_blocks = (n_seqs + 4) * ((max_len + 40) / kBlock + 2);
  const bool hybrid = IsHybrid(model);
  ASSIGN_OR_RETURN(auto rig, Rig::Create(model, be, n_blocks, o.seed ^ 0x5eed, o.k_format,
                                         o.v_format, n_seqs + 1));

  std::vector<Seq> seqs(n_seqs);
  for (int64_t i = 0; i < n_seqs && hybrid; ++i) seqs[i].slot = static_cast<int32_t>(i);
  std::vector<std::vector<Row>> ref(n_seqs);
  for (Seq& s : seqs) {
    const int64_t len = std::uniform_int_distribution<int64_t>(8, max_len)(rng);
    for (int64_t i = 0; i < len; ++i) {
      s.tokens.push_back(std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(V - 1))(rng));
    }
  }
  // The reference: each sequence alone, every row, in one step.
  for (int64_t i = 0; i < n_seqs; ++i) {
    ASSIGN_OR_RETURN(auto rows, rig->Step({&seqs[i]}, {static_cast<int64_t>(seqs[i].tokens.size())}));
    ref[i] = std::move(rows[0]);
    rig->Release(seqs[i]);
  }
  std::vector<ModelCheckLine> lines;

  {  // Batched prefill: groups of random size, all rows.
    ModelCheckLine line;
    line.name = "prefill batched";
    std::vector<int64_t> order(n_seqs);
    for (int64_t i = 0; i < n_seqs; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t at = 0; at < order.size();) {
      std::vector<Seq*> group;
      std::vector<int64_t> n;
      int64_t rows = 0;
      const int64_t want = std::uniform_int_distribution<int64_t>(2, 9)(rng);
      while (at < order.size() && static_cast<int64_t>(group.size()) < want &&
             rows + static_cast<int64_t>(seqs[order[at]].tokens.size()) <= kStepRows) {
        group.push_back(&seqs[order[at]]);
        n.push_back(static_cast<int64_t>(seqs[order[at]].tokens.size()));
        rows += n.back();
        ++at;
      }
      ASSIGN_OR_RETURN(auto got, rig->Step(group, n));
      for (size_t g = 0; g < group.size(); ++g) {
        Compare(line, ref[group[g] - seqs.data()], 0, got[g]);
        rig->Release(*group[g]);
      }
    }
    lines.push_back(line);
  }
  {  // Chunked prefill: chunks of 1, 7, 16, 33 tokens.
    ModelCheckLine line;
    line.name = "prefill chunked 1/7/16/33";
    const int64_t chunks[] = {1, 7, 16, 33};
    for (int64_t i = 0; i < std::min<int64_t>(n_seqs, 8); ++i) {
      Seq& s = seqs[i];
      const int64_t c = chunks[i % 4], len = static_cast<int64_t>(s.tokens.size());
      while (s.done < len) {
        const int64_t from = s.done;
        ASSIGN_OR_RETURN(auto got, rig->Step({&s}, {std::min(c, len - from)}));
        Compare(line, ref[i], from, got[0]);
      }
      rig->Release(s);
    }
    lines.push_back(line);
  }
  // B random sequences, each prefilled (KV only) to a random depth at least 4 short of its end.
  auto decode_group = [&](int64_t B) -> absl::StatusOr<std::vector<Seq*>> {
    std::vector<int64_t> pick(n_seqs);
    for (int64_t i = 0; i < n_seqs; ++i) pick[i] = i;
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.resize(B);
    std::vector<Seq*> group;
    for (int64_t i : pick) {
      Seq& s = seqs[i];
      const int64_t depth = std::uniform_int_distribution<int64_t>(1, static_cast<int64_t>(s.tokens.size()) - 4)(rng);
      RETURN_IF_ERROR(rig->Step({&s}, {depth}, false).status());
      group.push_back(&s);
    }
    return group;
  };
  // Decode batches: B sequences at random depths, 4 decode steps each (eager, capture, replay).
  for (int64_t B : o.batches) {
    ModelCheckLine line;
    line.name = absl::StrFormat("decode B=%d", B);
    ASSIGN_OR_RETURN(std::vector<Seq*> group, decode_group(B));
    for (int step = 0; step < 4; ++step) {
      std::vector<int64_t> from;
      for (Seq* s : group) from.push_back(s->done);
      ASSIGN_OR_RETURN(auto got, rig->Step(group, std::vector<int64_t>(B, 1)));
      for (int64_t g = 0; g < B; ++g) Compare(line, ref[group[g] - seqs.data()], from[g], got[g]);
    }
    for (Seq* s : group) rig->Release(*s);
    lines.push_back(line);
  }
  // Greedy picked on the backend (the engine's plain greedy path, Engine::BackendGreedy): B
  // sequences at random depths, 4 steps (eager, capture, replay); each token must be the argmax of
  // the reference row at that position.
  for (int64_t B : {int64_t{1}, int64_t{8}, std::min<int64_t>(64, n_seqs)}) {
    ModelCheckLine line;
    line.name = absl::StrFormat("greedy pick on backend B=%d", B);
    ASSIGN_OR_RETURN(std::vector<Seq*> group, decode_group(B));
    for (int step = 0; step < 4; ++step) {
      std::vector<int64_t> at;
      for (Seq* s : group) at.push_back(s->done);
      ASSIGN_OR_RETURN(std::vector<int32_t> got, rig->StepGreedy(group));
      for (int64_t g = 0; g < B; ++g) {
        ++line.rows;
        const int32_t want = ref[group[g] - seqs.data()][at[g]].argmax;
        if (got[g] != want) {
          if (line.differing++ == 0) {
            line.detail = absl::StrFormat("first: position %d picked %d, reference argmax %d", at[g], got[g], want);
          }
        }
      }
    }
    for (Seq* s : group) rig->Release(*s);
    lines.push_back(line);
  }
  {  // Speculative verify rows (k + 1 = 5) sharing steps with decode rows.
    ModelCheckLine line;
    line.name = "verify rows k+1=5 with decode rows";
    std::vector<Seq*> group;
    for (int64_t i = 0; i < 8; ++i) {
      Seq& s = seqs[i];
      RETURN_IF_ERROR(rig->Step({&s}, {1}, false).status());
      group.push_back(&s);
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<Seq*> active;
      std::vector<int64_t> n, from;
      for (int64_t g = 0; g < 8; ++g) {
        const int64_t left = static_cast<int64_t>(group[g]->tokens.size()) - group[g]->done;
        if (left == 0) continue;  // a short sequence ran out of tokens
        active.push_back(group[g]);
        n.push_back(std::min<int64_t>(g < 4 ? 5 : 1, left));
        from.push_back(group[g]->done);
      }
      ASSIGN_OR_RETURN(auto got, rig->Step(active, n));
      for (size_t g = 0; g < active.size(); ++g) {
        Compare(line, ref[active[g] - seqs.data()], from[g], got[g]);
      }
    }
    for (Seq* s : group) rig->Release(*s);
    lines.push_back(line);
  }
  {  // Prefix hit: B reuses A's first full blocks (written by A's own prefill), then its suffix.
    // A hybrid model's B also needs the recurrent state at the prefix's end: A prefills only the
    // prefix, into the slot B then continues from (a resumed session).
    ModelCheckLine line;
    line.name = hybrid ? "prefix hit + state vs cold" : "prefix hit vs cold";
    for (int pair = 0; pair < 4; ++pair) {
      Seq a = seqs[pair];
      a.blocks.clear();
      a.done = 0;
      const int64_t full = static_cast<int64_t>(a.tokens.size()) / kBlock;
      if (full == 0) continue;
      Seq b;
      if (hybrid) b.slot = static_cast<int32_t>(n_seqs);
      b.tokens.assign(a.tokens.begin(), a.tokens.begin() + full * kBlock);
      for (int64_t i = 0; i < 9; ++i) {
        b.tokens.push_back(std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(V - 1))(rng));
      }
      ASSIGN_OR_RETURN(auto b_cold, rig->Step({&b}, {static_cast<int64_t>(b.tokens.size())}));
      rig->Release(b);
      const int64_t a_feed = hybrid ? full * kBlock : static_cast<int64_t>(a.tokens.size());
      RETURN_IF_ERROR(rig->Step({&a}, {a_feed}, false).status());
      b.blocks.assign(a.blocks.begin(), a.blocks.begin() + full);
      b.done = full * kBlock;
      if (hybrid) b.slot = a.slot;
      ASSIGN_OR_RETURN(auto got, rig->Step({&b}, {static_cast<int64_t>(b.tokens.size()) - b.done}));
      Compare(line, b_cold[0], full * kBlock, got[0]);
      rig->Release(b, static_cast<size_t>(full));  // the shared blocks go back with a
      rig->Release(a);
    }
    lines.push_back(line);
  }
  return lines;
}

absl::StatusOr<std::vector<ModelCheckLine>> CompareGreedy(
    const models::Model& model, backend::Backend& be, backend::Backend& versus,
    const std::vector<std::vector<int32_t>>& prompts, const ModelCheckOptions& o) {
  std::vector<ModelCheckLine> lines;
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  const int64_t n_blocks = (longest + o.greedy_tokens) / kBlock + 2;
  ASSIGN_OR_RETURN(auto rig_a, Rig::Create(model, be, n_blocks, o.seed));
  ASSIGN_OR_RETURN(auto rig_b, Rig::Create(model, versus, n_blocks, o.seed));
  const int64_t V = model.config().n_vocab;
  auto margin = [V](const float* row) {
    float top1 = -INFINITY, top2 = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      if (row[v] > top1) {
        top2 = top1;
        top1 = row[v];
      } else if (row[v] > top2) {
        top2 = row[v];
      }
    }
    return static_cast<double>(top1) - top2;
  };
  for (size_t p = 0; p < prompts.size(); ++p) {
    ModelCheckLine line;
    line.name = absl::StrFormat("greedy %d tokens, prompt %d", o.greedy_tokens, p);
    Seq a, b;
    a.tokens = b.tokens = prompts[p];
    if (IsHybrid(model)) a.slot = b.slot = 0;
    int64_t agree = 0;
    std::string flips;
    int64_t feed = static_cast<int64_t>(prompts[p].size());
    for (int64_t i = 0; i < o.greedy_tokens; ++i) {
      ASSIGN_OR_RETURN(auto ra, rig_a->Step({&a}, {feed}));
      ASSIGN_OR_RETURN(auto rb, rig_b->Step({&b}, {feed}));
      const int64_t last = feed - 1;
      const Row& x = ra[0][last];
      const Row& y = rb[0][last];
      ++line.rows;
      if (x.argmax == y.argmax) {
        ++agree;
      } else {
        ++line.differing;
        const float* row_a = rig_a->last_logits().data() + last * V;
        const float* row_b = rig_b->last_logits().data() + last * V;
        flips += absl::StrFormat(" [pos %d: %d vs %d, margins %.4g / %.4g]",
                                 static_cast<int64_t>(a.tokens.size()), x.argmax, y.argmax,
                                 margin(row_a), margin(row_b));
      }
      a.tokens.push_back(x.argmax);  // both score the first backend's choice (teacher forcing)
      b.tokens.push_back(x.argmax);
      feed = 1;
    }
    line.detail = absl::StrFormat("top-1 agreement %d/%d%s", agree, line.rows,
                                  flips.empty() ? "" : ";" + flips);
    lines.push_back(line);
    rig_a->Release(a);
    rig_b->Release(b);
  }
  return lines;
}

}  // namespace lockstep::cli
