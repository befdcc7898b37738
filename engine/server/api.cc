#include "engine/server/api.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep::server {
namespace {

using json = nlohmann::json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a non-integer number";
    default: return "an integer";
  }
}

ApiError WrongType(const std::string& param, const std::string& want, const json& got) {
  return BadField(param, absl::StrCat("'", param, "' must be ", want, ", got ", TypeName(got)),
                  "invalid_type");
}

// Reads an optional integer field in [lo, hi]; absent or null leaves *out alone.
std::optional<ApiError> GetInt(const json& body, const std::string& key, int64_t lo, int64_t hi,
                               int64_t* out, bool* given = nullptr) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return WrongType(key, "an integer", *it);
  const bool in_range = it->is_number_unsigned()
                            ? it->get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                  (lo <= 0 || it->get<uint64_t>() >= static_cast<uint64_t>(lo))
                            : it->get<int64_t>() >= lo && it->get<int64_t>() <= hi;
  if (!in_range) {
    return BadField(key, absl::StrCat("'", key, "' must be in [", lo, ", ", hi, "], got ",
                                      it->dump()));
  }
  *out = it->get<int64_t>();
  if (given) *given = true;
  return std::nullopt;
}

std::optional<ApiError> GetFloat(const json& body, const std::string& key, double lo, double hi,
                                 bool lo_open, float* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return WrongType(key, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi) {
    return BadField(key, absl::StrCat("'", key, "' must be in ", lo_open ? "(" : "[", lo, ", ", hi,
                                      "], got ", it->dump()));
  }
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> GetBool(const json& body, const std::string& key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return WrongType(key, "a boolean", *it);
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& body, const ParseLimits& limits,
                                      std::vector<tokenizer::ChatMessage>* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return BadField("messages", "'messages' is required", "missing_required_parameter");
  }
  if (!it->is_array()) return WrongType("messages", "an array", *it);
  if (it->empty()) return BadField("messages", "'messages' must hold at least one message");
  if (it->size() > limits.max_messages) {
    return BadField("messages", absl::StrCat("'messages' holds ", it->size(),
                                             " messages; at most ", limits.max_messages));
  }
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant"};
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(at, "an object", m);
    for (auto f = m.begin(); f != m.end(); ++f) {
      if (f.key() != "role" && f.key() != "content" && f.key() != "name") {
        return BadField(absl::StrCat(at, ".", f.key()),
                        absl::StrCat("unsupported field '", at, ".", f.key(), "'"),
                        "unsupported_parameter");
      }
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return BadField(at + ".role", absl::StrCat("'", at, ".role' must be a string"),
                      "invalid_type");
    }
    if (kRoles.count(role->get<std::string>()) == 0) {
      return BadField(at + ".role", absl::StrCat("'", at, ".role' must be one of system, "
                                                 "developer, user, assistant; got '",
                                                 role->get<std::string>(), "'"));
    }
    tokenizer::ChatMessage msg;
    msg.role = role->get<std::string>() == "developer" ? "system" : role->get<std::string>();
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      return BadField(at + ".content", absl::StrCat("'", at, ".content' is required"),
                      "missing_required_parameter");
    }
    if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // [{"type": "text", "text": "..."}]: text parts are joined; other part types are refused.
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pat = absl::StrCat(at, ".content[", k, "]");
        if (!part.is_object() || part.value("type", json()) != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          return BadField(pat, absl::StrCat("'", pat, "' must be {\"type\": \"text\", \"text\": "
                                            "string} (only text parts are served)"));
        }
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return WrongType(at + ".content", "a string or an array of text parts", *content);
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, ParsedRequest* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return BadField("prompt", "'prompt' is required", "missing_required_parameter");
  }
  if (it->is_string()) {
    out->prompt = it->get<std::string>();
    return std::nullopt;
  }
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    out->prompt = (*it)[0].get<std::string>();
    return std::nullopt;
  }
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return BadField(absl::StrCat("prompt[", i, "]"),
                        absl::StrCat("'prompt[", i, "]' must be a token id >= 0, got ", t.dump()));
      }
      out->prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    out->prompt_is_tokens = true;
    return std::nullopt;
  }
  return BadField("prompt", absl::StrCat("'prompt' must be a string, an array of one string or "
                                         "an array of token ids, got ", TypeName(*it)),
                  "invalid_type");
}

std::optional<ApiError> ParseStop(const json& body, const ParseLimits& limits,
                                  std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (it->get<std::string>().empty()) return BadField("stop", "'stop' must not be empty");
    out->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return WrongType("stop", "a string or an array of strings", *it);
  if (static_cast<int>(it->size()) > limits.max_stop) {
    return BadField("stop", absl::StrCat("'stop' holds ", it->size(), " strings; at most ",
                                         limits.max_stop));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string at = absl::StrCat("stop[", i, "]");
    if (!(*it)[i].is_string()) return WrongType(at, "a string", (*it)[i]);
    if ((*it)[i].get<std::string>().empty()) return BadField(at, "'" + at + "' must not be empty");
    out->push_back((*it)[i].get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseLogitBias(const json& body, std::vector<sampling::LogitBias>* out) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return WrongType("logit_bias", "an object of token id -> bias", *it);
  for (auto e = it->begin(); e != it->end(); ++e) {
    const std::string at = "logit_bias." + e.key();
    int32_t id = 0;
    if (!absl::SimpleAtoi(e.key(), &id) || id < 0) {
      return BadField("logit_bias", "'logit_bias' keys must be token ids >= 0, got '" + e.key() + "'");
    }
    if (!e.value().is_number()) return WrongType(at, "a number", e.value());
    const double b = e.value().get<double>();
    if (!(b >= -100.0 && b <= 100.0)) {
      return BadField(at, absl::StrCat("'", at, "' must be in [-100, 100], got ", e.value().dump()));
    }
    out->push_back({id, static_cast<float>(b)});
  }
  return std::nullopt;
}

}  // namespace

nlohmann::json ApiError::ToJson() const {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

ApiError BadField(const std::string& param, const std::string& message, const std::string& code) {
  ApiError e;
  e.message = message;
  e.param = param;
  e.code = code;
  return e;
}

std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body_text,
                                     const ParseLimits& limits, ParsedRequest* out) {
  const bool chat = endpoint == Endpoint::kChat;
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    // Say where: nlohmann's own message carries the byte offset.
    try {
      (void)json::parse(body_text);
    } catch (const json::exception& e) {  // parse_error, or out_of_range (a number like 1e999)
      return BadField("", absl::StrCat("the body is not valid JSON: ", e.what()), "invalid_json");
    }
    return BadField("", "the body is not valid JSON", "invalid_json");
  }
  if (!body.is_object()) return WrongType("body", "a JSON object", body);
  static const std::set<std::string> kCommon = {
      "model", "max_tokens", "n", "stop", "temperature", "top_p", "top_k", "min_p", "seed",
      "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "stream",
      "stream_options", "user", "session_id", "logprobs"};
  static const std::set<std::string> kChat = {"messages", "max_completion_tokens", "top_logprobs"};
  static const std::set<std::string> kCompletions = {"prompt", "echo"};
  for (auto f = body.begin(); f != body.end(); ++f) {
    if (kCommon.count(f.key()) || (chat ? kChat : kCompletions).count(f.key())) continue;
    return BadField(f.key(), "unsupported field '" + f.key() + "' (docs/serving.md lists the "
                    "fields served)", "unsupported_parameter");
  }
  ParsedRequest& r = *out;
  r = ParsedRequest{};
  r.endpoint = endpoint;
  r.params.max_tokens = 0;
  r.params.temperature = 1.0f;  // OpenAI's default
  auto model = body.find("model");
  if (model == body.end() || model->is_null()) {
    return BadField("model", "'model' is required", "missing_required_parameter");
  }
  if (!model->is_string()) return WrongType("model", "a string", *model);
  r.model = model->get<std::string>();

  if (chat) {
    if (auto e = ParseMessages(body, limits, &r.messages)) return e;
  } else {
    if (auto e = ParsePrompt(body, &r)) return e;
    bool echo = false;
    if (auto e = GetBool(body, "echo", &echo)) return e;
    if (echo) return BadField("echo", "'echo': true is not served", "unsupported_value");
  }
  int64_t v = 0;
  bool given = false;
  if (auto e = GetInt(body, "max_tokens", 1, 1 << 30, &v, &given)) return e;
  if (chat) {
    if (auto e = GetInt(body, "max_completion_tokens", 1, 1 << 30, &v, &given)) return e;
  }
  r.params.max_tokens = given ? static_cast<int32_t>(v) : 0;
  v = 1;
  if (auto e = GetInt(body, "n", 1, limits.max_n, &v)) return e;
  r.n = static_cast<int>(v);
  if (auto e = ParseStop(body, limits, &r.params.stop)) return e;
  if (auto e = GetFloat(body, "temperature", 0, 2, false, &r.params.temperature)) return e;
  if (auto e = GetFloat(body, "top_p", 0, 1, true, &r.params.top_p)) return e;
  v = 0;
  if (auto e = GetInt(body, "top_k", 0, 1 << 30, &v)) return e;
  r.params.top_k = static_cast<int32_t>(v);
  if (auto e = GetFloat(body, "min_p", 0, 1, false, &r.params.min_p)) return e;
  if (auto e = GetFloat(body, "presence_penalty", -2, 2, false, &r.params.presence_penalty)) return e;
  if (auto e = GetFloat(body, "frequency_penalty", -2, 2, false, &r.params.frequency_penalty)) {
    return e;
  }
  if (auto e = GetFloat(body, "repetition_penalty", 0, 10, true, &r.params.repetition_penalty)) {
    return e;
  }
  if (auto e = ParseLogitBias(body, &r.params.logit_bias)) return e;
  if (auto seed = body.find("seed"); seed != body.end() && !seed->is_null()) {
    if (!seed->is_number_integer()) return WrongType("seed", "an integer", *seed);
    if (!seed->is_number_unsigned() && seed->get<int64_t>() < 0) {
      return BadField("seed", "'seed' must be in [0, 2^64 - 1], got " + seed->dump());
    }
    r.seed = seed->get<uint64_t>();
  }
  if (auto e = GetBool(body, "stream", &r.stream)) return e;
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!r.stream) {
      return BadField("stream_options", "'stream_options' is only allowed with 'stream': true");
    }
    for (auto f = so->begin(); f != so->end(); ++f) {
      if (f.key() != "include_usage") {
        return BadField("stream_options." + f.key(),
                        "unsupported field 'stream_options." + f.key() + "'",
                        "unsupported_parameter");
      }
    }
    if (so->contains("include_usage") && !(*so)["include_usage"].is_null()) {
      if (!(*so)["include_usage"].is_boolean()) {
        return WrongType("stream_options.include_usage", "a boolean", (*so)["include_usage"]);
      }
      r.include_usage = (*so)["include_usage"].get<bool>();
    }
  }
  if (auto u = body.find("user"); u != body.end() && !u->is_null() && !u->is_string()) {
    return WrongType("user", "a string", *u);
  }
  if (auto s = body.find("session_id"); s != body.end() && !s->is_null()) {
    if (!s->is_string()) return WrongType("session_id", "a string", *s);
    r.session = s->get<std::string>();
    if (r.session.empty() || r.session.size() > 256) {
      return BadField("session_id", "'session_id' must hold 1 to 256 bytes");
    }
  }
  if (chat) {
    if (auto e = GetBool(body, "logprobs", &r.logprobs)) return e;
    v = 0;
    given = false;
    if (auto e = GetInt(body, "top_logprobs", 0, 20, &v, &given)) return e;
    if (given && !r.logprobs) {
      return BadField("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    r.params.top_logprobs = static_cast<int32_t>(v);
  } else {
    v = 0;
    given = false;
    if (auto e = GetInt(body, "logprobs", 0, 5, &v, &given)) return e;
    r.logprobs = given;
    r.params.top_logprobs = static_cast<int32_t>(v);
  }
  if (!r.session.empty() && r.n > 1) {
    return BadField("n", "'n' must be 1 with a session (one conversation parks one KV)");
  }
  return std::nullopt;
}

}  // namespace lockstep::server
