// SPDX-License-Identifier: Apache-2.0
// Running the `dcp` binary from tests: popen, capture stdout, stderr and the exit code.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace dcp::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string ShellQuote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The bytes of a file ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// A path in the test temp directory, unique to the running test and process.
inline std::string TempPath(const std::string& suffix) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  std::replace(name.begin(), name.end(), '/', '_');  // parameterized names hold '/'
  return ::testing::TempDir() + "dcp_" + name + "_" + std::to_string(::getpid()) + suffix;
}

// Runs a shell command, capturing stdout, stderr and the exit code.
inline CliRun RunCommand(const std::string& command) {
  const std::string err_path = TempPath(".stderr");
  CliRun run;
  FILE* pipe = ::popen((command + " 2>" + ShellQuote(err_path)).c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed for " << command;
    return run;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream contents;
  contents << err.rdbuf();
  run.err = contents.str();
  std::remove(err_path.c_str());
  return run;
}

// The shell command `dcp ARGS...`.
inline std::string DcpCommand(const std::vector<std::string>& args) {
  std::string command = ShellQuote(DCP_CLI_PATH);
  for (const std::string& arg : args) command += " " + ShellQuote(arg);
  return command;
}

// Runs `dcp ARGS...`; with limit_seconds > 0 it is killed after that long (exit 124), so a hang
// fails the test with a message instead of stalling it.
inline CliRun RunDcp(const std::vector<std::string>& args, int limit_seconds = 0) {
  const std::string limit =
      limit_seconds > 0 ? "timeout -k 5 " + std::to_string(limit_seconds) + " " : "";
  return RunCommand(limit + DcpCommand(args));
}

// stdout as a JSON object, failing the test when the run failed or printed something else.
inline nlohmann::json ParseJson(const CliRun& run) {
  EXPECT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json j = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << "stdout is not a JSON object:\n" << run.out << "\nstderr:\n"
                             << run.err;
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace dcp::testing
