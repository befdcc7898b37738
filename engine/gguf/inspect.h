// Human- and machine-readable summaries of a parsed GGUF, for `lockstep inspect`.
#pragma once

#include <string>

#include "engine/gguf/gguf.h"
#include "nlohmann/json.hpp"

namespace lockstep::gguf {

// Unless `full`, arrays show their first kInspectItems items then "... (N items)", and strings
// longer than kInspectStringBytes show a prefix then "... (N bytes)".
inline constexpr size_t kInspectItems = 8;
inline constexpr size_t kInspectStringBytes = 160;

// Header (version, alignment, n_kv, n_tensors, data offset, file size), one line per metadata
// key, one line per tensor (name, type, shape, offset, bytes), and totals. Strings are escaped
// (control characters and bytes that are not UTF-8 as \xNN) so the text is always printable.
std::string InspectText(const File& file, bool full);

// The same as JSON: {"header": {...}, "metadata": [{"key", "type", "value", ...}],
// "tensors": [{"name", "type", "shape", "offset", "bytes", "elements"}], "total": {...}}.
// Strings are valid UTF-8 (invalid bytes become U+FFFD), so dump() never throws.
nlohmann::json InspectJson(const File& file, bool full);

}  // namespace lockstep::gguf
