// libFuzzer target for the model and tokenizer loaders on GGUF metadata (issue 9): any input
// either parses as GGUF or is rejected; a parsed file either loads as a model (hyperparameters
// read through its family, every tensor bound and shape-checked) or is refused with a message,
// and likewise for its tokenizer. A loaded model's config must be self-consistent (the checks
// below), and a loaded tokenizer must encode and decode a short text without an id out of range.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/gguf/gguf.h"
#include "engine/models/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "model_loader_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  auto file = gguf::File::FromBytes(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  auto tok = tokenizer::Tokenizer::FromGguf(*file);
  if (!tok.ok()) {
    if (tok.status().message().empty()) Fail("tokenizer error without a message");
  } else {
    const std::string text = "Hello, world! 123 \xC3\xA9";
    const std::vector<int32_t> ids = tok->Encode(text, tok->add_bos_default(), true);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok->vocab_size()) Fail("Encode produced an id outside the vocabulary");
    }
    if (!tok->Decode(ids).ok()) Fail("Decode of Encode's ids failed");
    (void)tok->CheckEncodable(text);
  }
  auto model = models::Model::FromFile(*std::move(file));
  if (!model.ok()) {
    if (model.status().message().empty()) Fail("model error without a message");
    return 0;
  }
  const models::Config& c = (*model)->config();
  if (c.n_layer <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0 ||
      c.head_dim <= 0 || c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_vocab <= 0 ||
      static_cast<int64_t>(c.layers.size()) != c.n_layer) {
    Fail("a loaded model has an inconsistent config");
  }
  return 0;
}
