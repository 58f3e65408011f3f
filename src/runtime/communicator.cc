// SPDX-License-Identifier: Apache-2.0
// What every communicator shares: the sizes of the messages it moves.
#include "dcp/communicator.h"

namespace dcp {
namespace {

template <typename Part>
size_t SumOfParts(const std::vector<Part>& parts) {
  size_t bytes = 0;
  for (const Part& part : parts) bytes += part.size();
  return bytes;
}

}  // namespace

size_t SendBuffer::bytes() const { return SumOfParts(parts); }
size_t RecvBuffer::bytes() const { return SumOfParts(parts); }

}  // namespace dcp
