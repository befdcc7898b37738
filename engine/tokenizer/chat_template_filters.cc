// Chat-template calls (the globals transformers provides, str/dict methods, loop.cycle),
// filters and tests, each matching jinja2 3.1 (jinja2/filters.py, jinja2/tests.py) or the
// transformers override (tojson) for the inputs it accepts, and an error otherwise.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status.h"
#include "engine/tokenizer/chat_template_internal.h"

namespace lockstep::tokenizer::chat_template_internal {
namespace {

absl::Status NoArgs(std::string_view fname, const CallArgs& a) {
  return Bind(fname, a, {}, 0).status();
}

Value Global(Builtin id, std::string name) {
  return Method(id, std::move(name), Value::MakeNone());
}

// dict(*args, **kwargs) as namespace() and dict() take them: an optional mapping, then keywords.
absl::StatusOr<std::vector<std::pair<std::string, Value>>> DictFromArgs(std::string_view fname,
                                                                        const CallArgs& a) {
  std::vector<std::pair<std::string, Value>> items;
  auto put = [&](const std::string& key, const Value& value) {
    for (auto& [k, v] : items) {
      if (k == key) {
        v = value;
        return;
      }
    }
    items.emplace_back(key, value);
  };
  if (a.positional.size() > 1) {
    return TypeError(absl::StrFormat("%s() takes at most 1 positional argument", fname));
  }
  if (a.positional.size() == 1) {
    const Value& m = a.positional[0];
    if (!m.is_dict()) {
      return absl::UnimplementedError(
          absl::StrFormat("unsupported %s() argument of type %s", fname, TypeName(m)));
    }
    for (const auto& [k, v] : m.dict().items) put(k, v);
  }
  for (const auto& [k, v] : a.keyword) put(k, v);
  return items;
}

absl::StatusOr<Value> Range(const CallArgs& a, Budget& budget) {
  ASSIGN_OR_RETURN(auto p, Bind("range", a, {"start", "stop", "step"}, 1));
  for (const auto& arg : p) {
    if (arg.has_value() && !arg->is_int_like()) {
      return TypeError(absl::StrFormat("'%s' object cannot be interpreted as an integer",
                                       TypeName(*arg)));
    }
  }
  int64_t start = 0, stop = p[0]->as_int(), step = 1;
  if (p[1].has_value()) {
    start = p[0]->as_int();
    stop = p[1]->as_int();
  }
  if (p[2].has_value()) step = p[2]->as_int();
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 mag = step > 0 ? step : -static_cast<__int128>(step);
  __int128 len = span <= 0 ? 0 : (span + mag - 1) / mag;
  if (len > kMaxRange) {
    return absl::InvalidArgumentError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  RETURN_IF_ERROR(budget.Charge(static_cast<uint64_t>(len)));
  std::vector<Value> items;
  for (__int128 i = 0; i < len; ++i) items.push_back(Value::MakeInt(static_cast<int64_t>(start + i * step)));
  return Value::MakeList(std::move(items), SeqKind::kView);
}

// A str or a tuple of str, as startswith/endswith take.
absl::StatusOr<bool> AffixMatch(std::string_view fname, const std::string& s, const Value& affix,
                                bool at_start) {
  auto match = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_str()) return match(affix.str());
  if (affix.is_list() && affix.list().kind == SeqKind::kTuple) {
    for (const Value& x : affix.list().items) {
      if (!x.is_str()) break;
      if (match(x.str())) return true;
    }
    if (std::all_of(affix.list().items.begin(), affix.list().items.end(),
                    [](const Value& x) { return x.is_str(); })) {
      return false;
    }
  }
  return TypeError(absl::StrFormat("%s first arg must be str or a tuple of str, not %s", fname,
                                   TypeName(affix)));
}

absl::StatusOr<Value> CallStrMethod(const Callable& fn, const std::string& s, const CallArgs& a,
                                    Budget& budget) {
  RETURN_IF_ERROR(budget.ChargeBytes(s.size()));
  switch (fn.id) {
    case Builtin::kStrStrip:
    case Builtin::kStrLstrip:
    case Builtin::kStrRstrip: {
      ASSIGN_OR_RETURN(auto p, Bind(fn.name, a, {"chars"}, 0));
      ASSIGN_OR_RETURN(const std::string* chars, StrArg(fn.name, p[0]));
      return Value::MakeStr(PyStrip(s, chars, fn.id != Builtin::kStrRstrip,
                                    fn.id != Builtin::kStrLstrip));
    }
    case Builtin::kStrStartswith:
    case Builtin::kStrEndswith: {
      ASSIGN_OR_RETURN(auto p, Bind(fn.name, a, {"prefix"}, 1));
      ASSIGN_OR_RETURN(bool m, AffixMatch(fn.name, s, *p[0], fn.id == Builtin::kStrStartswith));
      return Value::MakeBool(m);
    }
    case Builtin::kStrSplit: {
      ASSIGN_OR_RETURN(auto p, Bind(fn.name, a, {"sep", "maxsplit"}, 0));
      ASSIGN_OR_RETURN(const std::string* sep, StrArg(fn.name, p[0]));
      ASSIGN_OR_RETURN(int64_t maxsplit, IntArg(fn.name, p[1], -1));
      if (sep != nullptr && sep->empty()) return absl::InvalidArgumentError("empty separator");
      std::vector<Value> parts;
      for (std::string& part : PySplit(s, sep, maxsplit)) parts.push_back(Value::MakeStr(std::move(part)));
      RETURN_IF_ERROR(budget.CheckElements(parts.size()));
      return Value::MakeList(std::move(parts));
    }
    case Builtin::kStrReplace: {
      ASSIGN_OR_RETURN(auto p, Bind(fn.name, a, {"old", "new", "count"}, 2));
      if (!p[0]->is_str() || !p[1]->is_str()) {
        return TypeError("replace() arguments must be str");
      }
      ASSIGN_OR_RETURN(int64_t count, IntArg(fn.name, p[2], -1));
      ASSIGN_OR_RETURN(std::string r, PyReplace(s, p[0]->str(), p[1]->str(), count, budget));
      return Value::MakeStr(std::move(r));
    }
    case Builtin::kStrUpper:
    case Builtin::kStrLower:
    case Builtin::kStrCapitalize: {
      RETURN_IF_ERROR(NoArgs(fn.name, a));
      char mode = fn.id == Builtin::kStrUpper ? 'u' : fn.id == Builtin::kStrLower ? 'l' : 'c';
      ASSIGN_OR_RETURN(std::string r, PyCase(s, mode));
      return Value::MakeStr(std::move(r));
    }
    case Builtin::kStrJoin: {
      ASSIGN_OR_RETURN(auto p, Bind(fn.name, a, {"iterable"}, 1));
      ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*p[0]));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_str()) {
          return TypeError(absl::StrFormat("sequence item %d: expected str instance, %s found", i,
                                           TypeName(items[i])));
        }
        if (i > 0) out += s;
        out += items[i].str();
        RETURN_IF_ERROR(budget.CheckString(out.size()));
      }
      RETURN_IF_ERROR(budget.ChargeBytes(out.size()));
      return Value::MakeStr(std::move(out));
    }
    default:
      return absl::InternalError("not a str method");
  }
}

absl::StatusOr<Value> CallDictMethod(const Callable& fn, const Dict& d, const CallArgs& a,
                                     Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(d.items.size()));
  if (fn.id == Builtin::kDictGet) {
    ASSIGN_OR_RETURN(auto p, Bind("get", a, {"key", "default"}, 1));
    if (p[0]->is_str()) {
      if (const Value* v = d.Find(p[0]->str())) return *v;
    }
    return p[1].has_value() ? *p[1] : Value::MakeNone();
  }
  RETURN_IF_ERROR(NoArgs(fn.name, a));
  std::vector<Value> out;
  for (const auto& [key, value] : d.items) {
    if (fn.id == Builtin::kDictItems) {
      out.push_back(Value::MakeList({Value::MakeStr(key), value}, SeqKind::kTuple));
    } else {
      out.push_back(fn.id == Builtin::kDictKeys ? Value::MakeStr(key) : value);
    }
  }
  return Value::MakeList(std::move(out), SeqKind::kView);
}

absl::StatusOr<int64_t> Length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_str()) return static_cast<int64_t>(DecodeUtf8(v.str()).size());
  if (v.is_list() && v.list().kind != SeqKind::kIterator) {
    return static_cast<int64_t>(v.list().items.size());
  }
  if (v.is_dict()) return static_cast<int64_t>(v.dict().items.size());
  return TypeError(absl::StrFormat("object of type '%s' has no len()", TypeName(v)));
}

absl::StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& a, Budget& budget) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  ASSIGN_OR_RETURN(auto p, Bind("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"}, 0));
  JsonFormat f;
  f.ensure_ascii = p[0].has_value() && Truthy(*p[0]);
  if (p[1].has_value() && !p[1]->is_none()) {
    if (!p[1]->is_int_like() || p[1]->is_bool()) {
      return absl::UnimplementedError("unsupported tojson indent that is not an integer");
    }
    f.indent = static_cast<int>(std::clamp<int64_t>(p[1]->as_int(), 0, 64));
    f.item_sep.assign(1, ',');  // json.dumps uses "," between items once indent is set
  }
  if (p[2].has_value() && !p[2]->is_none()) {
    const Value& sep = *p[2];
    if (!sep.is_list() || sep.list().opaque() || sep.list().items.size() != 2 ||
        !sep.list().items[0].is_str() || !sep.list().items[1].is_str()) {
      return absl::UnimplementedError("unsupported tojson separators (expected two strings)");
    }
    f.item_sep = sep.list().items[0].str();
    f.key_sep = sep.list().items[1].str();
  }
  f.sort_keys = p[3].has_value() && Truthy(*p[3]);
  ASSIGN_OR_RETURN(std::string s, ToJson(v, f, budget));
  return Value::MakeStr(std::move(s));
}

}  // namespace

std::vector<std::pair<std::string, Value>> BuiltinGlobals() {
  return {{"raise_exception", Global(Builtin::kRaiseException, "raise_exception")},
          {"namespace", Global(Builtin::kNamespace, "namespace")},
          {"range", Global(Builtin::kRange, "range")},
          {"dict", Global(Builtin::kDict, "dict")},
          {"strftime_now", Global(Builtin::kStrftimeNow, "strftime_now")}};
}

absl::StatusOr<Value> Call(const Value& callee, const CallArgs& a, Budget& budget) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable()) {
    return TypeError(absl::StrFormat("'%s' object is not callable", TypeName(callee)));
  }
  const Callable& fn = callee.fn();
  switch (fn.id) {
    case Builtin::kRaiseException: {
      ASSIGN_OR_RETURN(auto p, Bind(fn.name, a, {"message"}, 1));
      ASSIGN_OR_RETURN(std::string msg, ToStr(*p[0], budget));
      return absl::InvalidArgumentError(absl::StrCat("raise_exception: ", msg));
    }
    case Builtin::kNamespace: {
      ASSIGN_OR_RETURN(auto items, DictFromArgs(fn.name, a));
      auto ns = std::make_shared<Namespace>();
      ns->attrs = std::move(items);
      return Value{std::move(ns)};
    }
    case Builtin::kDict: {
      ASSIGN_OR_RETURN(auto items, DictFromArgs(fn.name, a));
      return Value::MakeDict(std::move(items));
    }
    case Builtin::kRange:
      return Range(a, budget);
    case Builtin::kStrftimeNow:
      return absl::UnimplementedError(
          "unsupported strftime_now() (the prompt would depend on the clock; pass date_string)");
    case Builtin::kDictItems:
    case Builtin::kDictKeys:
    case Builtin::kDictValues:
    case Builtin::kDictGet:
      return CallDictMethod(fn, fn.receiver.dict(), a, budget);
    case Builtin::kLoopCycle: {
      if (!a.keyword.empty() || a.positional.empty()) {
        return TypeError("loop.cycle() takes one or more positional arguments");
      }
      return a.positional[fn.receiver.loop().index0 % a.positional.size()];
    }
    default:
      return CallStrMethod(fn, fn.receiver.str(), a, budget);
  }
}

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const CallArgs& a,
                                  Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(1));
  if (name == "trim") {
    ASSIGN_OR_RETURN(auto p, Bind(name, a, {"chars"}, 0));
    ASSIGN_OR_RETURN(const std::string* chars, StrArg(name, p[0]));
    ASSIGN_OR_RETURN(std::string s, ToStr(v, budget));
    RETURN_IF_ERROR(budget.ChargeBytes(s.size()));
    return Value::MakeStr(PyStrip(s, chars, true, true));
  }
  if (name == "length" || name == "count") {
    RETURN_IF_ERROR(NoArgs(name, a));
    ASSIGN_OR_RETURN(int64_t n, Length(v));
    return Value::MakeInt(n);
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    RETURN_IF_ERROR(NoArgs(name, a));
    ASSIGN_OR_RETURN(std::string s, ToStr(v, budget));
    ASSIGN_OR_RETURN(std::string r, PyCase(s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : 'c'));
    return Value::MakeStr(std::move(r));
  }
  if (name == "default" || name == "d") {
    ASSIGN_OR_RETURN(auto p, Bind(name, a, {"default_value", "boolean"}, 0));
    bool boolean = p[1].has_value() && Truthy(*p[1]);
    if (v.is_undefined() || (boolean && !Truthy(v))) {
      return p[0].has_value() ? *p[0] : Value::MakeStr("");
    }
    return v;
  }
  if (name == "tojson") return ToJsonFilter(v, a, budget);
  if (name == "first" || name == "last") {
    RETURN_IF_ERROR(NoArgs(name, a));
    if (v.is_list() && v.list().kind == SeqKind::kIterator) {
      return absl::UnimplementedError(absl::StrFormat("unsupported %s of a generator", name));
    }
    if (name == "last" && !v.is_str() && !v.is_list() && !v.is_dict()) {
      return TypeError(absl::StrFormat("'%s' object is not reversible", TypeName(v)));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    if (items.empty()) {
      return Value::MakeUndefined(absl::StrFormat("No %s item, sequence was empty.", name));
    }
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(auto p, Bind(name, a, {"d", "attribute"}, 0));
    if (p[1].has_value()) return absl::UnimplementedError("unsupported join(attribute=...)");
    std::string sep;
    if (p[0].has_value()) {
      ASSIGN_OR_RETURN(sep, ToStr(*p[0], budget));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      ASSIGN_OR_RETURN(std::string s, ToStr(items[i], budget));
      if (i > 0) out += sep;
      out += s;
      RETURN_IF_ERROR(budget.CheckString(out.size()));
    }
    RETURN_IF_ERROR(budget.ChargeBytes(out.size()));
    return Value::MakeStr(std::move(out));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(auto p, Bind(name, a, {"old", "new", "count"}, 2));
    ASSIGN_OR_RETURN(std::string s, ToStr(v, budget));
    ASSIGN_OR_RETURN(std::string old_s, ToStr(*p[0], budget));
    ASSIGN_OR_RETURN(std::string new_s, ToStr(*p[1], budget));
    ASSIGN_OR_RETURN(int64_t count, IntArg(name, p[2], -1));
    ASSIGN_OR_RETURN(std::string r, PyReplace(s, old_s, new_s, count, budget));
    return Value::MakeStr(std::move(r));
  }
  if (name == "string") {
    RETURN_IF_ERROR(NoArgs(name, a));
    if (v.is_str()) return v;
    ASSIGN_OR_RETURN(std::string s, ToStr(v, budget));
    return Value::MakeStr(std::move(s));
  }
  if (name == "list") {
    RETURN_IF_ERROR(NoArgs(name, a));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    RETURN_IF_ERROR(budget.Charge(items.size()));
    return Value::MakeList(std::move(items));
  }
  if (name == "items") {
    RETURN_IF_ERROR(NoArgs(name, a));
    if (v.is_undefined()) return Value::MakeList({}, SeqKind::kIterator);
    if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [key, value] : v.dict().items) {
      pairs.push_back(Value::MakeList({Value::MakeStr(key), value}, SeqKind::kTuple));
    }
    RETURN_IF_ERROR(budget.Charge(pairs.size()));
    return Value::MakeList(std::move(pairs), SeqKind::kIterator);
  }
  if (name == "reverse") {
    RETURN_IF_ERROR(NoArgs(name, a));
    if (v.is_str()) {
      std::vector<uint32_t> cps = DecodeUtf8(v.str());
      std::reverse(cps.begin(), cps.end());
      RETURN_IF_ERROR(budget.ChargeBytes(v.str().size()));
      return Value::MakeStr(EncodeUtf8(cps));
    }
    // reversed(): a one-shot iterator; an Undefined falls back to an empty list.
    if (v.is_undefined()) return Value::MakeList({});
    if (!(v.is_list() && v.list().kind != SeqKind::kIterator) && !v.is_dict()) {
      return absl::UnimplementedError(absl::StrFormat("unsupported reverse of a %s", TypeName(v)));
    }
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    std::reverse(items.begin(), items.end());
    RETURN_IF_ERROR(budget.Charge(items.size()));
    return Value::MakeList(std::move(items), SeqKind::kIterator);
  }
  if (name == "abs") {
    RETURN_IF_ERROR(NoArgs(name, a));
    if (v.is_undefined()) return UndefinedError(v);
    if (!v.is_int_like()) {
      return TypeError(absl::StrFormat("bad operand type for abs(): '%s'", TypeName(v)));
    }
    if (v.as_int() < 0) return Negate(v);
    return Value::MakeInt(v.as_int());
  }
  return absl::UnimplementedError(absl::StrFormat("unsupported filter \"%s\"", name));
}

absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& a,
                               Budget& budget) {
  RETURN_IF_ERROR(budget.Charge(1));
  auto no_args = [&]() { return NoArgs(name, a); };
  if (name == "defined" || name == "undefined") {
    RETURN_IF_ERROR(no_args());
    return v.is_undefined() == (name == "undefined");
  }
  if (name == "none" || name == "string" || name == "number" || name == "integer" ||
      name == "boolean" || name == "mapping") {
    RETURN_IF_ERROR(no_args());
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_str();
    if (name == "number") return v.is_int_like();  // bool is a Number in Python
    if (name == "integer") return v.is_int_like() && !v.is_bool();
    if (name == "boolean") return v.is_bool();
    return v.is_dict();
  }
  if (name == "true" || name == "false") {
    RETURN_IF_ERROR(no_args());
    return v.is_bool() && std::get<bool>(v.v) == (name == "true");
  }
  if (name == "callable") {
    RETURN_IF_ERROR(no_args());
    return v.is_callable() || v.is_undefined();  // jinja2's Undefined defines __call__
  }
  if (name == "iterable") {
    RETURN_IF_ERROR(no_args());
    return v.is_undefined() || v.is_str() || v.is_list() || v.is_dict() || v.is_loop();
  }
  if (name == "sequence") {
    RETURN_IF_ERROR(no_args());
    // len() and __getitem__: jinja2's Undefined has both.
    return v.is_undefined() || v.is_str() || v.is_dict() ||
           (v.is_list() && v.list().kind != SeqKind::kIterator);
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    int64_t divisor = 2;
    if (name == "divisibleby") {
      ASSIGN_OR_RETURN(auto p, Bind(name, a, {"num"}, 1));
      if (!p[0]->is_int_like()) return absl::UnimplementedError("unsupported divisibleby argument");
      divisor = p[0]->as_int();
    } else {
      RETURN_IF_ERROR(no_args());
    }
    ASSIGN_OR_RETURN(Value m, Arith("%", v, Value::MakeInt(divisor), budget));
    if (!m.is_int_like()) return absl::UnimplementedError("unsupported operand of an even/odd test");
    return name == "odd" ? m.as_int() == 1 : m.as_int() == 0;
  }
  ASSIGN_OR_RETURN(auto p, Bind(name, a, {"other"}, 1));
  const Value& other = *p[0];
  if (name == "eq" || name == "equalto") return Equal(v, other, budget);
  if (name == "ne") {
    ASSIGN_OR_RETURN(bool eq, Equal(v, other, budget));
    return !eq;
  }
  if (name == "in") return Contains(other, v, budget);
  if (name == "sameas") {
    bool singleton = [](const Value& x) { return x.is_none() || x.is_bool(); }(v) ||
                     other.is_none() || other.is_bool();
    if (!singleton) return absl::UnimplementedError("unsupported sameas test (Python identity)");
    if (v.is_none() || other.is_none()) return v.is_none() && other.is_none();
    return v.is_bool() && other.is_bool() && std::get<bool>(v.v) == std::get<bool>(other.v);
  }
  if (v.is_undefined()) return UndefinedError(v);
  if (other.is_undefined()) return UndefinedError(other);
  if (name == "lt" || name == "lessthan") return Less(v, other, budget);
  if (name == "gt" || name == "greaterthan") return Less(other, v, budget);
  // Python's <= on these (total) orders is not >, and >= is not <.
  ASSIGN_OR_RETURN(bool rev, name == "le" ? Less(other, v, budget) : Less(v, other, budget));
  return !rev;
}

}  // namespace lockstep::tokenizer::chat_template_internal
