// Server::Impl, shared by server.cc (routing, auth, models) and generate.cc (the two
// generation endpoints). Internal to engine/server.
#pragma once

#include <atomic>
#include <ctime>
#include <mutex>
#include <random>

#include "engine/server/server.h"
#include "httplib.h"

namespace lockstep::server {

struct Server::Impl {
  httplib::Server http;
  Metrics metrics;  // before models: the engine threads report to it until they stop
  std::vector<std::unique_ptr<ServedModel>> models;
  ServerOptions options;
  Server* owner = nullptr;
  std::atomic<int64_t> active_streams{0};
  std::atomic<int64_t> next_id{1};
  int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};

  bool Authorized(const httplib::Request& req, httplib::Response& res, const std::string& endpoint);
  void Reply(httplib::Response& res, const std::string& endpoint, const ApiError& e);
  ServedModel* Find(const std::string& alias);
  uint64_t RandomSeed();
  void HandleGenerate(Endpoint ep, const httplib::Request& req, httplib::Response& res);
};

}  // namespace lockstep::server
