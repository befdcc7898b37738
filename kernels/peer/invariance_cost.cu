// invariance_cost: what the invariant matmul costs against cuBLAS, the fastest non-invariant
// route at hand, on the Llama-3-8B layer set (docs/performance.md, "What invariance costs").
//
//   invariance_cost [--type q4_k|q8_0] [--T 1,8,64,512,2048] [--reps N]
//
// For each T it times, per layer set (7 matrices, two weight copies alternated so no rep reads
// out of L2, median of reps per matrix, summed):
//   lockstep   LaunchMatmul on the quantized weights (the production route, kAuto);
//   cublas-bf16  cublasGemmEx on the same weights dequantized to bf16 (tensor cores, f32
//              accumulation, the library's default algorithm: split-K and tile chosen by shape);
//   cublas-f32 cublasSgemm on the weights dequantized to f32 (CUBLAS_PEDANTIC_MATH: no TF32).
// and then shows why cuBLAS is not an option under the contract: the bits of token row 0 of
// attn_q computed at T = 1, 8, 64, ... against the same row computed inside the largest T, for
// cuBLAS and for lockstep (lockstep must show 0 differing elements; cuBLAS may not).
// The activation conversion f32 -> bf16 that a cuBLAS route would need is not timed (it is
// small against the weights). Weights are random quantized blocks, as in kernel_check --bench.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstring>

#include "kernels/check/check_support.h"
#include "kernels/dequant.h"
#include "kernels/matmul_mma.h"

namespace lockstep::kernels::check {
namespace {

#define CB(call)                                                                               \
  do {                                                                                         \
    cublasStatus_t s_ = (call);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      std::fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", (int)s_, __FILE__, __LINE__, #call); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void F32ToBf16(const float* in, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

void ToBf16(const float* in, __nv_bfloat16* out, int64_t n) {
  F32ToBf16<<<1024, 256>>>(in, out, n);
  CK(cudaGetLastError());
}

struct Mat { const char* name; int64_t rows, cols; };

struct Weights {  // one copy of one matrix in the three forms
  Dev<uint8_t> q;
  Dev<float> f32;
  Dev<__nv_bfloat16> bf16;
};

int Main(int argc, char** argv) {
  q::Type ty = q::Type::Q4_K;
  std::vector<int64_t> Ts = {1, 8, 64, 512, 2048};
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--type" && i + 1 < argc) {
      const std::string t = argv[++i];
      if (t == "q4_k") ty = q::Type::Q4_K;
      else if (t == "q8_0") ty = q::Type::Q8_0;
      else if (t == "q6_k") ty = q::Type::Q6_K;
      else { std::fprintf(stderr, "error: --type %s: expected q4_k, q8_0 or q6_k\n", t.c_str()); return 2; }
    } else if (a == "--T" && i + 1 < argc) {
      Ts.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > 8192) { std::fprintf(stderr, "error: --T: '%s' is not a list of 1..8192\n", argv[i]); return 2; }
        Ts.push_back(v);
        p = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps < 3) { std::fprintf(stderr, "error: --reps must be >= 3\n"); return 2; }
    } else {
      std::fprintf(stderr, "usage: invariance_cost [--type q4_k|q8_0|q6_k] [--T 1,8,...] [--reps N]\n");
      return 2;
    }
  }
  g_rng.seed(20261204);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const auto tr = Tr(ty);
  std::printf("invariance_cost device=%s type=%s reps=%d (Llama-3-8B layer set)\n", prop.name, tr.name, reps);
  const std::vector<Mat> layer = {{"attn_q", 4096, 4096}, {"attn_k", 1024, 4096}, {"attn_v", 1024, 4096},
                                  {"attn_o", 4096, 4096}, {"ffn_gate", 14336, 4096}, {"ffn_up", 14336, 4096},
                                  {"ffn_down", 4096, 14336}};
  constexpr int kCopies = 2;
  std::vector<std::vector<Weights>> w(kCopies);
  for (int c = 0; c < kCopies; ++c) {
    for (const auto& m : layer) {
      Weights& x = w[c].emplace_back();
      const int64_t n = m.rows * m.cols;
      x.q.Alloc(n / tr.block_size * tr.type_size);
      const auto tile = QuantizeRows(ty, RandVec(1 << 20));
      for (size_t off = 0; off < x.q.n; off += tile.size())
        CK(cudaMemcpy(x.q.p + off, tile.data(), std::min(tile.size(), x.q.n - off), cudaMemcpyHostToDevice));
      x.f32.Alloc(n);
      CK(LaunchDequantize((uint32_t)ty, x.q.p, n, x.f32.p, 0));
      x.bf16.Alloc(n);
      ToBf16(x.f32.p, x.bf16.p, n);
    }
  }
  CK(cudaDeviceSynchronize());
  cublasHandle_t h;
  CB(cublasCreate(&h));
  const int64_t max_t = *std::max_element(Ts.begin(), Ts.end());
  Dev<float> xf(max_t * 14336), y(max_t * 14336);
  Dev<__nv_bfloat16> xb(max_t * 14336);
  xf.Up(RandVec(max_t * 14336));
  ToBf16(xf.p, xb.p, max_t * 14336);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const float one = 1.f, zero = 0.f;
  // y[T, rows] = x[T, cols] . W[rows, cols]^T; in cuBLAS's column-major terms C[rows, T] =
  // op(A)[rows, cols] . B[cols, T] with A = W stored [cols, rows] (transposed), B = x.
  auto gemm_bf16 = [&](const Mat& m, const Weights& x, int64_t T) {
    CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)m.rows, (int)T, (int)m.cols, &one, x.bf16.p, CUDA_R_16BF,
                    (int)m.cols, xb.p, CUDA_R_16BF, (int)m.cols, &zero, y.p, CUDA_R_32F, (int)m.rows,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  auto gemm_f32 = [&](const Mat& m, const Weights& x, int64_t T) {
    CB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)m.rows, (int)T, (int)m.cols, &one, x.f32.p, (int)m.cols, xf.p,
                   (int)m.cols, &zero, y.p, (int)m.rows));
  };
  auto ours = [&](const Mat& m, const Weights& x, int64_t T) {
    CK(LaunchMatmul((uint32_t)ty, x.q.p, m.rows, m.cols, xf.p, T, y.p, 1.0f, MatmulRoute::kAuto, 0));
  };
  auto ours_mma = [&](const Mat& m, const Weights& x, int64_t T) {
    CK(LaunchMatmulMma((uint32_t)ty, x.q.p, m.rows, m.cols, xf.p, T, y.p, 1.0f, MmaConfig::kAutoByT, 0));
  };
  // Median over reps of one matrix, copies alternated; returns ms.
  auto time_one = [&](auto&& fn, size_t i, int64_t T) {
    std::vector<float> ts;
    fn(layer[i], w[1][i], T);  // warm-up
    for (int r = 0; r < reps; ++r) {
      CK(cudaEventRecord(e0));
      fn(layer[i], w[r % kCopies][i], T);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return (double)ts[ts.size() / 2];
  };
  CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));  // Sgemm: true f32, no TF32
  std::printf("%6s %16s %16s %16s %16s %9s %9s %9s\n", "T", "lockstep ms", "lockstep-mma ms", "cublas-bf16 ms",
              "cublas-f32 ms", "ls/bf16", "mma/bf16", "ls/f32");
  for (int64_t T : Ts) {
    double a = 0, am = 0, b = 0, c = 0;
    int64_t flop = 0;
    for (size_t i = 0; i < layer.size(); ++i) {
      a += time_one(ours, i, T);
      am += time_one(ours_mma, i, T);
      CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
      b += time_one(gemm_bf16, i, T);
      CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
      c += time_one(gemm_f32, i, T);
      flop += 2 * T * layer[i].rows * layer[i].cols;
    }
    std::printf("%6" PRId64 " %8.4f (%5.1fT) %8.4f (%5.1fT) %8.4f (%5.1fT) %8.4f (%5.1fT) %8.2fx %8.2fx %8.2fx\n", T, a,
                flop / (a * 1e9), am, flop / (am * 1e9), b, flop / (b * 1e9), c, flop / (c * 1e9), a / b, am / b, a / c);
    std::fflush(stdout);
  }
  std::printf("(T = TFLOP/s; 'vs' = lockstep time / cuBLAS time: how much slower the invariant route is)\n");
  // Batch invariance: row 0 of attn_q alone-ish (at T) against row 0 inside max_t.
  const Mat& m = layer[0];
  auto row0 = [&](auto&& fn, int64_t T) {
    fn(m, w[0][0], T);
    CK(cudaDeviceSynchronize());
    std::vector<float> r(m.rows);
    CK(cudaMemcpy(r.data(), y.p, m.rows * sizeof(float), cudaMemcpyDeviceToHost));
    return r;
  };
  CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  const auto ref_ours = row0(ours, max_t), ref_mma = row0(ours_mma, max_t), ref_bf16 = row0(gemm_bf16, max_t);
  CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  const auto ref_f32 = row0(gemm_f32, max_t);
  auto differ = [](const std::vector<float>& u, const std::vector<float>& v) {
    int64_t n = 0;
    for (size_t i = 0; i < u.size(); ++i) n += !SameBits(u[i], v[i]);
    return n;
  };
  std::printf("batch invariance, token row 0 of attn_q (%" PRId64 " outputs) at T vs inside T = %" PRId64
              ": differing elements\n", m.rows, max_t);
  std::printf("%6s %10s %13s %12s %11s\n", "T", "lockstep", "lockstep-mma", "cublas-bf16", "cublas-f32");
  int64_t ours_bad = 0;
  for (int64_t T : Ts) {
    if (T == max_t) continue;
    const int64_t d0 = differ(row0(ours, T), ref_ours);
    const int64_t d0m = differ(row0(ours_mma, T), ref_mma);
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    const int64_t d1 = differ(row0(gemm_bf16, T), ref_bf16);
    CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    const int64_t d2 = differ(row0(gemm_f32, T), ref_f32);
    ours_bad += d0 + d0m;
    std::printf("%6" PRId64 " %10" PRId64 " %13" PRId64 " %12" PRId64 " %11" PRId64 "\n", T, d0, d0m, d1, d2);
  }
  cublasDestroy(h);
  if (ours_bad != 0) {
    std::printf("FAIL: lockstep's matmul changed bits with T (%" PRId64 " elements)\n", ours_bad);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lockstep::kernels::check

int main(int argc, char** argv) { return lockstep::kernels::check::Main(argc, argv); }
