#include "engine/cli/qualify_report.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace lockstep::cli::qualify {
namespace {

using nlohmann::json;

std::string Esc(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// A JSON value as text: numbers with 4 significant digits, strings escaped.
std::string Val(const json& v) {
  if (v.is_number_float()) return absl::StrFormat("%.4g", v.get<double>());
  if (v.is_string()) return Esc(v.get<std::string>());
  if (v.is_null()) return "&mdash;";
  return Esc(v.dump());
}

std::string Get(const json& j, const char* key) {
  return j.is_object() && j.contains(key) ? Val(j[key]) : "&mdash;";
}

struct Bar {
  std::string label;
  double value = 0;
  std::string note;  // tooltip
};

// A vertical bar chart, values in [0, ymax], as inline SVG.
std::string BarChart(const std::string& title, const std::vector<Bar>& bars, double ymax,
                     const std::string& ylabel) {
  const int W = 640, H = 260, L = 56, R = 16, T = 28, B = 56;
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\" "
      "aria-label=\"%s\"><text x=\"%d\" y=\"18\" class=\"t\">%s</text>",
      W, H, Esc(title), L, Esc(title));
  if (ymax <= 0) ymax = 1;
  for (int i = 0; i <= 4; ++i) {
    const double y = T + (H - T - B) * (1.0 - i / 4.0);
    absl::StrAppendFormat(&s, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"g\"/>"
                              "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%.3g</text>",
                          L, y, W - R, y, L - 6, y + 4, ymax * i / 4.0);
  }
  absl::StrAppendFormat(&s, "<text x=\"14\" y=\"%d\" class=\"yl\" transform=\"rotate(-90 14 %d)\">%s</text>",
                        (H - B + T) / 2, (H - B + T) / 2, Esc(ylabel));
  const double slot = bars.empty() ? 1.0 : static_cast<double>(W - L - R) / bars.size();
  for (size_t i = 0; i < bars.size(); ++i) {
    const double h = (H - T - B) * std::clamp(bars[i].value / ymax, 0.0, 1.0);
    const double x = L + i * slot + slot * 0.15;
    absl::StrAppendFormat(&s, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"b\">"
                              "<title>%s</title></rect>",
                          x, H - B - h, slot * 0.7, h, Esc(bars[i].note));
    absl::StrAppendFormat(&s, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">%s</text>", x + slot * 0.35,
                          H - B + 16, Esc(bars[i].label));
  }
  return s + "</svg>";
}

// Points joined by a line: x categorical (concurrency), y tok/s.
std::string LineChart(const std::string& title, const std::vector<std::pair<std::string, double>>& pts,
                      const std::string& ylabel, double hline, const std::string& hlabel) {
  const int W = 640, H = 260, L = 56, R = 16, T = 28, B = 48;
  double ymax = hline;
  for (const auto& p : pts) ymax = std::max(ymax, p.second);
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\" "
      "aria-label=\"%s\"><text x=\"%d\" y=\"18\" class=\"t\">%s</text>",
      W, H, Esc(title), L, Esc(title));
  for (int i = 0; i <= 4; ++i) {
    const double y = T + (H - T - B) * (1.0 - i / 4.0);
    absl::StrAppendFormat(&s, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"g\"/>"
                              "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%.3g</text>",
                          L, y, W - R, y, L - 6, y + 4, ymax * i / 4.0);
  }
  absl::StrAppendFormat(&s, "<text x=\"14\" y=\"%d\" class=\"yl\" transform=\"rotate(-90 14 %d)\">%s</text>",
                        (H - B + T) / 2, (H - B + T) / 2, Esc(ylabel));
  auto ypix = [&](double v) { return T + (H - T - B) * (1.0 - v / ymax); };
  if (hline > 0) {
    absl::StrAppendFormat(&s, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"w\"/>"
                              "<text x=\"%d\" y=\"%.1f\" class=\"wl\">%s</text>",
                          L, ypix(hline), W - R, ypix(hline), L + 4, ypix(hline) - 4, Esc(hlabel));
  }
  const double slot = pts.empty() ? 1.0 : static_cast<double>(W - L - R) / pts.size();
  std::string path;
  for (size_t i = 0; i < pts.size(); ++i) {
    const double x = L + slot * (i + 0.5), y = ypix(pts[i].second);
    absl::StrAppendFormat(&path, "%s%.1f,%.1f", i ? " L" : "M", x, y);
    absl::StrAppendFormat(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" class=\"p\"><title>%.4g tok/s"
                              "</title></circle><text x=\"%.1f\" y=\"%d\" class=\"xl\">c=%s</text>",
                          x, y, pts[i].second, x, H - B + 16, Esc(pts[i].first));
  }
  if (!path.empty()) s += "<path d=\"" + path + "\" class=\"l\"/>";
  return s + "</svg>";
}

std::string Row(const std::vector<std::string>& cells, bool head = false) {
  std::string s = "<tr>";
  for (const auto& c : cells) s += (head ? "<th>" : "<td>") + c + (head ? "</th>" : "</td>");
  return s + "</tr>\n";
}

}  // namespace

std::string RenderHtml(const json& r) {
  const json& verdict = r.value("verdict", json::object());
  const bool ok = verdict.value("qualified", false);
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>lockstep qualify: " +
       Esc(r.value("cell", std::string("?"))) + "</title>\n<style>\n"
       "body{font:14px/1.45 system-ui,sans-serif;margin:24px;max-width:980px;color:#222}\n"
       "table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:left;vertical-align:top}th{background:#f3f3f3}\n"
       ".pass{color:#17702d;font-weight:600}.fail{color:#b00020;font-weight:600}.na{color:#8a6d00}\n"
       "svg{border:1px solid #ddd;margin:6px 0;background:#fff}.t{font-weight:600;font-size:13px}\n"
       ".g{stroke:#eee}.yl{font-size:11px;text-anchor:end}.xl{font-size:11px;text-anchor:middle}\n"
       ".b{fill:#4a78b5}.p{fill:#c0392b}.l{fill:none;stroke:#c0392b;stroke-width:2}\n"
       ".w{stroke:#888;stroke-dasharray:4 3}.wl{font-size:11px;fill:#555}\n"
       "#verdict{font-size:22px;font-weight:700;padding:12px;margin-top:20px;border:2px solid}\n"
       "#verdict.qualified{color:#17702d;border-color:#17702d}#verdict.not-qualified{color:#b00020;"
       "border-color:#b00020}\n</style></head><body>\n";
  h += "<h1>Qualification of " + Esc(r.value("cell", std::string("?"))) + "</h1>\n";
  const json& m = r.value("model", json::object());
  const json& d = r.value("drafter", json::object());
  const json& kv = r.value("kv", json::object());
  h += "<table>" + Row({"model", Get(m, "file") + " (" + Get(m, "arch") + ", " + Get(m, "quant") + ", " +
                                 Get(m, "bytes") + " bytes)"}) +
       Row({"KV formats", "K " + Get(kv, "k") + ", V " + Get(kv, "v")}) +
       Row({"drafter", Get(d, "kind") + (d.contains("file") ? " " + Get(d, "file") : "")}) +
       Row({"backend", Get(r.value("machine", json::object()), "backend")}) +
       Row({"date / commit", Get(r, "date") + " / " + Get(r, "commit")}) +
       Row({"command", "<code>" + Get(r, "command") + "</code>"}) + "</table>\n";

  h += "<h2>Load and format checks</h2><table>" + Row({"check", "result", "detail"}, true);
  for (const auto& c : r.value("load", json::object()).value("checks", json::array())) {
    const bool pass = c.value("ok", false);
    h += Row({Get(c, "name"), pass ? "<span class=\"pass\">ok</span>" : "<span class=\"fail\">FAILED</span>",
              Get(c, "detail")});
  }
  h += "</table>\n";

  const json& q = r.value("quality", json::object());
  const json& ref = q.value("reference", json::object());
  const json& text = q.value("text", json::object());
  h += "<h2>Quality against the reference</h2><p>Reference: " + Get(ref, "file") + " (" +
       Get(ref, "how") + "). Text: " + Get(text, "path") + ", first " + Get(q, "positions") +
       " predicted positions.</p><table>" +
       Row({"KL mean (nats)", "KL p50", "KL p99", "KL max", "top-1", "perplexity", "reference perplexity"}, true) +
       Row({Get(q, "kl_mean"), Get(q, "kl_p50"), Get(q, "kl_p99"), Get(q, "kl_max"), Get(q, "top1"),
            Get(q, "ppl"), Get(q, "ppl_reference")}) + "</table>\n";
  if (q.contains("kl_histogram")) {
    const auto edges = q["kl_histogram"]["edges"].get<std::vector<double>>();
    const auto counts = q["kl_histogram"]["counts"].get<std::vector<int64_t>>();
    std::vector<Bar> bars;
    double ymax = 0;
    for (size_t i = 0; i < counts.size() && i < edges.size(); ++i) {
      const std::string lo = i == 0 ? "0" : absl::StrFormat("%.0e", edges[i]);
      // Labels at whole decades only (half-decade bins would overlap).
      const double decade = std::log10(std::max(edges[i], 1e-300));
      const std::string label = i == 0 ? "0"
                                : std::abs(decade - std::round(decade)) < 1e-9
                                    ? absl::StrFormat("1e%d", static_cast<int>(std::round(decade)))
                                    : "";
      const std::string hi = i + 1 < edges.size() ? absl::StrFormat("%.0e", edges[i + 1]) : "inf";
      bars.push_back({label, static_cast<double>(counts[i]),
                      absl::StrFormat("[%s, %s): %d positions", lo, hi, counts[i])});
      ymax = std::max<double>(ymax, counts[i]);
    }
    h += BarChart("KL(reference || cell) per position: histogram (bin lower edges, nats)", bars, ymax,
                  "positions");
  }

  h += "<h2>Invariance battery</h2><table>" + Row({"line", "result", "compared", "detail"}, true);
  for (const auto& l : r.value("invariance", json::array())) {
    std::string st = l.value("status", std::string());
    if (l.value("kind", std::string()) == "law" && st == "measured") {
      // The policy's reading (qualify_policy.cc): p >= the bound, with draft tokens verified.
      const double bound = r.value("thresholds", json::object()).value("min_law_p_value", 1.0);
      st = l.value("p_value", 0.0) >= bound && l.value("drafted", int64_t{0}) > 0 ? "passed" : "failed";
    }
    const std::string cls = st == "passed" ? "pass" : st == "failed" ? "fail" : "na";
    const std::string compared = l.value("kind", std::string()) == "law"
                                     ? Get(l, "samples") + " samples"
                                     : (l.contains("rows") ? Get(l, "rows") + " rows, " +
                                                                 Get(l, "differing") + " differing"
                                                           : "&mdash;");
    h += Row({Get(l, "name"), "<span class=\"" + cls + "\">" + Esc(st) + "</span>", compared,
              Get(l, "detail")});
  }
  h += "</table>\n";

  const json& sp = r.value("spec", json::object());
  h += "<h2>Speculative decoding</h2>";
  if (sp.value("status", std::string()) == "not applicable") {
    h += "<p class=\"na\">Not applicable: " + Get(sp, "detail") + ".</p>\n";
  } else {
    h += "<table>" + Row({"K", "prompts x tokens", "reps", "plain tok/s (median)", "spec tok/s (median)",
                          "speedup", "acceptance", "tokens per target forward", "FR-Spec"}, true) +
         Row({Get(sp, "k"), Get(sp, "prompts") + " x " + Get(sp, "tokens_per_prompt"), Get(sp, "reps"),
              Get(sp, "plain_median_tok_s"), Get(sp, "spec_median_tok_s"), Get(sp, "speedup"),
              Get(sp, "acceptance"), Get(sp, "mean_accepted_length"),
              Get(sp.value("frspec", json::object()), "verdict") + ": " +
                  Get(sp.value("frspec", json::object()), "detail")}) + "</table>\n";
    std::vector<Bar> bars;
    for (const auto& p : sp.value("per_position", json::array())) {
      bars.push_back({std::to_string(p.value("position", 0)), p.value("rate", 0.0),
                      absl::StrFormat("position %d: %d of %d accepted", p.value("position", 0),
                                      p.value("accepted", int64_t{0}), p.value("proposed", int64_t{0}))});
    }
    h += BarChart("Acceptance rate per draft position", bars, 1.0, "accepted / proposed");
  }

  const json& tp = r.value("throughput", json::object());
  h += "<h2>Throughput</h2><p>Read bandwidth " + Get(tp, "read_bandwidth_GBps") + " GB/s (same run); " +
       Get(tp, "weight_bytes_per_token") + " weight bytes per decoded token; weight wall " +
       Get(tp, "weight_wall_tok_s") + " tok/s for one sequence. " + Get(tp, "prompt_tokens") +
       "-token prompts, " + Get(tp, "gen_tokens") + " tokens each, median of " + Get(tp, "reps") +
       " interleaved reps; " + Get(tp, "backend") + ", " + Get(tp, "threads") + " threads.</p><table>" +
       Row({"concurrency", "decode tok/s (aggregate)", "fraction of the weight wall", "prefill tok/s"}, true);
  std::vector<std::pair<std::string, double>> pts;
  for (const auto& c : tp.value("by_concurrency", json::array())) {
    h += Row({Get(c, "concurrency"), Get(c, "decode_tok_s"), Get(c, "fraction_of_wall"),
              Get(c, "prefill_tok_s")});
    pts.push_back({std::to_string(c.value("concurrency", 0)), c.value("decode_tok_s", 0.0)});
  }
  h += "</table>\n" + LineChart("Aggregate decode tok/s vs concurrency", pts, "tok/s",
                                tp.value("weight_wall_tok_s", 0.0), "one-sequence weight wall");

  h += "<h2>Thresholds</h2><table>" + Row({"bound", "value"}, true);
  const json thresholds = r.value("thresholds", json::object());
  for (const auto& [k, v] : thresholds.items()) h += Row({Esc(k), Val(v)});
  h += "</table>\n<h2>Settings</h2><table>" + Row({"setting", "value"}, true);
  const json settings = r.value("settings", json::object());
  for (const auto& [k, v] : settings.items()) h += Row({Esc(k), Val(v)});
  h += "</table>\n";
  const auto not_covered = verdict.value("not_covered", json::array());
  if (!not_covered.empty()) {
    h += "<h2>Not covered by this verdict</h2><ul>";
    for (const auto& n : not_covered) h += "<li class=\"na\">" + Val(n) + "</li>";
    h += "</ul>\n";
  }
  h += std::string("<div id=\"verdict\" class=\"") + (ok ? "qualified" : "not-qualified") + "\">" +
       (ok ? "QUALIFIED" : "NOT QUALIFIED") + "</div>\n";
  const auto reasons = verdict.value("reasons", json::array());
  if (!reasons.empty()) {
    h += "<ul id=\"reasons\">";
    for (const auto& x : reasons) h += "<li class=\"fail\">" + Val(x) + "</li>";
    h += "</ul>\n";
  }
  return h + "</body></html>\n";
}

}  // namespace lockstep::cli::qualify
