#include "engine/models/synth.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/core/status.h"
#include "engine/core/threads.h"
#include "engine/models/requantize.h"
#include "engine/quant/quant.h"
#include "engine/tokenizer/unicode.h"

namespace lockstep::models {
namespace {

using gguf::KeyValue;
using gguf::Value;
using gguf::ValueType;
using quant::Type;

// Bumped whenever the same (arch, shape, quant, seed) would give different bytes.
constexpr uint32_t kGeneratorVersion = 1;

// Output chunks of about this size are filled by the pool while the previous one is written.
constexpr uint64_t kChunkBytes = uint64_t{32} << 20;

// The synthetic vocabulary: ids [0, 256) the GPT-2 byte alphabet (byte b is id b), then one token
// per merge below, BOS, EOS, then "<synth_ID>" fillers up to the vocabulary size. The merges
// make BPE merging happen (llama.cpp and lockstep both need merges present for "gpt2").
constexpr std::array<std::pair<const char*, const char*>, 8> kMerges = {{
    {"h", "i"}, {"\xC4\xA0", "t"}, {"t", "h"}, {"h", "e"},  // \xC4\xA0 = U+0120, GPT-2's space
    {"i", "n"}, {"e", "r"}, {"o", "n"}, {"r", "e"},
}};
constexpr const char kBosText[] = "<|begin_of_text|>";
constexpr const char kEosText[] = "<|endoftext|>";  // an end-of-generation text in both
constexpr int64_t kBosId = 256 + static_cast<int64_t>(kMerges.size());
constexpr int64_t kEosId = kBosId + 1;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
constexpr int32_t kTokenNormal = 1, kTokenControl = 3;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order.
std::array<uint32_t, 256> ByteAlphabet() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// The pre-tokenizer each family's real GGUFs name (all known to lockstep and llama.cpp).
const char* PreTokenizerFor(const std::string& arch) {
  if (arch == "llama") return "llama-bpe";
  if (arch == "qwen3") return "qwen2";
  return "default";
}

// splitmix64 (Steele, Lea, Flood 2014): the finalizer as a hash, the whole as a row's stream.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t SplitMix(uint64_t& state) { return Mix64(state += 0x9E3779B97F4A7C15ull); }

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::vector<std::string> ShapeNames(const std::string& arch) {
  std::vector<std::string> out;
  for (const SynthShape& s : kSynthShapes) {
    if (arch.empty() || arch == s.arch) {
      if (std::find(out.begin(), out.end(), s.shape) == out.end()) out.emplace_back(s.shape);
    }
  }
  return out;
}

std::vector<std::string> ArchNames() {
  std::vector<std::string> out;
  for (const SynthShape& s : kSynthShapes) {
    if (std::find(out.begin(), out.end(), s.arch) == out.end()) out.emplace_back(s.arch);
  }
  return out;
}

const char* TypeName(Type t) { return quant::Traits(t).name; }

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool UseMoreBits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

// llama.cpp's tensor_type_fallback for rows that do not fit a 256-element K block.
Type Fallback(Type t, int64_t cols) {
  if (cols % quant::Traits(t).block_size == 0) return t;
  switch (t) {
    case Type::Q4_K: t = Type::Q5_0; break;
    case Type::Q6_K: t = Type::Q8_0; break;
    default: break;
  }
  return cols % quant::Traits(t).block_size == 0 ? t : Type::F16;
}

std::vector<Value> Strings(const std::vector<std::string>& v) {
  std::vector<Value> out;
  out.reserve(v.size());
  for (const std::string& s : v) out.push_back(Value::String(s));
  return out;
}

std::vector<KeyValue> Metadata(const SynthShape& s, const std::string& quant, uint64_t seed,
                               const SynthOptions& o) {
  const std::string a(s.arch);
  auto key = [&a](const char* k) { return absl::StrCat(a, ".", k); };
  std::vector<KeyValue> md;
  md.push_back({"general.architecture", Value::String(a)});
  md.push_back({"general.name", Value::String(absl::StrCat("lockstep-synth ", s.arch, "-", s.shape,
                                                           "-", quant, " seed ", seed))});
  const Type main = quant == "q4_k_m" ? Type::Q4_K : quant == "q8_0" ? Type::Q8_0 : Type::F16;
  md.push_back({"general.file_type", Value::U32(*LlamaFileType(main))});  // 15, 7 or 1
  md.push_back({"general.quantization_version", Value::U32(2)});
  md.push_back({key("context_length"), Value::U32(static_cast<uint32_t>(s.n_ctx))});
  md.push_back({key("embedding_length"), Value::U32(static_cast<uint32_t>(s.n_embd))});
  md.push_back({key("block_count"), Value::U32(static_cast<uint32_t>(s.n_layer))});
  md.push_back({key("feed_forward_length"), Value::U32(static_cast<uint32_t>(s.n_ff))});
  md.push_back({key("attention.head_count"), Value::U32(static_cast<uint32_t>(s.n_head))});
  md.push_back({key("attention.head_count_kv"), Value::U32(static_cast<uint32_t>(s.n_kv_head))});
  md.push_back({key("attention.key_length"), Value::U32(static_cast<uint32_t>(s.head_dim))});
  md.push_back({key("attention.value_length"), Value::U32(static_cast<uint32_t>(s.head_dim))});
  md.push_back({key("rope.dimension_count"), Value::U32(static_cast<uint32_t>(s.head_dim))});
  md.push_back({key("rope.freq_base"), Value::F32(s.rope_base)});
  md.push_back({key("attention.layer_norm_rms_epsilon"), Value::F32(s.norm_eps)});
  if (s.sliding_window > 0) {
    md.push_back({key("attention.sliding_window"),
                  Value::U32(static_cast<uint32_t>(s.sliding_window))});
  }
  md.push_back({key("vocab_size"), Value::U32(static_cast<uint32_t>(s.n_vocab))});

  // Tokenizer.
  const std::array<uint32_t, 256> alphabet = ByteAlphabet();
  std::vector<std::string> tokens;
  tokens.reserve(s.n_vocab);
  for (int b = 0; b < 256; ++b) {
    std::string t;
    tokenizer::AppendUtf8(alphabet[b], &t);
    tokens.push_back(std::move(t));
  }
  std::vector<std::string> merges;
  for (const auto& [l, r] : kMerges) {
    tokens.push_back(absl::StrCat(l, r));
    merges.push_back(absl::StrCat(l, " ", r));
  }
  tokens.emplace_back(kBosText);
  tokens.emplace_back(kEosText);
  for (int64_t id = static_cast<int64_t>(tokens.size()); id < s.n_vocab; ++id) {
    tokens.push_back(absl::StrCat("<synth_", id, ">"));
  }
  std::vector<Value> types(s.n_vocab, Value::I32(kTokenNormal));
  types[kBosId] = Value::I32(kTokenControl);
  types[kEosId] = Value::I32(kTokenControl);
  md.push_back({"tokenizer.ggml.model", Value::String("gpt2")});
  md.push_back({"tokenizer.ggml.pre", Value::String(PreTokenizerFor(a))});
  md.push_back({"tokenizer.ggml.tokens", Value::Array(ValueType::STRING, Strings(tokens))});
  md.push_back({"tokenizer.ggml.token_type", Value::Array(ValueType::INT32, std::move(types))});
  md.push_back({"tokenizer.ggml.merges", Value::Array(ValueType::STRING, Strings(merges))});
  md.push_back({"tokenizer.ggml.bos_token_id", Value::U32(kBosId)});
  md.push_back({"tokenizer.ggml.eos_token_id", Value::U32(kEosId)});
  md.push_back({"tokenizer.ggml.add_bos_token", Value::Bool(true)});

  // What made the file (not the thread count: the bytes do not depend on it).
  md.push_back({"lockstep.synth.arch", Value::String(a)});
  md.push_back({"lockstep.synth.shape", Value::String(s.shape)});
  md.push_back({"lockstep.synth.like", Value::String(s.like)});
  md.push_back({"lockstep.synth.quant", Value::String(quant)});
  md.push_back({"lockstep.synth.seed", Value::U64(seed)});
  md.push_back({"lockstep.synth.layers", Value::I64(o.layers)});  // 0 = the shape's
  md.push_back({"lockstep.synth.vocab", Value::I64(o.vocab)});    // 0 = the shape's
  md.push_back({"lockstep.synth.generator", Value::U32(kGeneratorVersion)});
  return md;
}

Type WeightType(const std::string& quant, const std::string& name, int64_t cols, int64_t n_layer,
                bool tied) {
  if (quant == "q4_k_m") return Q4KMType(name, cols, n_layer, tied);
  return Fallback(quant == "q8_0" ? Type::Q8_0 : Type::F16, cols);
}

std::vector<SynthTensor> Tensors(const SynthShape& s, const std::string& quant) {
  std::vector<SynthTensor> out;
  const std::string arch = s.arch;
  const int64_t d = s.n_embd, q_dim = s.n_head * s.head_dim, kv_dim = s.n_kv_head * s.head_dim;
  // 2-D weights ~ N(0, 1/cols): a unit-RMS input gives a unit-RMS output, so activations stay
  // O(1) through every layer, and a head's logits are ~ N(0, 1). Norm weights ~ 1 + N(0, 0.05^2),
  // F32. gemma3's forward multiplies embeddings by sqrt(n_embd), so its token_embd has sigma
  // 1/n_embd: the residual stream starts at the other families' scale. (With 1/sqrt(n_embd) the
  // tied head would score the current token ~sqrt(n_embd / (2 n_layer)) sd above the rest, and
  // greedy decoding would repeat it forever; this way its logits are small, sd 1/sqrt(n_embd).)
  auto matrix = [&](std::string name, int64_t cols, int64_t rows, double sigma = 0) {
    const Type t = WeightType(quant, name, cols, s.n_layer, s.tied);
    if (sigma == 0) sigma = 1.0 / std::sqrt(static_cast<double>(cols));
    out.push_back({std::move(name), {cols, rows}, t, 0.0f, static_cast<float>(sigma)});
  };
  auto norm = [&](std::string name, int64_t n) {
    out.push_back({std::move(name), {n}, Type::F32, 1.0f, 0.05f});
  };
  const double embd_sigma = arch == "gemma3" ? 1.0 / static_cast<double>(d) : 0.0;  // 0: 1/sqrt
  matrix("token_embd.weight", d, s.n_vocab, embd_sigma);
  for (int64_t il = 0; il < s.n_layer; ++il) {
    auto n = [il](const char* t) { return absl::StrCat("blk.", il, ".", t, ".weight"); };
    norm(n("attn_norm"), d);
    matrix(n("attn_q"), d, q_dim);
    matrix(n("attn_k"), d, kv_dim);
    matrix(n("attn_v"), d, kv_dim);
    matrix(n("attn_output"), q_dim, d);
    if (arch != "llama") {
      norm(n("attn_q_norm"), s.head_dim);
      norm(n("attn_k_norm"), s.head_dim);
    }
    if (arch == "gemma3") norm(n("post_attention_norm"), d);
    norm(n("ffn_norm"), d);
    matrix(n("ffn_gate"), d, s.n_ff);
    matrix(n("ffn_up"), d, s.n_ff);
    matrix(n("ffn_down"), s.n_ff, d);
    if (arch == "gemma3") norm(n("post_ffw_norm"), d);
  }
  norm("output_norm.weight", d);
  if (!s.tied) matrix("output.weight", d, s.n_vocab);
  return out;
}

uint64_t RowBytes(const SynthTensor& t) {
  const quant::TypeTraits tr = quant::Traits(t.type);
  return static_cast<uint64_t>(t.shape[0]) / tr.block_size * tr.type_size;
}

int64_t Rows(const SynthTensor& t) { return t.shape.size() > 1 ? t.shape[1] : 1; }

// Streams the file to `sink`: the header, then each tensor drawn and quantized a chunk of rows
// at a time across the pool, each chunk written (by a second thread) while the next is filled.
using Sink = std::function<absl::Status(std::string_view)>;

absl::Status Stream(const SynthPlan& plan, uint64_t seed, const SynthOptions& o, const Sink& sink) {
  std::vector<gguf::WriteTensor> infos;
  infos.reserve(plan.tensors.size());
  for (const SynthTensor& t : plan.tensors) infos.push_back({t.name, t.shape, t.type, {}});
  ASSIGN_OR_RETURN(gguf::SerializedHeader header, gguf::SerializeHeader(plan.metadata, infos));
  RETURN_IF_ERROR(sink(header.bytes));

  core::ThreadPool pool(o.threads);
  std::array<std::string, 2> buffers;
  int cur = 0;
  std::future<absl::Status> pending;  // the write of buffers[cur ^ 1]
  auto flush = [&]() -> absl::Status {
    if (!pending.valid()) return absl::OkStatus();
    return pending.get();
  };
  const std::string zeros(header.alignment, '\0');
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const SynthTensor& t = plan.tensors[i];
    if (o.progress) {
      o.progress(absl::StrFormat("[%d/%d] %s %s [%s]", i + 1, plan.tensors.size(), t.name,
                                 TypeName(t.type), absl::StrJoin(t.shape, ", ")));
    }
    const int64_t cols = t.shape[0], rows = Rows(t);
    const uint64_t row_bytes = RowBytes(t);
    const int64_t chunk_rows =
        std::clamp<int64_t>(kChunkBytes / std::max<uint64_t>(1, row_bytes), 1, rows);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - r0);
      std::string& buf = buffers[cur];
      buf.resize(n * row_bytes);
      std::mutex mu;
      absl::Status error;
      pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
        std::vector<float> row(cols);  // [cols] f32
        for (int64_t r = b; r < e; ++r) {
          SynthRow(seed, t, r0 + r, row);
          absl::Status s = quant::Quantize(t.type, row.data(), cols, buf.data() + r * row_bytes);
          if (!s.ok()) {
            std::lock_guard<std::mutex> lk(mu);
            if (error.ok()) error = absl::Status(s.code(), absl::StrCat(t.name, ": ", s.message()));
            return;
          }
        }
      });
      RETURN_IF_ERROR(flush());
      RETURN_IF_ERROR(error);
      const bool last_chunk = r0 + n >= rows;
      if (last_chunk) {
        const uint64_t size = rows * row_bytes;
        const uint64_t pad = (header.alignment - size % header.alignment) % header.alignment;
        buf.append(zeros, 0, pad);
      }
      pending = std::async(std::launch::async, [&sink, &buf] { return sink(buf); });
      cur ^= 1;
    }
  }
  return flush();
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

int64_t SynthMinVocab() { return kEosId + 1; }

Type Q4KMType(const std::string& name, int64_t cols, int64_t n_layer, bool tied) {
  // The output head (and token_embd when it is the head) gets Q6_K, or Q8_0 for rows that do
  // not fit 256-element blocks (no further fallback).
  const bool output = name == "output.weight" || (tied && name == "token_embd.weight");
  if (output) return cols % 256 == 0 ? Type::Q6_K : Type::Q8_0;
  Type t = Type::Q4_K;
  const bool attn_v = absl::EndsWith(name, ".attn_v.weight");
  const bool ffn_down = absl::EndsWith(name, ".ffn_down.weight");
  if (attn_v || ffn_down) {
    int64_t il = -1;
    if (std::sscanf(name.c_str(), "blk.%ld.", &il) == 1 && UseMoreBits(il, n_layer)) {
      t = Type::Q6_K;
    }
  }
  return Fallback(t, cols);
}

void SynthRow(uint64_t seed, const SynthTensor& t, int64_t row, std::span<float> out) {
  // A splitmix64 stream keyed by (seed, tensor name, row). Each value is an Irwin-Hall sum of 12
  // uniform 16-bit integers (three 64-bit draws): mean 12 * 32767.5 = 393210, variance
  // 12 * (2^32 - 1) / 12, i.e. sd 65536 to 1e-10 -- approximately N(0, 1), computed in integers,
  // so the same on every machine and compiler (no libm).
  uint64_t state = Mix64(Mix64(seed ^ 0x5EED5EED5EED5EEDull) ^ Fnv1a64(t.name)) +
                   static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull;
  state = Mix64(state);
  const float scale = t.sigma * (1.0f / 65536.0f);
  for (float& v : out) {
    int32_t sum = 0;
    for (int k = 0; k < 3; ++k) {
      const uint64_t x = SplitMix(state);
      sum += static_cast<int32_t>(x & 0xFFFF) + static_cast<int32_t>((x >> 16) & 0xFFFF) +
             static_cast<int32_t>((x >> 32) & 0xFFFF) + static_cast<int32_t>(x >> 48);
    }
    v = t.mean + static_cast<float>(sum - 393210) * scale;
  }
}

absl::StatusOr<SynthPlan> PlanSynth(const SynthOptions& o) {
  const std::string arch = absl::AsciiStrToLower(o.arch);
  const std::string shape = absl::AsciiStrToLower(o.shape);
  const std::string quant = absl::AsciiStrToLower(o.quant);
  const std::vector<std::string> archs = ArchNames();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown architecture \"", o.arch,
                                                   "\"; valid: ", absl::StrJoin(archs, ", ")));
  }
  const SynthShape* row = nullptr;
  for (const SynthShape& s : kSynthShapes) {
    if (s.arch == arch && s.shape == shape) row = &s;
  }
  if (row == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown shape \"", o.shape, "\" for ", arch,
                                                   "; valid: ",
                                                   absl::StrJoin(ShapeNames(arch), ", ")));
  }
  if (std::find(std::begin(kSynthQuants), std::end(kSynthQuants), quant) ==
      std::end(kSynthQuants)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown quantization \"", o.quant, "\"; valid: ", absl::StrJoin(kSynthQuants, ", ")));
  }
  if (o.layers < 0 || o.layers > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layers ", o.layers, " is outside [1, 4096] (0 = the shape's)"));
  }
  constexpr int64_t kMaxVocab = int64_t{1} << 20;
  if (o.vocab != 0 && (o.vocab < SynthMinVocab() || o.vocab > kMaxVocab)) {
    return absl::InvalidArgumentError(absl::StrCat("--vocab ", o.vocab, " is outside [",
                                                   SynthMinVocab(), ", ", kMaxVocab,
                                                   "] (0 = the shape's)"));
  }
  if (o.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--threads ", o.threads, " is negative"));
  }
  SynthPlan plan;
  plan.shape = *row;
  if (o.layers > 0) plan.shape.n_layer = o.layers;
  if (o.vocab > 0) plan.shape.n_vocab = o.vocab;
  plan.quant = quant;
  plan.metadata = Metadata(plan.shape, quant, o.seed, o);
  plan.tensors = Tensors(plan.shape, quant);
  std::vector<gguf::WriteTensor> infos;
  for (const SynthTensor& t : plan.tensors) {
    plan.n_params += static_cast<uint64_t>(t.shape[0]) * Rows(t);
    infos.push_back({t.name, t.shape, t.type, {}});
  }
  ASSIGN_OR_RETURN(gguf::SerializedHeader header, gguf::SerializeHeader(plan.metadata, infos));
  plan.file_bytes = header.bytes.size();
  for (const SynthTensor& t : plan.tensors) {
    const uint64_t size = RowBytes(t) * Rows(t);
    plan.file_bytes += (size + header.alignment - 1) / header.alignment * header.alignment;
  }
  return plan;
}

absl::StatusOr<std::string> SynthBytes(const SynthOptions& o) {
  ASSIGN_OR_RETURN(SynthPlan plan, PlanSynth(o));
  std::string out;
  out.reserve(plan.file_bytes);
  RETURN_IF_ERROR(Stream(plan, o.seed, o, [&out](std::string_view b) {
    out.append(b);
    return absl::OkStatus();
  }));
  if (out.size() != plan.file_bytes) {
    return absl::InternalError(
        absl::StrCat("wrote ", out.size(), " bytes, planned ", plan.file_bytes));
  }
  return out;
}

absl::StatusOr<SynthSummary> WriteSynth(const SynthOptions& o, const std::string& out_path,
                                        bool force) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  if (!force && fs::exists(out_path, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(out_path, " exists; pass --force to overwrite it"));
  }
  SynthSummary summary;
  ASSIGN_OR_RETURN(summary.plan, PlanSynth(o));

  // Beside the output, so that the rename stays on one file system (and is atomic).
  const std::string tmp = absl::StrCat(out_path, ".tmp.", static_cast<long>(getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return ErrnoError("create", tmp);
  uint64_t written = 0;
  absl::Status s = Stream(summary.plan, o.seed, o, [&](std::string_view b) -> absl::Status {
    if (std::fwrite(b.data(), 1, b.size(), f) != b.size()) {
      return ErrnoError(absl::StrCat("write (at byte ", written, ")"), tmp);
    }
    written += b.size();
    return absl::OkStatus();
  });
  if (std::fclose(f) != 0 && s.ok()) s = ErrnoError("close", tmp);
  if (s.ok() && written != summary.plan.file_bytes) {
    s = absl::InternalError(
        absl::StrCat("wrote ", written, " bytes, planned ", summary.plan.file_bytes));
  }
  if (s.ok() && !force && fs::exists(out_path, ec)) {
    s = absl::AlreadyExistsError(
        absl::StrCat(out_path, " appeared while writing; pass --force to overwrite it"));
  }
  if (s.ok() && std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    s = ErrnoError(absl::StrCat("rename ", tmp, " to"), out_path);
  }
  if (!s.ok()) {
    fs::remove(tmp, ec);
    return s;
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

std::string DescribeSynth(const SynthSummary& s) {
  const SynthPlan& p = s.plan;
  std::map<std::string, int> by_type;
  for (const SynthTensor& t : p.tensors) ++by_type[TypeName(t.type)];
  std::vector<std::string> parts;
  for (const auto& [name, n] : by_type) parts.push_back(absl::StrCat(name, " ", n));
  return absl::StrFormat(
      "%s-%s (%s shape: %d layers, n_embd %d, vocab %d%s) %s: %d tensors (%s), %.3f B params, "
      "%.1f MiB in %.1f s\n",
      p.shape.arch, p.shape.shape, p.shape.like, p.shape.n_layer, p.shape.n_embd, p.shape.n_vocab,
      p.shape.tied ? ", tied head" : "", p.quant, p.tensors.size(), absl::StrJoin(parts, ", "),
      p.n_params / 1e9, p.file_bytes / (1024.0 * 1024.0), s.seconds);
}

}  // namespace lockstep::models
