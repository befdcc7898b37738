// POST /v1/chat/completions and /v1/completions: tokenize, check against the context, admit,
// submit n sequences to the model's worker, answer as one JSON object or as an SSE stream
// (docs/serving.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "engine/server/connection.h"
#include "engine/server/server_internal.h"
#include "engine/spec/drafter.h"

namespace lockstep::server {
namespace {

using json = nlohmann::ordered_json;
using namespace std::chrono_literals;

// How often a handler with nothing to send looks whether its client is still there.
constexpr std::chrono::milliseconds kProbeEvery = 200ms;

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json Bytes(std::string_view s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Logprob of a token whose law gave it none: OpenAI's floor for "impossible" (JSON has no -inf).
double Finite(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

std::string Piece(const tokenizer::Tokenizer& tok, int32_t id) {
  auto p = tok.TokenPiece(id);
  return p.ok() ? std::string(*p) : std::string();
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs", "drafted", "accepted"}]}.
json ChatLogprobs(const tokenizer::Tokenizer& tok, const std::vector<TokenRecord>& toks, bool drafter) {
  json content = json::array();
  for (const TokenRecord& t : toks) {
    if (t.stops) continue;  // the stop token is not part of the reply
    const std::string piece = Piece(tok, t.token);
    json e = {{"token", piece}, {"logprob", Finite(t.logprob)}, {"bytes", Bytes(piece)}};
    json top = json::array();
    for (const sampling::TokenLogprob& a : t.top) {
      const std::string ap = Piece(tok, a.token);
      top.push_back({{"token", ap}, {"logprob", Finite(a.logprob)}, {"bytes", Bytes(ap)}});
    }
    e["top_logprobs"] = top;
    e["id"] = t.token;
    if (drafter) {
      e["drafted"] = t.drafted;
      e["accepted"] = t.accepted;
    }
    content.push_back(e);
  }
  return json{{"content", content}};
}

// Completions (legacy): {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
json CompletionLogprobs(const tokenizer::Tokenizer& tok, const std::vector<TokenRecord>& toks,
                        int top_n, size_t* offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const TokenRecord& t : toks) {
    if (t.stops) continue;
    const std::string piece = Piece(tok, t.token);
    tokens.push_back(piece);
    lps.push_back(Finite(t.logprob));
    offs.push_back(*offset);
    *offset += piece.size();
    json top = json::object();
    for (const sampling::TokenLogprob& a : t.top) top[Piece(tok, a.token)] = Finite(a.logprob);
    tops.push_back(top_n > 0 ? top : json(nullptr));
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops},
              {"text_offset", offs}};
}

// The param an engine/sampling validation message is about (its first word names the field).
std::string ParamOf(const std::string& message) {
  for (const char* f : {"logit_bias", "temperature", "top_k", "top_p", "min_p", "presence_penalty",
                        "frequency_penalty", "repetition_penalty", "top_logprobs", "max_tokens", "stop"}) {
    if (message.rfind(f, 0) == 0) return f;
  }
  return "";
}

}  // namespace

void Server::Impl::HandleGenerate(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
  const bool chat = ep == Endpoint::kChat;
  const std::string ep_name = chat ? "chat" : "completions";
  if (!Authorized(req, res, ep_name)) return;
  if (owner->draining()) {
    ApiError e;
    e.http_status = 503;
    e.type = "server_error";
    e.code = "draining";
    e.message = "the server is shutting down (SIGTERM): running requests finish, new ones are refused";
    return Reply(res, ep_name, e);
  }
  ParsedRequest pr;
  if (auto e = ParseRequest(ep, req.body, options.limits, &pr)) return Reply(res, ep_name, *e);
  if (pr.session.empty() && req.has_header("X-Session-Id")) {
    pr.session = req.get_header_value("X-Session-Id");
    if (pr.session.size() > 256) {
      return Reply(res, ep_name, BadField("X-Session-Id", "the X-Session-Id header must hold 1 to 256 bytes"));
    }
    if (pr.n > 1) return Reply(res, ep_name, BadField("n", "'n' must be 1 with a session"));
  }
  ServedModel* m = Find(pr.model);
  if (m == nullptr) {
    std::string known;
    for (const auto& x : models) known += (known.empty() ? "" : ", ") + x->alias;
    ApiError e = BadField("model", absl::StrCat("the model '", pr.model, "' is not served (served: ",
                                                known, ")"), "model_not_found");
    e.http_status = 404;
    return Reply(res, ep_name, e);
  }
  const tokenizer::Tokenizer& tok = *m->tok;
  std::vector<int32_t> prompt;
  std::string prompt_param = chat ? "messages" : "prompt";
  if (chat) {
    for (size_t i = 0; i < pr.messages.size(); ++i) {
      if (absl::Status s = tok.CheckEncodable(pr.messages[i].content); !s.ok()) {
        const std::string p = absl::StrCat("messages[", i, "].content");
        return Reply(res, ep_name, BadField(p, absl::StrCat("'", p, "': ", s.message())));
      }
    }
    auto t = tokenizer::RenderModelChatTokens(m->model->file(), tok, m->chat_template, pr.messages,
                                              /*add_generation_prompt=*/true);
    if (!t.ok()) {
      return Reply(res, ep_name, BadField("messages", absl::StrCat("the chat template of '", m->alias,
                                                                   "': ", t.status().message())));
    }
    prompt = std::move(*t);
  } else if (pr.prompt_is_tokens) {
    for (size_t i = 0; i < pr.prompt_tokens.size(); ++i) {
      if (pr.prompt_tokens[i] >= tok.vocab_size()) {
        const std::string p = absl::StrCat("prompt[", i, "]");
        return Reply(res, ep_name, BadField(p, absl::StrCat("'", p, "' is ", pr.prompt_tokens[i],
                                                            ", outside the vocabulary [0, ",
                                                            tok.vocab_size(), ")")));
      }
    }
    prompt = pr.prompt_tokens;
  } else {
    if (absl::Status s = tok.CheckEncodable(pr.prompt); !s.ok()) {
      return Reply(res, ep_name, BadField("prompt", absl::StrCat("'prompt': ", s.message())));
    }
    // A completion prompt is the caller's whole text, markup included (docs/serving.md).
    prompt = tok.Encode(pr.prompt, tok.add_bos_default(), /*parse_special=*/true);
  }
  if (prompt.empty()) return Reply(res, ep_name, BadField(prompt_param, "the prompt has no tokens"));
  Worker& w = *m->worker;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= w.ctx()) {
    return Reply(res, ep_name, BadField(prompt_param, absl::StrCat(
        "the prompt is ", n_prompt, " tokens; the context of '", m->alias, "' holds ", w.ctx(),
        " (prompt + max_tokens must fit)"), "context_length_exceeded"));
  }
  if (pr.params.max_tokens == 0) {
    pr.params.max_tokens = static_cast<int32_t>(
        std::min<int64_t>(options.default_max_tokens, w.ctx() - n_prompt));
  }
  if (n_prompt + pr.params.max_tokens > w.ctx()) {
    return Reply(res, ep_name, BadField(chat ? "max_completion_tokens" : "max_tokens", absl::StrCat(
        "the prompt (", n_prompt, " tokens) + max_tokens (", pr.params.max_tokens, ") = ",
        n_prompt + pr.params.max_tokens, " exceeds the context length ", w.ctx(), " of '",
        m->alias, "'"), "context_length_exceeded"));
  }
  if (absl::Status s = pr.params.ValidateForVocab(tok.vocab_size()); !s.ok()) {
    return Reply(res, ep_name, BadField(ParamOf(std::string(s.message())), std::string(s.message())));
  }
  // At temperature 0 the law drawn from is one-hot; the model's own log-softmax is reported.
  if (pr.params.greedy()) pr.params.logprobs_mode = sampling::LogprobsMode::kRaw;
  const int64_t blocks = (n_prompt + pr.params.max_tokens + w.block_size() - 1) / w.block_size();
  if (blocks * pr.n > w.pool_blocks()) {
    return Reply(res, ep_name, BadField(pr.n > 1 ? "n" : "max_tokens", absl::StrCat(
        "the request needs ", pr.n, " x ", blocks, " KV blocks of ", w.block_size(),
        " tokens; the whole pool of '", m->alias, "' has ", w.pool_blocks(), " (--kv-mb)"),
        "kv_budget_exceeded"));
  }
  if (!w.TryReserve(pr.n, blocks)) {
    ApiError e;
    e.http_status = 429;
    e.type = "rate_limit_error";
    e.code = "server_busy";
    e.message = absl::StrCat("'", m->alias, "' is at capacity (", w.max_seqs(),
                             " sequences at most, --max-seqs; KV pool of ", w.pool_blocks(),
                             " blocks, --kv-mb): retry after the Retry-After seconds");
    res.set_header("Retry-After", "1");
    return Reply(res, ep_name, e);
  }
  const uint64_t seed = pr.seed ? *pr.seed : RandomSeed();
  // Load-aware K: with half the sequence slots or more taken, drafts are halved (verify rows
  // cost step tokens every neighbour shares). Greedy and coupled modes emit plain decoding's
  // bytes for every K, so the reply does not depend on the K picked (docs/serving.md).
  const int spec_k =
      w.in_flight() >= (w.max_seqs() + 1) / 2 ? std::max(1, m->spec_k / 2) : m->spec_k;
  std::vector<std::shared_ptr<Channel>> chans;
  for (int i = 0; i < pr.n; ++i) {
    runtime::Request r;
    r.prompt = prompt;
    r.params = pr.params;
    r.logprobs = pr.logprobs;  // else the engine skips the log-softmax (and may pick on the backend)
    r.seed = seed + static_cast<uint64_t>(i);  // choice i is the request with seed + i, alone
    r.session = pr.session;
    if (m->drafter) {
      r.drafter = m->drafter.get();
      r.spec.k = spec_k;
      r.spec.mode = spec::DefaultSpecMode(pr.params.greedy());
    }
    chans.push_back(w.Submit(std::move(r), blocks));
  }
  const std::string id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", next_id++);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string object = chat ? "chat.completion" : "text_completion";
  const bool drafter = m->drafter != nullptr;
  const int top_n = pr.params.top_logprobs;

  // The client's socket, watched while the engine works: a client that goes away cancels
  // every choice and their blocks return to the pool (connection.h says how it is found).
  const int conn = ConnectionSocket(req.remote_addr, req.remote_port, req.local_port);
  if (conn < 0) {
    std::fprintf(stderr, "serve: the socket of %s:%d was not found; a disconnect will not cancel "
                 "this request\n", req.remote_addr.c_str(), req.remote_port);
  }
  if (!pr.stream) {
    std::vector<Channel::Batch> done(pr.n);
    std::vector<std::vector<TokenRecord>> toks(pr.n);
    std::vector<std::string> text(pr.n);
    for (int i = 0; i < pr.n; ++i) {
      while (true) {
        Channel::Batch b = chans[i]->Take(kProbeEvery);
        text[i] += b.text;
        toks[i].insert(toks[i].end(), b.tokens.begin(), b.tokens.end());
        if (b.done) {
          done[i] = std::move(b);
          break;
        }
        if (conn >= 0 && PeerClosed(conn)) {
          for (const auto& c : chans) w.Cancel(c);
          // 499: nginx's "client closed request"; nobody reads this reply.
          res.status = 499;
          metrics.CountRequest(ep_name, 499);
          return;
        }
      }
    }
    json choices = json::array();
    int64_t completion_tokens = 0;
    for (int i = 0; i < pr.n; ++i) {
      if (!done[i].error.empty()) {
        ApiError e;
        e.http_status = 500;
        e.type = "server_error";
        e.message = done[i].error;
        return Reply(res, ep_name, e);
      }
      const runtime::GenerateResult& g = done[i].result.gen;
      completion_tokens += static_cast<int64_t>(g.tokens.size());
      json c = {{"index", i}};
      if (chat) {
        c["message"] = {{"role", "assistant"}, {"content", text[i]}};
        c["logprobs"] = pr.logprobs ? ChatLogprobs(tok, toks[i], drafter) : json(nullptr);
      } else {
        c["text"] = text[i];
        size_t off = 0;
        c["logprobs"] = pr.logprobs ? CompletionLogprobs(tok, toks[i], top_n, &off) : json(nullptr);
      }
      c["finish_reason"] = std::string(sampling::OpenAIFinishReason(g.finish));
      choices.push_back(c);
    }
    json out = {{"id", id}, {"object", object}, {"created", created}, {"model", m->alias},
                {"system_fingerprint", m->facts.value("fingerprint", "")}, {"choices", choices},
                {"usage", {{"prompt_tokens", n_prompt}, {"completion_tokens", completion_tokens},
                           {"total_tokens", n_prompt + completion_tokens}}}};
    res.set_content(Dump(out), "application/json");
    metrics.CountRequest(ep_name, 200);
    return;
  }

  // SSE: one chunk per batch of news per choice; a client that goes away cancels every choice.
  ++active_streams;
  metrics.CountRequest(ep_name, 200);
  Worker* wp = &w;
  const bool include_usage = pr.include_usage, logprobs = pr.logprobs;
  const std::string alias = m->alias;
  std::atomic<int64_t>* active = &active_streams;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=, &tok](size_t, httplib::DataSink& sink) mutable {
        auto chunk = [&](json choices, const json& usage) {
          json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created}, {"model", alias}, {"choices", std::move(choices)}};
          if (include_usage) j["usage"] = usage;
          const std::string line = "data: " + Dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        std::vector<bool> finished(chans.size(), false);
        std::vector<size_t> offsets(chans.size(), 0);
        int64_t completion_tokens = 0;
        if (chat) {
          for (size_t i = 0; i < chans.size(); ++i) {
            json c = {{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr}, {"finish_reason", nullptr}};
            if (!chunk(json::array({c}), nullptr)) {
              return false;
            }
          }
        }
        size_t n_done = 0;
        while (n_done < chans.size()) {
          for (size_t i = 0; i < chans.size(); ++i) {
            if (finished[i]) continue;
            Channel::Batch b = chans[i]->Take(chans.size() == 1 ? 200ms : 10ms);
            json c = {{"index", i}};
            if (!b.error.empty()) {
              const std::string line = "data: " + Dump(json{{"error", {{"message", b.error},
                                                                       {"type", "server_error"},
                                                                       {"param", nullptr},
                                                                       {"code", nullptr}}}}) + "\n\n";
              sink.write(line.data(), line.size());
              sink.done();
              return true;
            }
            const bool has_news = !b.text.empty() || (logprobs && !b.tokens.empty());
            // Nothing to write (a long prefill, text held back by a stop string): no failed
            // write would notice a client that left, so look at its socket.
            if (!has_news && !b.done && conn >= 0 && PeerClosed(conn)) return false;
            if (has_news || b.done) {
              if (chat) {
                c["delta"] = b.text.empty() ? json::object() : json{{"content", b.text}};
                c["logprobs"] = logprobs && !b.tokens.empty() ? ChatLogprobs(tok, b.tokens, drafter)
                                                              : json(nullptr);
              } else {
                c["text"] = b.text;
                c["logprobs"] = logprobs && !b.tokens.empty()
                                    ? CompletionLogprobs(tok, b.tokens, top_n, &offsets[i])
                                    : json(nullptr);
              }
              c["finish_reason"] = b.done ? json(std::string(sampling::OpenAIFinishReason(
                                                b.result.gen.finish)))
                                          : json(nullptr);
              if (b.done && b.result.cancelled) c["finish_reason"] = "cancelled";
              if (!chunk(json::array({c}), nullptr) || !sink.is_writable()) {
                return false;
              }
            }
            if (b.done) {
              finished[i] = true;
              ++n_done;
              completion_tokens += static_cast<int64_t>(b.result.gen.tokens.size());
            }
          }
        }
        if (include_usage) {
          chunk(json::array(), {{"prompt_tokens", n_prompt}, {"completion_tokens", completion_tokens},
                                {"total_tokens", n_prompt + completion_tokens}});
        }
        const std::string end = "data: [DONE]\n\n";
        sink.write(end.data(), end.size());
        sink.done();
        return true;
      },
      // Runs however the response ends (done, write failure, client gone): a choice still
      // running is cancelled and its blocks freed.
      [chans, wp, active](bool) {
        for (const auto& c : chans) wp->Cancel(c);
        --*active;
      });
}

}  // namespace lockstep::server
