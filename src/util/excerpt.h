// SPDX-License-Identifier: Apache-2.0
// Short excerpts of user text for error messages. A message quotes what it complains about, but a
// mask spec, a file or a JSON value can be megabytes long: quoting it whole would make an error
// message as large as the input, and a multi-line one would break the CLI's one-line errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dcp::internal {

// Longest text Excerpt quotes whole, in bytes.
inline constexpr size_t kMaxExcerptBytes = 80;

// `text` on one line (control characters become spaces), whole when it has at most `max_bytes`
// bytes; otherwise its first bytes (cut at a UTF-8 character boundary) followed by
// "... (N bytes)".
std::string Excerpt(std::string_view text, size_t max_bytes = kMaxExcerptBytes);

}  // namespace dcp::internal
