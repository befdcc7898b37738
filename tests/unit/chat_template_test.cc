// Chat-template interpreter: errors name the construct and its line:column, unsupported
// constructs are errors (never a different prompt), jinja2's Undefined rules hold, and hostile
// templates (deep nesting, unbounded loops, huge strings) end in an error, not a crash or hang.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/tokenizer/chat_template.h"
#include "gtest/gtest.h"

namespace lockstep::tokenizer {
namespace {

const std::vector<ChatMessage> kConversation = {{"system", "Be brief."}, {"user", "Hi"}};

absl::StatusOr<std::string> RenderSource(std::string_view source,
                                         const std::vector<ChatMessage>& messages = kConversation) {
  auto tpl = ChatTemplate::Parse(source);
  if (!tpl.ok()) return tpl.status();
  return tpl->Render(messages, true, "<s>", "</s>");
}

void ExpectError(std::string_view source, std::string_view want_substring) {
  auto out = RenderSource(source);
  ASSERT_FALSE(out.ok()) << source << " rendered: " << *out;
  EXPECT_NE(std::string(out.status().message()).find(want_substring), std::string::npos)
      << source << "\n got: " << out.status().message() << "\nwant: " << want_substring;
}

void ExpectRender(std::string_view source, std::string_view want) {
  auto out = RenderSource(source);
  ASSERT_TRUE(out.ok()) << source << ": " << out.status();
  EXPECT_EQ(*out, want) << source;
}

TEST(ChatTemplateErrors, NameConstructAndPosition) {
  ExpectError("hello\n  {{ x | wordcount }}", "chat template line 2:10: unsupported filter \"wordcount\"");
  ExpectError("{% macro f() %}{% endmacro %}", "line 1:4: unsupported tag \"macro\"");
  ExpectError("ab\n{% frobnicate %}", "line 2:4: unknown tag \"frobnicate\"");
  ExpectError("{{ x is prime }}", "line 1:9: unsupported test \"prime\"");
  ExpectError("{% if x %}\n{% for m in messages %}", "line 2:4: missing {% endfor %}");
  ExpectError("{% endif %}", "line 1:4: unexpected tag \"endif\"");
  ExpectError("a {{ 'unterminated }}", "line 1:6: unterminated string literal");
  ExpectError("x\n\n   {{ 1 +", "line 3:4: unclosed '{{'");
  ExpectError("{{ 1.5 }}", "line 1:4: unsupported float literal");
  ExpectError("{# never closed", "line 1:1: unclosed comment");
  ExpectError("{{ (1 ]] }}", "line 1:7: unexpected ']', expected ')'");
  ExpectError("{% for x in y recursive %}{% endfor %}", "unsupported recursive for loop");
  ExpectError("{% break %}", "'break' outside of a for loop");
  ExpectError("{{ f(*args) }}", "unsupported *args");
  ExpectError("{{ messages[::, 1] }}", "line 1:12: unsupported subscript with several keys");
  ExpectError(std::string("{{ '\xff' }}"), "not valid UTF-8 (byte 4)");
}

TEST(ChatTemplateErrors, RuntimeErrorsCarryPosition) {
  ExpectError("\n {{ raise_exception('Roles must alternate') }}",
              "chat template line 2:20: raise_exception: Roles must alternate");
  ExpectError("{{ 1 + 'a' }}", "line 1:6: unsupported operand type(s) for +: 'int' and 'str'");
  ExpectError("{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str");
  ExpectError("{{ 7 / 2 }}", "unsupported true division");
  ExpectError("{{ 1 // 0 }}", "integer division or modulo by zero");
  ExpectError("{{ strftime_now('%Y') }}", "unsupported strftime_now()");
  ExpectError("{{ 'é'.upper() }}", "non-ASCII text (U+00E9) is unsupported");
  ExpectError("{{ ['é'] }}", "non-ASCII text is unsupported");
  ExpectError("{{ 'x'.title() }}", "unsupported attribute 'title' of a str");
  ExpectError("{{ messages.append(1) }}", "unsupported attribute 'append' of a list");
  ExpectError("{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute on non-namespace object");
  ExpectError("{% for a, b in [[1, 2, 3]] %}{% endfor %}", "too many values to unpack (expected 2, got 3)");
  ExpectError("{{ 9223372036854775807 + 1 }}", "integer overflow");
  ExpectError("{{ {1: 2} }}", "unsupported dict key of type int");
  ExpectError("{{ range(3) }}", "printing a range or dict view object is unsupported");
  ExpectError("{% set ns = namespace() %}{% set ns.me = [ns] %}",
              "line 1:30: unsupported: a namespace attribute holding a namespace");
}

// jinja2's default Undefined: printing and iterating are silent, using it otherwise fails.
TEST(ChatTemplateUndefined, MatchesJinja2) {
  ExpectRender("[{{ missing }}]", "[]");
  ExpectRender("{% for x in missing %}x{% endfor %}|{{ missing|length }}|{{ missing ~ 'a' }}", "|0|a");
  ExpectRender("{{ missing is defined }} {{ missing == missing }} {{ not missing }}", "False True True");
  ExpectRender("[{{ messages[0].nope }}][{{ messages[9] }}]", "[][]");
  ExpectRender("{{ missing|default('d') }} {{ missing|trim }}.", "d .");
  ExpectError("{{ missing.attr }}", "line 1:11: 'missing' is undefined");
  ExpectError("{{ messages[0].nope.x }}", "'dict object' has no attribute 'nope'");
  ExpectError("{{ messages[9].role }}", "list object has no element 9");
  ExpectError("{{ missing + 'a' }}", "'missing' is undefined");
  ExpectError("{{ missing < 1 }}", "'missing' is undefined");
  ExpectError("{{ missing() }}", "'missing' is undefined");
}

TEST(ChatTemplateScoping, LoopScopeDoesNotLeakButNamespaceDoes) {
  ExpectRender("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}",
               "0505050");
  ExpectRender("{% if true %}{% set y = 3 %}{% endif %}{{ y }}", "3");
  ExpectRender("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
               "{% endfor %}{{ ns.n }}",
               "6");
}

TEST(ChatTemplateWhitespace, TrimBlocksAndLstripBlocks) {
  ExpectRender("  {% if true %}\n  x\n  {% endif %}\n  y", "  x\n  y");
  ExpectRender("a  {# c #}  b\n  {#- c -#}  \n d", "a    bd");
  ExpectRender("  {%+ if true %}x{% endif %}", "  x");
  ExpectRender("a\n{{- ' b ' -}}\n c", "a b c");
  ExpectRender("line\n", "line");  // one trailing newline is dropped
  ExpectRender("x\r\ny", "x\ny");
}

TEST(ChatTemplateLimits, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string parens = std::string(20000, '(') + "1" + std::string(20000, ')');
  ExpectError("{{ " + parens + " }}", "nesting deeper than");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  ExpectError(ifs, "nesting deeper than");
  std::string sum = "{{ 1";
  for (int i = 0; i < 50000; ++i) sum += " + 1";
  ExpectError(sum + " }}", "nested deeper than");
  std::string nots = "{{ ";
  for (int i = 0; i < 50000; ++i) nots += "not ";
  ExpectError(nots + "1 }}", "nesting deeper than");
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 50000; ++i) filters += "|trim";
  ExpectError(filters + " }}", "nested deeper than");
}

TEST(ChatTemplateLimits, ValueNestingIsBounded) {
  std::string nested = "[";
  for (int i = 0; i < 80; ++i) nested += "[";
  nested += std::string(81, ']');
  ExpectError("{{ " + nested + " }}", "nested deeper than");
  ExpectError("{% set ns = namespace(x=[]) %}{% for i in range(200) %}{% set ns.x = [ns.x] %}"
              "{% endfor %}{{ ns.x|tojson }}",
              "values nested deeper than 64 levels");
}

TEST(ChatTemplateLimits, UnboundedWorkIsAnError) {
  auto tpl = ChatTemplate::Parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(tpl.ok()) << tpl.status();
  auto out = tpl->Render(kConversation, false, "", "");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_TRUE(absl::StrContains(out.status().message(), "evaluation steps")) << out.status();

  ExpectError("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
              "the rendered prompt exceeds the limit");
  ExpectError("{{ 'x' * 1000000000000 }}", "over the limit");
  ExpectError("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
              "{% endfor %}",
              "over the limit");
  ExpectError("{{ range(100001)|length }}",
              "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(ChatTemplateValues, PythonSemantics) {
  ExpectRender("{{ [1, 'a', none, true, (2,)] }} {{ {'k': [1]} }}", "[1, 'a', None, True, (2,)] {'k': [1]}");
  ExpectRender("{{ -7 // 2 }} {{ -7 % 3 }} {{ 1 == true }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }}",
               "-4 2 True True True");
  ExpectRender("{{ 'h\\u00e9llo 😀'[1] }}{{ 'h\\u00e9llo 😀'[-1:] }}{{ 'h\\u00e9llo 😀'|length }}",
               "é😀7");
  ExpectRender("{{ 'a\\qb' }} {{ '\\x41\\101\\u0042' }}", "a\\qb AAB");
  ExpectRender("{{ 'é'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ '😀'|tojson(true) }}",
               "\"é\" \"\\u00e9\" \"\\ud83d\\ude00\"");
  ExpectRender("{{ {'b': 1, 'a': [1, {}]}|tojson(sort_keys=true, indent=1) }}",
               "{\n \"a\": [\n  1,\n  {}\n ],\n \"b\": 1\n}");
  ExpectRender("{% for k, v in {'x': 1, 'y': 2}|items %}{{ k }}{{ v }}{% endfor %}", "x1y2");
  ExpectRender("{{ ' a\\u3000'.strip() }}|{{ 'a b'.split(none, 0) }}|{{ 'ab'.replace('', '-') }}",
               "a|['a b']|-a-b-");
}

TEST(ChatMessagesJson, ErrorsNameIndexAndField) {
  auto ok = ParseChatMessagesJson(R"([{"role": "user", "content": "hi"}])");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].content, "hi");
  auto err = [](std::string_view json) { return std::string(ParseChatMessagesJson(json).status().message()); };
  EXPECT_EQ(err("{}"), "messages: expected an array, got object");
  // Issue 9: the parse error names the byte offset where parsing stopped.
  EXPECT_EQ(err("[1").rfind("messages: not valid JSON at byte offset 2: ", 0), 0u) << err("[1");
  EXPECT_EQ(err(R"([{"role": "user",, ])").rfind("messages: not valid JSON at byte offset 17: ", 0), 0u)
      << err(R"([{"role": "user",, ])");
  EXPECT_EQ(err(R"([{"role": "user", "content": "a"}, 3])"), "messages[1]: expected an object, got number");
  EXPECT_EQ(err(R"([{"role": "user"}])"), "messages[0].content: missing");
  EXPECT_EQ(err(R"([{"role": "user", "content": 5}])"), "messages[0].content: expected a string, got number");
  EXPECT_EQ(err(R"([{"role": "user", "content": "", "name": "x"}])"), "messages[0].name: unknown field");
}

TEST(ChatTemplateRender, JsonMessagesRejectFloats) {
  auto tpl = ChatTemplate::Parse("{{ messages }}");
  ASSERT_TRUE(tpl.ok());
  auto out = tpl->RenderJson(nlohmann::ordered_json::parse(R"([{"role": "user", "content": 1.5}])"),
                             RenderOptions{});
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::StrContains(out.status().message(), "messages[0].content: number values are unsupported"))
      << out.status();
}

}  // namespace
}  // namespace lockstep::tokenizer
