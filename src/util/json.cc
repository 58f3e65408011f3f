// SPDX-License-Identifier: Apache-2.0
#include "util/json.h"

#include <fmt/format.h>

#include "util/excerpt.h"

namespace dcp::internal {

Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what) {
  // The parser reports each array or object as it opens, at the depth of its parent's elements
  // (0 for the top level). Refusing deeper ones keeps them out of the value, so nothing deep is
  // ever built, and the flag turns the refusal into an error.
  bool too_deep = false;
  const auto limit_depth = [&too_deep](int depth, nlohmann::json::parse_event_t event,
                                       nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      too_deep = true;
    }
    return !too_deep;
  };
  try {
    nlohmann::json value = nlohmann::json::parse(text, limit_depth);
    if (too_deep) {
      return Status::InvalidArgument(
          fmt::format("{} is nested deeper than {} levels", what, kMaxJsonDepth));
    }
    return value;
  } catch (const nlohmann::json::parse_error& e) {
    // The parser's message ends with the token it was reading, which can be the rest of the file.
    return Status::InvalidArgument(fmt::format("{} does not parse at byte {}: {}", what, e.byte,
                                               Excerpt(e.what(), 2 * kMaxExcerptBytes)));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{} does not parse: {}", what, Excerpt(e.what(), 2 * kMaxExcerptBytes)));
  }
}

std::string JsonExcerpt(const nlohmann::json& value) { return Excerpt(value.dump()); }

}  // namespace dcp::internal
