// The op check's shared pieces (op_check.h): a line under construction, the pair of backends
// with buffers on both, and the comparison of a NaN-poisoned output. Included by op_check.cc and
// op_check_families.cc only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/backend/backend.h"
#include "engine/core/status.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "oracle/op_check.h"

namespace lockstep::oracle::op_check_internal {

using backend::Backend;
using backend::IntTensor;
using backend::StepMeta;
using backend::Tensor;
using backend::Weight;
using quant::Type;

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The weight types the matmul set covers (docs/kernels.md).
inline const std::vector<Type>& MatmulTypes() {
  static const std::vector<Type> t = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0,
                                      Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0, Type::Q4_K, Type::Q5_K,
                                      Type::Q6_K, Type::IQ4_XS, Type::NVFP4};
  return t;
}

// A line under construction: cases, covered values per dimension, worst error.
class Line {
 public:
  explicit Line(std::string op) { line_.op = std::move(op); }
  void Cover(const std::string& dim, const std::string& value) { covered_[dim].insert(value); }
  void Cover(const std::string& dim, int64_t v) { ints_[dim].push_back(v); }
  void Case() { ++line_.cases; }
  // One element: |c - r| <= bound; c must be finite where r is.
  void Element(double c, double r, double bound, const std::string& where) {
    ++line_.elements;
    if (!std::isfinite(r)) {  // the inputs are drawn so that no output overflows
      Fail(absl::StrFormat("%s: the ref produced %g", where, r));
      return;
    }
    const double err = std::fabs(c - r);
    if (std::isfinite(c)) {
      line_.worst = std::max(line_.worst, bound > 0 ? err / bound : (err == 0 ? 0.0 : 1e300));
    }
    if (!std::isfinite(c) || !(err <= bound)) {
      Fail(absl::StrFormat("%s: got %.9g, ref %.9g, bound %.3g", where, c, r, bound));
    }
  }
  // Bitwise equality of two byte ranges.
  void Bytes(const std::vector<uint8_t>& c, const std::vector<uint8_t>& r, const std::string& where) {
    line_.elements += static_cast<int64_t>(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      if (c[i] != r[i]) {
        Fail(absl::StrFormat("%s: byte %d is %02x, ref %02x", where, i, c[i], r[i]));
        return;
      }
    }
  }
  void Fail(const std::string& what) {
    if (line_.failures++ == 0) line_.first_failure = what;
  }
  OpCheckLine Finish() {
    std::vector<std::string> parts;
    for (auto& [dim, vals] : covered_) {
      parts.push_back(dim + " " + absl::StrJoin(vals, ","));
    }
    for (auto& [dim, vals] : ints_) {
      auto [lo, hi] = std::minmax_element(vals.begin(), vals.end());
      parts.push_back(absl::StrFormat("%s %d..%d", dim, *lo, *hi));
    }
    line_.covered = absl::StrJoin(parts, "; ");
    return line_;
  }

 private:
  OpCheckLine line_;
  std::map<std::string, std::set<std::string>> covered_;
  std::map<std::string, std::vector<int64_t>> ints_;
};

// The two backends side by side: buffers allocated on both, freed at the end.
class Pair {
 public:
  Pair(Backend& cand, Backend& ref) : be_{&cand, &ref} {}
  ~Pair() {
    for (int i = 0; i < 2; ++i) {
      for (void* p : owned_[i]) be_[i]->Free(p);
    }
  }
  Backend& cand() { return *be_[0]; }
  Backend& ref() { return *be_[1]; }

  struct Buf {
    Tensor t[2];
  };
  absl::StatusOr<Buf> Upload(const std::vector<float>& v, int64_t rows, int64_t cols) {
    Buf b;
    for (int i = 0; i < 2; ++i) {
      ASSIGN_OR_RETURN(void* p, Raw(i, rows * cols * 4));
      b.t[i] = Tensor{static_cast<float*>(p), rows, cols};
      RETURN_IF_ERROR(be_[i]->Upload(p, v.data(), rows * cols * 4));
    }
    return b;
  }
  absl::StatusOr<Buf> Poisoned(int64_t rows, int64_t cols) {
    return Upload(std::vector<float>(rows * cols, kNaN), rows, cols);
  }
  absl::StatusOr<void*> Raw(int i, int64_t bytes) {
    ASSIGN_OR_RETURN(void* p, be_[i]->Allocate(bytes, "op check buffer"));
    owned_[i].push_back(p);
    return p;
  }
  absl::StatusOr<std::vector<float>> Get(int i, const Tensor& t) {
    std::vector<float> v(t.size());
    RETURN_IF_ERROR(be_[i]->Download(v.data(), t.data, t.size() * 4));
    return v;
  }
  absl::StatusOr<std::vector<uint8_t>> GetBytes(int i, const void* p, int64_t bytes) {
    std::vector<uint8_t> v(bytes);
    RETURN_IF_ERROR(be_[i]->Download(v.data(), p, bytes));
    return v;
  }
  // A weight of `type` from random values: quantized once, bound on both backends.
  absl::StatusOr<std::pair<Weight, Weight>> Bind(Type type, int64_t rows, int64_t cols,
                                                 std::mt19937_64& rng, float lo, float hi,
                                                 std::vector<float>* decoded) {
    return BindValues(type, rows, cols, Uniform(rng, rows * cols, lo, hi), decoded);
  }
  // A weight of `type` from the given values (rows * cols of them), as Bind.
  absl::StatusOr<std::pair<Weight, Weight>> BindValues(Type type, int64_t rows, int64_t cols,
                                                       const std::vector<float>& v,
                                                       std::vector<float>* decoded) {
    Weight w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.name = "op-check weight";
    host_.emplace_back(rows * w.row_bytes());
    RETURN_IF_ERROR(quant::Quantize(type, v.data(), rows * cols, host_.back().data()));
    w.data = host_.back().data();
    decoded->resize(rows * cols);
    RETURN_IF_ERROR(quant::Dequantize(type, w.data, rows * cols, decoded->data()));
    ASSIGN_OR_RETURN(Weight c, be_[0]->BindWeight(w));
    ASSIGN_OR_RETURN(Weight r, be_[1]->BindWeight(w));
    return std::pair{c, r};
  }
  absl::Status Begin(StepMeta m) {
    m.may_capture = false;  // the check downloads between ops
    RETURN_IF_ERROR(be_[0]->BeginStep(m));
    return be_[1]->BeginStep(m);
  }
  static std::vector<float> Uniform(std::mt19937_64& rng, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  }

 private:
  Backend* be_[2];
  std::vector<void*> owned_[2];
  std::deque<std::vector<uint8_t>> host_;  // weight bytes the ref reads in place
};

// int32 buffers on both backends (MoE route ids, greedy tokens).
struct IntBuf {
  IntTensor t[2];
};
inline absl::StatusOr<IntBuf> UploadInts(Pair& pair, const std::vector<int32_t>& v, int64_t rows,
                                         int64_t cols) {
  IntBuf b;
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(void* p, pair.Raw(i, std::max<int64_t>(rows * cols, 1) * 4));
    b.t[i] = IntTensor{static_cast<int32_t*>(p), rows, cols};
    Backend& be = i == 0 ? pair.cand() : pair.ref();
    RETURN_IF_ERROR(be.Upload(p, v.data(), rows * cols * 4));
  }
  return b;
}

// A step of T rows of one sequence at the given positions (no KV use).
inline StepMeta RowsStep(const std::vector<int32_t>& positions, std::vector<int32_t> tokens = {}) {
  StepMeta m;
  const int64_t T = static_cast<int64_t>(positions.size());
  m.tokens = tokens.empty() ? std::vector<int32_t>(T, 0) : std::move(tokens);
  m.positions = positions;
  m.slots.resize(T);
  std::iota(m.slots.begin(), m.slots.end(), 0);
  m.query_start = {0, static_cast<int32_t>(T)};
  m.seq_len = {static_cast<int32_t>(T)};
  m.max_blocks = 0;
  return m;
}

inline std::vector<int32_t> Iota(int64_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

template <typename T>
const T& Pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

// Compares a candidate output with the ref's, element by element, with bound(i).
template <typename BoundFn>
absl::Status CompareOut(Pair& pair, const Pair::Buf& out, Line& line, const std::string& where,
                        BoundFn bound) {
  ASSIGN_OR_RETURN(std::vector<float> c, pair.Get(0, out.t[0]));
  ASSIGN_OR_RETURN(std::vector<float> r, pair.Get(1, out.t[1]));
  for (size_t i = 0; i < r.size(); ++i) {
    line.Element(c[i], r[i], bound(static_cast<int64_t>(i), r[i]),
                 absl::StrFormat("%s element %d", where, i));
  }
  return absl::OkStatus();
}

}  // namespace lockstep::oracle::op_check_internal

namespace lockstep::oracle::op_check_internal {

// The lines of CheckFamilyOps, in the order it fills `lines` (op_check_families.cc).
inline const std::vector<std::string>& FamilyOpNames() {
  static const std::vector<std::string> n = {
      "CausalConvSilu", "GdnGates",      "GatedDeltaRule",     "GatedRmsNorm", "SplitHalves",
      "MoeRoute",       "MatMulExperts", "MatMulExperts/bits", "MoeCombine",   "SigmoidMul"};
  return n;
}

// The Gated DeltaNet and mixture-of-experts ops against ref (one Line per FamilyOpNames entry).
absl::Status CheckFamilyOps(Pair& pair, std::mt19937_64& rng, std::vector<Line>& lines);

}  // namespace lockstep::oracle::op_check_internal
