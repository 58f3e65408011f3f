// SPDX-License-Identifier: Apache-2.0
#include "util/excerpt.h"

#include <fmt/format.h>

namespace dcp::internal {

std::string Excerpt(std::string_view text, size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  if (text.size() > max_bytes) {
    // Drop a UTF-8 character cut in two: back up over continuation bytes (10xxxxxx) to the byte
    // that starts the last character, and keep it only if all of its bytes made it in.
    size_t i = out.size();
    while (i > 0 && (static_cast<unsigned char>(out[i - 1]) & 0xC0) == 0x80) --i;
    if (i > 0) {
      const size_t lead = i - 1;
      const auto byte = static_cast<unsigned char>(out[lead]);
      const size_t bytes = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
      if (out.size() - lead < bytes) out.resize(lead);
    }
  }
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = ' ';
  }
  if (text.size() > max_bytes) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace dcp::internal
