// SPDX-License-Identifier: Apache-2.0
#include <random>

#include "dcp/batch.h"

namespace dcp {
namespace {

// Uniform integer in [0, n) by rejection, so the shuffle is the same on every platform.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

}  // namespace

Status PackOptions::Validate() const {
  if (token_budget < 1 || token_budget > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("token_budget={} is not in [1, {}]", token_budget, kMaxSequenceLength));
  }
  if (max_sequence_length < 0 || max_sequence_length > token_budget) {
    return Status::InvalidArgument(
        fmt::format("max_sequence_length={} is not in [0, token_budget={}]", max_sequence_length,
                    token_budget));
  }
  if (!(min_fill >= 0 && min_fill <= 1)) {
    return Status::InvalidArgument(fmt::format("min_fill={} is not in [0, 1]", min_fill));
  }
  return Status::Ok();
}

Result<std::vector<std::vector<int64_t>>> PackBatches(std::vector<int64_t> lengths,
                                                      const PackOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  std::mt19937_64 rng(options.seed);
  for (size_t i = lengths.size(); i > 1; --i) {  // Fisher-Yates
    std::swap(lengths[i - 1], lengths[UniformBelow(rng, i)]);
  }
  const int64_t max_len =
      options.max_sequence_length > 0 ? options.max_sequence_length : options.token_budget;
  const double min_tokens = options.min_fill * static_cast<double>(options.token_budget);

  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> current;
  int64_t filled = 0;
  for (int64_t len : lengths) {
    if (len < 1)
      return Status::InvalidArgument(fmt::format("sequence length {} is not positive", len));
    if (len > max_len) continue;
    if (filled + len > options.token_budget) {
      if (static_cast<double>(filled) >= min_tokens) batches.push_back(current);
      current.clear();
      filled = 0;
    }
    current.push_back(len);
    filled += len;
  }
  // A batch filled exactly to the budget is finished; anything less is the unfinished tail.
  if (filled == options.token_budget) batches.push_back(current);
  return batches;
}

}  // namespace dcp
