// SPDX-License-Identifier: Apache-2.0
// The `dcp` command line: a thin shell over the library. It parses options, calls the library and
// formats results as tables for people or JSON (--json) for programs. Every error is one line
// "dcp: error: ..." on stderr; exit status 2 for a command line that does not parse (usage), 1
// for a failure, 0 otherwise (also --help and --version).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "cli/commands.h"

namespace dcp::cli {

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
    std::fprintf(stderr, "dcp: error: out of memory (try a smaller batch or larger blocks)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dcp: error: %s\n", e.what());
    return 1;
  }
  return status;
}
