// SPDX-License-Identifier: Apache-2.0
// A min-heap of the items 0..n-1, each in it at most once with a key, smallest (key, item) on top.
// A key changes in place, so a sweep whose keys change often (the simulator's progressive filling)
// keeps one entry per item instead of piling up stale ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dcp::internal {

class IndexedMinHeap {
 public:
  explicit IndexedMinHeap(size_t n) : key_(n), place_(n, -1) {}

  bool empty() const { return heap_.empty(); }
  int32_t top() const { return heap_.front(); }  // REQUIRES: !empty()
  double key(int32_t x) const { return key_[x]; }

  // Inserts x with this key, or moves it to this key when it is in the heap.
  void Set(int32_t x, double key) {
    key_[x] = key;
    if (place_[x] < 0) {
      place_[x] = static_cast<int32_t>(heap_.size());
      heap_.push_back(x);
    }
    Restore(x);
  }

  // Takes x out. REQUIRES: x is in the heap.
  void Remove(int32_t x) {
    const int32_t place = place_[x];
    place_[x] = -1;
    const int32_t last = heap_.back();
    heap_.pop_back();
    if (last == x) return;
    Place(last, place);
    Restore(last);
  }

  void Clear() {
    for (int32_t x : heap_) place_[x] = -1;
    heap_.clear();
  }

 private:
  bool Before(int32_t x, int32_t y) const {
    return key_[x] < key_[y] || (key_[x] == key_[y] && x < y);
  }
  void Place(int32_t x, size_t i) {
    heap_[i] = x;
    place_[x] = static_cast<int32_t>(i);
  }
  // Sifts x up or down to where its key belongs.
  void Restore(int32_t x) {
    size_t i = static_cast<size_t>(place_[x]);
    while (i > 0 && Before(x, heap_[(i - 1) / 2])) {
      Place(heap_[(i - 1) / 2], i);
      i = (i - 1) / 2;
    }
    for (size_t child; (child = 2 * i + 1) < heap_.size(); i = child) {
      if (child + 1 < heap_.size() && Before(heap_[child + 1], heap_[child])) ++child;
      if (!Before(heap_[child], x)) break;
      Place(heap_[child], i);
    }
    Place(x, i);
  }

  std::vector<double> key_;
  std::vector<int32_t> heap_;
  std::vector<int32_t> place_;  // per item, its index in heap_, or -1
};

}  // namespace dcp::internal
