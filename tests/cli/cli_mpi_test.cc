// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of `dcp run --comm mpi`: start the `dcp` binary under mpirun (one rank per
// device) with popen, parse rank 0's --json output, and check every rank's exit and error
// messages. (Failures injected into ranks are tested on the executor itself, with a faulty
// communicator in the test code: runtime/mpi_executor_test.cc.) The numbers are checked against the dense reference and against the in-process run of the same
// batch, which must give exactly the same outputs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/cli.h"

namespace {

// A run never takes this long; the limit turns a hang into a failure with a message (exit 124).
constexpr int kLimitSeconds = 100;

using dcp::testing::CliRun;
using dcp::testing::DcpCommand;
using dcp::testing::ParseJson;
using dcp::testing::ReadFile;
using dcp::testing::RunCommand;
using dcp::testing::ShellQuote;
using dcp::testing::TempPath;

// `dcp ARGS...` in this process's place (an MPI singleton for --comm mpi).
CliRun RunDcp(const std::vector<std::string>& args) {
  return dcp::testing::RunDcp(args, kLimitSeconds);
}

// `mpirun -n RANKS dcp ARGS...`. Open MPI refuses to start as root unless told it may.
CliRun RunDcpOnRanks(int ranks, const std::vector<std::string>& args) {
  return RunCommand("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 " +
                    std::to_string(kLimitSeconds) + " " + ShellQuote(DCP_MPIEXEC) + " -n " +
                    std::to_string(ranks) + " --oversubscribe " + DcpCommand(args));
}

// The first "dcp: error: rank R: ..." line of each rank (empty when a rank printed none).
std::vector<std::string> ErrorLines(const std::string& err, int ranks) {
  std::vector<std::string> lines(static_cast<size_t>(ranks));
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    for (int r = 0; r < ranks; ++r) {
      std::string& first = lines[static_cast<size_t>(r)];
      if (first.empty() && line.rfind("dcp: error: rank " + std::to_string(r) + ": ", 0) == 0) {
        first = line;
      }
    }
  }
  return lines;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A failing job exits non-zero anyway: under the sanitizers, what they report must be looked for.
void ExpectNoSanitizerReport(const CliRun& run) {
  EXPECT_FALSE(Contains(run.err, "Sanitizer")) << run.err;
  EXPECT_FALSE(Contains(run.err, "runtime error:")) << run.err;
}

// A job meant to fail: it exits non-zero without a sanitizer report and without hanging (124 is
// the limit's exit code). Returns the first error line of each of its `ranks` ranks.
std::vector<std::string> FailedJobErrorLines(const CliRun& run, int ranks) {
  EXPECT_NE(run.exit_code, 0);
  ExpectNoSanitizerReport(run);
  EXPECT_NE(run.exit_code, 124) << "the job hung:\n" << run.err;
  return ErrorLines(run.err, ranks);
}

// A small batch: three sequences in 256-token blocks on four devices, 4 query heads of dimension
// 16 over 2 KV heads (GQA 2) unless `extra` gives --kv-heads. Small, because the dense reference
// is quadratic and the tests also run under the sanitizers.
std::vector<std::string> SmallBatch(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "run",          "--comm",    "mpi",     "--seqlens", "1024,512,300",
      "--block-size", "256",       "--heads", "4",         "--head-dim",
      "16",           "--devices", "4",       "--json"};
  if (std::find(extra.begin(), extra.end(), "--kv-heads") == extra.end()) {
    args.insert(args.end(), {"--kv-heads", "2"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

struct Case {
  const char* name;
  std::vector<std::string> options;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CliMpiRun : public ::testing::TestWithParam<Case> {};

TEST_P(CliMpiRun, MatchesTheDenseReferenceAndTheInProcessRunOnFourRanks) {
  const std::vector<std::string> args = SmallBatch(GetParam().options);
  const std::string mpi_dump = TempPath("_mpi"), local_dump = TempPath("_local");
  std::vector<std::string> mpi_args = args;
  mpi_args.insert(mpi_args.end(), {"--dump", mpi_dump});
  const CliRun mpi = RunDcpOnRanks(4, mpi_args);
  const nlohmann::json j = ParseJson(mpi);
  ASSERT_TRUE(j.contains("errors")) << mpi.out << mpi.err;
  EXPECT_TRUE(j["within_tolerance"].get<bool>()) << mpi.out;
  EXPECT_EQ(j["devices"].get<int>(), 4);
  EXPECT_EQ(j["comm"].get<std::string>(), "mpi");
  for (const char* tensor : {"o", "lse", "dq", "dk", "dv"}) {
    EXPECT_LE(j["errors"][tensor]["worst"].get<double>(), 1.0) << tensor;
  }
  // The same plan, inputs and kernels in one process: exactly the same outputs, byte for byte
  // (README.md, "Running over MPI").
  std::vector<std::string> local = args;
  local[2] = "local";
  local.insert(local.end(), {"--dump", local_dump});
  const nlohmann::json in_process = ParseJson(RunDcp(local));
  EXPECT_EQ(j["errors"], in_process["errors"]);
  EXPECT_EQ(j["n_divisions"], in_process["n_divisions"]);
  for (const char* output : {"o", "lse", "dq", "dk", "dv"}) {
    const std::string name = std::string("/") + output + ".npy";
    const std::string mpi_bytes = ReadFile(mpi_dump + name);
    EXPECT_FALSE(mpi_bytes.empty()) << mpi_dump << name << " was not written";
    EXPECT_EQ(mpi_bytes, ReadFile(local_dump + name)) << output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    MasksDtypesAndGqa, CliMpiRun,
    ::testing::Values(Case{"CausalFp32Gqa2", {"--mask", "causal", "--dtype", "fp32"}},
                      Case{"SlidingWindowBf16Gqa4",
                           {"--mask", "sliding-window:window=200", "--dtype", "bf16", "--kv-heads",
                            "1"}},
                      Case{"LambdaFp32TwoHeadGroupsTwoNodes",
                           {"--mask", "lambda:sink=8,window=128", "--dtype", "fp32",
                            "--head-groups", "2", "--topology", "2x2"}},
                      Case{"DocumentsBf16NoGqa",
                           {"--mask", "documents:count=3", "--dtype", "bf16", "--kv-heads", "4"}}),
    [](const ::testing::TestParamInfo<Case>& param) { return std::string(param.param.name); });

TEST(CliMpi, RejectsARankCountOtherThanTheDevicesOnEveryRank) {
  const CliRun r = RunDcpOnRanks(2, SmallBatch({}));
  const std::vector<std::string> lines = FailedJobErrorLines(r, 2);
  for (const std::string& line : lines) {
    EXPECT_TRUE(Contains(line, "InvalidArgument: --comm mpi: the plan is for 4 devices"))
        << line << "\nstderr:\n"
        << r.err;
    EXPECT_TRUE(Contains(line, "this MPI job has 2 ranks")) << line;
  }
}

TEST(CliMpi, RunsOneDeviceAsAnMpiSingletonWithoutMpirun) {
  const CliRun r = RunDcp({"run", "--comm", "mpi", "--seqlens", "300,200", "--block-size", "128",
                           "--head-dim", "16", "--devices", "1", "--json"});
  const nlohmann::json j = ParseJson(r);
  EXPECT_TRUE(j["within_tolerance"].get<bool>()) << r.out;
  EXPECT_EQ(j["devices"].get<int>(), 1);
}

// --no-reference: every rank prints its own line, with its local tokens and peak memory.
TEST(CliMpi, WithoutTheReferenceEveryRankReportsItsOwnShare) {
  const CliRun r = RunDcpOnRanks(4, SmallBatch({"--no-reference"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<bool> seen(4, false);
  int64_t tokens = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    seen[j["rank"].get<size_t>()] = true;
    tokens += j["local_tokens"].get<int64_t>();
    EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(seen, std::vector<bool>(4, true)) << r.out;
  EXPECT_EQ(tokens, 1024 + 512 + 300) << r.out;
}

}  // namespace
