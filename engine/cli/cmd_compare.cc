#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "engine/cli/commands.h"
#include "nlohmann/json.hpp"
#include "engine/core/compare.h"
#include "engine/core/npy.h"

namespace lockstep::cli {
namespace {

struct Args {
  std::string a, b;
  double margin = 0.0;
  bool json = false, topk = false;
  double max_lse_abs = -1;
  double max_abs = -1, max_nmse = -1, max_kl = -1, min_top1 = -1, min_decisive_top1 = -1;
};

std::string Shape(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// Appends "what" to the breach list when `bad`.
void Breach(std::string* breach, bool bad, const std::string& what) {
  if (bad) *breach += (breach->empty() ? "" : "; ") + what;
}

// `compare --golden-topk`: A [positions, vocab] against a compact golden [positions, 1 + 2K].
void CompareTopK(const Args& args, const npy::Array& a, const npy::Array& b) {
  if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[0] != b.shape[0]) {
    throw CliError(2, absl::StrFormat(
        "%s is %s and %s is %s; --golden-topk needs A [positions, vocab] and B [positions, 1 + 2K]"
        " with the same positions", args.a, Shape(a.shape), args.b, Shape(b.shape)));
  }
  if (args.max_kl >= 0 || args.min_top1 >= 0) {
    throw CliError(2, std::string(args.max_kl >= 0 ? "--max-kl" : "--min-top1") +
                          " needs full reference rows; a --golden-topk golden keeps only the top-K");
  }
  auto s = compare::TopKGolden(a.data.data(), a.shape[0], a.shape[1], b.data.data(), b.shape[1],
                               args.margin);
  ThrowIfError(s.status());
  if (args.json) {
    const nlohmann::json j = {{"positions", s->positions}, {"vocab", s->vocab}, {"k", s->k},
                              {"non_finite_a", s->non_finite}, {"max_lse_abs", s->max_lse_abs},
                              {"max_abs", s->max_abs}, {"nmse", s->nmse},
                              {"top1_agree", s->top1_agree}, {"decisive", s->decisive},
                              {"decisive_agree", s->decisive_agree},
                              {"first_decisive_flip", s->first_decisive_flip}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::fputs(compare::Describe(*s).c_str(), stdout);
  }
  std::string breach;
  Breach(&breach, s->non_finite > 0, "non-finite values in A");
  Breach(&breach, args.max_lse_abs >= 0 && s->max_lse_abs > args.max_lse_abs,
         absl::StrFormat("lse max_abs %.6g > %.6g at position %d", s->max_lse_abs,
                         args.max_lse_abs, s->worst_lse_position));
  Breach(&breach, args.max_abs >= 0 && s->max_abs > args.max_abs,
         absl::StrFormat("top-K max_abs %.6g > %.6g at position %d token %d", s->max_abs,
                         args.max_abs, s->worst_abs_position, s->worst_abs_token));
  Breach(&breach, args.max_nmse >= 0 && s->nmse > args.max_nmse,
         absl::StrFormat("nmse %.6g > %.6g", s->nmse, args.max_nmse));
  const double dec = s->decisive > 0 ? static_cast<double>(s->decisive_agree) / s->decisive : 1.0;
  Breach(&breach, args.min_decisive_top1 >= 0 && dec < args.min_decisive_top1,
         absl::StrFormat("decisive top1 agreement %.4f < %.4f (first flip at position %d)", dec,
                         args.min_decisive_top1, s->first_decisive_flip));
  if (!breach.empty()) throw CliError(1, "compare: " + breach);
  if (!args.json) std::puts("PASS");
}

}  // namespace

void RegisterCompare(CLI::App& app) {
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
  sub->add_flag("--golden-topk", args->topk,
                "B is a compact golden [positions, 1 + 2K] (log-sum-exp, top-K ids, their logits; "
                "golden/real): --max-abs and --max-nmse then cover the top-K entries");
  sub->add_option("--max-lse-abs", args->max_lse_abs,
                  "With --golden-topk: fail if any row's |log-sum-exp(A) - golden's| exceeds this")
      ->check(bound);
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
    if (args->topk) {
      CompareTopK(*args, *a, *b);
      return;
    }
    if (args->max_lse_abs >= 0) {
      throw CliError(2, "--max-lse-abs needs --golden-topk (B must be a compact golden)");
    }
    if (a->shape.size() != 2 || a->shape != b->shape) {
      throw CliError(2, absl::StrFormat(
          "%s is %s and %s is %s; both must be 2-D [positions, vocab] of one shape", args->a,
          Shape(a->shape), args->b, Shape(b->shape)));
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
    auto check = [&](bool bad, const std::string& what) { Breach(&breach, bad, what); };
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
