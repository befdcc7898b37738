// Chat-template operations with Python/jinja2 semantics: iteration, `in`, arithmetic,
// attribute and item lookup (jinja2's sandboxed getattr/getitem), calls of the globals and str/
// dict methods, filters and tests. Errors carry no position; the evaluator adds it.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer::chat_template_internal {
namespace {



// Python attribute names of str/dict/list that this interpreter does not implement: looking one
// up is an error rather than the Undefined that a plain missing attribute is.
bool IsPythonAttr(const Value& obj, std::string_view name) {
  static constexpr std::string_view kStr[] = {
      "casefold", "center", "count", "encode", "expandtabs", "find", "format", "format_map",
      "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
      "isnumeric", "isprintable", "isspace", "istitle", "isupper", "ljust", "maketrans",
      "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition",
      "rsplit", "splitlines", "swapcase", "title", "translate", "zfill"};
  static constexpr std::string_view kDict[] = {"clear", "copy", "fromkeys", "pop", "popitem",
                                               "setdefault", "update"};
  static constexpr std::string_view kList[] = {"append", "clear", "copy", "count", "extend",
                                               "index", "insert", "pop", "remove", "reverse", "sort"};
  auto has = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  if (!name.empty() && name[0] == '_') return true;  // the sandbox refuses private attributes
  if (obj.is_str()) return has(kStr);
  if (obj.is_dict()) return has(kDict);
  if (obj.is_list()) return has(kList);
  return false;
}

// The supported methods of str and dict, bound to their receiver.
std::optional<Value> FindMethod(const Value& obj, std::string_view name) {
  static const std::pair<std::string_view, Builtin> kStr[] = {
      {"strip", Builtin::kStrStrip},         {"lstrip", Builtin::kStrLstrip},
      {"rstrip", Builtin::kStrRstrip},       {"startswith", Builtin::kStrStartswith},
      {"endswith", Builtin::kStrEndswith},   {"split", Builtin::kStrSplit},
      {"replace", Builtin::kStrReplace},     {"upper", Builtin::kStrUpper},
      {"lower", Builtin::kStrLower},         {"capitalize", Builtin::kStrCapitalize},
      {"join", Builtin::kStrJoin}};
  static const std::pair<std::string_view, Builtin> kDict[] = {
      {"items", Builtin::kDictItems}, {"keys", Builtin::kDictKeys},
      {"values", Builtin::kDictValues}, {"get", Builtin::kDictGet}};
  auto find = [&](const auto& table) -> std::optional<Value> {
    for (const auto& [n, id] : table) {
      if (n == name) return Method(id, std::string(name), obj);
    }
    return std::nullopt;
  };
  if (obj.is_str()) return find(kStr);
  if (obj.is_dict()) return find(kDict);
  return std::nullopt;
}

absl::StatusOr<Value> LoopAttr(const Value& loop_value, std::string_view name) {
  const LoopInfo& loop = loop_value.loop();
  int64_t n = static_cast<int64_t>(loop.items->size());
  int64_t i = loop.index0;
  if (name == "index") return Value::MakeInt(i + 1);
  if (name == "index0") return Value::MakeInt(i);
  if (name == "revindex") return Value::MakeInt(n - i);
  if (name == "revindex0") return Value::MakeInt(n - i - 1);
  if (name == "first") return Value::MakeBool(i == 0);
  if (name == "last") return Value::MakeBool(i == n - 1);
  if (name == "length") return Value::MakeInt(n);
  if (name == "depth") return Value::MakeInt(1);
  if (name == "depth0") return Value::MakeInt(0);
  if (name == "previtem") {
    if (i == 0) return Value::MakeUndefined("there is no previous item");
    return (*loop.items)[i - 1];
  }
  if (name == "nextitem") {
    if (i + 1 >= n) return Value::MakeUndefined("there is no next item");
    return (*loop.items)[i + 1];
  }
  if (name == "cycle") return Method(Builtin::kLoopCycle, "cycle", loop_value);
  if (name == "changed") return absl::UnimplementedError("unsupported loop.changed");
  return Value::MakeUndefined(absl::StrFormat("'LoopContext object' has no attribute '%s'", name));
}

absl::Status OverflowError() {
  return absl::UnimplementedError("integer overflow (Python integers are unbounded; unsupported)");
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times, Budget& budget) {
  times = std::max<int64_t>(times, 0);
  if (seq.is_str()) {
    uint64_t size = seq.str().size();
    if (size > 0 && static_cast<uint64_t>(times) > budget.limits.max_output_bytes / size) {
      RETURN_IF_ERROR(budget.CheckString(budget.limits.max_output_bytes + 1));
    }
    RETURN_IF_ERROR(budget.ChargeBytes(size * times));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value::MakeStr(std::move(out));
  }
  uint64_t n = seq.list().items.size();
  if (n > 0 && static_cast<uint64_t>(times) > budget.limits.max_container_elements / n) {
    RETURN_IF_ERROR(budget.CheckElements(budget.limits.max_container_elements + 1));
  }
  RETURN_IF_ERROR(budget.Charge(n * times));
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) {
    items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
  }
  return Value::MakeList(std::move(items), seq.list().kind);
}

}  // namespace

// Binds call arguments to `params` by position, then by keyword, as Python does; unset
// optional parameters stay nullopt.
absl::StatusOr<std::vector<std::optional<Value>>> Bind(std::string_view fname, const CallArgs& a,
                                                       std::initializer_list<std::string_view> params,
                                                       size_t required) {
  std::vector<std::optional<Value>> bound(params.size());
  if (a.positional.size() > params.size()) {
    return TypeError(absl::StrFormat("%s() takes at most %d arguments (%d given)", fname,
                                     params.size(), a.positional.size()));
  }
  for (size_t i = 0; i < a.positional.size(); ++i) bound[i] = a.positional[i];
  for (const auto& [key, value] : a.keyword) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return TypeError(absl::StrFormat("%s() got an unexpected keyword argument '%s'", fname, key));
    }
    size_t idx = it - params.begin();
    if (bound[idx].has_value()) {
      return TypeError(absl::StrFormat("%s() got multiple values for argument '%s'", fname, key));
    }
    bound[idx] = value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!bound[i].has_value()) {
      return TypeError(absl::StrFormat("%s() missing required argument '%s'", fname,
                                       *(params.begin() + i)));
    }
  }
  return bound;
}

absl::StatusOr<const std::string*> StrArg(std::string_view fname, const std::optional<Value>& v) {
  if (!v.has_value() || v->is_none()) return nullptr;
  if (!v->is_str()) {
    return TypeError(absl::StrFormat("%s() argument must be str, not %s", fname, TypeName(*v)));
  }
  return &v->str();
}
absl::StatusOr<int64_t> IntArg(std::string_view fname, const std::optional<Value>& v,
                               int64_t fallback) {
  if (!v.has_value() || v->is_none()) return fallback;
  if (!v->is_int_like()) {
    return TypeError(absl::StrFormat("%s() argument must be int, not %s", fname, TypeName(*v)));
  }
  return v->as_int();
}

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_hint());
}
absl::Status TypeError(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }
Value Method(Builtin id, std::string name, const Value& receiver) {
  return Value{std::make_shared<const Callable>(Callable{id, std::move(name), receiver})};
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  if (v.is_undefined()) return std::vector<Value>();
  if (v.is_list()) {
    const List& list = v.list();
    if (list.kind == SeqKind::kIterator) {
      if (list.consumed) return std::vector<Value>();
      list.consumed = true;
    }
    return list.items;
  }
  if (v.is_str()) {
    std::vector<Value> chars;
    for (uint32_t cp : DecodeUtf8(v.str())) {
      std::string c;
      AppendUtf8(c, cp);
      chars.push_back(Value::MakeStr(std::move(c)));
    }
    return chars;
  }
  if (v.is_dict()) {
    std::vector<Value> keys;
    for (const auto& [key, value] : v.dict().items) keys.push_back(Value::MakeStr(key));
    return keys;
  }
  return TypeError(absl::StrFormat("'%s' object is not iterable", TypeName(v)));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& needle, Budget& budget) {
  if (container.is_str()) {
    if (!needle.is_str()) {
      return TypeError(absl::StrFormat("'in <string>' requires string as left operand, not %s",
                                       TypeName(needle)));
    }
    RETURN_IF_ERROR(budget.ChargeBytes(container.str().size()));
    return container.str().find(needle.str()) != std::string::npos;
  }
  if (container.is_dict()) {
    if (needle.is_list() || needle.is_dict()) {
      return TypeError(absl::StrFormat("unhashable type: '%s'", TypeName(needle)));
    }
    return needle.is_str() && container.dict().Find(needle.str()) != nullptr;
  }
  if (container.is_list() || container.is_undefined()) {
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(container));
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(bool eq, Equal(item, needle, budget));
      if (eq) return true;
    }
    return false;
  }
  return TypeError(absl::StrFormat("argument of type '%s' is not iterable", TypeName(container)));
}

absl::StatusOr<Value> Arith(std::string_view op, const Value& a, const Value& b, Budget& budget) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  bool ints = a.is_int_like() && b.is_int_like();
  int64_t x = ints ? a.as_int() : 0, y = ints ? b.as_int() : 0, r = 0;
  if (op == "+") {
    if (ints) {
      if (__builtin_add_overflow(x, y, &r)) return OverflowError();
      return Value::MakeInt(r);
    }
    if (a.is_str() && b.is_str()) {
      RETURN_IF_ERROR(budget.CheckString(a.str().size() + b.str().size()));
      RETURN_IF_ERROR(budget.ChargeBytes(a.str().size() + b.str().size()));
      return Value::MakeStr(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.list().kind == b.list().kind && !a.list().opaque()) {
      RETURN_IF_ERROR(budget.CheckElements(a.list().items.size() + b.list().items.size()));
      RETURN_IF_ERROR(budget.Charge(a.list().items.size() + b.list().items.size()));
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::MakeList(std::move(items), a.list().kind);
    }
    if (a.is_str()) {
      return TypeError(absl::StrFormat("can only concatenate str (not \"%s\") to str", TypeName(b)));
    }
  } else if (op == "-" && ints) {
    if (__builtin_sub_overflow(x, y, &r)) return OverflowError();
    return Value::MakeInt(r);
  } else if (op == "*") {
    if (ints) {
      if (__builtin_mul_overflow(x, y, &r)) return OverflowError();
      return Value::MakeInt(r);
    }
    auto repeatable = [](const Value& v) {
      return v.is_str() || (v.is_list() && !v.list().opaque());
    };
    if (repeatable(a) && b.is_int_like()) return Repeat(a, b.as_int(), budget);
    if (a.is_int_like() && repeatable(b)) return Repeat(b, a.as_int(), budget);
  } else if (op == "/" && ints) {
    return absl::UnimplementedError("unsupported true division '/' (its result is a float)");
  } else if ((op == "//" || op == "%") && ints) {
    if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) return OverflowError();
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
      --q;
      m += y;
    }
    return Value::MakeInt(op == "//" ? q : m);
  } else if (op == "%" && a.is_str()) {
    return absl::UnimplementedError("unsupported printf-style string formatting with '%'");
  } else if (op == "**" && ints) {
    if (y < 0) return absl::UnimplementedError("unsupported negative exponent (a float result)");
    if (x == 0 || x == 1) return Value::MakeInt(y == 0 ? 1 : x);
    if (x == -1) return Value::MakeInt(y % 2 == 0 ? 1 : -1);
    // |x| >= 2 overflows within 63 multiplications, so this loop is short.
    int64_t result = 1;
    for (int64_t i = 0; i < y; ++i) {
      if (__builtin_mul_overflow(result, x, &result)) return OverflowError();
    }
    return Value::MakeInt(result);
  }
  return TypeError(absl::StrFormat("unsupported operand type(s) for %s: '%s' and '%s'", op,
                                   TypeName(a), TypeName(b)));
}

absl::StatusOr<Value> Negate(const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_int_like()) {
    return TypeError(absl::StrFormat("bad operand type for unary -: '%s'", TypeName(v)));
  }
  if (v.as_int() == INT64_MIN) return OverflowError();
  return Value::MakeInt(-v.as_int());
}

absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_loop()) return LoopAttr(obj, name);
  if (std::optional<Value> method = FindMethod(obj, name)) return *method;
  if (IsPythonAttr(obj, name)) {
    return absl::UnimplementedError(
        absl::StrFormat("unsupported attribute '%s' of a %s", name, TypeName(obj)));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.ns().Find(name)) return *v;
  }
  return Value::MakeUndefined(
      absl::StrFormat("'%s object' has no attribute '%s'", TypeName(obj), name));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key, Budget& budget) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() && key.is_str()) {
    if (const Value* v = obj.dict().Find(key.str())) return *v;
  }
  if ((obj.is_list() && obj.list().kind != SeqKind::kIterator) || obj.is_str()) {
    if (key.is_int_like()) {
      int64_t i = key.as_int();
      if (obj.is_list()) {
        int64_t n = static_cast<int64_t>(obj.list().items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.list().items[i];
      } else {
        RETURN_IF_ERROR(budget.ChargeBytes(obj.str().size()));
        std::vector<uint32_t> cps = DecodeUtf8(obj.str());
        int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string c;
          AppendUtf8(c, cps[i]);
          return Value::MakeStr(std::move(c));
        }
      }
      return Value::MakeUndefined(
          absl::StrFormat("%s object has no element %d", TypeName(obj), key.as_int()));
    }
  }
  // jinja2 falls back to the attribute of that name.
  if (key.is_str()) return GetAttr(obj, key.str());
  return Value::MakeUndefined(absl::StrFormat("'%s object' has no element", TypeName(obj)));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start, const Value& stop,
                               const Value& step, Budget& budget) {
  if (obj.is_undefined()) return UndefinedError(obj);
  for (const Value* part : {&start, &stop, &step}) {
    // Python raises TypeError, which jinja2's getitem turns into Undefined.
    if (!part->is_none() && !part->is_int_like()) {
      return Value::MakeUndefined("slice indices must be integers or None");
    }
  }
  std::vector<int64_t> picked;
  if (obj.is_str()) {
    RETURN_IF_ERROR(budget.ChargeBytes(obj.str().size()));
    std::vector<uint32_t> cps = DecodeUtf8(obj.str());
    RETURN_IF_ERROR(PySliceIndices(static_cast<int64_t>(cps.size()), start, stop, step, picked));
    std::string out;
    for (int64_t i : picked) AppendUtf8(out, cps[i]);
    return Value::MakeStr(std::move(out));
  }
  if (obj.is_list() && obj.list().kind != SeqKind::kIterator) {
    const auto& items = obj.list().items;
    RETURN_IF_ERROR(PySliceIndices(static_cast<int64_t>(items.size()), start, stop, step, picked));
    RETURN_IF_ERROR(budget.Charge(picked.size()));
    std::vector<Value> out;
    for (int64_t i : picked) out.push_back(items[i]);
    return Value::MakeList(std::move(out), obj.list().kind);
  }
  return Value::MakeUndefined(absl::StrFormat("'%s' object is not subscriptable", TypeName(obj)));
}

}  // namespace lockstep::tokenizer::chat_template_internal
