// SPDX-License-Identifier: Apache-2.0
#include "util/file.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

namespace dcp::internal {

Result<std::string> ReadWholeFile(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    return Status::NotFound(fmt::format("cannot open '{}': no such file", path));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return Status::NotFound(fmt::format(
        "cannot read '{}': it is {}, not a file", path,
        std::filesystem::is_directory(status) ? "a directory" : "not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("cannot open '{}'", path));
  try {
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return Status::NotFound(fmt::format("cannot read '{}'", path));
    return data;
  } catch (const std::exception& e) {  // libstdc++ throws from a failed underflow
    return Status::NotFound(fmt::format("cannot read '{}': {}", path, e.what()));
  }
}

}  // namespace dcp::internal
