// SPDX-License-Identifier: Apache-2.0
// Static context-parallel strategies expressed in dcp's own terms, so they are measured with the
// same model and, later, run on the same executor and simulator (issue 6).
#pragma once

#include "dcp/blocks.h"
#include "dcp/partition.h"

namespace dcp {

// ZigZag ring attention's placement at block granularity: every sequence is cut into 2P chunks
// (P = devices), device r holds chunks r and 2P-1-r, and each tile is computed where its queries
// live (KV travels around the ring). Block b of a sequence of n blocks falls in chunk
// floor(b * 2P / n). Sequences shorter than 2P blocks leave some devices without blocks of them.
Placement ZigzagPlacement(const BlockSet& blocks, const Topology& topology);

}  // namespace dcp
