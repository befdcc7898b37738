// Encoding and decoding of paged-KV rows (engine/quant/kv_format.h) through the quant layer.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/quant/kv_format.h"
#include "engine/quant/quant.h"

namespace lockstep::quant {
namespace {

absl::Status CheckKvRow(const char* op, KvFormat f, const void* src, int64_t n, const void* dst) {
  if (static_cast<uint32_t>(f) >= static_cast<uint32_t>(kKvFormatCount)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unknown KV format id %u", op, static_cast<uint32_t>(f)));
  }
  const int64_t block = KvFormatBlockElems(f);
  if (n < 0 || n % block != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s: n = %d elements is not a non-negative multiple of the format's block of %d", op,
        KvFormatName(f), n, block));
  }
  if (n > 0 && (src == nullptr || dst == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %s: null src or dst for n = %d", op, KvFormatName(f), n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodeKvRow(KvFormat f, const float* src, int64_t n, void* dst) {
  if (absl::Status s = CheckKvRow("EncodeKvRow", f, src, n, dst); !s.ok()) return s;
  if (f == KvFormat::kFp8E4M3) {
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = Fp32ToE4m3(src[i]);
    return absl::OkStatus();
  }
  if (f == KvFormat::kF32) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return absl::OkStatus();
  }
  return Quantize(KvFormatBlockType(f), src, n, dst);
}

absl::Status DecodeKvRow(KvFormat f, const void* src, int64_t n, float* dst) {
  if (absl::Status s = CheckKvRow("DecodeKvRow", f, src, n, dst); !s.ok()) return s;
  if (f == KvFormat::kFp8E4M3) {
    const auto* in = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = E4m3ToFp32(in[i]);
    return absl::OkStatus();
  }
  if (f == KvFormat::kF32) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return absl::OkStatus();
  }
  return Dequantize(KvFormatBlockType(f), src, n, dst);
}

absl::StatusOr<KvFormat> ParseKvFormat(std::string_view name) {
  std::string known;
  for (int i = 0; i < kKvFormatCount; ++i) {
    const auto f = static_cast<KvFormat>(i);
    if (name == KvFormatName(f)) return f;
    absl::StrAppend(&known, i ? ", " : "", KvFormatName(f));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV format '", std::string(name), "'; known formats: ", known));
}

}  // namespace lockstep::quant
