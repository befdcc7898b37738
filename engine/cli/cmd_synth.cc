// `lockstep synth --arch A --shape S --quant Q --seed N --out M.gguf`: a real-size model with
// seeded random weights, for benchmarks (engine/models/synth.h; docs/models.md).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/cli/commands.h"
#include "engine/models/synth.h"

namespace lockstep::cli {

void RegisterSynth(CLI::App& app) {
  struct Args {
    models::SynthOptions options;
    std::string out;
    bool force = false;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  std::vector<std::string> archs, shapes;
  for (const models::SynthShape& s : models::kSynthShapes) {
    if (std::find(archs.begin(), archs.end(), s.arch) == archs.end()) archs.emplace_back(s.arch);
    if (std::find(shapes.begin(), shapes.end(), s.shape) == shapes.end()) {
      shapes.emplace_back(s.shape);
    }
  }
  CLI::App* sub = app.add_subcommand(
      "synth", "Write a real-size model with seeded random weights (benchmarks; docs/models.md)");
  models::SynthOptions& o = args->options;
  sub->add_option("--arch", o.arch, "Architecture: " + absl::StrJoin(archs, ", "))->required();
  sub->add_option("--shape", o.shape,
                  "Shape: " + absl::StrJoin(shapes, ", ") +
                      " (1b, 8b: the shapes of Llama-3.2-1B / Llama-3-8B, Qwen3-1.7B / Qwen3-8B, "
                      "Gemma-3-1B / Gemma-3-4B)")
      ->required();
  sub->add_option("--quant", o.quant,
                  "Quantization mix, as llama-quantize names it: " +
                      absl::StrJoin(models::kSynthQuants, ", "))
      ->required();
  sub->add_option("--seed", o.seed, "Weight seed: the same seed gives the same bytes")->required();
  sub->add_option("--out", args->out,
                  "Output GGUF path (written beside it as <out>.tmp.<pid>, renamed when complete)")
      ->required();
  sub->add_flag("--force", args->force, "Overwrite --out if it exists");
  sub->add_option("--threads", o.threads,
                  "Worker threads (0 = all cores; the bytes do not depend on it)");
  sub->add_option("--layers", o.layers, "Block count instead of the shape's (quick tests)");
  sub->add_option("--vocab", o.vocab, "Vocabulary size instead of the shape's");
  sub->add_flag("-q,--quiet", args->quiet, "No per-tensor progress lines");
  sub->callback([args] {
    if (!args->quiet) {
      args->options.progress = [](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
      };
    }
    auto summary = models::WriteSynth(args->options, args->out, args->force);
    ThrowIfError(summary.status());
    std::fputs(models::DescribeSynth(*summary).c_str(), stderr);
    std::printf("%s\n", args->out.c_str());
  });
}

}  // namespace lockstep::cli
