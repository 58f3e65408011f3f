// SPDX-License-Identifier: Apache-2.0
// The `dcp` subcommands. Each registers its options on the app and returns the function that runs
// it once the command line is parsed; that function returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "dcp/status.h"

namespace dcp::cli {

using CommandRunner = std::function<int()>;

CommandRunner AddBlocksCommand(CLI::App& app);
CommandRunner AddPlaceCommand(CLI::App& app);
CommandRunner AddPlanCommand(CLI::App& app);
CommandRunner AddRunCommand(CLI::App& app);
CommandRunner AddSimulateCommand(CLI::App& app);
CommandRunner AddBenchCommand(CLI::App& app);

// Prints "dcp: error: <status>" to stderr and returns 1.
int ReportError(const Status& status);

}  // namespace dcp::cli
