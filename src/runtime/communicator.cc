// SPDX-License-Identifier: Apache-2.0
#include "dcp/communicator.h"

namespace dcp {

size_t SendBuffer::bytes() const {
  size_t total = 0;
  for (const auto& part : parts) total += part.size();
  return total;
}

size_t RecvBuffer::bytes() const {
  size_t total = 0;
  for (const auto& part : parts) total += part.size();
  return total;
}

}  // namespace dcp
