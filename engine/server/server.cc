#include "engine/server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/core/sha256.h"
#include "engine/server/server_internal.h"
#include "httplib.h"

namespace lockstep::server {

using json = nlohmann::ordered_json;

Server::Server(std::vector<std::unique_ptr<ServedModel>> models, ServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->models = std::move(models);
  impl_->options = std::move(options);
  impl_->owner = this;
  Impl& im = *impl_;
  for (auto& m : im.models) m->worker->Start(&im.metrics, m->drafter ? m->spec_k : 0);
  httplib::Server& s = im.http;
  const int threads = im.options.http_threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(static_cast<size_t>(im.options.max_body_bytes));
  s.set_read_timeout(30, 0);
  s.set_write_timeout(30, 0);
  s.set_error_handler([&im](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.http_status = res.status;
    if (res.status == 413) {
      e.message = absl::StrCat("the request body is ", req.get_header_value("Content-Length"),
                               " bytes; the limit is ", im.options.max_body_bytes,
                               " bytes (--max-body-kb)");
      e.code = "body_too_large";
    } else if (res.status == 404) {
      e.message = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
      e.code = "not_found";
    } else {
      e.message = absl::StrCat("HTTP ", res.status, " for ", req.method, " ", req.path);
    }
    res.set_content(e.Body(), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& x) {
      e.message = absl::StrCat("internal error: ", x.what());
    } catch (...) {
      e.message = "internal error";
    }
    res.status = 500;
    res.set_content(e.Body(), "application/json");
  });

  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  s.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      res.status = 503;
      res.set_content("{\"status\":\"draining\"}", "application/json");
      return;
    }
    res.set_content("{\"status\":\"ready\"}", "application/json");
  });
  s.Get("/metrics", [&im](const httplib::Request& req, httplib::Response& res) {
    if (!im.Authorized(req, res, "metrics")) return;
    res.set_content(im.metrics.Render(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [&im](const httplib::Request& req, httplib::Response& res) {
    if (!im.Authorized(req, res, "models")) return;
    json data = json::array();
    for (const auto& m : im.models) {
      json e = {{"id", m->alias}, {"object", "model"}, {"created", im.started}, {"owned_by", "lockstep"}};
      e["lockstep"] = m->facts;
      data.push_back(e);
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    im.metrics.CountRequest("models", 200);
  });
  s.Post("/v1/chat/completions", [&im](const httplib::Request& req, httplib::Response& res) {
    im.HandleGenerate(Endpoint::kChat, req, res);
  });
  s.Post("/v1/completions", [&im](const httplib::Request& req, httplib::Response& res) {
    im.HandleGenerate(Endpoint::kCompletions, req, res);
  });
  for (const StaticFile& f : PlaygroundFiles()) {
    s.Get(f.path, [f](const httplib::Request&, httplib::Response& res) {
      res.set_content(f.body, f.content_type);
    });
  }
}

Server::~Server() { Stop(); }

namespace {

// Debian's cpp-httplib 0.11 listens with a backlog of 5 (compiled into its library), so a
// burst of new connections (32 clients at once) gets resets. Linux lets listen() be called
// again on a listening socket to change its backlog: find ours by its port and raise it.
void RaiseListenBacklog(int port) {
  for (int fd = 3; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(fd, SOMAXCONN);
  }
}

}  // namespace

bool Server::ListenAndReport(const std::string& host, int port) {
  httplib::Server& s = impl_->http;
  if (port == 0) {
    port = s.bind_to_any_port(host);
    if (port <= 0) return false;
  } else if (!s.bind_to_port(host, port)) {
    return false;
  }
  RaiseListenBacklog(port);
  std::fprintf(stderr, "lockstep serve: listening on http://%s:%d\n", host.c_str(), port);
  std::fflush(stderr);
  return s.listen_after_bind();
}

void Server::Stop() { impl_->http.stop(); }

int64_t Server::InFlight() const {
  int64_t n = impl_->active_streams.load();
  for (const auto& m : impl_->models) n += m->worker->in_flight();
  return n;
}

void Server::Drain() {
  if (draining_.exchange(true)) return;
  std::thread([this] {
    while (InFlight() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Stop();
  }).detach();
}

bool Server::Impl::Authorized(const httplib::Request& req, httplib::Response& res,
                              const std::string& endpoint) {
  if (options.api_key_sha256.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  // Only the hash of what was sent is compared or kept; the key itself is never logged.
  if (h.rfind(prefix, 0) == 0 && options.api_key_sha256.count(core::Sha256Hex(h.substr(prefix.size())))) {
    return true;
  }
  ApiError e;
  e.http_status = 401;
  e.message = h.empty() ? "no API key: send the header 'Authorization: Bearer KEY'"
                        : "the API key is not valid";
  e.code = "invalid_api_key";
  Reply(res, endpoint, e);
  return false;
}

void Server::Impl::Reply(httplib::Response& res, const std::string& endpoint, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(e.Body(), "application/json");
  metrics.CountRequest(endpoint, e.http_status);
}

ServedModel* Server::Impl::Find(const std::string& alias) {
  for (const auto& m : models) {
    if (m->alias == alias) return m.get();
  }
  return nullptr;
}

uint64_t Server::Impl::RandomSeed() {
  std::lock_guard<std::mutex> l(rng_mu);
  return rng();
}

}  // namespace lockstep::server
