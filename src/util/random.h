// SPDX-License-Identifier: Apache-2.0
// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): a
// counter passed through a 64-bit mixing function. One add and three xor-shift-multiplies per
// number, against mt19937_64's state of 312 words refilled in bulk; the annealer draws several
// numbers per step, and with mt19937_64 they were a fifth of a 128-part placement.
#pragma once

#include <cstdint>
#include <limits>

namespace dcp {

// The mixing function alone: a well-spread 64-bit hash of x.
constexpr uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A UniformRandomBitGenerator (usable with <random> and std::shuffle).
class SplitMix64 {
 public:
  using result_type = uint64_t;
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  result_type operator()() { return Mix64(state_ += 0x9e3779b97f4a7c15ull); }

 private:
  uint64_t state_;
};

}  // namespace dcp
