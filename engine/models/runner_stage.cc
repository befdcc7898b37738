// Pipeline stages of models::Runner (docs/pipeline.md): rank 0 embeds and runs the first layers
// of each micro-batch, sends the f32 residual down the chain, and gets the head's rows back from
// the last stage. Every stage runs the unsplit forward's own calls (BuildMeta, Layers, Head) on
// the same rows in the same order, so a split step's logits are the unsplit ones bit for bit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/core/status.h"
#include "engine/models/runner.h"
#include "engine/models/stage_wire.h"

namespace lockstep::models {
namespace {

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

int64_t WeightBytes(const backend::Weight& w) { return w.bound() ? w.rows * w.row_bytes() : 0; }

std::string StageLine(int rank, const backend::Backend& be, int64_t first, int64_t last) {
  return absl::StrCat("stage", rank, "=", HostName(), ":", be.Describe(), " layers [", first, ", ",
                      last, ")");
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> BalancedSplit(const Model& model, int64_t n_stages) {
  const Config& c = model.config();
  if (n_stages < 2 || n_stages > c.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("--pp-stages ", n_stages, ": a model of ",
                                                   c.n_layer, " layers splits into 2 to ",
                                                   c.n_layer, " stages"));
  }
  const Weights& w = model.weights();
  std::vector<int64_t> layer(c.n_layer, 0);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    // Every tensor of the layer: attention or GDN mixer, dense or expert FFN (model.h All()).
    for (const backend::Weight* x : w.layers[il].All()) layer[il] += WeightBytes(*x);
  }
  const int64_t head = WeightBytes(w.output) + WeightBytes(w.output_norm);
  int64_t total = WeightBytes(w.tok_embd) + head;
  for (int64_t b : layer) total += b;
  // Stage s ends at the first layer boundary where the bytes so far reach (s + 1) / n of the
  // total, keeping at least one layer for every stage after it.
  std::vector<int64_t> split = {0};
  int64_t acc = WeightBytes(w.tok_embd);
  for (int64_t il = 0; il < c.n_layer && static_cast<int64_t>(split.size()) < n_stages; ++il) {
    acc += layer[il];
    const int64_t s = static_cast<int64_t>(split.size());  // the stage being closed
    const bool enough = acc * n_stages >= total * s;
    const bool must = c.n_layer - (il + 1) == n_stages - s;  // one layer left per later stage
    if ((enough || must) && c.n_layer - (il + 1) >= n_stages - s) split.push_back(il + 1);
  }
  split.push_back(c.n_layer);
  return split;
}

absl::StatusOr<std::vector<int64_t>> ParseSplit(const std::string& text, int64_t n_layer,
                                                int64_t n_stages) {
  std::vector<int64_t> split = {0};
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= split.back() || v >= n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--pp-split entry ", split.size(), " '", part, "' must be a layer index in (",
          split.back(), ", ", n_layer, "): boundaries increase and the last stage keeps a layer"));
    }
    split.push_back(v);
  }
  if (static_cast<int64_t>(split.size()) != n_stages) {
    return absl::InvalidArgumentError(absl::StrCat("--pp-split '", text, "' gives ", split.size(),
                                                   " stages; --pp-stages asks for ", n_stages));
  }
  split.push_back(n_layer);
  return split;
}

absl::Status Runner::ForwardPipelined(std::span<const StepEntry> batch, std::vector<float>* logits) {
  StageLink& link = *options_.link;
  const Config& c = model_.config();
  const int last_rank = link.size() - 1;
  logits->clear();
  if (batch.empty()) return absl::OkStatus();
  const int64_t M = std::min<int64_t>(options_.micro_batches, static_cast<int64_t>(batch.size()));
  std::vector<int64_t> rows(M);
  // Micro-batch g holds entries [g * n / M, (g + 1) * n / M): while stage 1 runs group g, this
  // stage already runs group g + 1. Rows are independent of their neighbours (docs/design.md
  // §1), so cutting the step changes no logit.
  const int64_t n = static_cast<int64_t>(batch.size());
  for (int64_t g = 0; g < M; ++g) {
    const auto group = batch.subspan(g * n / M, (g + 1) * n / M - g * n / M);
    ASSIGN_OR_RETURN(backend::StepMeta meta, BuildMeta(group));
    const int64_t T = meta.n_tokens();
    rows[g] = static_cast<int64_t>(meta.output_rows.size());
    RETURN_IF_ERROR(be_.BeginStep(meta));
    const backend::Tensor x = ws_.x.Rows(0, T);
    RETURN_IF_ERROR(be_.Embed(bound_.tok_embd, x));
    if (c.embed_scale != 1.0f) RETURN_IF_ERROR(be_.Scale(x, c.embed_scale, x));
    RETURN_IF_ERROR(Layers(T, first_, last_, nullptr));
    wire::Message m;
    m.kind = wire::Kind::kForward;
    m.rows = T;
    m.cols = c.n_embd;
    m.floats.resize(T * c.n_embd);
    RETURN_IF_ERROR(be_.Download(m.floats.data(), x.data, T * c.n_embd * sizeof(float)));
    RETURN_IF_ERROR(be_.Synchronize());
    for (const StepEntry& e : group) {
      m.entries.push_back({std::vector<int32_t>(e.tokens.begin(), e.tokens.end()),
                           std::vector<int32_t>(e.blocks.begin(), e.blocks.end()), e.start,
                           e.n_logits});
    }
    RETURN_IF_ERROR(link.Send(1, wire::Encode(m)));
  }
  // One reply per micro-batch, in order; after a failure the rest are still drained so that
  // the next step does not read this step's replies.
  absl::Status status = absl::OkStatus();
  const int64_t n_out = model_.weights().output.rows;
  for (int64_t g = 0; g < M; ++g) {
    auto bytes = link.Recv(last_rank, options_.timeout_ms);
    if (!bytes.ok()) return bytes.status();  // the chain is broken: nothing more will come
    auto m = wire::Decode(*bytes);
    if (!status.ok()) continue;
    if (!m.ok()) {
      status = absl::DataLossError(absl::StrCat("stage ", last_rank, ": ", m.status().message()));
    } else if (m->kind == wire::Kind::kError) {
      status = absl::InternalError(m->text);
    } else if (m->kind != wire::Kind::kLogits || m->rows != rows[g] || m->cols != n_out) {
      status = absl::DataLossError(absl::StrCat(
          "stage ", last_rank, " answered micro-batch ", g, " with a message of kind ",
          static_cast<uint32_t>(m->kind), " and shape [", m->rows, ", ", m->cols,
          "]; expected logits [", rows[g], ", ", n_out, "]"));
    } else {
      PlaceLogits(m->floats, rows[g], logits);
    }
  }
  return status;
}

absl::Status Runner::ServeStage() {
  StageLink& link = *options_.link;
  const Config& c = model_.config();
  const int r = link.rank(), prev = r - 1, next = r + 1;
  const bool last = last_stage();
  // A failed micro-batch becomes an error message in place of its reply, so that rank 0 gets
  // exactly one answer per micro-batch and names the stage.
  auto pass_on = [&](const wire::Message& m) {
    return link.Send(last ? 0 : next, wire::Encode(m));
  };
  for (;;) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, link.Recv(prev, -1));
    auto m = wire::Decode(bytes);
    if (!m.ok()) {
      wire::Message err;
      err.kind = wire::Kind::kError;
      err.text = absl::StrCat("stage ", r, ": from stage ", prev, ": ", m.status().message());
      RETURN_IF_ERROR(pass_on(err));
      continue;
    }
    switch (m->kind) {
      case wire::Kind::kStop:
        if (!last) RETURN_IF_ERROR(link.Send(next, std::move(bytes)));
        return absl::OkStatus();
      case wire::Kind::kCopy:
        RETURN_IF_ERROR(CopyBlock(m->src, m->dst));
        if (!last) RETURN_IF_ERROR(link.Send(next, std::move(bytes)));
        continue;
      case wire::Kind::kError:
        RETURN_IF_ERROR(pass_on(*m));
        continue;
      case wire::Kind::kPing:
        RETURN_IF_ERROR(link.Send(last ? 0 : next, std::move(bytes)));
        continue;
      case wire::Kind::kForward:
        break;
      default: {
        wire::Message err;
        err.kind = wire::Kind::kError;
        err.text = absl::StrCat("stage ", r, ": unexpected message kind ",
                                static_cast<uint32_t>(m->kind), " from stage ", prev);
        RETURN_IF_ERROR(pass_on(err));
        continue;
      }
    }
    auto step = [&]() -> absl::StatusOr<wire::Message> {
      std::vector<StepEntry> entries;
      for (const wire::Entry& e : m->entries) entries.push_back({e.tokens, e.start, e.blocks, e.n_logits});
      ASSIGN_OR_RETURN(backend::StepMeta meta, BuildMeta(entries));
      const int64_t T = meta.n_tokens();
      if (m->rows != T || m->cols != c.n_embd) {
        return absl::DataLossError(absl::StrCat("the residual is [", m->rows, ", ", m->cols,
                                                "]; the step has ", T, " tokens of width ",
                                                c.n_embd));
      }
      const backend::Tensor x = ws_.x.Rows(0, T);
      RETURN_IF_ERROR(be_.Upload(x.data, m->floats.data(), T * c.n_embd * sizeof(float)));
      RETURN_IF_ERROR(be_.BeginStep(meta));
      RETURN_IF_ERROR(Layers(T, first_, last_, nullptr));
      wire::Message out;
      if (last) {
        const int64_t R = static_cast<int64_t>(meta.output_rows.size());
        out.kind = wire::Kind::kLogits;
        out.rows = R;
        out.cols = model_.weights().output.rows;
        if (R > 0) RETURN_IF_ERROR(Head(T, R, &out.floats, nullptr));
      } else {
        out = std::move(*m);
        RETURN_IF_ERROR(be_.Download(out.floats.data(), x.data, T * c.n_embd * sizeof(float)));
      }
      RETURN_IF_ERROR(be_.Synchronize());
      return out;
    };
    auto out = step();
    if (!out.ok()) {
      wire::Message err;
      err.kind = wire::Kind::kError;
      err.text = absl::StrCat("stage ", r, " (layers [", first_, ", ", last_, ")): ",
                              out.status().message());
      RETURN_IF_ERROR(pass_on(err));
      continue;
    }
    RETURN_IF_ERROR(pass_on(*out));
  }
}

absl::StatusOr<double> Runner::ChainRoundTrip(int64_t floats, int reps) {
  if (!pipelined() || options_.link->rank() != 0) {
    return absl::FailedPreconditionError("the chain round trip is measured on stage 0 of a split");
  }
  StageLink& link = *options_.link;
  wire::Message m;
  m.kind = wire::Kind::kPing;
  m.rows = 1;
  m.cols = floats;
  m.floats.assign(floats, 1.0f);
  const std::vector<uint8_t> bytes = wire::Encode(m);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(link.Send(1, bytes));
    ASSIGN_OR_RETURN(std::vector<uint8_t> back, link.Recv(link.size() - 1, options_.timeout_ms));
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (back != bytes) return absl::DataLossError("the ping came back changed");
  }
  std::sort(t.begin(), t.end());
  return t.empty() ? 0.0 : t[t.size() / 2];
}

absl::Status Runner::Handshake() {
  StageLink& link = *options_.link;
  wire::Message m;
  m.kind = wire::Kind::kConfig;
  m.config = {options_.max_step_tokens, options_.max_logit_rows, options_.block_size,
              options_.n_blocks, static_cast<uint32_t>(options_.k_format),
              static_cast<uint32_t>(options_.v_format), options_.micro_batches,
              options_.timeout_ms, options_.split};
  RETURN_IF_ERROR(link.Send(1, wire::Encode(m)));
  stage_lines_ = {StageLine(0, be_, first_, last_)};
  for (int r = 1; r < link.size(); ++r) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, link.Recv(r, options_.timeout_ms));
    ASSIGN_OR_RETURN(wire::Message hello, wire::Decode(bytes));
    if (hello.kind == wire::Kind::kError) return absl::FailedPreconditionError(hello.text);
    if (hello.kind != wire::Kind::kHello) {
      return absl::DataLossError(absl::StrCat("stage ", r, " answered the configuration with kind ",
                                              static_cast<uint32_t>(hello.kind)));
    }
    stage_lines_.push_back(hello.text);
  }
  return absl::OkStatus();
}

absl::Status RunStage(const Model& model, backend::Backend& be, StageLink& link) {
  const int r = link.rank();
  if (r < 1 || r >= link.size()) {
    return absl::InvalidArgumentError(absl::StrCat("RunStage on rank ", r, " of ", link.size()));
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, link.Recv(r - 1, -1));
  ASSIGN_OR_RETURN(wire::Message m, wire::Decode(bytes));
  if (m.kind != wire::Kind::kConfig) {
    return absl::DataLossError(absl::StrCat("stage ", r, " expected the configuration first; got kind ",
                                            static_cast<uint32_t>(m.kind)));
  }
  if (r + 1 < link.size()) RETURN_IF_ERROR(link.Send(r + 1, std::move(bytes)));
  RunnerOptions o;
  o.max_step_tokens = m.config.max_step_tokens;
  o.max_logit_rows = m.config.max_logit_rows;
  o.block_size = m.config.block_size;
  o.n_blocks = m.config.n_blocks;
  o.k_format = static_cast<quant::KvFormat>(m.config.k_format);
  o.v_format = static_cast<quant::KvFormat>(m.config.v_format);
  o.micro_batches = m.config.micro_batches;
  o.timeout_ms = m.config.timeout_ms;
  o.split = m.config.split;
  o.link = &link;
  auto runner = Runner::Create(model, be, o);
  wire::Message hello;
  if (!runner.ok()) {
    hello.kind = wire::Kind::kError;
    hello.text = absl::StrCat("stage ", r, " on ", HostName(), ": ", runner.status().message());
    (void)link.Send(0, wire::Encode(hello));
    return runner.status();
  }
  hello.kind = wire::Kind::kHello;
  hello.text = StageLine(r, be, (*runner)->first_layer(), (*runner)->last_layer());
  RETURN_IF_ERROR(link.Send(0, wire::Encode(hello)));
  return (*runner)->ServeStage();
}

}  // namespace lockstep::models
