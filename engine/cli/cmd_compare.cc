#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "engine/cli/commands.h"
#include "nlohmann/json.hpp"
#include "engine/core/compare.h"
#include "engine/core/npy.h"

namespace lockstep::cli {

void RegisterCompare(CLI::App& app) {
  struct Args {
    std::string a, b;
    double margin = 0.0;
    bool json = false;
    double max_abs = -1, max_nmse = -1, max_kl = -1, min_top1 = -1, min_decisive_top1 = -1;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Compare logits A.npy (under test) with B.npy (reference); exit 1 on a breach");
  sub->add_option("A", args->a, "Logits under test, float32 [positions, vocab]")->required();
  sub->add_option("B", args->b, "Reference logits, float32 [positions, vocab]")->required();
  // A bound must be a finite number >= 0 (fractions: in [0, 1]): a negative or NaN bound
  // would make a gate that cannot fail, so it is refused, naming the flag.
  const auto bound = CLI::Validator(
      [](std::string& v) -> std::string {
        double d = 0;
        if (!CLI::detail::lexical_cast(v, d) || !std::isfinite(d) || d < 0) {
          return "must be a finite number >= 0, got '" + v + "'";
        }
        return "";
      },
      "BOUND>=0");
  const auto fraction = CLI::Validator(
      [](std::string& v) -> std::string {
        double d = 0;
        if (!CLI::detail::lexical_cast(v, d) || !(d >= 0 && d <= 1)) {
          return "must be a fraction in [0, 1], got '" + v + "'";
        }
        return "";
      },
      "FRACTION");
  sub->add_option("--margin", args->margin,
                  "Reference top-1/top-2 logit gap above which a position is decisive")
      ->check(bound);
  sub->add_option("--max-abs", args->max_abs, "Fail if max |A - B| exceeds this")->check(bound);
  sub->add_flag("--json", args->json, "Print the statistics as one JSON object");
  sub->add_option("--max-nmse", args->max_nmse, "Fail if sum (A-B)^2 / sum B^2 exceeds this")
      ->check(bound);
  sub->add_option("--max-kl", args->max_kl, "Fail if any position's KL(B || A) exceeds this (nats)")
      ->check(bound);
  sub->add_option("--min-top1", args->min_top1, "Fail if top-1 agreement (fraction) is below this")
      ->check(fraction);
  sub->add_option("--min-decisive-top1", args->min_decisive_top1,
                  "Fail if top-1 agreement on decisive positions (fraction) is below this")
      ->check(fraction);
  sub->callback([args] {
    auto a = npy::Read(args->a);
    ThrowIfError(a.status());
    auto b = npy::Read(args->b);
    ThrowIfError(b.status());
    if (a->shape.size() != 2 || a->shape != b->shape) {
      auto shape = [](const std::vector<int64_t>& v) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
        return out + "]";
      };
      throw CliError(2, absl::StrFormat(
          "%s is %s and %s is %s; both must be 2-D [positions, vocab] of one shape", args->a,
          shape(a->shape), args->b, shape(b->shape)));
    }
    auto s = compare::Logits(a->data.data(), b->data.data(), a->shape[0], a->shape[1], args->margin);
    ThrowIfError(s.status());
    if (args->json) {
      const nlohmann::json j = {{"positions", s->positions}, {"vocab", s->vocab},
                                {"non_finite_a", s->nan_a}, {"non_finite_b", s->nan_b},
                                {"max_abs", s->max_abs}, {"nmse", s->nmse},
                                {"max_kl", s->max_kl}, {"mean_kl", s->mean_kl},
                                {"top1_agree", s->top1_agree}, {"decisive", s->decisive},
                                {"decisive_agree", s->decisive_agree}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::fputs(compare::Describe(*s).c_str(), stdout);
    }
    std::string breach;
    auto check = [&](bool bad, const std::string& what) {
      if (bad) breach += (breach.empty() ? "" : "; ") + what;
    };
    check(s->nan_a + s->nan_b > 0, "non-finite values present");
    check(args->max_abs >= 0 && s->max_abs > args->max_abs,
          absl::StrFormat("max_abs %.6g > %.6g", s->max_abs, args->max_abs));
    check(args->max_nmse >= 0 && s->nmse > args->max_nmse,
          absl::StrFormat("nmse %.6g > %.6g", s->nmse, args->max_nmse));
    check(args->max_kl >= 0 && s->max_kl > args->max_kl,
          absl::StrFormat("max kl %.6g > %.6g", s->max_kl, args->max_kl));
    const double top1 = static_cast<double>(s->top1_agree) / s->positions;
    check(args->min_top1 >= 0 && top1 < args->min_top1,
          absl::StrFormat("top1 agreement %.4f < %.4f", top1, args->min_top1));
    const double dec = s->decisive > 0 ? static_cast<double>(s->decisive_agree) / s->decisive : 1.0;
    check(args->min_decisive_top1 >= 0 && dec < args->min_decisive_top1,
          absl::StrFormat("decisive top1 agreement %.4f < %.4f", dec, args->min_decisive_top1));
    if (!breach.empty()) throw CliError(1, "compare: " + breach);
    if (!args->json) std::puts("PASS");
  });
}

}  // namespace lockstep::cli
