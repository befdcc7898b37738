// The chat-template evaluator: walks the tree, with jinja2's scoping (a for-loop body gets a
// fresh scope each iteration, so `set` inside a loop does not leak; `if` opens no scope) and
// its Undefined rules. Every step is charged to a budget and the output is size-capped.
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer::chat_template_internal {
namespace {

// Adds the line:column of the construct to an error from a value operation (errors from deeper
// constructs already carry theirs).
absl::Status Located(Pos pos, const absl::Status& s) {
  if (s.ok() || absl::StartsWith(s.message(), "chat template")) return s;
  return absl::Status(s.code(), absl::StrFormat("chat template line %d:%d: %s", pos.line,
                                                pos.col, s.message()));
}

#define RETURN_IF_ERROR_AT(pos, expr)              \
  do {                                             \
    ::absl::Status at_status_ = (expr);            \
    if (!at_status_.ok()) return Located(pos, at_status_); \
  } while (0)
#define ASSIGN_OR_RETURN_AT(pos, lhs, rexpr) \
  ASSIGN_OR_RETURN_AT_IMPL(LOCKSTEP_CONCAT(at_statusor_, __LINE__), pos, lhs, rexpr)
#define ASSIGN_OR_RETURN_AT_IMPL(tmp, pos, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return Located(pos, tmp.status());    \
  lhs = std::move(tmp).value()

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  Evaluator(std::vector<std::pair<std::string, Value>> context, const RenderLimits& limits) {
    budget_.limits = limits;
    frames_.emplace_back();
    for (auto& [name, value] : BuiltinGlobals()) frames_[0][name] = std::move(value);
    for (auto& [name, value] : context) frames_[0][name] = std::move(value);
  }

  absl::StatusOr<std::string> Run(const Program& program) {
    Flow flow = Flow::kNormal;
    RETURN_IF_ERROR(ExecBody(program.body, &flow));
    return std::move(out_);
  }

 private:
  using Frame = absl::flat_hash_map<std::string, Value>;

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::MakeUndefined(absl::StrFormat("'%s' is undefined", name));
  }

  absl::Status Emit(Pos pos, std::string_view s) {
    if (out_.size() + s.size() > budget_.limits.max_output_bytes) {
      return Located(pos, absl::ResourceExhaustedError(absl::StrFormat(
                              "the rendered prompt exceeds the limit of %d bytes",
                              budget_.limits.max_output_bytes)));
    }
    RETURN_IF_ERROR_AT(pos, budget_.ChargeBytes(s.size()));
    out_.append(s);
    return absl::OkStatus();
  }

  // ---- statements ------------------------------------------------------------------------

  absl::Status ExecBody(const std::vector<Stmt>& body, Flow* flow) {
    for (const Stmt& s : body) {
      RETURN_IF_ERROR(Exec(s, flow));
      if (*flow != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Exec(const Stmt& s, Flow* flow) {
    RETURN_IF_ERROR_AT(s.pos, budget_.Charge(1));
    switch (s.kind) {
      case StmtKind::kText:
        return Emit(s.pos, s.text);
      case StmtKind::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        ASSIGN_OR_RETURN_AT(s.expr->pos, std::string text, ToStr(v, budget_));
        return Emit(s.pos, text);
      }
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          ASSIGN_OR_RETURN(Value c, Eval(*cond));
          if (Truthy(c)) return ExecBody(body, flow);
        }
        return ExecBody(s.else_body, flow);
      case StmtKind::kFor:
        return ExecFor(s, flow);
      case StmtKind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        return Assign(s, std::move(v));
      }
      case StmtKind::kSetBlock: {
        std::string saved;
        std::swap(saved, out_);
        Flow inner = Flow::kNormal;
        absl::Status st = ExecBody(s.body, &inner);
        std::swap(saved, out_);
        RETURN_IF_ERROR(st);
        return Assign(s, Value::MakeStr(std::move(saved)));
      }
      case StmtKind::kBreak:
        *flow = Flow::kBreak;
        return absl::OkStatus();
      case StmtKind::kContinue:
        *flow = Flow::kContinue;
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Assign(const Stmt& s, Value v) {
    if (!s.attr.empty()) {
      Value target = Lookup(s.targets[0]);
      if (!target.is_namespace()) {
        return TemplateError(s.pos, "cannot assign attribute on non-namespace object");
      }
      // Python's garbage collector breaks reference cycles; shared_ptr cannot, so a namespace
      // may not hold what could lead back to it.
      if (v.holds_refs()) {
        return TemplateError(s.pos, "unsupported: a namespace attribute holding a namespace, "
                                    "loop or function");
      }
      if (Value* slot = target.ns().Find(s.attr)) {
        *slot = std::move(v);
      } else {
        target.ns().attrs.emplace_back(s.attr, std::move(v));
      }
      return absl::OkStatus();
    }
    return Bind(s.pos, s.targets, std::move(v), frames_.back());
  }

  // Binds one name, or unpacks into several as Python does.
  absl::Status Bind(Pos pos, const std::vector<std::string>& names, Value v, Frame& frame) {
    if (names.size() == 1) {
      frame[names[0]] = std::move(v);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN_AT(pos, std::vector<Value> items, Iterate(v));
    if (v.is_undefined()) return Located(pos, UndefinedError(v));
    if (items.size() != names.size()) {
      return TemplateError(pos, absl::StrFormat("%s values to unpack (expected %d, got %d)",
                                                items.size() < names.size() ? "not enough" : "too many",
                                                names.size(), items.size()));
    }
    for (size_t i = 0; i < names.size(); ++i) frame[names[i]] = std::move(items[i]);
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Stmt& s, Flow* flow) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    ASSIGN_OR_RETURN_AT(s.expr->pos, std::vector<Value> all, Iterate(iterable));
    auto items = std::make_shared<std::vector<Value>>();
    if (s.cond == nullptr) {
      *items = std::move(all);
    } else {
      // The filter sees the loop variables but not `loop`.
      for (Value& item : all) {
        RETURN_IF_ERROR_AT(s.pos, budget_.Charge(1));
        frames_.emplace_back();
        absl::Status st = Bind(s.pos, s.targets, item, frames_.back());
        absl::StatusOr<Value> keep = st.ok() ? Eval(*s.cond) : absl::StatusOr<Value>(st);
        frames_.pop_back();
        if (!keep.ok()) return keep.status();
        if (Truthy(*keep)) items->push_back(std::move(item));
      }
    }
    if (items->empty()) return ExecBody(s.else_body, flow);
    auto info = std::make_shared<LoopInfo>();
    info->items = items;
    for (size_t i = 0; i < items->size(); ++i) {
      RETURN_IF_ERROR_AT(s.pos, budget_.Charge(1));
      // Each iteration gets its own LoopInfo: a `loop` captured in a value must not change.
      auto this_loop = std::make_shared<LoopInfo>(*info);
      this_loop->index0 = static_cast<int64_t>(i);
      frames_.emplace_back();
      absl::Status st = Bind(s.pos, s.targets, (*items)[i], frames_.back());
      frames_.back()["loop"] = Value{std::shared_ptr<const LoopInfo>(std::move(this_loop))};
      Flow inner = Flow::kNormal;
      if (st.ok()) st = ExecBody(s.body, &inner);
      frames_.pop_back();
      RETURN_IF_ERROR(st);
      if (inner == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  // ---- expressions -----------------------------------------------------------------------

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
      a.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr));
      a.keyword.emplace_back(key, std::move(v));
    }
    return a;
  }

  absl::Status CheckDepth(Pos pos, const Value& v) {
    if (v.depth() > kMaxValueDepth) {
      return TemplateError(pos, absl::StrFormat("values nested deeper than %d levels", kMaxValueDepth));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    RETURN_IF_ERROR_AT(e.pos, budget_.Charge(1));
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName:
        return Lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const auto& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a));
          items.push_back(std::move(v));
        }
        Value list = Value::MakeList(std::move(items),
                                     e.kind == ExprKind::kList ? SeqKind::kList : SeqKind::kTuple);
        RETURN_IF_ERROR(CheckDepth(e.pos, list));
        return list;
      }
      case ExprKind::kDict: {
        std::vector<std::pair<std::string, Value>> items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          ASSIGN_OR_RETURN(Value key, Eval(*e.args[i]));
          ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1]));
          if (!key.is_str()) {
            return TemplateError(e.args[i]->pos, absl::StrFormat(
                "unsupported dict key of type %s (only str keys)", TypeName(key)));
          }
          auto it = std::find_if(items.begin(), items.end(),
                                 [&](const auto& kv) { return kv.first == key.str(); });
          if (it != items.end()) {
            it->second = std::move(value);
          } else {
            items.emplace_back(key.str(), std::move(value));
          }
        }
        Value dict = Value::MakeDict(std::move(items));
        RETURN_IF_ERROR(CheckDepth(e.pos, dict));
        return dict;
      }
      case ExprKind::kGetAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        ASSIGN_OR_RETURN_AT(e.pos, Value v, GetAttr(obj, e.name));
        return v;
      }
      case ExprKind::kGetItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
        ASSIGN_OR_RETURN_AT(e.pos, Value v, GetItem(obj, key, budget_));
        return v;
      }
      case ExprKind::kSlice: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(Value start, Eval(*e.args[1]));
        ASSIGN_OR_RETURN(Value stop, Eval(*e.args[2]));
        ASSIGN_OR_RETURN(Value step, Eval(*e.args[3]));
        ASSIGN_OR_RETURN_AT(e.pos, Value v, GetSlice(obj, start, stop, step, budget_));
        return v;
      }
      case ExprKind::kCall: {
        ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        ASSIGN_OR_RETURN_AT(e.pos, Value v, Call(callee, args, budget_));
        RETURN_IF_ERROR(CheckDepth(e.pos, v));
        return v;
      }
      case ExprKind::kFilter: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        ASSIGN_OR_RETURN_AT(e.pos, Value v, ApplyFilter(e.name, operand, args, budget_));
        return v;
      }
      case ExprKind::kTest: {
        ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0]));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
        ASSIGN_OR_RETURN_AT(e.pos, bool r, ApplyTest(e.name, operand, args, budget_));
        return Value::MakeBool(r != e.negated);
      }
      case ExprKind::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        return Value::MakeBool(!Truthy(v));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
        if (e.kind == ExprKind::kNeg) {
          ASSIGN_OR_RETURN_AT(e.pos, Value r, Negate(v));
          return r;
        }
        if (v.is_undefined()) return Located(e.pos, UndefinedError(v));
        if (!v.is_int_like()) {
          return TemplateError(e.pos, absl::StrFormat("bad operand type for unary +: '%s'", TypeName(v)));
        }
        return Value::MakeInt(v.as_int());
      }
      case ExprKind::kBinary:
        return EvalBinary(e);
      case ExprKind::kCompare:
        return EvalCompare(e);
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        // Python returns the deciding operand, not a bool.
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
        if (Truthy(left) == (e.kind == ExprKind::kOr)) return left;
        return Eval(*e.args[1]);
      }
      case ExprKind::kCondExpr: {
        ASSIGN_OR_RETURN(Value cond, Eval(*e.args[0]));
        if (Truthy(cond)) return Eval(*e.args[1]);
        if (e.args.size() > 2) return Eval(*e.args[2]);
        return Value::MakeUndefined(absl::StrFormat(
            "the inline if-expression on line %d evaluated to false and no else section was "
            "defined.",
            e.pos.line));
      }
    }
    return TemplateError(e.pos, "unknown expression");
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e) {
    ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
    ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
    if (e.name == "~") {
      ASSIGN_OR_RETURN_AT(e.pos, std::string x, ToStr(a, budget_));
      ASSIGN_OR_RETURN_AT(e.pos, std::string y, ToStr(b, budget_));
      RETURN_IF_ERROR_AT(e.pos, budget_.CheckString(x.size() + y.size()));
      RETURN_IF_ERROR_AT(e.pos, budget_.ChargeBytes(x.size() + y.size()));
      return Value::MakeStr(x + y);
    }
    ASSIGN_OR_RETURN_AT(e.pos, Value v, Arith(e.name, a, b, budget_));
    RETURN_IF_ERROR(CheckDepth(e.pos, v));
    return v;
  }

  absl::StatusOr<bool> CompareOnce(std::string_view op, const Value& a, const Value& b) {
    if (op == "==" || op == "!=") {
      ASSIGN_OR_RETURN(bool eq, Equal(a, b, budget_));
      return eq == (op == "==");
    }
    if (op == "in" || op == "not in") {
      ASSIGN_OR_RETURN(bool in, Contains(b, a, budget_));
      return in == (op == "in");
    }
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    if (op == "<") return Less(a, b, budget_);
    if (op == ">") return Less(b, a, budget_);
    ASSIGN_OR_RETURN(bool rev, op == "<=" ? Less(b, a, budget_) : Less(a, b, budget_));
    return !rev;
  }

  // Python chains comparisons: a < b < c is a < b and b < c, evaluating b once.
  absl::StatusOr<Value> EvalCompare(const Expr& e) {
    ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
      ASSIGN_OR_RETURN_AT(e.args[i + 1]->pos, bool r, CompareOnce(e.ops[i], left, right));
      if (!r) return Value::MakeBool(false);
      left = std::move(right);
    }
    return Value::MakeBool(true);
  }

  Budget budget_;
  std::string out_;
  std::vector<Frame> frames_;
};

}  // namespace

absl::StatusOr<std::string> Evaluate(const Program& program,
                                     std::vector<std::pair<std::string, Value>> context,
                                     const RenderLimits& limits) {
  return Evaluator(std::move(context), limits).Run(program);
}

}  // namespace lockstep::tokenizer::chat_template_internal
