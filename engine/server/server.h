// `lockstep serve`'s HTTP surface on cpp-httplib (docs/serving.md): /v1/chat/completions,
// /v1/completions (JSON and SSE streams), /v1/models, /health, /ready, /metrics and the
// playground at /. Each served model has one Worker (its engine thread); the handlers parse,
// tokenize, admit, submit, and stream what the worker's channels produce. The bytes a request
// gets do not depend on what else is served at the same time (docs/design.md §1).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "engine/backend/backend.h"
#include "engine/models/model.h"
#include "engine/server/api.h"
#include "engine/server/metrics.h"
#include "engine/server/worker.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer/tokenizer.h"

namespace lockstep::server {

// One alias: a model, its tokenizer, backend, optional drafter, and its engine thread.
struct ServedModel {
  std::string alias;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<spec::Drafter> drafter;  // null: plain decoding
  int spec_k = 4;
  std::string chat_template;               // "" = the GGUF's tokenizer.chat_template
  std::unique_ptr<Worker> worker;
  nlohmann::ordered_json facts;            // the boot report's facts, served at /v1/models
};

struct ServerOptions {
  int64_t max_body_bytes = 1 << 20;
  int default_max_tokens = 256;  // when a request gives none (capped by the room in context)
  int http_threads = 64;
  std::set<std::string> api_key_sha256;  // hex; empty = no auth
  ParseLimits limits;
};

class Server {
 public:
  Server(std::vector<std::unique_ptr<ServedModel>> models, ServerOptions options);
  ~Server();
  // Binds (port 0: any free port), prints "lockstep serve: listening on http://HOST:PORT" on
  // stderr, and serves until Stop(); false when the address cannot be bound.
  bool ListenAndReport(const std::string& host, int port);
  // SIGTERM: new requests get 503, running ones finish, then Listen returns.
  void Drain();
  void Stop();
  bool draining() const { return draining_; }
  int64_t InFlight() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> draining_{false};
};

// The playground's static files (engine/server/playground.cc), by path ("/" = index.html).
struct StaticFile {
  const char* path;
  const char* content_type;
  const char* body;
};
const std::vector<StaticFile>& PlaygroundFiles();

}  // namespace lockstep::server
