#include "engine/models/stage_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status.h"

namespace lockstep::models::wire {
namespace {

// Limits that keep a decoded message's allocations bounded by its own size.
constexpr int64_t kMaxCount = int64_t{1} << 31;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  template <typename T>
  void PutVec(const std::vector<T>& v) {
    Put<int64_t>(static_cast<int64_t>(v.size()));
    const size_t at = out_.size();
    out_.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out_.data() + at, v.data(), v.size() * sizeof(T));
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  absl::Status Get(T* v, const char* what) {
    if (b_.size() - at_ < sizeof(T)) return Short(what, sizeof(T));
    std::memcpy(v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status GetVec(std::vector<T>* v, const char* what) {
    int64_t n = 0;
    RETURN_IF_ERROR(Get(&n, what));
    if (n < 0 || n > kMaxCount || static_cast<uint64_t>(n) * sizeof(T) > b_.size() - at_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage message: ", what, " at byte ", at_ - sizeof(int64_t), " claims ", n,
          " elements; ", b_.size() - at_, " bytes remain"));
    }
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return absl::OkStatus();
  }
  absl::Status Done() const {
    if (at_ == b_.size()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("stage message: ", b_.size() - at_,
                                                   " unread bytes from byte ", at_));
  }
  size_t at() const { return at_; }

 private:
  absl::Status Short(const char* what, size_t n) const {
    return absl::InvalidArgumentError(absl::StrCat("stage message: ", what, " at byte ", at_,
                                                   " needs ", n, " bytes; ", b_.size() - at_,
                                                   " remain"));
  }
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> Encode(const Message& m) {
  Writer w;
  w.Put<uint32_t>(static_cast<uint32_t>(m.kind));
  switch (m.kind) {
    case Kind::kConfig: {
      const Config& c = m.config;
      for (int64_t v : {c.max_step_tokens, c.max_logit_rows, c.block_size, c.n_blocks,
                        c.micro_batches, c.timeout_ms}) {
        w.Put<int64_t>(v);
      }
      w.Put<uint32_t>(c.k_format);
      w.Put<uint32_t>(c.v_format);
      w.PutVec(c.split);
      break;
    }
    case Kind::kHello:
    case Kind::kError:
      w.PutVec(std::vector<char>(m.text.begin(), m.text.end()));
      break;
    case Kind::kForward:
      w.Put<int64_t>(static_cast<int64_t>(m.entries.size()));
      for (const Entry& e : m.entries) {
        w.Put<int64_t>(e.start);
        w.Put<int64_t>(e.n_logits);
        w.PutVec(e.tokens);
        w.PutVec(e.blocks);
      }
      [[fallthrough]];
    case Kind::kLogits:
    case Kind::kPing:
      w.Put<int64_t>(m.rows);
      w.Put<int64_t>(m.cols);
      w.PutVec(m.floats);
      break;
    case Kind::kCopy:
      w.Put<int32_t>(m.src);
      w.Put<int32_t>(m.dst);
      break;
    case Kind::kStop:
      break;
  }
  return w.Take();
}

absl::StatusOr<Message> Decode(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  Message m;
  uint32_t kind = 0;
  RETURN_IF_ERROR(r.Get(&kind, "kind"));
  if (kind < 1 || kind > 8) {
    return absl::InvalidArgumentError(absl::StrCat("stage message: unknown kind ", kind,
                                                   " at byte 0"));
  }
  m.kind = static_cast<Kind>(kind);
  switch (m.kind) {
    case Kind::kConfig: {
      Config& c = m.config;
      for (int64_t* v : {&c.max_step_tokens, &c.max_logit_rows, &c.block_size, &c.n_blocks,
                         &c.micro_batches, &c.timeout_ms}) {
        RETURN_IF_ERROR(r.Get(v, "config field"));
      }
      RETURN_IF_ERROR(r.Get(&c.k_format, "k_format"));
      RETURN_IF_ERROR(r.Get(&c.v_format, "v_format"));
      RETURN_IF_ERROR(r.GetVec(&c.split, "split"));
      break;
    }
    case Kind::kHello:
    case Kind::kError: {
      std::vector<char> text;
      RETURN_IF_ERROR(r.GetVec(&text, "text"));
      m.text.assign(text.begin(), text.end());
      break;
    }
    case Kind::kForward: {
      int64_t n = 0;
      RETURN_IF_ERROR(r.Get(&n, "entry count"));
      // Each entry takes at least 32 bytes: a count beyond that is a lie, not an allocation.
      if (n < 0 || static_cast<uint64_t>(n) > (bytes.size() - r.at()) / 32) {
        return absl::InvalidArgumentError(absl::StrCat("stage message: entry count ", n,
                                                       " at byte ", r.at() - 8,
                                                       " exceeds what the message holds"));
      }
      m.entries.resize(n);
      for (Entry& e : m.entries) {
        RETURN_IF_ERROR(r.Get(&e.start, "entry start"));
        RETURN_IF_ERROR(r.Get(&e.n_logits, "entry n_logits"));
        RETURN_IF_ERROR(r.GetVec(&e.tokens, "entry tokens"));
        RETURN_IF_ERROR(r.GetVec(&e.blocks, "entry blocks"));
      }
      [[fallthrough]];
    }
    case Kind::kLogits:
    case Kind::kPing: {
      const size_t at = r.at();
      RETURN_IF_ERROR(r.Get(&m.rows, "rows"));
      RETURN_IF_ERROR(r.Get(&m.cols, "cols"));
      RETURN_IF_ERROR(r.GetVec(&m.floats, "floats"));
      if (m.rows < 0 || m.cols < 0 ||
          (m.cols > 0 && m.rows > static_cast<int64_t>(m.floats.size()) / m.cols) ||
          m.rows * m.cols != static_cast<int64_t>(m.floats.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stage message: shape [", m.rows, ", ", m.cols, "] at byte ", at, " does not hold ",
            m.floats.size(), " floats"));
      }
      break;
    }
    case Kind::kCopy:
      RETURN_IF_ERROR(r.Get(&m.src, "src"));
      RETURN_IF_ERROR(r.Get(&m.dst, "dst"));
      break;
    case Kind::kStop:
      break;
  }
  RETURN_IF_ERROR(r.Done());
  return m;
}

}  // namespace lockstep::models::wire
