// `lockstep quantize IN --type T --out OUT`: requantizes a model's 2-D weights (docs/quantize.md).
#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/models/requantize.h"
#include "engine/store/model_store.h"

namespace lockstep::cli {

void RegisterQuantize(CLI::App& app) {
  struct Args {
    std::string model, type, out, fallback;
    bool keep_embeddings = false;
    bool quiet = false;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "quantize", "Requantize a model's 2-D weight matrices to one type (docs/quantize.md)");
  sub->add_option("MODEL", args->model, "GGUF file path or known model name (see `models`)")
      ->required();
  sub->add_option("--type", args->type, "Target type: F32, F16, BF16, Q4_0, Q8_0, Q4_K, ...")
      ->required();
  sub->add_option("--out", args->out, "Output GGUF path (written whole, then renamed into place)")
      ->required();
  sub->add_option("--fallback", args->fallback,
                  "Type for weights whose row length is not a multiple of --type's block size "
                  "(without it, such a weight is an error)");
  sub->add_flag("--keep-embeddings", args->keep_embeddings,
                "Keep token_embd.weight and output.weight in their current type");
  sub->add_option("--threads", args->threads, "Worker threads (0 = all cores)");
  sub->add_flag("-q,--quiet", args->quiet, "No per-tensor progress lines");
  sub->callback([args] {
    models::RequantizeOptions options;
    auto type = models::ParseTargetType(args->type);
    ThrowIfError(type.status());
    options.type = *type;
    if (!args->fallback.empty()) {
      auto fb = models::ParseTargetType(args->fallback);
      if (!fb.ok()) throw CliError(2, "--fallback: " + std::string(fb.status().message()));
      options.fallback = *fb;
    }
    options.keep_embeddings = args->keep_embeddings;
    options.threads = args->threads;
    if (!args->quiet) {
      options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    }
    auto path = store::ResolveModel(args->model);
    ThrowIfError(path.status());
    auto summary = models::RequantizeFile(*path, args->out, options);
    ThrowIfError(summary.status());
    std::fputs(models::DescribeSummary(*summary, options).c_str(), stderr);
    std::printf("%s\n", args->out.c_str());
  });
}

}  // namespace lockstep::cli
