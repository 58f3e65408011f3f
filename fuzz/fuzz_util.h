// SPDX-License-Identifier: Apache-2.0
// What the libFuzzer harnesses of fuzz/ share (docs/fuzzing.md): a check that stops the fuzzer on
// a broken property, the check that a refused input gets one of the codes its parser documents,
// the optional tally of outcomes, and an in-memory file for the readers that take a path.
//
// A harness calls one parser with the fuzzer's bytes, then, on success, checks the properties the
// parser's contract promises (a round trip, a validation) and exercises what a successful parse
// feeds, with sizes bounded so the harness itself stays far below -rss_limit_mb.
#pragma once

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "dcp/status.h"

namespace dcp::fuzz {

// A property that must hold for every input. On failure prints the message and traps, so that
// libFuzzer reports a crash and saves the input.
#define DCP_FUZZ_CHECK(condition, ...)                                                           \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s: %s\n", __FILE__, __LINE__, #condition, \
                   ::fmt::format("" __VA_ARGS__).c_str());                                       \
      std::fflush(stderr);                                                                       \
      __builtin_trap();                                                                          \
    }                                                                                            \
  } while (false)

// Whether DCP_FUZZ_TALLY is set: then every outcome is printed, one line each, for the table of
// docs/fuzzing.md (fuzz/tally.py counts them). Off during fuzzing.
inline bool TallyOn() {
  static const bool on = std::getenv("DCP_FUZZ_TALLY") != nullptr;
  return on;
}

// Records the outcome of one parse: `status` is OK, or an error whose code must be one of
// `allowed` (the codes the parser documents) and whose message is not empty. `input`, when given,
// is the text the message may quote; the tally shows it as <input> (if 4 bytes or more).
inline void Outcome(std::string_view what, const Status& status,
                    std::initializer_list<StatusCode> allowed, std::string_view input = {}) {
  if (TallyOn()) {
    std::string message = status.ok() ? std::string("ok") : status.message();
    constexpr std::string_view kPlaceholder = "<input>";
    if (input.size() >= 4) {  // shorter ones would also match inside the message
      for (size_t at = message.find(input); at != std::string::npos;
           at = message.find(input, at + kPlaceholder.size())) {
        message.replace(at, input.size(), kPlaceholder);
      }
    }
    for (char& c : message) {
      if (c == '\n' || c == '\t' || c == '\r') c = ' ';
    }
    std::fprintf(stderr, "DCP_FUZZ_OUTCOME\t%.*s\t%.*s\t%s\n", static_cast<int>(what.size()),
                 what.data(), static_cast<int>(ToString(status.code()).size()),
                 ToString(status.code()).data(), message.c_str());
  }
  if (status.ok()) return;
  bool known = false;
  for (StatusCode code : allowed) known = known || status.code() == code;
  DCP_FUZZ_CHECK(known, "{}: undocumented error code: {}", what, status.ToString());
  DCP_FUZZ_CHECK(!status.message().empty(), "{}: error {} without a message", what,
                 ToString(status.code()));
}

// A file that lives in memory (memfd), for readers that take a path: Write() replaces its contents
// and path() names it (/proc/self/fd/N, a regular file to std::filesystem). One per harness.
class MemoryFile {
 public:
  MemoryFile() : fd_(memfd_create("dcp-fuzz-input", 0)) {
    DCP_FUZZ_CHECK(fd_ >= 0, "memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { close(fd_); }

  void Write(std::string_view data) {
    DCP_FUZZ_CHECK(ftruncate(fd_, 0) == 0, "ftruncate failed");
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n =
          pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(done));
      DCP_FUZZ_CHECK(n > 0, "pwrite failed");
      done += static_cast<size_t>(n);
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace dcp::fuzz
