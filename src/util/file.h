// SPDX-License-Identifier: Apache-2.0
// Reading a whole file: the one place every reader of user-named files goes through.
#pragma once

#include <string>

#include "dcp/status.h"

namespace dcp::internal {

// The whole contents of the regular file at `path`. NotFound names the path when it does not
// exist, is not a regular file (a directory, a device) or cannot be read. Never throws.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace dcp::internal
