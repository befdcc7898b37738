// Chat templates rendered by the engine vs. Python jinja2 rendering them as transformers does
// (oracle/gen_template_golden.py -> golden/templates/cases.json): every case byte-identical, or
// an error where jinja2 raised (with the same raise_exception message). The SmolLM2 template is
// also checked against the real GGUF's tokenizer.chat_template.
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/chat_template.h"
#include "gtest/gtest.h"
#include "tests/support/golden_manifest.h"
#include "nlohmann/json.hpp"

namespace lockstep::tokenizer {
namespace {

const std::string kTemplateDir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/templates/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateGolden, EveryCaseMatchesJinja2) {
  auto cases = nlohmann::ordered_json::parse(ReadFile(kTemplateDir + "cases.json"));
  ASSERT_TRUE(cases.is_array());
  std::map<std::string, ChatTemplate> templates;
  int rendered = 0, errors = 0, snippets = 0;
  for (const auto& c : cases) {
    // A case names a template file, or carries a short template inline (a snippet).
    const bool inline_source = c.contains("source");
    const std::string file = inline_source ? c["name"].get<std::string>() : c["template"].get<std::string>();
    const std::string label = file + " " + c["name"].get<std::string>();
    if (!templates.count(file)) {
      auto parsed = ChatTemplate::Parse(inline_source ? c["source"].get<std::string>()
                                                      : ReadFile(kTemplateDir + file));
      ASSERT_TRUE(parsed.ok()) << file << ": " << parsed.status();
      templates.emplace(file, *std::move(parsed));
      snippets += inline_source;
    }
    RenderOptions options;
    options.add_generation_prompt = c["add_generation_prompt"];
    options.bos_token = c["bos_token"];
    options.eos_token = c["eos_token"];
    options.extra_context = c["extra_context"];
    auto out = templates.at(file).RenderJson(c["messages"], options);
    if (c.contains("error")) {
      ++errors;
      ASSERT_FALSE(out.ok()) << label << ": jinja2 raised " << c["error_message"]
                             << " but the engine rendered:\n" << *out;
      if (c["error"] == "raise_exception") {
        std::string want = "raise_exception: " + c["error_message"].get<std::string>();
        EXPECT_TRUE(absl::EndsWith(out.status().message(), want))
            << label << ": got " << out.status() << "\nwant a message ending in " << want;
      }
      continue;
    }
    ++rendered;
    ASSERT_TRUE(out.ok()) << label << ": " << out.status();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << label;
  }
  // Report what "green" covered.
  std::printf("chat template golden: %zu template files + %d snippets, %d renders byte-identical, "
              "%d errors matched\n",
              templates.size() - snippets, snippets, rendered, errors);
  EXPECT_GE(templates.size() - snippets, 6u);
  EXPECT_GE(errors, 1);
}

TEST(ChatTemplateGolden, SmolLM2TemplateIsTheGgufOwn) {
  const char* home = std::getenv("HOME");
  std::string path = std::string(home ? home : "/root") +
                     "/.cache/lockstep/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::ifstream probe(path);
  ASSERT_TRUE(probe.good()) << path
                            << " is missing; fetch it with `build/bin/lockstep pull smollm2-135m`";
  auto file = gguf::File::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const gguf::Value* tpl = file->Find("tokenizer.chat_template");
  ASSERT_NE(tpl, nullptr) << path << " has no tokenizer.chat_template";
  EXPECT_EQ(tpl->str, ReadFile(kTemplateDir + "smollm2.jinja"));

  auto parsed = ChatTemplate::Parse(tpl->str);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto out = parsed->Render({{"user", "Hi"}}, true, "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// Every file of golden/templates hashes to its MANIFEST.json entry and nothing is unlisted.
TEST(ChatTemplateGoldenManifest, EveryFileMatchesItsSha256) {
  const std::string dir = std::string(LOCKSTEP_SOURCE_DIR) + "/golden/templates";
  for (const std::string& f : ::lockstep::testing::CheckManifest(dir)) {
    ADD_FAILURE() << f;
  }
}

}  // namespace
}  // namespace lockstep::tokenizer
