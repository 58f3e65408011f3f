// SPDX-License-Identifier: Apache-2.0
// The starts of the k-way engine (kway_engine.h): geometric, contiguous, greedy and stripes.
#include <algorithm>
#include <tuple>

#include "partition/kway_engine.h"

namespace dcp::internal {
namespace {

// A tile of the geometric start: a point in stretched (q block, kv block) coordinates.
struct Point {
  int32_t v;
  double x, y;
};

// The points of a region in two orders: by (x, y, v) and by (y, x, v) (each a total order, as
// v is unique). A region is a range [0, count) of both lists holding the same points.
struct Region {
  int32_t* by_x;
  int32_t* by_y;
  int32_t count;
};

// Cuts `region` (indices into `points`) into `parts` regions of equal compute (the weights of g)
// by recursive bisection across the longer side, numbered from first_part into (*part)[v]. The
// points are sorted along both axes once: a region's half along one axis is a prefix of that
// order, and the other order keeps its sortedness when split stably, so no level sorts again.
void Bisect(const Hypergraph& g, const std::vector<Point>& points, Region region,
            int32_t first_part, int32_t parts, std::vector<char>* on_left,
            std::vector<int32_t>* scratch, std::vector<int32_t>* part) {
  const int32_t count = region.count;
  if (parts == 1 || count <= 1) {
    for (int32_t i = 0; i < count; ++i) (*part)[points[region.by_x[i]].v] = first_part;
    return;
  }
  const double width = points[region.by_x[count - 1]].x - points[region.by_x[0]].x;
  const double height = points[region.by_y[count - 1]].y - points[region.by_y[0]].y;
  const bool along_x = width >= height;
  int32_t* along = along_x ? region.by_x : region.by_y;
  int32_t* other = along_x ? region.by_y : region.by_x;
  const auto weight = [&](int32_t i) { return g.compute_weight[points[along[i]].v]; };
  int64_t total = 0;
  for (int32_t i = 0; i < count; ++i) total += weight(i);
  const int32_t left_parts = parts / 2;
  const double target = static_cast<double>(total) * left_parts / parts;
  int32_t cut = 0;
  int64_t prefix = 0;
  while (cut != count && static_cast<double>(prefix + weight(cut)) <= target) {
    prefix += weight(cut);
    ++cut;
  }
  // Take the next tile too if that lands closer to the target.
  if (cut != count &&
      static_cast<double>(prefix + weight(cut)) - target < target - static_cast<double>(prefix)) {
    ++cut;
  }
  // The other order split stably: the left half's points first, each half still sorted.
  for (int32_t i = 0; i < count; ++i) (*on_left)[along[i]] = i < cut ? 1 : 0;
  scratch->assign(other, other + count);
  int32_t* left = other;
  int32_t* right = other + cut;
  for (int32_t i : *scratch) *((*on_left)[i] ? left++ : right++) = i;
  Bisect(g, points, {region.by_x, region.by_y, cut}, first_part, left_parts, on_left, scratch,
         part);
  Bisect(g, points, {region.by_x + cut, region.by_y + cut, count - cut}, first_part + left_parts,
         parts - left_parts, on_left, scratch, part);
}

// Cuts the points into k regions of equal compute (Bisect), into (*part)[v].
void BisectPoints(const Hypergraph& g, const std::vector<Point>& points, int32_t k,
                  std::vector<int32_t>* part) {
  // Sorted as contiguous (major, minor, v) records: comparing indices into `points` reached
  // into it at random.
  struct Record {
    double major, minor;
    int32_t v, index;
  };
  const auto order = [&](bool along_x) {
    std::vector<Record> records(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
      const Point& p = points[i];
      records[i] = along_x ? Record{p.x, p.y, p.v, static_cast<int32_t>(i)}
                           : Record{p.y, p.x, p.v, static_cast<int32_t>(i)};
    }
    std::sort(records.begin(), records.end(), [](const Record& a, const Record& b) {
      return std::tie(a.major, a.minor, a.v) < std::tie(b.major, b.minor, b.v);
    });
    std::vector<int32_t> indices(points.size());
    for (size_t i = 0; i < records.size(); ++i) indices[i] = records[i].index;
    return indices;
  };
  std::vector<int32_t> by_x = order(true), by_y = order(false);
  std::vector<char> on_left(points.size());
  std::vector<int32_t> scratch;
  Bisect(g, points, {by_x.data(), by_y.data(), static_cast<int32_t>(points.size())}, 0, k, &on_left,
         &scratch, part);
}

}  // namespace

// Start for attention hypergraphs: tiles are points (q block, kv block) in the batch's block
// coordinates, with the q axis stretched by the ratio of row-net to column-net bytes, and are
// cut by recursive bisection into k regions of equal compute. A region a rows tall and b
// columns wide costs about row_bytes * a + column_bytes * b for a * b tiles, so square regions in
// the stretched coordinates move the fewest bytes. Each data block then goes to the part that
// saves the most bytes holding it, within the memory cap.
void KwayEngine::GeometricPlacement(double stretch_factor) {
  std::vector<Point> points;
  std::vector<int32_t> data;
  std::vector<double> net_sum(2, 0), net_count(2, 0);
  for (int32_t n = 0; n < g_.n_nets(); ++n) {
    const int kind = g_.net_kind[n] == NetKind::kRow ? 0 : 1;
    net_sum[kind] += static_cast<double>(g_.net_weight[n]);
    net_count[kind] += 1;
  }
  const double stretch =
      stretch_factor * (net_count[0] > 0 && net_count[1] > 0 && net_sum[1] > 0
                            ? (net_sum[0] / net_count[0]) / (net_sum[1] / net_count[1])
                            : 1.0);
  for (int32_t v : subset_) {
    if (!IsCompute(v)) {
      data.push_back(v);
      continue;
    }
    Point p{v, 0, 0};
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (g_.net_kind[n] == NetKind::kRow)
        p.x = stretch * g_.net_data_block[n];
      else
        p.y = g_.net_data_block[n];
    }
    points.push_back(p);
  }
  std::vector<int32_t> part_of_point(g_.n_vertices(), -1);
  BisectPoints(g_, points, k_, &part_of_point);
  for (const Point& p : points) state_.Assign(p.v, part_of_point[p.v]);
  PlaceData(data);
}

// Each data vertex to the part where its nets already have pins worth the most bytes, within
// the memory cap; the rest to the part with the most memory room.
void KwayEngine::PlaceData(const std::vector<int32_t>& data) {
  struct Choice {
    int64_t saving;
    int32_t v, part;
  };
  std::vector<Choice> choices;
  for (int32_t v : data) {
    for (int32_t p = 0; p < k_; ++p) {
      int64_t saving = 0;
      for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
        if (state_.pins(g_.incident[i], p) > 0) saving += g_.net_weight[g_.incident[i]];
      }
      if (saving > 0) choices.push_back({saving, v, p});
    }
  }
  std::sort(choices.begin(), choices.end(), [](const Choice& a, const Choice& b) {
    return std::tie(b.saving, a.v, a.part) < std::tie(a.saving, b.v, b.part);
  });
  for (const Choice& c : choices) {
    if (state_.part(c.v) < 0 && Fits(c.part, 0, g_.memory_weight[c.v])) state_.Assign(c.v, c.part);
  }
  for (int32_t v : data) {
    if (state_.part(v) >= 0) continue;
    int32_t best = 0;
    for (int32_t p = 1; p < k_; ++p) {
      if (state_.memory()[p] < state_.memory()[best]) best = p;
    }
    state_.Assign(v, best);
  }
}

// Start that keeps sequences together: data blocks in batch order cut into k runs of equal
// memory, every tile on the part holding its queries (row nets are the heavy ones). Compute is
// then unbalanced where long causal sequences sit; the repair pass moves the cheapest tiles out,
// and once a part imports a row or column, more tiles of it come almost free, so the moved tiles
// gather into compact regions.
void KwayEngine::ContiguousPlacement() {
  int64_t total = 0;
  for (int32_t v : data_vertices_) total += g_.memory_weight[v];
  int64_t prefix = 0;
  std::vector<int32_t> row_owner(g_.n_data, -1);
  for (int32_t v : data_vertices_) {  // ascending vertex id: batch order
    const auto p = static_cast<int32_t>(std::min<int64_t>(
        k_ - 1, (2 * prefix + g_.memory_weight[v]) * k_ / (2 * std::max<int64_t>(total, 1))));
    prefix += g_.memory_weight[v];
    state_.Assign(v, p);
    row_owner[v - g_.n_compute] = p;
  }
  for (int32_t v : subset_) {
    if (!IsCompute(v)) continue;
    int32_t p = 0;
    for (int32_t i = g_.vertex_begin[v]; i < g_.vertex_begin[v + 1]; ++i) {
      const int32_t n = g_.incident[i];
      if (g_.net_kind[n] == NetKind::kRow && row_owner[g_.net_data_block[n]] >= 0) {
        p = row_owner[g_.net_data_block[n]];
      }
    }
    state_.Assign(v, p);
  }
}

// The units of the subset: a whole sequence if it fits half a part (in *whole), else its rows,
// one list per sequence in block order (in *rows); tiles whose row's data block is outside the
// subset are units of their own (in *whole).
void KwayEngine::BuildUnits(std::vector<Unit>* whole_units,
                            std::vector<std::vector<Unit>>* rows_of) const {
  std::vector<char> covered(g_.n_vertices(), 0);
  std::vector<int32_t> tiles;
  const auto add = [&](Unit& u, int32_t v) {
    if (covered[v]) return;
    covered[v] = 1;
    u.vertices.push_back(v);
    u.compute += g_.compute_weight[v];
    u.memory += g_.memory_weight[v];
  };
  const int32_t n_sequences = static_cast<int32_t>(problem_.sequence_first_block.size()) - 1;
  for (int32_t s = 0; s < n_sequences; ++s) {
    Unit whole;
    std::vector<Unit> rows;
    for (int32_t b = problem_.sequence_first_block[s]; b < problem_.sequence_first_block[s + 1];
         ++b) {
      const int32_t d = g_.n_compute + b;
      if (!in_subset_[d]) continue;
      Unit row;
      add(row, d);
      RowTiles(d, &tiles);
      for (int32_t t : tiles) add(row, t);
      whole.compute += row.compute;
      whole.memory += row.memory;
      whole.vertices.insert(whole.vertices.end(), row.vertices.begin(), row.vertices.end());
      rows.push_back(std::move(row));
    }
    if (static_cast<double>(whole.compute) <= problem_.compute_cap / 2 &&
        static_cast<double>(whole.memory) <= problem_.memory_cap / 2) {
      if (!whole.vertices.empty()) whole_units->push_back(std::move(whole));
    } else {
      rows_of->push_back(std::move(rows));
    }
  }
  for (int32_t v : subset_) {
    if (!covered[v]) {
      Unit u;
      add(u, v);
      whole_units->push_back(std::move(u));
    }
  }
}

// Places units largest first (by the constraint each presses hardest), each onto the least
// loaded part.
void KwayEngine::PlaceLeastLoaded(std::vector<Unit> units) {
  const auto size = [&](const Unit& u) {
    return std::max(static_cast<double>(u.compute) / problem_.compute_cap,
                    static_cast<double>(u.memory) / problem_.memory_cap);
  };
  std::stable_sort(units.begin(), units.end(),
                   [&](const Unit& a, const Unit& b) { return size(a) > size(b); });
  for (const Unit& u : units) {
    int32_t best = 0;
    double best_load = 0;
    for (int32_t p = 0; p < k_; ++p) {
      const double load =
          std::max(static_cast<double>(state_.compute()[p] + u.compute) / problem_.compute_cap,
                   static_cast<double>(state_.memory()[p] + u.memory) / problem_.memory_cap);
      if (p == 0 || load < best_load) {
        best = p;
        best_load = load;
      }
    }
    for (int32_t v : u.vertices) state_.Assign(v, best);
  }
}

// Greedy start: whole short sequences and the rows of long ones, largest first onto the least
// loaded part.
void KwayEngine::GreedyPlacement() {
  std::vector<Unit> units;
  std::vector<std::vector<Unit>> rows_of;
  BuildUnits(&units, &rows_of);
  for (std::vector<Unit>& rows : rows_of) {
    for (Unit& r : rows) units.push_back(std::move(r));
  }
  PlaceLeastLoaded(std::move(units));
}

// Start that cuts long sequences into stripes of whole rows. Row nets weigh several times
// column nets, so a part that holds whole rows with their data pays only for the columns it
// reads from above its stripe. Rows go bottom-up (the long, compute-heavy rows first), each part
// filled until its compute plus the compute of the short sequences needed to fill its memory to
// the average would pass the average; whole short sequences then fill the parts least loaded
// first. Top rows (short, data-heavy) thus end in a stripe of many rows or fill other parts.
void KwayEngine::StripePlacement() {
  std::vector<Unit> units;
  std::vector<std::vector<Unit>> rows_of;
  BuildUnits(&units, &rows_of);
  double total_compute = 0, total_memory = 0, filler_compute = 0, filler_memory = 0;
  for (int32_t v : subset_) {
    total_compute += static_cast<double>(g_.compute_weight[v]);
    total_memory += static_cast<double>(g_.memory_weight[v]);
  }
  for (const Unit& u : units) {
    filler_compute += static_cast<double>(u.compute);
    filler_memory += static_cast<double>(u.memory);
  }
  // Compute the fillers bring per byte of memory.
  const double density = filler_memory > 0 ? filler_compute / filler_memory : 0;
  const double avg_compute = total_compute / k_, avg_memory = total_memory / k_;
  std::stable_sort(rows_of.begin(), rows_of.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  int32_t p = 0;
  double c = 0, m = 0;
  for (const std::vector<Unit>& rows : rows_of) {
    for (auto r = rows.rbegin(); r != rows.rend(); ++r) {
      const double next_c = c + static_cast<double>(r->compute);
      const double next_m = m + static_cast<double>(r->memory);
      const bool full = next_m > avg_memory ||
                        next_c + std::max(0.0, avg_memory - next_m) * density > avg_compute;
      if (full && (c > 0 || m > 0) && p + 1 < k_) {
        ++p;
        c = m = 0;
      }
      c += static_cast<double>(r->compute);
      m += static_cast<double>(r->memory);
      for (int32_t v : r->vertices) state_.Assign(v, p);
    }
  }
  PlaceLeastLoaded(std::move(units));
}

}  // namespace dcp::internal
