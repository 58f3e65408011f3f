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

// Checks the text of every option of the app and its subcommands before CLI11 converts it: an
// empty value is refused (`-o ''` would otherwise read as "not given"), and an integer must be
// decimal and fit 64 bits (CLI11 alone reads 010 as octal and 0x10 as hexadecimal, and clamps
// what overflows).
void CheckOptionTexts(CLI::App& app);

// Prints "dcp: error: <status>" to stderr and returns 1.
int ReportError(const Status& status);

}  // namespace dcp::cli
