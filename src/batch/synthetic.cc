// SPDX-License-Identifier: Apache-2.0
// Seeded synthetic length distributions. Everything is computed from std::mt19937_64, whose output
// the C++ standard fixes, with our own uniform and normal transforms (the standard library's
// distributions differ between implementations), so a seed gives the same lengths everywhere.
#include <cmath>
#include <numbers>
#include <random>

#include "dcp/batch.h"

namespace dcp {
namespace {

// A log-normal component: exp(N(log(median), sigma)).
struct Component {
  double weight;
  double median;
  double sigma;
};

// Fitted by eye to the length histograms of Fig. 2 of the DCP paper (capped at 128K tokens); see
// docs/datasets.md. LongDataCollections: most sequences are a few thousand tokens, a quarter come
// from a long tail of books and papers. LongAlign: mostly 8K-64K instructions, few short ones.
constexpr Component kLongDataCollections[] = {{0.75, 2000, 1.0}, {0.25, 16000, 0.9}};
constexpr Component kLongAlign[] = {{0.10, 4000, 0.6}, {0.90, 14000, 0.5}};

double Uniform01(std::mt19937_64& rng) {  // in [0, 1), 53 random bits
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

double StandardNormal(std::mt19937_64& rng) {  // Box-Muller
  const double u1 = 1.0 - Uniform01(rng);      // (0, 1]
  const double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

std::string_view ToString(LengthDistribution distribution) {
  switch (distribution) {
    case LengthDistribution::kLongDataCollections:
      return "ldc";
    case LengthDistribution::kLongAlign:
      return "longalign";
  }
  return "unknown";
}

Result<LengthDistribution> ParseLengthDistribution(std::string_view text) {
  if (text == "ldc") return LengthDistribution::kLongDataCollections;
  if (text == "longalign") return LengthDistribution::kLongAlign;
  return Status::InvalidArgument(fmt::format("unknown dataset '{}' (known: ldc, longalign)", text));
}

Status SyntheticOptions::Validate() const {
  if (!(scale >= 1.0 / 64 && scale <= 64)) {
    return Status::InvalidArgument(fmt::format("scale={} is not in [1/64, 64]", scale));
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> SampleLengths(const SyntheticOptions& options, int64_t count) {
  DCP_RETURN_IF_ERROR(options.Validate());
  if (count < 0) return Status::InvalidArgument(fmt::format("count={} is negative", count));
  std::span<const Component> mixture = options.distribution == LengthDistribution::kLongAlign
                                           ? std::span<const Component>(kLongAlign)
                                           : std::span<const Component>(kLongDataCollections);
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> lengths;
  lengths.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    double pick = Uniform01(rng);
    const Component* c = &mixture.back();
    for (const Component& m : mixture) {
      if (pick < m.weight) {
        c = &m;
        break;
      }
      pick -= m.weight;
    }
    const double tokens = c->median * std::exp(c->sigma * StandardNormal(rng)) * options.scale;
    const double capped = std::min(tokens, static_cast<double>(kMaxSequenceLength));
    lengths.push_back(std::max<int64_t>(1, std::llround(capped)));
  }
  return lengths;
}

Result<std::vector<int64_t>> SyntheticBatch(const SyntheticOptions& options, int64_t tokens) {
  DCP_RETURN_IF_ERROR(options.Validate());
  if (tokens < 1 || tokens > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("tokens={} is not in [1, {}]", tokens, kMaxSequenceLength));
  }
  // Draw a pool large enough for several batches at every scale, then pack it.
  constexpr int64_t kPool = 4096;
  DCP_ASSIGN_OR_RETURN(std::vector<int64_t> pool, SampleLengths(options, kPool));
  const PackOptions pack{.token_budget = tokens, .seed = options.seed};
  DCP_ASSIGN_OR_RETURN(auto batches, PackBatches(std::move(pool), pack));
  if (batches.empty()) {
    return Status::InvalidArgument(fmt::format(
        "no batch of {} tokens could be packed from {} at scale {}: sequences are too long", tokens,
        ToString(options.distribution), options.scale));
  }
  return batches.front();
}

}  // namespace dcp
