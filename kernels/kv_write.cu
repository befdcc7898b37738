// KV write (kv_write.h): one thread per quant block (q formats) or per element. The quantizers
// repeat engine/quant/quantize_legacy.cc operation for operation (binary32, rounded one at a
// time), so the bytes match the host's.
#include "kernels/kv_write.h"

#include "engine/quant/blocks.h"
#include "engine/quant/fp.h"
#include "engine/quant/kv_format.h"
#include "kernels/pdl.cuh"

namespace lockstep::kernels {
namespace {

namespace q = ::lockstep::quant;

__device__ __forceinline__ uint8_t CastLikeNumpyX86(float v) {
  int32_t i = INT32_MIN;
  if (v > -2147483904.0f && v < 2147483648.0f) i = (int32_t)v;
  return (uint8_t)(uint32_t)i;
}
__device__ __forceinline__ uint8_t ClipU8(uint8_t v, uint8_t hi) { return v > hi ? hi : v; }
__device__ __forceinline__ float InverseOrZero(float d) { return d == 0.0f ? 0.0f : __fdiv_rn(1.0f, d); }
__device__ __forceinline__ float NpRoundf(float x) {
  const float a = fabsf(x);
  const float fl = floorf(a);
  const float b = __fadd_rn(fl, floorf(__fmul_rn(2.0f, __fsub_rn(a, fl))));
  const float sign = isnan(x) ? x : (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f));
  return __fmul_rn(sign, b);
}
__device__ __forceinline__ void StoreU16(uint8_t* p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

__device__ void QuantQ8_0(const float* x, uint8_t* dst) {
  float amax = fabsf(x[0]);
  for (int j = 0; j < 32 && !isnan(amax); ++j) {
    const float a = fabsf(x[j]);
    if (isnan(a) || a > amax) amax = a;
  }
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = InverseOrZero(d);
  StoreU16(dst, q::Fp32ToFp16(d));
  for (int j = 0; j < 32; ++j) dst[2 + j] = CastLikeNumpyX86(NpRoundf(__fmul_rn(x[j], id)));
}

__device__ void QuantQ4_0(const float* x, uint8_t* dst) {
  int best = 0;
  float amax = fabsf(x[0]);
  if (!isnan(amax)) {
    for (int j = 1; j < 32; ++j) {
      const float a = fabsf(x[j]);
      if (isnan(a)) { best = j; break; }
      if (a > amax) { amax = a; best = j; }
    }
  }
  const float d = __fdiv_rn(x[best], -8.0f);
  const float id = InverseOrZero(d);
  uint8_t qv[32];
  for (int j = 0; j < 32; ++j) qv[j] = ClipU8(CastLikeNumpyX86(truncf(__fadd_rn(__fmul_rn(x[j], id), 8.5f))), 15);
  StoreU16(dst, q::Fp32ToFp16(d));
  for (int j = 0; j < 16; ++j) dst[2 + j] = (uint8_t)(qv[j] | (qv[j + 16] << 4));
}

__device__ void QuantQ5_1(const float* x, uint8_t* dst) {
  float mx = x[0], mn = x[0];
  bool nan_mx = false, nan_mn = false;
  for (int j = 0; j < 32; ++j) {
    if (isnan(x[j])) { if (!nan_mx) { mx = x[j]; nan_mx = true; } }
    else if (!nan_mx) mx = mx > x[j] ? mx : x[j];
    if (isnan(x[j])) { if (!nan_mn) { mn = x[j]; nan_mn = true; } }
    else if (!nan_mn) mn = mn < x[j] ? mn : x[j];
  }
  const float d = __fdiv_rn(__fsub_rn(mx, mn), 31.0f);
  const float id = InverseOrZero(d);
  uint8_t qv[32];
  for (int j = 0; j < 32; ++j) {
    qv[j] = ClipU8(CastLikeNumpyX86(truncf(__fadd_rn(__fmul_rn(__fsub_rn(x[j], mn), id), 0.5f))), 31);
  }
  StoreU16(dst, q::Fp32ToFp16(d));
  StoreU16(dst + 2, q::Fp32ToFp16(mn));
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= (uint32_t)((qv[j] >> 4) != 0) << j;
  for (int k = 0; k < 4; ++k) dst[4 + k] = (uint8_t)(h >> (8 * k));
  for (int j = 0; j < 16; ++j) dst[8 + j] = (uint8_t)((qv[j] & 0xF) | (qv[j + 16] << 4));
}

// One launch writes one or two caches: blockIdx.y picks the target (K, then V).
struct Target {
  uint32_t fmt;
  const float* src;
  int64_t row_bytes;
  uint8_t* cache;
};

__global__ void KvWriteBlocksKernel(Target t0, Target t1, const int32_t* __restrict__ slots,
                                    int64_t T, int64_t kv_dim) {
  pdl::Begin();
  const Target tg = blockIdx.y == 0 ? t0 : t1;
  const int64_t bpr = kv_dim / 32;
  const int64_t total = T * bpr;
  const uint32_t fmt = tg.fmt;
  const int64_t bytes = fmt == (uint32_t)q::KvFormat::kQ8_0 ? 34 : (fmt == (uint32_t)q::KvFormat::kQ5_1 ? 24 : 18);
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = idx / bpr, b = idx % bpr;
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    float xv[32];
    for (int j = 0; j < 32; ++j) xv[j] = tg.src[t * kv_dim + b * 32 + j];
    uint8_t* dst = tg.cache + (int64_t)slot * tg.row_bytes + b * bytes;
    if (fmt == (uint32_t)q::KvFormat::kQ8_0) QuantQ8_0(xv, dst);
    else if (fmt == (uint32_t)q::KvFormat::kQ5_1) QuantQ5_1(xv, dst);
    else QuantQ4_0(xv, dst);
  }
}

__global__ void KvWriteElemsKernel(Target t0, Target t1, const int32_t* __restrict__ slots,
                                   int64_t T, int64_t kv_dim) {
  pdl::Begin();
  const Target tg = blockIdx.y == 0 ? t0 : t1;
  const int64_t total = T * kv_dim;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = idx / kv_dim, e = idx % kv_dim;
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    const float v = tg.src[idx];
    uint8_t* row = tg.cache + (int64_t)slot * tg.row_bytes;
    switch ((q::KvFormat)tg.fmt) {
      case q::KvFormat::kF32: reinterpret_cast<float*>(row)[e] = v; break;
      case q::KvFormat::kF16: reinterpret_cast<uint16_t*>(row)[e] = q::Fp32ToFp16(v); break;
      case q::KvFormat::kBF16: reinterpret_cast<uint16_t*>(row)[e] = q::Fp32ToBf16(v); break;
      default: row[e] = q::Fp32ToE4m3(v); break;
    }
  }
}

bool BlockFormat(uint32_t fmt) {
  const q::KvFormat f = (q::KvFormat)fmt;
  return f == q::KvFormat::kQ8_0 || f == q::KvFormat::kQ5_1 || f == q::KvFormat::kQ4_0;
}

cudaError_t CheckArgs(uint32_t fmt, const float* src, const void* cache, int64_t kv_dim) {
  if (fmt >= (uint32_t)q::kKvFormatCount || src == nullptr || cache == nullptr || kv_dim < 1) {
    return cudaErrorInvalidValue;
  }
  if (kv_dim % q::KvFormatBlockElems((q::KvFormat)fmt) != 0) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// n_targets (1 or 2) targets of one format group (BlockFormat alike) in one launch.
void Launch(const Target* tg, int n_targets, const int32_t* slots, int64_t T, int64_t kv_dim,
            cudaStream_t stream) {
  const bool blocks = BlockFormat(tg[0].fmt);
  const int64_t n = blocks ? T * (kv_dim / 32) : T * kv_dim;
  const int64_t want = (n + 255) / 256;
  const dim3 grid((unsigned)(want < 132 * 64 ? want : 132 * 64), (unsigned)n_targets);
  const Target t1 = n_targets > 1 ? tg[1] : tg[0];
  if (blocks) {
    pdl::Launch(KvWriteBlocksKernel, grid, 256, 0, stream, tg[0], t1, slots, T, kv_dim);
  } else {
    pdl::Launch(KvWriteElemsKernel, grid, 256, 0, stream, tg[0], t1, slots, T, kv_dim);
  }
}

}  // namespace

cudaError_t LaunchKvWrite(uint32_t fmt, const float* src, const int32_t* slots, int64_t T,
                          int64_t kv_dim, void* cache, cudaStream_t stream) {
  if (CheckArgs(fmt, src, cache, kv_dim) != cudaSuccess || slots == nullptr || T < 0) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const Target t = {fmt, src, q::KvRowBytes((q::KvFormat)fmt, kv_dim), static_cast<uint8_t*>(cache)};
  Launch(&t, 1, slots, T, kv_dim, stream);
  return cudaGetLastError();
}

cudaError_t LaunchKvWritePair(uint32_t k_fmt, const float* k_src, void* k_cache, uint32_t v_fmt,
                              const float* v_src, void* v_cache, const int32_t* slots, int64_t T,
                              int64_t kv_dim, cudaStream_t stream) {
  if (CheckArgs(k_fmt, k_src, k_cache, kv_dim) != cudaSuccess ||
      CheckArgs(v_fmt, v_src, v_cache, kv_dim) != cudaSuccess || slots == nullptr || T < 0 ||
      k_cache == v_cache) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const Target tg[2] = {
      {k_fmt, k_src, q::KvRowBytes((q::KvFormat)k_fmt, kv_dim), static_cast<uint8_t*>(k_cache)},
      {v_fmt, v_src, q::KvRowBytes((q::KvFormat)v_fmt, kv_dim), static_cast<uint8_t*>(v_cache)}};
  if (BlockFormat(k_fmt) == BlockFormat(v_fmt)) {
    Launch(tg, 2, slots, T, kv_dim, stream);
  } else {  // one kernel per format group: two launches, the same bytes
    Launch(&tg[0], 1, slots, T, kv_dim, stream);
    Launch(&tg[1], 1, slots, T, kv_dim, stream);
  }
  return cudaGetLastError();
}

}  // namespace lockstep::kernels
