// The chat-template parser: recursive descent over the token stream with jinja2's grammar and
// operator precedence (jinja2/parser.py), building the tree that chat_template_eval.cc walks.
// Tags, filters and tests outside the supported set are refused here, naming them.
#include <algorithm>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer::chat_template_internal {

bool IsSupportedFilter(std::string_view name) {
  static constexpr std::string_view kFilters[] = {
      "trim", "length", "count", "upper", "lower", "capitalize", "default", "d", "tojson",
      "first", "last", "join", "replace", "string", "list", "items", "reverse", "abs"};
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsSupportedTest(std::string_view name) {
  static constexpr std::string_view kTests[] = {
      "defined", "undefined", "none",  "string", "number",      "integer", "boolean",
      "mapping", "sequence",  "iterable", "true", "false",      "even",    "odd",
      "divisibleby", "eq", "equalto", "ne", "lt", "lessthan", "le", "gt", "greaterthan", "ge",
      "in", "sameas", "callable"};
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

namespace {

using ExprP = std::unique_ptr<Expr>;

const char* DescribeKind(Tok kind) {
  switch (kind) {
    case Tok::kData: return "template text";
    case Tok::kVarBegin: return "'{{'";
    case Tok::kVarEnd: return "'}}'";
    case Tok::kBlockBegin: return "'{%'";
    case Tok::kBlockEnd: return "'%}'";
    case Tok::kName: return "name";
    case Tok::kInt: return "integer";
    case Tok::kString: return "string";
    case Tok::kOp: return "operator";
    case Tok::kEof: return "end of template";
  }
  return "token";
}

std::string Describe(const Token& t) {
  if (t.kind == Tok::kName || t.kind == Tok::kOp || t.kind == Tok::kInt) {
    return absl::StrCat("'", t.text, "'");
  }
  return DescribeKind(t.kind);
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<std::shared_ptr<const Program>> Run() {
    auto program = std::make_shared<Program>();
    std::string end;
    ASSIGN_OR_RETURN(program->body, ParseBody({}, &end));
    return std::shared_ptr<const Program>(std::move(program));
  }

 private:
  // Counts recursion so that nested input cannot exhaust the stack.
  class DepthGuard {
   public:
    explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
    ~DepthGuard() { --depth_; }
    bool too_deep() const { return depth_ > kMaxSyntaxDepth; }

   private:
    int& depth_;
  };

  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t k) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const { return Cur().kind == Tok::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const {
    return Cur().kind == Tok::kName && Cur().text == name;
  }
  absl::Status Fail(const Token& t, std::string_view what) const {
    return TemplateError(t.pos, what);
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) {
      return Fail(Cur(), absl::StrFormat("expected '%s', got %s", op, Describe(Cur())));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd(std::string_view tag) {
    if (Cur().kind != Tok::kBlockEnd) {
      return Fail(Cur(), absl::StrFormat("expected '%%}' to end the %s tag, got %s", tag,
                                         Describe(Cur())));
    }
    Advance();
    return absl::OkStatus();
  }
  absl::Status TooDeep(const Token& t) const {
    return Fail(t, absl::StrFormat("nesting deeper than %d levels", kMaxSyntaxDepth));
  }

  ExprP NewExpr(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  // Sets the height from the children; left-leaning operator chains are built by loops, so this
  // is where their depth is bounded.
  absl::StatusOr<ExprP> Finish(ExprP e) {
    int h = 0;
    for (const auto& a : e->args) h = std::max(h, a->height);
    for (const auto& [k, a] : e->kwargs) h = std::max(h, a->height);
    e->height = h + 1;
    if (e->height > kMaxSyntaxDepth) {
      return TemplateError(e->pos, absl::StrFormat("expression nested deeper than %d levels",
                                                   kMaxSyntaxDepth));
    }
    return e;
  }
  absl::StatusOr<ExprP> MakeBinary(ExprKind kind, std::string op, Pos pos, ExprP a, ExprP b) {
    ExprP e = NewExpr(kind, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return Finish(std::move(e));
  }

  // ---- statements ------------------------------------------------------------------------

  // Parses until one of `end_tags` opens a block ({% endfor ...) and consumes `{%` and the tag
  // name; `*found` is that name, or "" at the end of the template.
  absl::StatusOr<std::vector<Stmt>> ParseBody(std::initializer_list<std::string_view> end_tags,
                                              std::string* found) {
    DepthGuard guard(depth_);
    if (guard.too_deep()) return TooDeep(Cur());
    std::vector<Stmt> body;
    *found = "";
    while (true) {
      const Token& t = Cur();
      if (t.kind == Tok::kEof) return body;
      if (t.kind == Tok::kData) {
        Stmt s{StmtKind::kText, t.pos};
        s.text = t.text;
        body.push_back(std::move(s));
        Advance();
        continue;
      }
      if (t.kind == Tok::kVarBegin) {
        Stmt s{StmtKind::kOutput, t.pos};
        Advance();
        ASSIGN_OR_RETURN(s.expr, ParseTuple(true, {}, false));
        if (Cur().kind != Tok::kVarEnd) {
          return Fail(Cur(), absl::StrFormat("expected '}}' to end the print statement, got %s",
                                             Describe(Cur())));
        }
        Advance();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != Tok::kBlockBegin) return Fail(t, absl::StrCat("unexpected ", Describe(t)));
      Advance();
      const Token& name = Cur();
      if (name.kind != Tok::kName) return Fail(name, "expected a tag name after '{%'");
      if (std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
        *found = name.text;
        Advance();
        return body;
      }
      ASSIGN_OR_RETURN(Stmt s, ParseTag());
      body.push_back(std::move(s));
    }
  }

  absl::StatusOr<Stmt> ParseTag() {
    const Token tag = Cur();
    Advance();
    const std::string& n = tag.text;
    if (n == "for") return ParseFor(tag);
    if (n == "if") return ParseIf(tag);
    if (n == "set") return ParseSet(tag);
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) {
        return Fail(tag, absl::StrFormat("'%s' outside of a for loop", n));
      }
      RETURN_IF_ERROR(ExpectBlockEnd(n));
      return Stmt{n == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag.pos};
    }
    static constexpr std::string_view kJinjaTags[] = {
        "macro", "call", "filter", "block", "extends", "include", "import", "from", "with",
        "autoescape", "do", "trans", "print", "generation"};
    if (std::find(std::begin(kJinjaTags), std::end(kJinjaTags), n) != std::end(kJinjaTags)) {
      return Fail(tag, absl::StrFormat("unsupported tag \"%s\"", n));
    }
    if (n.rfind("end", 0) == 0 || n == "else" || n == "elif") {
      return Fail(tag, absl::StrFormat("unexpected tag \"%s\" (nothing open that it closes)", n));
    }
    return Fail(tag, absl::StrFormat("unknown tag \"%s\"", n));
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets(bool allow_attr, std::string* attr) {
    std::vector<std::string> names;
    bool paren = IsOp("(");
    if (paren) Advance();
    while (true) {
      if (Cur().kind != Tok::kName) {
        return Fail(Cur(), absl::StrFormat("expected a variable name, got %s", Describe(Cur())));
      }
      names.push_back(Cur().text);
      Advance();
      if (allow_attr && names.size() == 1 && !paren && IsOp(".")) {
        Advance();
        if (Cur().kind != Tok::kName) return Fail(Cur(), "expected an attribute name after '.'");
        *attr = Cur().text;
        Advance();
        return names;
      }
      if (!IsOp(",")) break;
      Advance();
      if (paren && IsOp(")")) break;
    }
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    return names;
  }

  absl::StatusOr<Stmt> ParseFor(const Token& tag) {
    Stmt s{StmtKind::kFor, tag.pos};
    std::string unused;
    ASSIGN_OR_RETURN(s.targets, ParseTargets(false, &unused));
    if (!IsName("in")) return Fail(Cur(), "expected 'in' in the for tag");
    Advance();
    ASSIGN_OR_RETURN(s.expr, ParseTuple(false, {"if", "recursive"}, false));
    if (IsName("if")) {
      Advance();
      ASSIGN_OR_RETURN(s.cond, ParseExpression());
    }
    if (IsName("recursive")) return Fail(Cur(), "unsupported recursive for loop");
    RETURN_IF_ERROR(ExpectBlockEnd("for"));
    std::string end;
    ++loop_depth_;
    auto body = ParseBody({"endfor", "else"}, &end);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s.body = std::move(body).value();
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd("else"));
      ASSIGN_OR_RETURN(s.else_body, ParseBody({"endfor"}, &end));
    }
    if (end.empty()) return Fail(tag, "missing {% endfor %} for this {% for %}");
    RETURN_IF_ERROR(ExpectBlockEnd("endfor"));
    return s;
  }

  absl::StatusOr<Stmt> ParseIf(const Token& tag) {
    Stmt s{StmtKind::kIf, tag.pos};
    std::string end = "if";
    while (end == "if" || end == "elif") {
      ASSIGN_OR_RETURN(ExprP cond, ParseTuple(false, {}, false));
      RETURN_IF_ERROR(ExpectBlockEnd(end));
      ASSIGN_OR_RETURN(std::vector<Stmt> body, ParseBody({"elif", "else", "endif"}, &end));
      s.branches.emplace_back(std::move(cond), std::move(body));
    }
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd("else"));
      ASSIGN_OR_RETURN(s.else_body, ParseBody({"endif"}, &end));
    }
    if (end.empty()) return Fail(tag, "missing {% endif %} for this {% if %}");
    RETURN_IF_ERROR(ExpectBlockEnd("endif"));
    return s;
  }

  absl::StatusOr<Stmt> ParseSet(const Token& tag) {
    Stmt s{StmtKind::kSet, tag.pos};
    ASSIGN_OR_RETURN(s.targets, ParseTargets(true, &s.attr));
    if (IsOp("=")) {
      Advance();
      ASSIGN_OR_RETURN(s.expr, ParseTuple(true, {}, false));
      RETURN_IF_ERROR(ExpectBlockEnd("set"));
      return s;
    }
    if (IsOp("|")) return Fail(Cur(), "unsupported filter on a block set");
    if (s.targets.size() != 1) return Fail(tag, "a block set assigns exactly one name");
    RETURN_IF_ERROR(ExpectBlockEnd("set"));
    s.kind = StmtKind::kSetBlock;
    std::string end;
    ASSIGN_OR_RETURN(s.body, ParseBody({"endset"}, &end));
    if (end.empty()) return Fail(tag, "missing {% endset %} for this {% set %}");
    RETURN_IF_ERROR(ExpectBlockEnd("endset"));
    return s;
  }

  // ---- expressions (precedence from loosest to tightest) --------------------------------

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    if (Cur().kind == Tok::kVarEnd || Cur().kind == Tok::kBlockEnd || IsOp(")")) return true;
    return Cur().kind == Tok::kName &&
           std::find(extra_end.begin(), extra_end.end(), Cur().text) != extra_end.end();
  }

  // `a, b, c` is a tuple; one expression alone is itself.
  absl::StatusOr<ExprP> ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                                   bool explicit_parens) {
    Pos pos = Cur().pos;
    std::vector<ExprP> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      ExprP item;
      if (with_condexpr) {
        ASSIGN_OR_RETURN(item, ParseExpression());
      } else {
        ASSIGN_OR_RETURN(item, ParseOr());
      }
      items.push_back(std::move(item));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) {
        return Fail(Cur(), absl::StrFormat("expected an expression, got %s", Describe(Cur())));
      }
    }
    ExprP e = NewExpr(ExprKind::kTuple, pos);
    e->args = std::move(items);
    return Finish(std::move(e));
  }

  absl::StatusOr<ExprP> ParseExpression() {
    Pos pos = Cur().pos;
    ASSIGN_OR_RETURN(ExprP expr, ParseOr());
    while (IsName("if")) {
      Advance();
      ExprP e = NewExpr(ExprKind::kCondExpr, pos);
      ASSIGN_OR_RETURN(ExprP cond, ParseOr());
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(expr));
      if (IsName("else")) {
        Advance();
        DepthGuard guard(depth_);
        if (guard.too_deep()) return TooDeep(Cur());
        ASSIGN_OR_RETURN(ExprP other, ParseExpression());
        e->args.push_back(std::move(other));
      }
      ASSIGN_OR_RETURN(expr, Finish(std::move(e)));
    }
    return expr;
  }

  absl::StatusOr<ExprP> ParseOr() {
    ASSIGN_OR_RETURN(ExprP left, ParseAnd());
    while (IsName("or")) {
      Pos pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprP right, ParseAnd());
      ASSIGN_OR_RETURN(left, MakeBinary(ExprKind::kOr, "or", pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprP> ParseAnd() {
    ASSIGN_OR_RETURN(ExprP left, ParseNot());
    while (IsName("and")) {
      Pos pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprP right, ParseNot());
      ASSIGN_OR_RETURN(left, MakeBinary(ExprKind::kAnd, "and", pos, std::move(left), std::move(right)));
    }
    return left;
  }

  absl::StatusOr<ExprP> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    DepthGuard guard(depth_);
    if (guard.too_deep()) return TooDeep(Cur());
    ExprP e = NewExpr(ExprKind::kNot, Cur().pos);
    Advance();
    ASSIGN_OR_RETURN(ExprP operand, ParseNot());
    e->args.push_back(std::move(operand));
    return Finish(std::move(e));
  }

  absl::StatusOr<ExprP> ParseCompare() {
    Pos pos = Cur().pos;
    ASSIGN_OR_RETURN(ExprP first, ParseMath1());
    ExprP e = NewExpr(ExprKind::kCompare, pos);
    e->args.push_back(std::move(first));
    while (true) {
      static constexpr std::string_view kCmp[] = {"==", "!=", "<", "<=", ">", ">="};
      if (Cur().kind == Tok::kOp &&
          std::find(std::begin(kCmp), std::end(kCmp), Cur().text) != std::end(kCmp)) {
        e->ops.push_back(Cur().text);
        Advance();
      } else if (IsName("in")) {
        e->ops.push_back("in");
        Advance();
      } else if (IsName("not") && Peek(1).kind == Tok::kName && Peek(1).text == "in") {
        e->ops.push_back("not in");
        Advance();
        Advance();
      } else {
        break;
      }
      ASSIGN_OR_RETURN(ExprP operand, ParseMath1());
      e->args.push_back(std::move(operand));
      if (e->args.size() > static_cast<size_t>(kMaxSyntaxDepth)) return TooDeep(Cur());
    }
    if (e->ops.empty()) return std::move(e->args[0]);
    return Finish(std::move(e));
  }

  // One level of left-associative binary operators.
  template <typename Next>
  absl::StatusOr<ExprP> ParseLeftAssoc(std::initializer_list<std::string_view> ops, Next next) {
    ASSIGN_OR_RETURN(ExprP left, (this->*next)());
    while (Cur().kind == Tok::kOp && std::find(ops.begin(), ops.end(), Cur().text) != ops.end()) {
      std::string op = Cur().text;
      Pos pos = Cur().pos;
      Advance();
      ASSIGN_OR_RETURN(ExprP right, (this->*next)());
      ASSIGN_OR_RETURN(left, MakeBinary(ExprKind::kBinary, op, pos, std::move(left), std::move(right)));
    }
    return left;
  }
  absl::StatusOr<ExprP> ParseMath1() { return ParseLeftAssoc({"+", "-"}, &Parser::ParseConcat); }
  absl::StatusOr<ExprP> ParseConcat() { return ParseLeftAssoc({"~"}, &Parser::ParseMath2); }
  absl::StatusOr<ExprP> ParseMath2() {
    return ParseLeftAssoc({"*", "/", "//", "%"}, &Parser::ParsePow);
  }
  absl::StatusOr<ExprP> ParsePow() { return ParseLeftAssoc({"**"}, &Parser::ParseUnaryWithFilter); }
  absl::StatusOr<ExprP> ParseUnaryWithFilter() { return ParseUnary(true); }

  absl::StatusOr<ExprP> ParseUnary(bool with_filter) {
    DepthGuard guard(depth_);
    if (guard.too_deep()) return TooDeep(Cur());
    ExprP node;
    if (IsOp("-") || IsOp("+")) {
      node = NewExpr(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, Cur().pos);
      Advance();
      ASSIGN_OR_RETURN(ExprP operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
      ASSIGN_OR_RETURN(node, Finish(std::move(node)));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprP> ParsePrimary() {
    const Token& t = Cur();
    if (t.kind == Tok::kName) {
      ExprP e = NewExpr(ExprKind::kLiteral, t.pos);
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e->literal = Value::MakeBool(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::MakeNone();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      Advance();
      return e;
    }
    if (t.kind == Tok::kString) {
      // Adjacent string literals concatenate, as in Python.
      ExprP e = NewExpr(ExprKind::kLiteral, t.pos);
      std::string s;
      while (Cur().kind == Tok::kString) {
        s += Cur().text;
        Advance();
      }
      e->literal = Value::MakeStr(std::move(s));
      return e;
    }
    if (t.kind == Tok::kInt) {
      ExprP e = NewExpr(ExprKind::kLiteral, t.pos);
      e->literal = Value::MakeInt(t.int_value);
      Advance();
      return e;
    }
    if (IsOp("(")) {
      Advance();
      ASSIGN_OR_RETURN(ExprP e, ParseTuple(true, {}, true));
      RETURN_IF_ERROR(ExpectOp(")"));
      return e;
    }
    if (IsOp("[") || IsOp("{")) {
      bool is_dict = IsOp("{");
      ExprP e = NewExpr(is_dict ? ExprKind::kDict : ExprKind::kList, t.pos);
      std::string close = is_dict ? "}" : "]";
      Advance();
      while (!IsOp(close)) {
        if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(close)) break;
        ASSIGN_OR_RETURN(ExprP item, ParseExpression());
        e->args.push_back(std::move(item));
        if (is_dict) {
          RETURN_IF_ERROR(ExpectOp(":"));
          ASSIGN_OR_RETURN(ExprP value, ParseExpression());
          e->args.push_back(std::move(value));
        }
      }
      Advance();
      return Finish(std::move(e));
    }
    return Fail(t, absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprP> ParsePostfix(ExprP node) {
    while (true) {
      if (IsOp(".")) {
        Pos pos = Cur().pos;
        Advance();
        ExprP e;
        if (Cur().kind == Tok::kName) {
          e = NewExpr(ExprKind::kGetAttr, pos);
          e->name = Cur().text;
        } else if (Cur().kind == Tok::kInt) {
          e = NewExpr(ExprKind::kGetItem, pos);
          ExprP index = NewExpr(ExprKind::kLiteral, Cur().pos);
          index->literal = Value::MakeInt(Cur().int_value);
          e->args.push_back(nullptr);
          e->args.push_back(std::move(index));
        } else {
          return Fail(Cur(), "expected a name or number after '.'");
        }
        Advance();
        if (e->args.empty()) {
          e->args.push_back(std::move(node));
        } else {
          e->args[0] = std::move(node);
        }
        ASSIGN_OR_RETURN(node, Finish(std::move(e)));
      } else if (IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprP> ParseSubscript(ExprP node) {
    Pos pos = Cur().pos;
    Advance();  // [
    std::vector<ExprP> keys;
    while (!IsOp("]")) {
      if (!keys.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(ExprP key, ParseSubscribed());
      keys.push_back(std::move(key));
    }
    Advance();  // ]
    if (keys.empty()) return Fail(Cur(), "expected a subscript inside '[]'");
    // x[a, b] subscripts by a tuple, which no str/list/dict key matches in a chat template.
    if (keys.size() > 1) return TemplateError(pos, "unsupported subscript with several keys");
    ExprP key = std::move(keys[0]);
    if (key->kind == ExprKind::kSlice) {
      key->args.insert(key->args.begin(), std::move(node));
      return Finish(std::move(key));
    }
    ExprP e = NewExpr(ExprKind::kGetItem, pos);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(key));
    return Finish(std::move(e));
  }

  // An index or a slice `start:stop:step` (missing parts are None). A slice comes back as a
  // kSlice node whose operand the caller inserts first.
  absl::StatusOr<ExprP> ParseSubscribed() {
    Pos pos = Cur().pos;
    auto none = [&] {
      ExprP e = NewExpr(ExprKind::kLiteral, Cur().pos);
      e->literal = Value::MakeNone();
      return e;
    };
    ExprP slice = NewExpr(ExprKind::kSlice, pos);
    if (IsOp(":")) {
      Advance();
      slice->args.push_back(none());
    } else {
      ASSIGN_OR_RETURN(ExprP start, ParseExpression());
      if (!IsOp(":")) return start;
      Advance();
      slice->args.push_back(std::move(start));
    }
    auto part_ends = [&] { return IsOp("]") || IsOp(",") || IsOp(":"); };
    if (part_ends()) {
      slice->args.push_back(none());
    } else {
      ASSIGN_OR_RETURN(ExprP stop, ParseExpression());
      slice->args.push_back(std::move(stop));
    }
    if (IsOp(":")) {
      Advance();
      if (IsOp("]") || IsOp(",")) {
        slice->args.push_back(none());
      } else {
        ASSIGN_OR_RETURN(ExprP step, ParseExpression());
        slice->args.push_back(std::move(step));
      }
    } else {
      slice->args.push_back(none());
    }
    return slice;
  }

  // `(args, name=value)` after `callee`, into e->args[first_arg:] and e->kwargs.
  absl::Status ParseCallArgs(Expr& e) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool need_comma = false;
    while (!IsOp(")")) {
      if (need_comma) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) return Fail(Cur(), "unsupported *args/**kwargs in a call");
      if (Cur().kind == Tok::kName && Peek(1).kind == Tok::kOp && Peek(1).text == "=") {
        std::string key = Cur().text;
        Advance();
        Advance();
        ASSIGN_OR_RETURN(ExprP value, ParseExpression());
        e.kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e.kwargs.empty()) return Fail(Cur(), "positional argument after a keyword argument");
        ASSIGN_OR_RETURN(ExprP value, ParseExpression());
        e.args.push_back(std::move(value));
      }
      need_comma = true;
    }
    Advance();  // )
    return absl::OkStatus();
  }

  absl::StatusOr<ExprP> ParseCall(ExprP callee) {
    ExprP e = NewExpr(ExprKind::kCall, Cur().pos);
    e->args.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseCallArgs(*e));
    return Finish(std::move(e));
  }

  absl::StatusOr<ExprP> ParseFilterExpr(ExprP node) {
    while (true) {
      if (IsOp("|")) {
        Advance();
        if (Cur().kind != Tok::kName) return Fail(Cur(), "expected a filter name after '|'");
        const Token name = Cur();
        Advance();
        if (IsOp(".") || !IsSupportedFilter(name.text)) {
          return Fail(name, absl::StrFormat("unsupported filter \"%s\"", name.text));
        }
        ExprP e = NewExpr(ExprKind::kFilter, name.pos);
        e->name = name.text;
        e->args.push_back(std::move(node));
        if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(*e));
        ASSIGN_OR_RETURN(node, Finish(std::move(e)));
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprP> ParseTest(ExprP node) {
    Pos pos = Cur().pos;
    Advance();  // is
    bool negated = false;
    if (IsName("not")) {
      negated = true;
      Advance();
    }
    if (Cur().kind != Tok::kName) return Fail(Cur(), "expected a test name after 'is'");
    const Token name = Cur();
    Advance();
    if (IsOp(".") || !IsSupportedTest(name.text)) {
      return Fail(name, absl::StrFormat("unsupported test \"%s\"", name.text));
    }
    ExprP e = NewExpr(ExprKind::kTest, pos);
    e->name = name.text;
    e->negated = negated;
    e->args.push_back(std::move(node));
    const Token& t = Cur();
    bool bare_arg = (t.kind == Tok::kName || t.kind == Tok::kString || t.kind == Tok::kInt ||
                     IsOp("(") || IsOp("[") || IsOp("{")) &&
                    !IsName("else") && !IsName("or") && !IsName("and");
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseCallArgs(*e));
    } else if (bare_arg) {
      if (IsName("is")) return Fail(t, "tests cannot be chained with 'is'");
      ASSIGN_OR_RETURN(ExprP arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return Finish(std::move(e));
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Program>> ParseProgram(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).Run();
}

}  // namespace lockstep::tokenizer::chat_template_internal
