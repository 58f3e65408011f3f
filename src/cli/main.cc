// SPDX-License-Identifier: Apache-2.0
// The `dcp` command line: a thin shell over the library. It parses options, calls the library and
// formats results as tables for people or JSON (--json) for programs. Every error is one line
// "dcp: error: ..." on stderr; exit status 2 for a command line that does not parse (usage), 1
// for a failure, 0 otherwise (also --help and --version).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>

#include "cli/commands.h"

namespace dcp::cli {

namespace {

// A value as an error message shows it: whole up to 40 characters, else its start and length
// (a value pasted by mistake can be megabytes).
std::string Shown(std::string_view text) {
  if (text.size() <= 40) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, 32), text.size());
}

// The error for an integer option's text that is not a decimal integer within 64 bits (signed
// or not, as the option's type), or "" after dropping its leading zeros, so that CLI11's own
// reading, which takes a leading 0 for octal, gets the decimal value.
template <typename Int>
std::string ReadAsDecimal(std::string& text) {
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    return fmt::format("{} is out of range [{}, {}]", Shown(text),
                       std::numeric_limits<Int>::min(), std::numeric_limits<Int>::max());
  }
  if (error != std::errc() || end != text.data() + text.size()) {
    if (!std::is_signed_v<Int> && text.starts_with('-')) {
      return fmt::format("{} is negative; expected an integer >= 0", Shown(text));
    }
    return fmt::format("{} is not a decimal integer", Shown(text));
  }
  const size_t sign = text.starts_with('-') ? 1 : 0;
  const size_t first_digit = std::min(text.find_first_not_of('0', sign), text.size() - 1);
  text.erase(sign, first_digit - sign);
  return {};
}

}  // namespace

void CheckOptionTexts(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_max() == 0) continue;  // a flag
    // The type name as CLI11 gives it, e.g. "INT" or "UINT:SEED >= 0" (with its checks' names).
    const std::string type = option->get_type_name();
    if (type.starts_with("INT")) {
      option->transform(CLI::Validator(ReadAsDecimal<int64_t>, ""));
    } else if (type.starts_with("UINT")) {
      option->transform(CLI::Validator(ReadAsDecimal<uint64_t>, ""));
    }
    // Added last but run first (a transform goes before the checks).
    option->transform(CLI::Validator(
        [](std::string& text) { return text.empty() ? std::string("the value is empty") : ""; },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) CheckOptionTexts(*sub);
}

int ReportError(const Status& status) {
  std::fprintf(stderr, "dcp: error: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace dcp::cli

int main(int argc, char** argv) {
  CLI::App app{"dcp: dynamic context parallelism planner and runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dcp " DCP_VERSION);
  const dcp::cli::CommandRunner commands[] = {
      dcp::cli::AddBlocksCommand(app),   dcp::cli::AddPlaceCommand(app),
      dcp::cli::AddPlanCommand(app),     dcp::cli::AddRunCommand(app),
      dcp::cli::AddSimulateCommand(app), dcp::cli::AddBenchCommand(app)};
  dcp::cli::CheckOptionTexts(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "dcp: error: %s (see --help)\n", e.what());
    return 2;
  }
  int status = 0;
  // The library reports failures as Status; what still escapes is the machine running out
  // (memory, threads), which gets one error line like any other failure, not an abort.
  try {
    for (const auto& run : commands) status = std::max(status, run());  // only the parsed one runs
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "dcp: error: out of memory (try a smaller batch, larger blocks or fewer "
                 "devices)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcp: error: %s\n", e.what());
    return 1;
  }
  return status;
}
