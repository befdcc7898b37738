// The self-contained HTML report of a qualification record (docs/qualify.md): tables, three
// inline SVG plots (acceptance per draft position, the KL histogram, decode tok/s vs
// concurrency) and, last, the verdict element `<div id="verdict">` with its reasons. No script,
// no external file, no network.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace lockstep::cli::qualify {

// `record` is the full record, its "verdict" section included.
std::string RenderHtml(const nlohmann::json& record);

}  // namespace lockstep::cli::qualify
