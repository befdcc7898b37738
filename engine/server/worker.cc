#include "engine/server/worker.h"

#include <cstdio>
#include <map>

namespace lockstep::server {

using Clock = std::chrono::steady_clock;

Channel::Batch Channel::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return news_; });
  Batch out = std::move(pending_);
  pending_ = Batch{};
  pending_.done = out.done;  // done stays done
  news_ = false;
  return out;
}

bool Channel::done() const {
  std::lock_guard<std::mutex> l(mu_);
  return pending_.done;
}

Worker::Worker(std::string model_name, std::unique_ptr<runtime::Engine> engine, int64_t max_seqs)
    : name_(std::move(model_name)),
      engine_(std::move(engine)),
      max_seqs_(max_seqs),
      pool_blocks_(engine_->pool().n_blocks()),
      block_size_(engine_->options().block_size),
      ctx_(engine_->ctx()) {}

void Worker::Start(Metrics* metrics, int spec_k) {
  metrics_ = metrics;
  spec_k_ = spec_k;
  Publish();
  thread_ = std::thread([this] { Loop(); });
}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Worker::TryReserve(int seqs, int64_t blocks_each) {
  std::lock_guard<std::mutex> l(mu_);
  if (reserved_seqs_ + seqs > max_seqs_) return false;
  if (reserved_blocks_ + seqs * blocks_each > pool_blocks_) return false;
  reserved_seqs_ += seqs;
  reserved_blocks_ += seqs * blocks_each;
  return true;
}

void Worker::Unreserve(int seqs, int64_t blocks_each) {
  std::lock_guard<std::mutex> l(mu_);
  reserved_seqs_ -= seqs;
  reserved_blocks_ -= seqs * blocks_each;
}

int64_t Worker::in_flight() const {
  std::lock_guard<std::mutex> l(mu_);
  return reserved_seqs_;
}

std::shared_ptr<Channel> Worker::Submit(runtime::Request r, int64_t blocks) {
  auto ch = std::make_shared<Channel>();
  ch->blocks_ = blocks;
  ch->spec_k_ = r.drafter != nullptr ? r.spec.k : 0;
  ch->t_submit_ = Clock::now();
  Channel* c = ch.get();
  Metrics* m = metrics_;
  r.on_text = [c](std::string_view s) {
    std::lock_guard<std::mutex> l(c->mu_);
    c->pending_.text.append(s);
    c->news_ = true;
    c->cv_.notify_all();
  };
  r.on_token = [c, m](const runtime::TokenEvent& e) {
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> l(c->mu_);
      c->pending_.tokens.push_back({e.token, e.logprob, e.top_logprobs, e.drafted, e.accepted,
                                    e.stops});
      c->news_ = true;
      c->cv_.notify_all();
    }
    if (!c->has_token_) {
      m->ObserveTtft(std::chrono::duration<double>(now - c->t_submit_).count());
    } else {
      m->ObserveItl(std::chrono::duration<double>(now - c->t_last_).count());
    }
    c->has_token_ = true;
    c->t_last_ = now;
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    inbox_.emplace_back(std::move(r), ch);
  }
  cv_.notify_all();
  return ch;
}

void Worker::Cancel(const std::shared_ptr<Channel>& c) {
  {
    std::lock_guard<std::mutex> l(mu_);
    cancels_.push_back(c);
  }
  cv_.notify_all();
}

void Worker::Publish() {
  EngineGauges g;
  g.waiting = engine_->waiting();
  g.running = engine_->running();
  g.kv_blocks_used = engine_->pool().n_used();
  g.kv_blocks_free = engine_->pool().n_free();
  g.prefix_hits = engine_->stats().prefix_hits;
  g.prefix_misses = engine_->stats().prefix_misses;
  g.session_resumes = engine_->stats().session_resumes;
  g.in_flight = in_flight();
  g.drafted_at = drafted_at_;
  g.accepted_at = accepted_at_;
  g.spec_k = spec_k_;
  g.spec_by_k = spec_by_k_;
  metrics_->SetEngine(name_, g);
}

void Worker::Deliver(runtime::RequestResult r) {
  auto it = live_.find(r.id);
  if (it == live_.end()) return;
  std::shared_ptr<Channel> ch = it->second;
  live_.erase(it);
  const spec::SpecStats& st = r.stats;
  if (drafted_at_.size() < st.proposed_at.size()) {
    drafted_at_.resize(st.proposed_at.size());
    accepted_at_.resize(st.proposed_at.size());
  }
  for (size_t i = 0; i < st.proposed_at.size(); ++i) {
    drafted_at_[i] += st.proposed_at[i];
    accepted_at_[i] += st.accepted_at[i];
  }
  if (ch->spec_k_ > 0) {
    SpecByK& k = spec_by_k_[ch->spec_k_];
    ++k.sequences;
    k.rounds += st.rounds;
  }
  metrics_->AddTokens(r.gen.prompt_tokens, static_cast<int64_t>(r.gen.tokens.size()));
  Unreserve(1, ch->blocks_);
  std::lock_guard<std::mutex> l(ch->mu_);
  ch->pending_.result = std::move(r);
  ch->pending_.done = true;
  ch->news_ = true;
  ch->cv_.notify_all();
}

void Worker::Loop() {
  while (true) {
    std::deque<std::pair<runtime::Request, std::shared_ptr<Channel>>> inbox;
    std::vector<std::shared_ptr<Channel>> cancels;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !inbox_.empty() || !cancels_.empty() || !engine_->Idle(); });
      if (stop_) break;
      inbox.swap(inbox_);
      cancels.swap(cancels_);
    }
    for (auto& [req, ch] : inbox) {
      absl::StatusOr<int64_t> id = engine_->Submit(std::move(req));
      if (!id.ok()) {
        Unreserve(1, ch->blocks_);
        std::lock_guard<std::mutex> l(ch->mu_);
        ch->pending_.error = std::string(id.status().message());
        ch->pending_.done = true;
        ch->news_ = true;
        ch->cv_.notify_all();
        continue;
      }
      ch->id_ = *id;
      live_[*id] = ch;
    }
    for (auto& ch : cancels) {
      if (ch->id_ != 0) engine_->Cancel(ch->id_);
    }
    if (!engine_->Idle()) {
      absl::StatusOr<std::vector<runtime::RequestResult>> done = engine_->Step();
      if (!done.ok()) {
        // An engine error ends every live request with it (the server keeps serving others).
        std::fprintf(stderr, "serve: %s: engine step failed: %s\n", name_.c_str(),
                     std::string(done.status().message()).c_str());
        for (auto& [id, ch] : live_) {
          engine_->Cancel(id);
          Unreserve(1, ch->blocks_);
          std::lock_guard<std::mutex> l(ch->mu_);
          ch->pending_.error = std::string(done.status().message());
          ch->pending_.done = true;
          ch->news_ = true;
          ch->cv_.notify_all();
        }
        live_.clear();
        engine_->TakeFinished();
      } else {
        for (runtime::RequestResult& r : *done) Deliver(std::move(r));
      }
    }
    for (runtime::RequestResult& r : engine_->TakeFinished()) Deliver(std::move(r));
    Publish();
  }
  for (auto& [id, ch] : live_) engine_->Cancel(id);
  engine_->TakeFinished();
}

}  // namespace lockstep::server
