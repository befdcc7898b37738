// `lockstep qualify` as a user runs it (docs/qualify.md): the binary on a small SmolLM2 cell, its
// record checked against independent computations (logits dumped by `lockstep logits` and reduced
// here in double, the GGUF's tensor sizes, medians and sums of the record's own raw numbers), its
// HTML report opened in headless Chromium, and cells that must fail. Needs the cached SmolLM2 and
// Gemma 3 (make models) and chromium (ci/deps); a missing one fails, it does not skip.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/npy.h"
#include "engine/gguf/gguf.h"
#include "engine/store/model_store.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_manifest.h"
#include "tests/support/run_command.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using ::lockstep::testing::Ran;
using ::lockstep::testing::RunCommand;
using ::lockstep::testing::RunLockstep;
using nlohmann::json;

std::string Cached(const char* name) {
  const store::KnownModel* m = store::FindKnownModel(name);
  EXPECT_NE(m, nullptr) << name;
  if (m == nullptr) return name;
  EXPECT_TRUE(store::IsCached(*m)) << store::CachedPath(*m) << " is missing: run `make models`";
  return store::CachedPath(*m);
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const fs::path kArtifacts = fs::path(LOCKSTEP_BINARY_DIR) / "artifacts";

// Small settings: the whole run is well under a minute on 2 cores.
const char kSmall[] =
    " --text-tokens 96 --batches 1,3 --max-prompt 48 --gen-tokens 4 --spec-tokens 8 --reps 3"
    " --law-samples 60 --concurrency 1,2 --bench-prompt 8 --bench-gen 4 --threads 2";

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

TEST(Qualify, GoldenTextManifest) {
  const auto fail = ::lockstep::testing::CheckManifest(std::string(LOCKSTEP_SOURCE_DIR) + "/golden/text");
  EXPECT_TRUE(fail.empty()) << fail.front();
}

// One n-gram cell with q8_0/q5_1 KV; every check below reads the same run (one TEST: CTest runs
// each TEST in a process of its own, so a fixture would repeat the run for each).
struct CellRun {
  fs::path out_;
  Ran* ran_ = nullptr;
  json* record_ = nullptr;
};

void ExitCodeAndVerdictLineMatchTheRecord(const CellRun& c) {
  const fs::path& out_ = c.out_;
  const Ran* ran_ = c.ran_;
  const json* record_ = c.record_;
  (void)out_;
  (void)ran_;
  ASSERT_FALSE(record_->is_discarded()) << ran_->out;
  const bool q = (*record_)["verdict"]["qualified"].get<bool>();
  EXPECT_EQ(ran_->exit_code, q ? 0 : 1) << ran_->out;
  EXPECT_NE(ran_->out.find(q ? "\nQUALIFIED: smol-test" : "\nNOT QUALIFIED: smol-test"),
            std::string::npos) << ran_->out;
  // Progress went to stderr during the long stages.
  EXPECT_NE(ran_->out.find("quality: positions"), std::string::npos) << ran_->out;
  EXPECT_EQ((*record_)["settings"]["text_tokens"], 96);
  EXPECT_EQ((*record_)["kv"]["k"], "q8_0");
  // A healthy cell may fail on speed (a drafter slower than plain on 2 cores) or, on 95 scored
  // positions, on the perplexity ratio; each such reason must be a breach the record shows.
  // Nothing may fail in the load checks or the invariance battery.
  const json& rec = *record_;
  for (const auto& r : rec["verdict"]["reasons"]) {
    const std::string why = r;
    if (why.rfind("spec: median speedup", 0) == 0) {
      EXPECT_LT(rec["spec"]["speedup"].get<double>(), 1.0) << why;
    } else if (why.rfind("quality: perplexity", 0) == 0) {
      EXPECT_GT(rec["quality"]["ppl"].get<double>(), 1.02 * rec["quality"]["ppl_reference"].get<double>());
    } else {
      ADD_FAILURE() << "unexpected reason: " << why;
    }
  }
}

// KL, top-1 and perplexity recomputed in double from `lockstep logits` dumps of the same tokens:
// the model with the cell's KV formats, the kept F16 reference with f32 KV.
void QualityMatchesLogitsDumpedByLockstepLogits(const CellRun& c) {
  const fs::path& out_ = c.out_;
  const Ran* ran_ = c.ran_;
  const json* record_ = c.record_;
  (void)out_;
  (void)ran_;
  ASSERT_FALSE(record_->is_discarded()) << ran_->out;
  const json& q = (*record_)["quality"];
  const auto ids = q["text"]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 96u);
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const fs::path a = out_ / "a.npy", b = out_ / "b.npy";
  const Ran ra = RunLockstep("logits " + Cached("smollm2-135m") + " --tokens " + list +
                             " --kv-k q8_0 --kv-v q5_1 --threads 2 --out " + a.string());
  ASSERT_EQ(ra.exit_code, 0) << ra.out;
  const Ran rb = RunLockstep("logits " + q["reference"]["path"].get<std::string>() + " --tokens " +
                             list + " --threads 2 --out " + b.string());
  ASSERT_EQ(rb.exit_code, 0) << rb.out;
  auto A = npy::Read(a.string());
  auto B = npy::Read(b.string());
  ASSERT_TRUE(A.ok() && B.ok());
  const int64_t T = A->shape[0], V = A->shape[1];
  std::vector<double> kl;
  int64_t top1 = 0;
  double nll = 0, nll_ref = 0;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const float* x = A->data.data() + t * V;  // the cell
    const float* y = B->data.data() + t * V;  // the reference
    double mx = -INFINITY, my = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = std::max<double>(mx, x[i]), my = std::max<double>(my, y[i]);
    double sx = 0, sy = 0;
    for (int64_t i = 0; i < V; ++i) sx += std::exp(x[i] - mx), sy += std::exp(y[i] - my);
    const double lx = mx + std::log(sx), ly = my + std::log(sy);
    double k = 0;
    for (int64_t i = 0; i < V; ++i) {
      const double py = std::exp(y[i] - ly);
      if (py > 0) k += py * ((y[i] - ly) - (x[i] - lx));
    }
    kl.push_back(k);
    top1 += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
    nll += lx - x[ids[t + 1]];
    nll_ref += ly - y[ids[t + 1]];
  }
  const double n = static_cast<double>(kl.size());
  double mean = 0;
  for (double k : kl) mean += k / n;
  std::sort(kl.begin(), kl.end());
  EXPECT_EQ(q["positions"], T - 1);
  EXPECT_NEAR(q["kl_mean"].get<double>(), mean, 1e-6 * mean + 1e-9);
  EXPECT_NEAR(q["kl_max"].get<double>(), kl.back(), 1e-6 * kl.back() + 1e-9);
  const double p99 = kl[static_cast<size_t>(std::ceil(0.99 * n)) - 1];
  EXPECT_NEAR(q["kl_p99"].get<double>(), p99, 1e-6 * p99 + 1e-9);
  EXPECT_EQ(q["top1_agree"], top1);
  EXPECT_NEAR(q["ppl"].get<double>(), std::exp(nll / n), 1e-9 * std::exp(nll / n));
  EXPECT_NEAR(q["ppl_reference"].get<double>(), std::exp(nll_ref / n), 1e-9 * std::exp(nll_ref / n));
  int64_t hist = 0;
  for (const auto& c : q["kl_histogram"]["counts"]) hist += c.get<int64_t>();
  EXPECT_EQ(hist, T - 1);
  EXPECT_NE(q["reference"]["how"].get<std::string>().find("F16 copy"), std::string::npos);
}

void InvarianceLinesRanAndPipelineSplitCompared(const CellRun& c) {
  const fs::path& out_ = c.out_;
  const Ran* ran_ = c.ran_;
  const json* record_ = c.record_;
  (void)out_;
  (void)ran_;
  ASSERT_FALSE(record_->is_discarded()) << ran_->out;
  std::vector<std::string> names;
  for (const auto& l : (*record_)["invariance"]) {
    const std::string name = l["name"];
    names.push_back(name);
    if (l["kind"] == "law") {
      EXPECT_GT(l["drafted"].get<int64_t>(), 0) << l;
      EXPECT_EQ(l["samples"], 60);
    } else {
      EXPECT_GT(l["rows"].get<int64_t>(), 0) << l;
      EXPECT_EQ(l["status"], l["differing"] == 0 ? "passed" : "failed") << l;
    }
  }
  for (const char* want : {"forward: prefill batched", "forward: prefill chunked 1/7/16/33",
                           "forward: decode B=3", "forward: prefix hit vs cold",
                           "engine: prefix-cache hit == cold (greedy)",
                           "engine: 4 requests batched == alone (sampled)",
                           "spec greedy == plain greedy", "spec coupled == plain sampled",
                           "pipeline split == unsplit"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // The pipeline line ran 2- and 3-stage splits (mpirun is installed by ci/deps).
  for (const auto& l : (*record_)["invariance"]) {
    if (l["name"] == "pipeline split == unsplit") EXPECT_EQ(l["rows"], 2 * 64) << l;  // 64 text tokens, two splits
  }
}

void SpecAndThroughputAgreeWithTheirRawNumbers(const CellRun& c) {
  const fs::path& out_ = c.out_;
  const Ran* ran_ = c.ran_;
  const json* record_ = c.record_;
  (void)out_;
  (void)ran_;
  ASSERT_FALSE(record_->is_discarded()) << ran_->out;
  const json& s = (*record_)["spec"];
  int64_t proposed = 0, accepted = 0;
  for (const auto& p : s["per_position"]) {
    proposed += p["proposed"].get<int64_t>();
    accepted += p["accepted"].get<int64_t>();
  }
  EXPECT_EQ(proposed, s["drafted"]);
  EXPECT_EQ(accepted, s["accepted"]);
  EXPECT_GT(proposed, 0);
  EXPECT_EQ(s["plain_tok_s"].size(), 3u);
  const double plain = Median(s["plain_tok_s"].get<std::vector<double>>());
  const double spec = Median(s["spec_tok_s"].get<std::vector<double>>());
  EXPECT_DOUBLE_EQ(s["speedup"].get<double>(), spec / plain);
  EXPECT_EQ(s["frspec"]["verdict"], "not applicable");

  // One decoded token reads every tensor once: SmolLM2's head is tied to token_embd.
  auto f = gguf::File::Open(Cached("smollm2-135m"));
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->FindTensor("output.weight"), nullptr);
  double bytes = 0;
  for (const auto& t : f->tensors()) bytes += static_cast<double>(t.n_bytes);
  const json& tp = (*record_)["throughput"];
  EXPECT_DOUBLE_EQ(tp["weight_bytes_per_token"].get<double>(), bytes);
  EXPECT_NEAR(tp["weight_wall_tok_s"].get<double>(), tp["read_bandwidth_GBps"].get<double>() * 1e9 / bytes,
              1e-9 * tp["weight_wall_tok_s"].get<double>());
  ASSERT_EQ(tp["by_concurrency"].size(), 2u);
  for (const auto& c : tp["by_concurrency"]) {
    EXPECT_DOUBLE_EQ(c["decode_tok_s"].get<double>(),
                     Median(c["decode_tok_s_reps"].get<std::vector<double>>()));
    EXPECT_NEAR(c["fraction_of_wall"].get<double>(),
                c["decode_tok_s"].get<double>() / tp["weight_wall_tok_s"].get<double>(), 1e-12);
  }
}

// The report: self-contained (no script, no fetched resource), loads in headless Chromium without
// a console message, and its verdict element says what the record says. Screenshot kept under
// build/artifacts/.
void HtmlReportLoadsInChromiumWithTheVerdict(const CellRun& c) {
  const fs::path& out_ = c.out_;
  const Ran* ran_ = c.ran_;
  const json* record_ = c.record_;
  (void)out_;
  (void)ran_;
  ASSERT_FALSE(record_->is_discarded()) << ran_->out;
  const fs::path html = out_ / "smol-test.html";
  const std::string page = ReadAll(html);
  for (const char* banned : {"<script", "src=", "href=", "url(", "@import", "https://"}) {
    EXPECT_EQ(page.find(banned), std::string::npos) << banned;
  }
  EXPECT_EQ(std::count(page.begin(), page.end(), '<') > 0 &&
                page.find("<svg") != std::string::npos, true);
  const std::string verdict = (*record_)["verdict"]["verdict"];
  const std::string flags = " --headless --no-sandbox --disable-gpu --allow-file-access-from-files"
                            " --enable-logging=stderr --v=0 --window-size=1000,2600 ";
  const Ran dom = RunCommand("chromium" + flags + "--dump-dom file://" + html.string());
  ASSERT_EQ(dom.exit_code, 0) << dom.out;
  const std::string want = "id=\"verdict\" class=\"" +
                           std::string(verdict == "QUALIFIED" ? "qualified" : "not-qualified") +
                           "\">" + verdict + "</div>";
  EXPECT_NE(dom.out.find(want), std::string::npos) << dom.out.substr(0, 2000);
  EXPECT_EQ(dom.out.find("CONSOLE"), std::string::npos) << dom.out.substr(0, 4000);
  EXPECT_EQ(dom.out.find("Uncaught"), std::string::npos);
  const fs::path png = kArtifacts / "qualify-report.png";
  fs::remove(png);
  const Ran shot = RunCommand("chromium" + flags + "--screenshot=" + png.string() + " file://" +
                              html.string());
  ASSERT_EQ(shot.exit_code, 0) << shot.out;
  EXPECT_GT(fs::exists(png) ? fs::file_size(png) : 0, 10000u) << shot.out;
}

TEST(Qualify, SmallNgramCellWithQuantizedKv) {
  CellRun c;
  c.out_ = kArtifacts / "qualify-test";
  fs::remove_all(c.out_);
  fs::create_directories(c.out_ / "work");
  Ran ran = RunCommand("cd " + std::string(LOCKSTEP_SOURCE_DIR) + " && " +
                       std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep qualify --model " +
                       Cached("smollm2-135m") + " --ngram --kv-k q8_0 --kv-v q5_1 --cell smol-test" +
                       " --out " + c.out_.string() + " --work " + (c.out_ / "work").string() + kSmall);
  json record = json::parse(ReadAll(c.out_ / "smol-test.json"), nullptr, false);
  c.ran_ = &ran;
  c.record_ = &record;
  {
    SCOPED_TRACE("ExitCodeAndVerdictLineMatchTheRecord");
    ExitCodeAndVerdictLineMatchTheRecord(c);
  }
  {
    SCOPED_TRACE("QualityMatchesLogitsDumpedByLockstepLogits");
    QualityMatchesLogitsDumpedByLockstepLogits(c);
  }
  {
    SCOPED_TRACE("InvarianceLinesRanAndPipelineSplitCompared");
    InvarianceLinesRanAndPipelineSplitCompared(c);
  }
  {
    SCOPED_TRACE("SpecAndThroughputAgreeWithTheirRawNumbers");
    SpecAndThroughputAgreeWithTheirRawNumbers(c);
  }
  {
    SCOPED_TRACE("HtmlReportLoadsInChromiumWithTheVerdict");
    HtmlReportLoadsInChromiumWithTheVerdict(c);
  }
}

// A reference that is another model is refused at the load stage: NOT QUALIFIED, exit 1, the
// reason names the check.
TEST(Qualify, DifferentModelAsReferenceIsNotQualified) {
  const fs::path out = kArtifacts / "qualify-test-wrong-ref";
  fs::remove_all(out);
  const Ran r = RunCommand("cd " + std::string(LOCKSTEP_SOURCE_DIR) + " && " +
                           std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep qualify --model " +
                           Cached("smollm2-135m") + " --reference " + Cached("gemma3-270m") +
                           " --cell wrong-ref --out " + out.string() + kSmall);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("NOT QUALIFIED: wrong-ref"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reason: load: reference is the same model"), std::string::npos) << r.out;
  const json j = json::parse(ReadAll(out / "wrong-ref.json"), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_FALSE(j["verdict"]["qualified"].get<bool>());
  EXPECT_NE(ReadAll(out / "wrong-ref.html").find("NOT QUALIFIED</div>"), std::string::npos);
}

// q4_0 K and V move whole decisions (docs/runtime.md): the quality stage must say so.
TEST(Qualify, Q4_0KvCellIsNotQualifiedOnQuality) {
  const fs::path out = kArtifacts / "qualify-test-q4kv";
  fs::remove_all(out);
  const Ran r = RunCommand("cd " + std::string(LOCKSTEP_SOURCE_DIR) + " && " +
                           std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep qualify --model " +
                           Cached("smollm2-135m") + " --kv-k q4_0 --kv-v q4_0 --cell q4kv --out " +
                           out.string() + kSmall);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("NOT QUALIFIED: q4kv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reason: quality: mean KL"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lockstep
