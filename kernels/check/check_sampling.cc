// kernel_check: device Philox == host Philox, Gumbel-max argmax.
#include "kernels/check/check_support.h"

namespace lockstep::kernels::check {

// ---------------------------------------------------------------------------------------------
// Sampling.
void CheckSampling() {
  Line* l = NewLine("philox-noise");
  int64_t counters = 0;
  for (uint32_t stream_tag : {0u, 1u, 7u}) {
    const int64_t n_rows = stream_tag == 0 ? 8 : 2;
    const int64_t n_tok = 131072 + 77;
    std::vector<int64_t> pos(n_rows);
    for (auto& p : pos) p = Int(0, INT64_C(1) << 40);
    pos[0] = 0;
    const uint64_t seed = g_rng();
    const uint32_t token0 = stream_tag == 7 ? 0xFFFF0000u : 0;
    Dev<int64_t> dp = Upload(pos);
    Dev<uint32_t> db(n_rows * n_tok), dc(n_rows * n_tok);
    db.Poison(), dc.Poison();
    LAUNCH(lk::LaunchPhiloxNoise(seed, dp.p, n_rows, token0, n_tok, stream_tag, db.p, 0));
    LAUNCH(lockstep::kernels::check::LaunchCurandBits(seed, dp.p, n_rows, token0, n_tok, stream_tag, dc.p, 0));
    const auto hb = db.Down(), hc = dc.Down();
    int64_t bad = 0, bad_c = 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t v = 0; v < n_tok; ++v) {
        const uint32_t want = lockstep::sampling::NoiseBits(seed, (uint64_t)pos[r], token0 + (uint32_t)v, stream_tag);
        bad += hb[r * n_tok + v] != want;
        bad_c += hc[r * n_tok + v] != want;
      }
    }
    counters += n_rows * n_tok;
    l->Bit(bad == 0, "device Philox != host NoiseBits");
    l->Bit(bad_c == 0, "cuRAND (curand_init keying of philox.h) != host NoiseBits");
  }
  l->shapes = std::to_string(counters) + " counters (3 stream tags, positions up to 2^40, token wrap) device == host, and cuRAND == host";
  Line* g = NewLine("gumbel-argmax");
  int64_t rows_checked = 0;
  for (int64_t vocab : {7, 32000, 128256}) {
    const int64_t n_rows = 12;
    const auto logits = RandVec(n_rows * vocab, -5, 5);
    std::vector<int64_t> pos(n_rows);
    for (auto& p : pos) p = Int(0, 1 << 20);
    const uint64_t seed = g_rng();
    const double inv_t = 1.0 / 0.8;
    Dev<float> dl = Upload(logits);
    Dev<int64_t> dp = Upload(pos);
    Dev<int32_t> dout(n_rows);
    dout.Poison();
    LAUNCH(lk::LaunchGumbelArgmax(dl.p, n_rows, vocab, inv_t, seed, dp.p, dout.p, 0));
    const auto out = dout.Down();
    for (int64_t r = 0; r < n_rows; ++r) {
      int32_t best = -1;
      double bs = -INFINITY, second = -INFINITY;
      for (int64_t v = 0; v < vocab; ++v) {
        const double s = (double)logits[r * vocab + v] * inv_t + lockstep::sampling::GumbelNoise(seed, pos[r], (uint32_t)v);
        if (best < 0 || s > bs) {
          second = bs;
          bs = s, best = (int32_t)v;
        } else if (s > second) {
          second = s;
        }
      }
      ++rows_checked;
      // The device log() may differ from glibc's by an ulp: a winner within 1e-12 of the
      // runner-up is a near tie, reported but not failed.
      if (out[r] != best && !(bs - second < 1e-12 * std::fabs(bs))) {
        g->Fail("gumbel argmax " + std::to_string(out[r]) + " != host " + std::to_string(best));
      } else {
        g->Bit(true, "");
      }
    }
  }
  g->shapes = std::to_string(rows_checked) + " rows, vocab {7,32000,128256}, T=0.8; token == host GumbelArgmax formula";
}

}  // namespace lockstep::kernels::check
