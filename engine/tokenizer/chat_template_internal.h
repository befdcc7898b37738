// Internals of the chat-template interpreter (chat_template.h): values with Python semantics,
// the token stream, the syntax tree, and the three stages (lex, parse, evaluate) that pass them on.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_template.h"

namespace lockstep::tokenizer::chat_template_internal {

// Syntax nesting (parenthesised expressions, nested tags, operator chains) is capped so that
// parsing, evaluation and tree destruction recurse a bounded number of frames.
inline constexpr int kMaxSyntaxDepth = 96;
// Values nest at most this deep (lists in dicts in lists ...), so repr/tojson/equality recursion
// stays bounded too.
inline constexpr int kMaxValueDepth = 64;
// jinja2.sandbox.MAX_RANGE.
inline constexpr int64_t kMaxRange = 100000;

struct Pos {
  int line = 1;
  int col = 1;
};
// "chat template line L:C: <what>" as an InvalidArgument status.
absl::Status TemplateError(Pos pos, std::string_view what);

// ---------------------------------------------------------------------------------------------
// Values. Containers are immutable once built (the sandbox is an immutable one) and shared;
// a namespace() is the one mutable object, shared by reference like Python's.

struct Value;
struct List;
struct Dict;
struct Namespace;
struct Callable;
struct LoopInfo;

// Python sequences the interpreter distinguishes: a list and a tuple print differently and are
// never equal; a range or dict view (re-iterable) and a generator (one pass) cannot be printed,
// serialized or compared the way Python does it without their types, so those are errors.
enum class SeqKind { kList, kTuple, kView, kIterator };

struct Undefined {
  // What jinja2 would say if the value is used in a way that fails ("'x' is undefined").
  std::shared_ptr<const std::string> hint;
};
struct None {};
using Str = std::shared_ptr<const std::string>;  // always valid UTF-8

struct Value {
  std::variant<Undefined, None, bool, int64_t, Str, std::shared_ptr<const List>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
               std::shared_ptr<const Callable>, std::shared_ptr<const LoopInfo>>
      v;

  static Value MakeUndefined(std::string hint);
  static Value MakeNone() { return Value{None{}}; }
  static Value MakeBool(bool b) { return Value{b}; }
  static Value MakeInt(int64_t i) { return Value{i}; }
  static Value MakeStr(std::string s);
  static Value MakeList(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value MakeDict(std::vector<std::pair<std::string, Value>> items);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  // Python's bool is an int: True + 1 == 2, True == 1.
  bool is_int_like() const { return is_bool() || std::holds_alternative<int64_t>(v); }
  bool is_str() const { return std::holds_alternative<Str>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<const Dict>>(v); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v); }
  bool is_loop() const { return std::holds_alternative<std::shared_ptr<const LoopInfo>>(v); }

  int64_t as_int() const { return is_bool() ? std::get<bool>(v) : std::get<int64_t>(v); }
  const std::string& str() const { return *std::get<Str>(v); }
  const List& list() const { return *std::get<std::shared_ptr<const List>>(v); }
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(v); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(v); }
  const Callable& fn() const { return *std::get<std::shared_ptr<const Callable>>(v); }
  const LoopInfo& loop() const { return *std::get<std::shared_ptr<const LoopInfo>>(v); }
  const std::string& undefined_hint() const { return *std::get<Undefined>(v).hint; }
  // Nesting depth of containers (0 for scalars).
  int depth() const;
  // Whether this is, or a container that holds, a namespace, loop or function: the values that
  // could make a reference cycle if stored into a namespace attribute.
  bool holds_refs() const;
};

struct List {
  std::vector<Value> items;
  SeqKind kind = SeqKind::kList;
  int depth = 1;
  bool holds_refs = false;
  mutable bool consumed = false;  // a kIterator yields its items once
  bool opaque() const { return kind == SeqKind::kView || kind == SeqKind::kIterator; }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python keeps it
  int depth = 1;
  bool holds_refs = false;
  const Value* Find(std::string_view key) const;
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  Value* Find(std::string_view key);
};

// Globals and bound methods. `receiver` is the object a method is bound to.
enum class Builtin {
  kRaiseException, kNamespace, kRange, kDict, kStrftimeNow,
  kStrStrip, kStrLstrip, kStrRstrip, kStrStartswith, kStrEndswith, kStrSplit, kStrReplace,
  kStrUpper, kStrLower, kStrCapitalize, kStrJoin,
  kDictItems, kDictKeys, kDictValues, kDictGet,
  kLoopCycle,
};
struct Callable {
  Builtin id;
  std::string name;
  Value receiver;
};

// `loop` inside a for: the iterated items and the current position.
struct LoopInfo {
  std::shared_ptr<const std::vector<Value>> items;
  int64_t index0 = 0;
};

// ---------------------------------------------------------------------------------------------
// Python semantics on values (chat_template_value.cc). Functions that can fail return a Status
// whose message has no position; the evaluator prefixes the line:column.

// Counts work so that no render runs unbounded; every deep operation charges it.
struct Budget {
  RenderLimits limits;
  uint64_t steps = 0;
  absl::Status Charge(uint64_t n);
  absl::Status ChargeBytes(uint64_t n) { return Charge(1 + n / 16); }
  absl::Status CheckString(uint64_t size) const;
  absl::Status CheckElements(uint64_t count) const;
};

bool Truthy(const Value& v);
// Python ==, with jinja2's Undefined == Undefined.
absl::StatusOr<bool> Equal(const Value& a, const Value& b, Budget& budget);
// Python <; TypeError (as a status) for unordered types.
absl::StatusOr<bool> Less(const Value& a, const Value& b, Budget& budget);
// Python str() as jinja2 prints it (Undefined prints as "").
absl::StatusOr<std::string> ToStr(const Value& v, Budget& budget);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct JsonFormat {
  bool ensure_ascii = false;
  int indent = -1;  // -1: None
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
absl::StatusOr<std::string> ToJson(const Value& v, const JsonFormat& format, Budget& budget);
// Python type names for error messages ("str", "list", "dict", "NoneType", ...).
std::string TypeName(const Value& v);
// A value from parsed JSON (request messages, extra context); floats are rejected.
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j, std::string_view where, int depth);

// UTF-8 helpers; strings are code-point sequences as in Python.
bool IsValidUtf8(std::string_view s, size_t* bad_offset);
std::vector<uint32_t> DecodeUtf8(std::string_view s);
void AppendUtf8(std::string& out, uint32_t cp);
std::string EncodeUtf8(const std::vector<uint32_t>& cps);
bool IsPyWhitespace(uint32_t cp);
// str.strip/lstrip/rstrip; `chars` null means whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// str.upper/lower/capitalize; non-ASCII text that has case is refused (no Unicode tables here).
absl::StatusOr<std::string> PyCase(std::string_view s, char mode /* 'u', 'l', 'c' */);
// str.split(sep, maxsplit); sep null means runs of whitespace.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 means all.
absl::StatusOr<std::string> PyReplace(std::string_view s, std::string_view old_s,
                                      std::string_view new_s, int64_t count, Budget& budget);
// Python slice semantics over a sequence of `len` items: fills the picked indices.
absl::Status PySliceIndices(int64_t len, const Value& start, const Value& stop, const Value& step,
                            std::vector<int64_t>& picked);

// ---------------------------------------------------------------------------------------------
// Operations and builtins (chat_template_builtins.cc); errors carry no position.

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Helpers for implementing builtins.
absl::Status UndefinedError(const Value& v);  // the error of using an Undefined
absl::Status TypeError(std::string msg);
Value Method(Builtin id, std::string name, const Value& receiver);
// Binds call arguments to `params` by position, then by keyword, as Python does; unset
// optional parameters stay nullopt.
absl::StatusOr<std::vector<std::optional<Value>>> Bind(std::string_view fname, const CallArgs& a,
                                                       std::initializer_list<std::string_view> params,
                                                       size_t required);
// A str argument (nullptr when absent or None) / an int argument (`fallback` when absent/None).
absl::StatusOr<const std::string*> StrArg(std::string_view fname, const std::optional<Value>& v);
absl::StatusOr<int64_t> IntArg(std::string_view fname, const std::optional<Value>& v,
                               int64_t fallback);

// for-loop and `in` iteration: str yields characters, dict its keys, Undefined nothing.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
absl::StatusOr<bool> Contains(const Value& container, const Value& needle, Budget& budget);
// + - * / // % ** (not ~, which is str() concatenation).
absl::StatusOr<Value> Arith(std::string_view op, const Value& a, const Value& b, Budget& budget);
absl::StatusOr<Value> Negate(const Value& v);
// jinja2's sandboxed getattr (attribute first, then item) and getitem (item first, then
// attribute); a miss is Undefined, using Undefined is the error.
absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key, Budget& budget);
absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step, Budget& budget);
absl::StatusOr<Value> Call(const Value& callee, const CallArgs& args, Budget& budget);
absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const CallArgs& args,
                                  Budget& budget);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& args,
                               Budget& budget);
// The globals transformers provides: raise_exception, namespace, range, dict, strftime_now.
std::vector<std::pair<std::string, Value>> BuiltinGlobals();

// ---------------------------------------------------------------------------------------------
// Tokens (chat_template_lexer.cc).

enum class Tok {
  kData,        // literal text between tags, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kInt,
  kString,  // value unescaped
  kOp,      // operator or punctuation, text in `text`
  kEof,
};
struct Token {
  Tok kind;
  std::string text;
  int64_t int_value = 0;
  Pos pos;
};
// Normalizes newlines, drops one trailing newline (keep_trailing_newline=False), then tokenizes
// with trim_blocks and lstrip_blocks.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

// ---------------------------------------------------------------------------------------------
// Syntax tree (chat_template_parser.cc).

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // args: items
  kTuple,      // args: items
  kDict,       // args: key0, value0, key1, value1, ...
  kGetAttr,    // args[0].name
  kGetItem,    // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (a missing part is a None literal)
  kCall,       // args[0](args[1:], kwargs)
  kFilter,     // args[0] | name(args[1:], kwargs)
  kTest,       // args[0] is name(args[1:]); `negated` for `is not`
  kNot,        // not args[0]
  kNeg,        // -args[0]
  kPos,        // +args[0]
  kBinary,     // args[0] <name> args[1]: + - * / // % ** ~
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ... (chained as in Python)
  kAnd,        // args[0] and args[1]
  kOr,         // args[0] or args[1]
  kCondExpr,   // args[1] if args[0] else args[2] (args[2] absent: Undefined)
};

struct Expr {
  ExprKind kind;
  Pos pos;
  int height = 1;  // longest path to a leaf, bounded by kMaxSyntaxDepth
  bool negated = false;
  Value literal;
  std::string name;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // branches (cond, body) ...; else_body
  kFor,       // for targets in expr [if cond]: body [else else_body]
  kSet,       // set targets = expr, or set targets[0].attr = expr
  kSetBlock,  // set targets[0] %} body {% endset
  kBreak,
  kContinue,
};

struct Stmt {
  Stmt(StmtKind k, Pos p) : kind(k), pos(p) {}
  StmtKind kind;
  Pos pos;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> cond;  // for-loop filter
  std::vector<std::pair<std::unique_ptr<Expr>, std::vector<Stmt>>> branches;
  std::vector<Stmt> body;
  std::vector<Stmt> else_body;
  std::vector<std::string> targets;
  std::string attr;  // set ns.attr
};

struct Program {
  std::vector<Stmt> body;
};

absl::StatusOr<std::shared_ptr<const Program>> ParseProgram(std::vector<Token> tokens);

// The filters and tests the evaluator implements (the parser refuses others up front).
bool IsSupportedFilter(std::string_view name);
bool IsSupportedTest(std::string_view name);

// Evaluation (chat_template_eval.cc): `context` holds the top-level variables.
absl::StatusOr<std::string> Evaluate(const Program& program,
                                     std::vector<std::pair<std::string, Value>> context,
                                     const RenderLimits& limits);

}  // namespace lockstep::tokenizer::chat_template_internal
