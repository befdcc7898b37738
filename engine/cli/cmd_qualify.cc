// `lockstep qualify --model M [--reference R] [--draft D | --ngram] [--kv-k T --kv-v T]
// [--backend B] [--out DIR]`: the whole gate for one (model, quant, drafter, KV, backend) cell
// (docs/qualify.md). The stages measure (qualify_stages.h), the policy decides
// (qualify_policy.h), the report renders (qualify_report.h); this file wires flags to them,
// shows progress on stderr and writes DIR/<cell>.json and DIR/<cell>.html.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/cli/commands.h"
#include "engine/cli/qualify_policy.h"
#include "engine/cli/qualify_report.h"
#include "engine/cli/qualify_stages.h"
#include "engine/core/npy.h"
#include "engine/models/requantize.h"
#include "engine/quant/quant.h"
#include "engine/store/model_store.h"

namespace lockstep::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, reference, draft, draft_untrimmed, backend = "cpu", out = "qualify", cell;
  std::string kv_k = "f32", kv_v = "f32", text = "golden/text/kjv-genesis-1-2.txt", work;
  std::string from_record;
  bool ngram = false;
  int threads = 0;
  uint64_t seed = 1;
  int64_t text_tokens = 512, chunk = 64, max_prompt = 64, gen_tokens = 16, spec_tokens = 32;
  int64_t law_samples = 200, bench_prompt = 32, bench_gen = 16;
  int spec_k = 4, reps = 3;
  std::vector<int64_t> batches = {1, 3, 8};
  std::vector<int> concurrency = {1, 2, 4};
};

// The prompts of the battery and the speculative stage (plain text, the model's BOS rule).
const char* const kPrompts[] = {"The capital of France is", "Once upon a time, in a small village,",
                                "def fibonacci(n):\n", "The three primary colors are"};

void Progress(const std::string& what, int64_t done, int64_t total) {
  const bool tty = isatty(STDERR_FILENO);
  const int width = 30, filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "%s%-44s %lld/%lld [%-*s]%s", tty ? "\r" : "", what.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), width,
               std::string(filled, '#').c_str(), tty ? "\033[K" : "\n");
  if (tty && done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

std::string Stem(const std::string& path) {
  std::string s = std::filesystem::path(path).filename().string();
  if (s.size() > 5 && s.substr(s.size() - 5) == ".gguf") s.resize(s.size() - 5);
  std::string out;
  for (char c : s) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (std::isalnum(static_cast<unsigned char>(l)) || l == '.' || l == '_') ? l : '-';
  }
  return out;
}

// stdout of a shell command, trailing newline dropped ("" when it fails).
std::string Shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[256];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return "";
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string Commit() {
  const std::string head = Shell("git rev-parse --short=12 HEAD");
  if (head.empty()) return "unknown (not run inside a git checkout)";
  const bool dirty = !Shell("git status --porcelain --untracked-files=no").empty();
  return head + (dirty ? "+uncommitted-changes" : "");
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The weight types of a file by bytes. The cell's quant label is general.file_type's name
// (llama.cpp's llama_ftype: "Q4_K_M" keeps some tensors in other types), else the type holding
// the most bytes, said so.
json WeightTypes(const gguf::File& f, std::string* label) {
  std::map<std::string, uint64_t> bytes;
  for (const gguf::TensorInfo& t : f.tensors()) bytes[quant::Traits(t.type).name] += t.n_bytes;
  static const std::map<int64_t, const char*> kFileTypes = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},    {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},   {25, "IQ4_NL"}, {30, "IQ4_XS"}, {32, "BF16"},   {38, "MXFP4_MOE"}};
  if (const gguf::Value* ft = f.Find("general.file_type"); ft != nullptr && ft->IsInteger()) {
    const auto it = kFileTypes.find(ft->AsInt());
    *label = it != kFileTypes.end() ? it->second
                                    : absl::StrFormat("general.file_type %d", ft->AsInt());
    return bytes;
  }
  uint64_t best = 0;
  for (const auto& [name, b] : bytes) {
    if (b > best) best = b, *label = name + " (most bytes; no general.file_type)";
  }
  return bytes;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !out.write(text.data(), static_cast<std::streamsize>(text.size()))) {
    throw CliError(2, "--out: cannot write " + path);
  }
}

std::string ReadText(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CliError(2, what + ": cannot read " + path +
                          (what == "--text" ? " (run from the repository root, or pass --text FILE)" : ""));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Pipeline split == unsplit (docs/pipeline.md): `lockstep logits` over `ids` unsplit, then as
// MPI ranks split into 2 stages (balanced) and 3 stages (at n_layer/3, 2n_layer/3); every logits
// row must have the same bytes. Without mpirun the line is "not available", never passed.
json PipelineSplitLine(const std::string& model, const std::vector<int32_t>& ids, const Args& a,
                       int64_t n_layer, const std::filesystem::path& dir) {
  json line = {{"name", "pipeline split == unsplit"}, {"kind", "bitwise"}};
  if (Shell("command -v mpirun").empty()) {
    line["status"] = "not available";
    line["detail"] = "mpirun not found (stages are MPI ranks: docs/pipeline.md)";
    return line;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const std::string common = " logits '" + model + "' --tokens " + list + " --kv-k " + a.kv_k +
                             " --kv-v " + a.kv_v + " --backend " + a.backend + " --threads 1";
  const std::string mpi = "mpirun --allow-run-as-root --oversubscribe -np ";
  struct Run {
    std::string label, cmd, out;
  };
  const int64_t third = std::max<int64_t>(1, n_layer / 3);
  const std::vector<Run> runs = {
      {"unsplit", "'" + self + "'" + common, (dir / "unsplit.npy").string()},
      {"2 stages (balanced)", mpi + "2 '" + self + "'" + common + " --pp-stages 2",
       (dir / "split2.npy").string()},
      {absl::StrFormat("3 stages at %d,%d", third, 2 * third),
       mpi + "3 '" + self + "'" + common +
           absl::StrFormat(" --pp-stages 3 --pp-split %d,%d", third, 2 * third),
       (dir / "split3.npy").string()}};
  std::vector<npy::Array> got;
  for (const Run& r : runs) {
    Progress("invariance: pipeline " + r.label, static_cast<int64_t>(got.size()), 3);
    if (std::system((r.cmd + " --out '" + r.out + "' >/dev/null 2>&1").c_str()) != 0) {
      line["status"] = "failed";
      line["rows"] = 0;
      line["differing"] = 0;
      line["detail"] = "the " + r.label + " run failed: " + r.cmd;
      return line;
    }
    auto arr = npy::Read(r.out);
    ThrowIfError(arr.status());
    got.push_back(std::move(*arr));
  }
  Progress("invariance: pipeline", 3, 3);
  int64_t rows = 0, differing = 0;
  const npy::Array& ref = got[0];
  const int64_t V = ref.shape.size() == 2 ? ref.shape[1] : 0;
  for (size_t s = 1; s < got.size(); ++s) {
    if (got[s].shape != ref.shape) {
      ++differing;
      continue;
    }
    for (int64_t t = 0; t < ref.shape[0]; ++t, ++rows) {
      differing += std::memcmp(got[s].data.data() + t * V, ref.data.data() + t * V,
                               static_cast<size_t>(V) * sizeof(float)) != 0;
    }
  }
  line["rows"] = rows;
  line["differing"] = differing;
  line["status"] = rows > 0 && differing == 0 ? "passed" : "failed";
  line["detail"] = absl::StrFormat("%d text tokens through `lockstep logits`: unsplit vs %s and %s "
                                   "(MPI ranks); logits rows compared byte for byte",
                                   ids.size(), runs[1].label, runs[2].label);
  return line;
}

void Check(json& checks, const std::string& name, const absl::Status& s, const std::string& ok) {
  checks.push_back({{"name", name}, {"ok", s.ok()},
                    {"detail", s.ok() ? ok : std::string(s.message())}});
}

// --from-record: re-decide a record with this build's policy and re-render its report beside
// it; nothing is measured. The record keeps its measurements, date and commit.
void Redecide(const std::string& path) {
  const json record = json::parse(ReadText(path, "--from-record"), nullptr, false);
  if (record.is_discarded() || !record.is_object()) {
    throw CliError(2, "--from-record: " + path + " is not a JSON object");
  }
  json r = record;
  const qualify::Thresholds thresholds;
  r["thresholds"] = qualify::Describe(thresholds);
  const qualify::Verdict v = qualify::Decide(r, thresholds);
  r["verdict"] = qualify::ToJson(v);
  std::string base = path;
  if (base.size() > 5 && base.substr(base.size() - 5) == ".json") base.resize(base.size() - 5);
  WriteFile(path, r.dump(1) + "\n");
  WriteFile(base + ".html", qualify::RenderHtml(r));
  for (const auto& x : v.reasons) std::printf("reason: %s\n", x.c_str());
  std::printf("%s: %s\n", v.qualified ? "QUALIFIED" : "NOT QUALIFIED",
              r.value("cell", std::string("?")).c_str());
  if (!v.qualified) throw CliError(1, "cell is NOT QUALIFIED: " + absl::StrJoin(v.reasons, "; "));
}

void RunQualify(const Args& a, const std::string& command) {
  if (!a.from_record.empty()) {
    if (!a.model.empty()) throw CliError(2, "--from-record re-decides a record; it takes no --model");
    Redecide(a.from_record);
    return;
  }
  if (a.model.empty()) throw CliError(2, "qualify needs --model (or --from-record RECORD.json)");
  if (a.ngram && !a.draft.empty()) throw CliError(2, "--draft and --ngram exclude each other");
  if (!a.draft_untrimmed.empty() && a.draft.empty()) {
    throw CliError(2, "--draft-untrimmed needs --draft (the trimmed draft)");
  }
  auto kf = quant::ParseKvFormat(a.kv_k);
  if (!kf.ok()) throw CliError(2, "--kv-k: " + std::string(kf.status().message()));
  auto vf = quant::ParseKvFormat(a.kv_v);
  if (!vf.ok()) throw CliError(2, "--kv-v: " + std::string(vf.status().message()));
  const std::string text = ReadText(a.text, "--text");
  const int threads = a.threads > 0 ? a.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto path = store::ResolveModel(a.model);
  ThrowIfError(path.status());
  const std::string drafter_kind = a.ngram ? "ngram" : a.draft.empty() ? "plain" : "draft";
  const std::string cell =
      !a.cell.empty() ? a.cell
                      : absl::StrFormat("%s-kv-%s-%s-%s-%s", Stem(*path), a.kv_k, a.kv_v,
                                        drafter_kind == "draft" ? "draft-" + Stem(a.draft) : drafter_kind,
                                        a.backend);
  const auto t_all = Clock::now();
  json timings = json::object();
  auto stage = [&](const char* name, Clock::time_point t0) {
    timings[name] = std::chrono::duration<double>(Clock::now() - t0).count();
    std::fprintf(stderr, "qualify: %s done in %.1f s\n", name, timings[name].get<double>());
  };
  json record = {{"schema", 1}, {"cell", cell}, {"date", UtcNow()}, {"commit", Commit()},
                 {"command", command}, {"kv", {{"k", a.kv_k}, {"v", a.kv_v}}}};
  record["settings"] = {{"text_tokens", a.text_tokens}, {"chunk", a.chunk},
                        {"battery_batches", a.batches}, {"battery_max_prompt", a.max_prompt},
                        {"battery_gen_tokens", a.gen_tokens}, {"spec_k", a.spec_k},
                        {"spec_tokens_per_prompt", a.spec_tokens}, {"reps", a.reps},
                        {"law_samples", a.law_samples}, {"bench_prompt_tokens", a.bench_prompt},
                        {"bench_gen_tokens", a.bench_gen}, {"concurrency", a.concurrency},
                        {"threads", threads}, {"seed", a.seed}, {"prompts", std::size(kPrompts)}};
  const qualify::Thresholds thresholds;
  record["thresholds"] = qualify::Describe(thresholds);

  // Stage 1: load and format checks. A failure here ends the run with a NOT QUALIFIED record.
  auto t0 = Clock::now();
  json checks = json::array();
  auto be = backend::MakeBackend(a.backend, {threads});
  ThrowIfError(be.status());
  // The load average at the start: timings on a shared machine are read against it.
  const std::string loadavg = ReadText("/proc/loadavg", "/proc/loadavg");
  record["machine"] = {{"backend", (*be)->Describe()}, {"threads", threads},
                       {"hardware_threads", std::thread::hardware_concurrency()},
                       {"loadavg_at_start", loadavg.substr(0, loadavg.find(' '))}};
  auto model = models::Model::Load(*path);
  Check(checks, "model loads (every tensor bound, shapes and types checked)", model.status(),
        *path);
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<models::Model> ref_model;
  std::unique_ptr<spec::Drafter> drafter, untrimmed;
  std::string ref_how;
  std::filesystem::path work;
  if (model.ok()) {
    const models::Config& c = (*model)->config();
    std::string quant_label;
    record["model"] = {{"path", *path}, {"file", std::filesystem::path(*path).filename().string()},
                       {"bytes", (*model)->file().file_size()}, {"arch", c.arch},
                       {"n_vocab", c.n_vocab}, {"n_layer", c.n_layer}, {"n_embd", c.n_embd},
                       {"weight_bytes_by_type", WeightTypes((*model)->file(), &quant_label)}};
    record["model"]["quant"] = quant_label;
    auto t = tokenizer::Tokenizer::FromGguf((*model)->file());
    Check(checks, "tokenizer loads", t.status(), "");
    if (t.ok()) tok = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
    Check(checks, "KV formats fit the model", models::CheckKvFormats(c, *kf, *vf),
          "K " + a.kv_k + ", V " + a.kv_v);
    // The reference: a given file, else an F16 copy of the model's own weights.
    std::string ref_path = a.reference;
    if (ref_path.empty()) {
      work = a.work.empty() ? std::filesystem::temp_directory_path() /
                                  absl::StrFormat("lockstep-qualify-%d", static_cast<int>(getpid()))
                            : std::filesystem::path(a.work);
      std::filesystem::create_directories(work);
      ref_path = (work / (Stem(*path) + ".f16.gguf")).string();
      std::fprintf(stderr, "qualify: making the reference %s (lockstep quantize --type F16)\n",
                   ref_path.c_str());
      models::RequantizeOptions ro;
      ro.type = quant::Type::F16;
      ro.threads = threads;
      auto made = models::RequantizeFile(*path, ref_path, ro);
      Check(checks, "reference made (F16 copy of the model)", made.status(), ref_path);
      ref_how = "F16 copy of the model file made by lockstep quantize; no higher-precision "
                "original is available here, so the KL measures the cell's arithmetic "
                "(quantized activations, KV format) against the decoded weights, not the file's "
                "quantization loss";
      if (!made.ok()) ref_path.clear();
    } else {
      auto rp = store::ResolveModel(a.reference);
      ThrowIfError(rp.status());
      ref_path = *rp;
      ref_how = "given by --reference";
    }
    if (!ref_path.empty()) {
      auto r = models::Model::Load(ref_path);
      Check(checks, "reference loads", r.status(), ref_path);
      if (r.ok()) {
        const models::Config& rc = (*r)->config();
        absl::Status same = spec::CheckVocabIdentity(**model, **r);
        if (same.ok() && (rc.arch != c.arch || rc.n_layer != c.n_layer || rc.n_embd != c.n_embd)) {
          same = absl::InvalidArgumentError(absl::StrFormat(
              "the reference is %s with %d layers of width %d, the model %s with %d of width %d",
              rc.arch, rc.n_layer, rc.n_embd, c.arch, c.n_layer, c.n_embd));
        }
        Check(checks, "reference is the same model (vocabulary, architecture, shape)", same, "");
        if (same.ok()) ref_model = std::move(*r);
      }
      record["quality"]["reference"] = {{"path", ref_path}, {"how", ref_how},
                                        {"file", std::filesystem::path(ref_path).filename().string()}};
    }
    if (drafter_kind != "plain") {
      auto d = spec::MakeDrafter(**model, **be, a.ngram ? "ngram" : a.draft);
      Check(checks, "drafter fits the target", d.status(), a.ngram ? "n-gram" : a.draft);
      if (d.ok()) drafter = std::move(*d);
      record["drafter"] = {{"kind", drafter_kind}};
      if (!a.ngram) {
        record["drafter"]["file"] = std::filesystem::path(a.draft).filename().string();
        auto df = gguf::File::Open(a.draft);
        const bool trimmed = df.ok() && df->Find("lockstep.trim.ids") != nullptr;
        record["drafter"]["trimmed"] = trimmed;
        if (trimmed && a.draft_untrimmed.empty()) {
          throw CliError(2, "--draft " + a.draft + " is trimmed (lockstep.trim.ids): give "
                            "--draft-untrimmed FILE so the FR-Spec verdict can be measured");
        }
        if (!a.draft_untrimmed.empty()) {
          auto u = spec::MakeDrafter(**model, **be, a.draft_untrimmed);
          Check(checks, "untrimmed draft fits the target", u.status(), a.draft_untrimmed);
          if (u.ok()) untrimmed = std::move(*u);
        }
      }
    } else {
      record["drafter"] = {{"kind", "plain"}};
    }
  }
  record["load"] = {{"checks", checks}};
  stage("load", t0);
  bool loaded = true;
  for (const auto& c : checks) loaded = loaded && c["ok"].get<bool>();

  if (loaded) {
    qualify::Cell c;
    c.model = model->get();
    c.tok = tok.get();
    c.be = be->get();
    c.k = *kf;
    c.v = *vf;
    c.drafter = drafter.get();
    c.untrimmed_drafter = untrimmed.get();
    c.threads = threads;
    c.seed = a.seed;
    c.progress = Progress;
    const std::vector<int32_t> all_ids = tok->Encode(text, tok->add_bos_default(), false);
    std::vector<int32_t> ids = all_ids;
    if (static_cast<int64_t>(ids.size()) > a.text_tokens) ids.resize(a.text_tokens);
    t0 = Clock::now();
    auto q = qualify::MeasureQuality(c, *ref_model, ids, a.chunk);
    ThrowIfError(q.status());
    json ref = record["quality"]["reference"];
    record["quality"] = *q;
    record["quality"]["reference"] = ref;
    record["quality"]["text"] = {{"path", a.text}, {"tokens", ids.size()},
                                 {"provenance", "golden/text/README.md"}, {"token_ids", ids}};
    stage("quality", t0);
    ref_model.reset();

    std::vector<std::vector<int32_t>> prompts;
    for (const char* p : kPrompts) prompts.push_back(tok->Encode(p, tok->add_bos_default(), false));
    t0 = Clock::now();
    // Long prompts for the prefix-cache line: 3 windows of 48 tokens of the text (3 KV blocks).
    std::vector<std::vector<int32_t>> long_prompts;
    for (size_t at = 0; at + 48 <= all_ids.size() && long_prompts.size() < 3; at += 48) {
      long_prompts.emplace_back(all_ids.begin() + static_cast<std::ptrdiff_t>(at),
                                all_ids.begin() + static_cast<std::ptrdiff_t>(at + 48));
    }
    auto inv = qualify::RunInvariance(c, prompts, long_prompts, a.batches, a.max_prompt,
                                      a.gen_tokens);
    ThrowIfError(inv.status());
    json invariance = *inv;
    {
      const std::vector<int32_t> pp_ids(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 64));
      std::filesystem::path dir = work.empty() ? std::filesystem::temp_directory_path() /
                                                     absl::StrFormat("lockstep-qualify-pp-%d",
                                                                     static_cast<int>(getpid()))
                                               : work;
      std::filesystem::create_directories(dir);
      invariance.push_back(PipelineSplitLine(*path, pp_ids, a, model->get()->config().n_layer, dir));
      if (work.empty()) std::filesystem::remove_all(dir);
    }
    stage("invariance", t0);
    t0 = Clock::now();
    qualify::SpecSettings ss;
    ss.k = a.spec_k;
    ss.tokens = a.spec_tokens;
    ss.reps = a.reps;
    auto sp = qualify::MeasureSpec(c, prompts, ss, &invariance);
    ThrowIfError(sp.status());
    record["spec"] = *sp;
    stage("spec", t0);
    if (drafter) {
      t0 = Clock::now();
      // A repetitive prompt, so that the n-gram drafter proposes too.
      const std::vector<int32_t> law_prompt = tok->Encode(
          "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
          tok->add_bos_default(), false);
      auto law = qualify::CheckRejectLaw(c, law_prompt, a.law_samples);
      ThrowIfError(law.status());
      invariance.push_back(*law);
      stage("reject law", t0);
    }
    record["invariance"] = invariance;
    t0 = Clock::now();
    qualify::ThroughputSettings ts;
    ts.concurrency = a.concurrency;
    ts.prompt_tokens = a.bench_prompt;
    ts.gen_tokens = a.bench_gen;
    ts.reps = a.reps;
    auto tp = qualify::MeasureThroughput(c, ts);
    ThrowIfError(tp.status());
    record["throughput"] = *tp;
    stage("throughput", t0);
  }
  if (!work.empty() && a.work.empty()) std::filesystem::remove_all(work);
  timings["total"] = std::chrono::duration<double>(Clock::now() - t_all).count();
  record["timings_s"] = timings;
  const qualify::Verdict v = qualify::Decide(record, thresholds);
  record["verdict"] = qualify::ToJson(v);
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) throw CliError(2, "--out: cannot create " + a.out + ": " + ec.message());
  const std::string base = (std::filesystem::path(a.out) / cell).string();
  WriteFile(base + ".json", record.dump(1) + "\n");
  WriteFile(base + ".html", qualify::RenderHtml(record));
  std::printf("record  %s.json\nreport  %s.html\n", base.c_str(), base.c_str());
  for (const auto& n : v.not_covered) std::printf("not covered: %s\n", n.c_str());
  for (const auto& r : v.reasons) std::printf("reason: %s\n", r.c_str());
  std::printf("%s: %s\n", v.qualified ? "QUALIFIED" : "NOT QUALIFIED", cell.c_str());
  std::fflush(stdout);
  if (!v.qualified) throw CliError(1, "cell " + cell + " is NOT QUALIFIED: " + absl::StrJoin(v.reasons, "; "));
}

}  // namespace

void RegisterQualify(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "qualify", "Run the whole gate for one (model, quant, drafter, KV, backend) cell; write "
                 "DIR/<cell>.json and .html; exit 1 when NOT QUALIFIED (docs/qualify.md)");
  sub->add_option("--model", a->model, "Model under test: GGUF path or known name");
  sub->add_option("--from-record", a->from_record,
                  "Re-decide RECORD.json with this build's policy and re-render its report "
                  "(nothing is measured)");
  sub->add_option("--reference", a->reference,
                  "The same weights at higher precision (default: an F16 copy made here)");
  sub->add_option("--draft", a->draft, "Draft model GGUF (speculative cell)");
  sub->add_flag("--ngram", a->ngram, "Prompt-lookup drafter (speculative cell)");
  sub->add_option("--draft-untrimmed", a->draft_untrimmed,
                  "For a trimmed --draft: its untrimmed source (FR-Spec A/B)");
  sub->add_option("--kv-k", a->kv_k, "K cache format: f32 f16 bf16 q8_0 q5_1 q4_0 fp8")->capture_default_str();
  sub->add_option("--kv-v", a->kv_v, "V cache format: f32 f16 bf16 q8_0 q5_1 q4_0 fp8")->capture_default_str();
  sub->add_option("--backend", a->backend, "Backend: " + BackendChoices())->capture_default_str();
  sub->add_option("--threads", a->threads, "cpu backend threads (0 = all cores)");
  sub->add_option("--out", a->out, "Directory of the record and report")->capture_default_str();
  sub->add_option("--cell", a->cell, "Cell name (default: model-kv-K-V-drafter-backend)");
  sub->add_option("--text", a->text, "Public-domain text of the quality stage")->capture_default_str();
  sub->add_option("--work", a->work, "Keep the made reference here (default: a temporary directory)");
  sub->add_option("--seed", a->seed, "Seed of prompts, battery and sampled runs")
      ->check(SeedCheck())->capture_default_str();
  sub->add_option("--text-tokens", a->text_tokens, "Tokens of the text scored")
      ->check(CLI::Range(int64_t{2}, int64_t{8192}))->capture_default_str();
  sub->add_option("--chunk", a->chunk, "Positions per scoring step")
      ->check(CLI::Range(int64_t{1}, int64_t{512}))->capture_default_str();
  sub->add_option("--batches", a->batches, "Decode batch sizes of the forward lines")
      ->delimiter(',')->check(CLI::Range(int64_t{1}, int64_t{256}))->capture_default_str();
  // At least 3 KV blocks, so that the prefix line's prompts hold full blocks to reuse.
  sub->add_option("--max-prompt", a->max_prompt, "Longest random prompt of the forward lines")
      ->check(CLI::Range(int64_t{48}, int64_t{480}))->capture_default_str();
  sub->add_option("--gen-tokens", a->gen_tokens, "Tokens per request of the engine lines")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))->capture_default_str();
  sub->add_option("--spec-tokens", a->spec_tokens, "Tokens per prompt of the speculative stage")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))->capture_default_str();
  sub->add_option("--spec-k", a->spec_k, "Draft tokens per round")->check(CLI::Range(1, 16))->capture_default_str();
  sub->add_option("--reps", a->reps, "Interleaved reps (medians)")->check(CLI::Range(1, 100))->capture_default_str();
  sub->add_option("--law-samples", a->law_samples, "Reject-mode runs of the law check")
      ->check(CLI::Range(int64_t{50}, int64_t{1000000}))->capture_default_str();
  sub->add_option("--concurrency", a->concurrency, "Concurrent sequences of the throughput stage")
      ->delimiter(',')->check(CLI::Range(1, 256))->capture_default_str();
  sub->add_option("--bench-prompt", a->bench_prompt, "Prompt tokens of the throughput stage")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))->capture_default_str();
  sub->add_option("--bench-gen", a->bench_gen, "Generated tokens of the throughput stage")
      ->check(CLI::Range(int64_t{2}, int64_t{4096}))->capture_default_str();
  sub->callback([a, sub] {
    // The command line as given, for the record (flags in the order CLI11 parsed them).
    std::string cmd = "lockstep qualify";
    for (const CLI::Option* o : sub->get_options()) {
      if (o->count() == 0 || o->get_name() == "--help") continue;
      cmd += " " + o->get_name();
      if (o->get_expected_min() != 0) {
        for (const std::string& r : o->results()) cmd += " " + r;
      }
    }
    RunQualify(*a, cmd);
  });
}

}  // namespace lockstep::cli
