// SPDX-License-Identifier: Apache-2.0
#include "util/json.h"

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "util/excerpt.h"

namespace dcp::internal {

namespace {

// A first pass over the text that builds nothing: it stops at the first array or object opened
// at depth kMaxJsonDepth (the top level is depth 0) and at the first key an object repeats.
// (nlohmann's parser with a callback did the depth check in the same pass as the build, but its
// callback parser rescans an array each time an element closes: a mask of 200K slices took 12 s.)
class Screen : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool too_deep = false;
  bool repeated = false;
  std::string repeated_key;  // the first key an object repeats
  bool failed = false;       // the text does not parse (the full parse says where)

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (!Open()) return false;
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (keys_.back().insert(key).second) return true;
    repeated = true;
    repeated_key = key;
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    failed = true;
    return false;
  }

 private:
  bool Open() {
    if (depth_ >= kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    ++depth_;
    return true;
  }
  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // of each open object
};

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what) {
  try {
    Screen screen;
    nlohmann::json::sax_parse(text, &screen);
    if (screen.too_deep) {
      return Status::InvalidArgument(
          fmt::format("{} is nested deeper than {} levels", what, kMaxJsonDepth));
    }
    if (screen.repeated) {
      return Status::InvalidArgument(fmt::format("{} repeats the key \"{}\" in one object", what,
                                                 Excerpt(screen.repeated_key)));
    }
    return nlohmann::json::parse(text);
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
