// `lockstep serve`: the OpenAI-compatible server (docs/serving.md). Loads every --model
// ALIAS=PATH[+DRAFT], starts one engine thread per model, prints the boot report, and serves
// until SIGTERM / SIGINT, which drain (running requests finish, new ones get 503, exit 0).
// Every boot error stops the program with a sentence naming the flag, variable or file.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cli/commands.h"
#include "engine/cli/engine_flags.h"
#include "engine/cli/model_io.h"
#include "engine/core/sha256.h"
#include "engine/store/model_store.h"

#include "engine/server/server.h"

namespace lockstep::cli {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

std::string ReadFileOrThrow(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CliError(2, flag + ": cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "ALIAS=PATH[+DRAFT]" (a bare PATH is its own alias).
struct ModelSpec {
  std::string alias, path, draft;
};
ModelSpec ParseModelSpec(const std::string& s) {
  ModelSpec m;
  std::string rest = s;
  const size_t eq = s.find('=');
  if (eq != std::string::npos) {
    m.alias = s.substr(0, eq);
    rest = s.substr(eq + 1);
    if (m.alias.empty()) throw CliError(2, "--model '" + s + "': the alias before '=' is empty");
  }
  const size_t plus = rest.rfind('+');
  if (plus != std::string::npos) {
    m.draft = rest.substr(plus + 1);
    rest = rest.substr(0, plus);
    if (m.draft.empty()) throw CliError(2, "--model '" + s + "': the draft after '+' is empty");
  }
  if (rest.empty()) throw CliError(2, "--model '" + s + "': no model path or name");
  m.path = rest;
  if (m.alias.empty()) m.alias = rest;
  return m;
}

std::string MainQuant(const gguf::File& f) {
  std::map<std::string, int64_t> bytes;
  for (const gguf::TensorInfo& t : f.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const quant::TypeTraits tr = quant::Traits(t.type);
    bytes[tr.name ? tr.name : "?"] += n;
  }
  std::string best;
  for (const auto& [name, n] : bytes) {
    if (best.empty() || n > bytes[best]) best = name;
  }
  return best;
}

}  // namespace

void RegisterServe(CLI::App& app) {
  struct Args {
    std::vector<std::string> models, templates;
    std::string host = "127.0.0.1", backend = "cpu", api_key_file;
    int port = 8080, threads = 0, spec_k = 4, http_threads = 64, default_max_tokens = 256;
    int64_t max_seqs = 16, prefix_cache_mb = 64, max_sessions = 64, max_body_kb = 1024;
    EngineFlags engine;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("serve", "Serve models over an OpenAI-compatible HTTP API "
                                              "(docs/serving.md)");
  sub->add_option("--model", a->models,
                  "ALIAS=PATH[+DRAFT] (repeatable); PATH a GGUF file or known name, DRAFT a "
                  "draft model, 'ngram' or 'self' (its own MTP head); default: the embedded "
                  "default model")
      ->envname("LOCKSTEP_SERVE_MODELS")->delimiter(',');
  sub->add_option("--chat-template", a->templates, "ALIAS=FILE: a chat template for a model "
                  "whose GGUF has none (repeatable)")
      ->envname("LOCKSTEP_CHAT_TEMPLATES")->delimiter(',');
  sub->add_option("--host", a->host, "Address to bind")->capture_default_str()->envname("LOCKSTEP_HOST");
  sub->add_option("--port", a->port, "Port to bind (0 = any free port, printed)")
      ->capture_default_str()->envname("LOCKSTEP_PORT");
  sub->add_option("--backend", a->backend, "Backend: " + BackendChoices())
      ->capture_default_str()->envname("LOCKSTEP_BACKEND");
  sub->add_option("--threads", a->threads, "cpu backend threads (0 = all cores)")
      ->envname("LOCKSTEP_THREADS");
  sub->add_option("--max-seqs", a->max_seqs, "Sequences admitted at once per model (429 beyond)")
      ->capture_default_str()->envname("LOCKSTEP_MAX_SEQS");
  CLI::Option* prefix_cache_opt =
      sub->add_option("--prefix-cache-mb", a->prefix_cache_mb,
                      "Prefix cache budget in MiB (0 = off; off by default for models with "
                      "recurrent layers, which it cannot hold yet)")
          ->capture_default_str()->envname("LOCKSTEP_PREFIX_CACHE_MB");
  sub->add_option("--max-sessions", a->max_sessions, "Parked sessions per model (LRU; 0 = off)")
      ->capture_default_str()->envname("LOCKSTEP_MAX_SESSIONS");
  sub->add_option("--spec-k", a->spec_k, "Draft tokens per round for models served with a draft")
      ->capture_default_str()->envname("LOCKSTEP_SPEC_K");
  sub->add_option("--api-key-file", a->api_key_file,
                  "File of API keys, one per line (kept as SHA-256 only); without it, no auth")
      ->envname("LOCKSTEP_API_KEY_FILE");
  sub->add_option("--max-body-kb", a->max_body_kb, "Largest request body in KiB (413 beyond)")
      ->capture_default_str()->envname("LOCKSTEP_MAX_BODY_KB");
  sub->add_option("--default-max-tokens", a->default_max_tokens,
                  "max_tokens of a request that gives none (capped by the room in the context)")
      ->capture_default_str()->envname("LOCKSTEP_DEFAULT_MAX_TOKENS");
  sub->add_option("--http-threads", a->http_threads, "HTTP worker threads (streams held at once)")
      ->capture_default_str()->envname("LOCKSTEP_HTTP_THREADS");
  AddEngineFlags(sub, a->engine);
  sub->callback([a, prefix_cache_opt] {
    if (a->models.empty()) a->models.push_back(store::DefaultModel().name);
    if (a->max_seqs < 1) throw CliError(2, absl::StrCat("--max-seqs must be >= 1, got ", a->max_seqs));
    if (a->prefix_cache_mb < 0) throw CliError(2, "--prefix-cache-mb must be >= 0");
    if (a->max_sessions < 0) throw CliError(2, "--max-sessions must be >= 0");
    if (a->max_body_kb < 1) throw CliError(2, "--max-body-kb must be >= 1");
    if (a->default_max_tokens < 1) throw CliError(2, "--default-max-tokens must be >= 1");
    if (a->http_threads < 2) throw CliError(2, "--http-threads must be >= 2");
    if (a->port < 0 || a->port > 65535) throw CliError(2, absl::StrCat("--port must be in [0, 65535], got ", a->port));
    server::ServerOptions so;
    so.max_body_bytes = a->max_body_kb * 1024;
    so.default_max_tokens = a->default_max_tokens;
    so.http_threads = a->http_threads;
    if (!a->api_key_file.empty()) {
      std::istringstream in(ReadFileOrThrow(a->api_key_file, "--api-key-file"));
      std::string line;
      while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (!line.empty()) so.api_key_sha256.insert(core::Sha256Hex(line));
      }
      if (so.api_key_sha256.empty()) {
        throw CliError(2, "--api-key-file " + a->api_key_file + " holds no key (one per line)");
      }
    }
    std::map<std::string, std::string> templates;
    for (const std::string& t : a->templates) {
      const size_t eq = t.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw CliError(2, "--chat-template '" + t + "': expected ALIAS=FILE");
      }
      templates[t.substr(0, eq)] = ReadFileOrThrow(t.substr(eq + 1), "--chat-template " + t);
    }
    std::vector<std::unique_ptr<server::ServedModel>> served;
    std::fprintf(stderr, "lockstep serve: booting %zu model(s)\n", a->models.size());
    for (const std::string& spec_text : a->models) {
      const ModelSpec ms = ParseModelSpec(spec_text);
      for (const auto& m : served) {
        if (m->alias == ms.alias) throw CliError(2, "--model: the alias '" + ms.alias + "' is given twice");
      }
      auto sm = std::make_unique<server::ServedModel>();
      sm->alias = ms.alias;
      LoadedModel lm;
      try {
        lm = LoadModel(ms.path, /*progress=*/false);
      } catch (const CliError& e) {
        throw CliError(2, "--model " + spec_text + ": " + e.what());
      }
      auto be = backend::MakeBackend(a->backend, {a->threads});
      if (!be.ok()) throw CliError(2, "--backend " + a->backend + ": " + std::string(be.status().message()));
      sm->be = std::move(*be);
      runtime::EngineOptions eo = ToEngineOptions(a->engine);
      eo.max_running = a->max_seqs;
      // The prefix cache does not hold recurrent (Gated DeltaNet) state yet: a hybrid model is
      // served without it unless --prefix-cache-mb was given, which the engine then refuses by
      // name (docs/serving.md). The boot report says which.
      const bool recurrent = lm.model->config().gdn.present();
      const int64_t prefix_cache_mb =
          recurrent && prefix_cache_opt->count() == 0 ? 0 : a->prefix_cache_mb;
      eo.prefix_cache_bytes = prefix_cache_mb << 20;
      eo.max_sessions = a->max_sessions;
      eo.max_spec_k = std::max(1, a->spec_k);
      if (a->engine.pp_stages > 1 && a->models.size() > 1) {
        throw CliError(2, "--pp-stages splits one model into stages: give exactly one --model");
      }
      // Pipeline stages (docs/pipeline.md): ranks > 0 serve their layers and end here.
      if (StartPipeline(a->engine, *lm.model, *sm->be, &eo)) return;
      auto engine = runtime::Engine::Create(*lm.model, *lm.tok, *sm->be, eo);
      if (!engine.ok()) {
        throw CliError(2, "--model " + ms.alias + ": " + std::string(engine.status().message()));
      }
      std::string draft_desc = "none";
      if (!ms.draft.empty()) {
        std::string draft_path = "ngram";
        if (ms.draft != "ngram" && ms.draft != "self") {  // self: its MTP head (docs/speculative.md)
          auto p = store::ResolveModel(ms.draft);
          if (!p.ok()) {
            throw CliError(2, "--model " + spec_text + ": the draft: " + std::string(p.status().message()));
          }
          draft_path = *p;
        }
        auto d = spec::MakeDrafter(*lm.model, *sm->be, draft_path, (*engine)->ctx() * a->max_seqs);
        if (!d.ok()) {
          throw CliError(2, "--model " + spec_text + ": the draft does not fit its target: " +
                                std::string(d.status().message()));
        }
        sm->drafter = std::move(*d);
        sm->spec_k = a->spec_k;
        draft_desc = sm->drafter->name() + " (K = " + std::to_string(a->spec_k) + ")";
        if (ms.draft == "self") {
          draft_desc = "mtp: the model drafts for itself with its MTP head (K = " +
                       std::to_string(a->spec_k) + ")";
        }
      }
      if (auto it = templates.find(ms.alias); it != templates.end()) {
        sm->chat_template = it->second;
        templates.erase(it);
      }
      const gguf::File& f = lm.model->file();
      const std::string sha = core::Sha256Hex(
          std::string_view(reinterpret_cast<const char*>(f.bytes()), f.file_size()));
      const runtime::EngineOptions& o = (*engine)->options();
      const bool has_template = !sm->chat_template.empty() || f.Find("tokenizer.chat_template") != nullptr;
      sm->facts = {{"file", lm.path},
                   {"sha256", sha.substr(0, 16)},
                   {"architecture", lm.model->config().arch},
                   {"quant", MainQuant(f)},
                   {"backend", a->backend},
                   {"draft", draft_desc},
                   {"kv_k", quant::KvFormatName(o.k_format)},
                   {"kv_v", quant::KvFormatName(o.v_format)},
                   {"context", (*engine)->ctx()},
                   {"kv_blocks", (*engine)->pool().n_blocks()},
                   {"kv_block_tokens", o.block_size},
                   {"max_seqs", a->max_seqs},
                   {"prefix_cache_mb", prefix_cache_mb},
                   {"max_sessions", a->max_sessions},
                   {"chat_template", has_template ? "yes" : "none (chat requests refused)"},
                   {"pipeline_stages", std::max<size_t>(1, (*engine)->stage_lines().size())},
                   {"pipeline", (*engine)->stage_lines()},
                   {"fingerprint", "lockstep-" + sha.substr(0, 12)}};
      std::fprintf(stderr,
                   "  %s: %s sha256 %s  %s %s  backend %s  draft %s  KV %s/%s  context %lld  "
                   "KV blocks %lld x %lld tokens  max-seqs %lld  prefix cache %lld MiB%s  "
                   "sessions %lld  chat template %s  stages %zu\n",
                   ms.alias.c_str(), lm.path.c_str(), sha.substr(0, 16).c_str(),
                   lm.model->config().arch.c_str(), MainQuant(f).c_str(), a->backend.c_str(),
                   draft_desc.c_str(), quant::KvFormatName(o.k_format),
                   quant::KvFormatName(o.v_format), static_cast<long long>((*engine)->ctx()),
                   static_cast<long long>((*engine)->pool().n_blocks()),
                   static_cast<long long>(o.block_size), static_cast<long long>(a->max_seqs),
                   static_cast<long long>(prefix_cache_mb),
                   recurrent && prefix_cache_mb == 0 ? " (recurrent layers)" : "",
                   static_cast<long long>(a->max_sessions), has_template ? "yes" : "none",
                   std::max<size_t>(1, (*engine)->stage_lines().size()));
      PrintStages(**engine);
      sm->model = std::move(lm.model);
      sm->tok = std::move(lm.tok);
      sm->worker = std::make_unique<server::Worker>(sm->alias, std::move(*engine), a->max_seqs);
      served.push_back(std::move(sm));
    }
    if (!templates.empty()) {
      throw CliError(2, "--chat-template names the alias '" + templates.begin()->first +
                            "', which no --model serves");
    }
    server::Server srv(std::move(served), so);
    signal(SIGTERM, OnSignal);
    signal(SIGINT, OnSignal);
    signal(SIGPIPE, SIG_IGN);
    std::atomic<bool> done{false};
    std::thread watcher([&] {
      while (!done) {
        if (g_signal != 0) {
          std::fprintf(stderr, "lockstep serve: signal %d: draining (%lld in flight)\n",
                       g_signal.load(), static_cast<long long>(srv.InFlight()));
          srv.Drain();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    const bool ok = srv.ListenAndReport(a->host, a->port);
    done = true;
    watcher.join();
    if (!ok) {
      throw CliError(2, absl::StrCat("--host ", a->host, " --port ", a->port,
                                     ": cannot bind (in use, or not an address of this machine)"));
    }
    std::fprintf(stderr, "lockstep serve: drained, exiting\n");
  });
}

}  // namespace lockstep::cli
