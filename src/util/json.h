// SPDX-License-Identifier: Apache-2.0
// Reading JSON that users wrote (mask specs, cluster files), with bounded nesting and no key
// given twice in one object (the last would win silently).
//
// nlohmann::json parses and destroys values without recursion, but dump() and comparisons recurse
// once per level, so a document nested 60,000 levels deep (120 KB of brackets) overflows the stack
// as soon as an error message prints part of it. Every reader of user JSON parses through
// ParseJson, which refuses such a document before any recursive code sees it; error messages
// quote values through JsonExcerpt, never a whole dump.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "dcp/status.h"

namespace dcp::internal {

// Deepest nesting of arrays and objects ParseJson accepts. dcp's own formats need 3 levels; a
// recursive walk this deep costs a few KB of stack.
inline constexpr int kMaxJsonDepth = 64;

// The JSON value of `text`. InvalidArgument, starting with `what` ("mask JSON", "cluster JSON"),
// when the text does not parse ("does not parse at byte B: ...") or has arrays or objects nested
// more than kMaxJsonDepth deep ("is nested deeper than 64 levels") or an object with a key twice
// ("repeats the key \"k\" in one object"). Linear in the text. Never throws.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what);

// The JSON text of `value` as a short one-line excerpt for an error message (util/excerpt.h).
// REQUIRES: `value` is nested at most kMaxJsonDepth deep (it came from ParseJson).
std::string JsonExcerpt(const nlohmann::json& value);

}  // namespace dcp::internal
