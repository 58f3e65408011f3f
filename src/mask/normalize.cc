// SPDX-License-Identifier: Apache-2.0
// Normalization: the union of raw slices as disjoint slices, by one sweep over the rows.
//
// Every raw slice is first cut into pieces: row ranges on which it is non-empty and its columns,
// clipped to [0, length), keep one affine form. On any row the union of the active pieces is a
// list of components, maximal runs of covered columns with at least one uncovered column between
// two of them. The sweep keeps the components in column order, each with the affine columns
// [lo, hi) that bound it and a chain of pieces that covers it: each link overlaps or touches the
// next, found greedily by taking the piece that reaches farthest. A component stays exactly
// [lo(i), hi(i)) on later rows until one of its certificates fails:
//   (a) its hi reaches the lo of the next component: they merge;
//   (b) its moving lo passes the fixed lo of a piece, which now starts the component;
//   (c) its fixed hi is passed by the moving hi of a piece, which now ends the component;
//   (d) a moving lo in the chain passes the fixed hi of the link before it: the chain breaks and
//       the component may split.
// Each certificate compares a fixed column with one that moves one column per row, so the row
// where it fails is known in advance. The sweep stops only at rows where pieces start or end and
// where a certificate fails, and there walks again only the components that may have changed. A
// component that comes back with the same affine bounds continues its output slice, so an output
// slice is a component over the rows on which its bounds kept their form.
//
// Endpoints that cross inside covered columns cost nothing, since no certificate watches them;
// the former cut-at-every-crossing normalization was cubic in the slices covering a row. Each
// stop costs O(log n) per link of the chains it walks again, so a sweep costs
// O((n + k + f) c log n) for n raw slices, k output slices, f certificates that failed without
// changing the union and chains of at most c links. c stays small for the families and for
// random overlapping slices (a few long pieces cover a component), where 100,000 slices take a
// fraction of a second. The union of n slices can itself need Θ(n²) slices (n/2 fixed stripes
// crossed by n/2 moving ones), so k is bounded by the caller (kMaxMaskSlices).
#include "mask/normalize.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

namespace dcp::internal {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

AffineColumn Constant(int64_t value) { return AffineColumn{.base = value, .slope = 0}; }

// The rows of [begin, end) on which [lo(i), hi(i)) is non-empty: one range, as hi - lo is affine.
std::pair<int64_t, int64_t> NonEmptyRows(const AffineColumn& lo, const AffineColumn& hi,
                                         int64_t begin, int64_t end) {
  const int64_t gap = hi.base - lo.base;  // hi(i) - lo(i) = gap + (hi.slope - lo.slope) * i
  switch (hi.slope - lo.slope) {
    case 0:
      return gap > 0 ? std::pair{begin, end} : std::pair{begin, begin};
    case 1:  // gap + i > 0
      return {std::max(begin, 1 - gap), end};
    default:  // gap - i > 0
      return {begin, std::min(end, gap)};
  }
}

// Appends the pieces of a raw slice. Its rows are cut where an endpoint crosses 0 or length (its
// clipped form changes there), and each part is kept on the rows where it is non-empty.
void AppendPieces(const Slice& s, int64_t length, std::vector<Slice>* pieces) {
  int64_t cuts[4] = {s.row_begin, s.row_end, s.row_end, s.row_end};
  // The first row where lo >= 0, and the first where hi > length.
  if (s.lo.slope == 1) cuts[2] = std::clamp(-s.lo.base, s.row_begin, s.row_end);
  if (s.hi.slope == 1) cuts[3] = std::clamp(length - s.hi.base + 1, s.row_begin, s.row_end);
  std::sort(cuts, cuts + 4);
  for (int k = 0; k < 3; ++k) {
    if (cuts[k] >= cuts[k + 1]) continue;
    const AffineColumn lo = s.lo.At(cuts[k]) < 0 ? Constant(0) : s.lo;
    const AffineColumn hi = s.hi.At(cuts[k]) > length ? Constant(length) : s.hi;
    const auto [begin, end] = NonEmptyRows(lo, hi, cuts[k], cuts[k + 1]);
    if (begin < end) pieces->push_back(Slice{begin, end, lo, hi});
  }
}

// A piece and its hi: its base in PrefixMax, its column at a row from Farthest; piece -1 for none.
struct Reach {
  int64_t hi = std::numeric_limits<int64_t>::min();
  int32_t piece = -1;
};

// The maximum of (hi base, piece) over a prefix of positions; empty positions hold piece -1.
class PrefixMax {
 public:
  explicit PrefixMax(size_t n) : size_(std::bit_ceil(std::max<size_t>(n, 1))), tree_(2 * size_) {}

  void Set(size_t pos, Reach value) {
    pos += size_;
    tree_[pos] = value;
    for (pos /= 2; pos >= 1; pos /= 2) tree_[pos] = Max(tree_[2 * pos], tree_[2 * pos + 1]);
  }

  // The maximum over positions [0, end).
  Reach Query(size_t end) const {
    Reach best;
    for (size_t lo = size_, hi = size_ + end; lo < hi; lo /= 2, hi /= 2) {
      if (lo & 1) best = Max(best, tree_[lo++]);
      if (hi & 1) best = Max(best, tree_[--hi]);
    }
    return best;
  }

 private:
  static Reach Max(const Reach& a, const Reach& b) {
    return std::tie(a.hi, a.piece) < std::tie(b.hi, b.piece) ? b : a;
  }

  size_t size_;
  std::vector<Reach> tree_;
};

// The active pieces, in four groups by the slopes of their lo and hi. Inside a group the order of
// the pieces' lo columns is the same on every row, so "lo(row) <= x" selects a prefix of the group
// sorted by lo base, whatever the row.
class ActivePieces {
 public:
  explicit ActivePieces(const std::vector<Slice>& pieces) : pieces_(pieces), slot_(pieces.size()) {
    for (size_t p = 0; p < pieces.size(); ++p) {
      groups_[GroupOf(pieces[p])].members.push_back(static_cast<int32_t>(p));
    }
    for (Group& g : groups_) {
      std::sort(g.members.begin(), g.members.end(), [&](int32_t a, int32_t b) {
        return std::pair{pieces[a].lo.base, a} < std::pair{pieces[b].lo.base, b};
      });
      for (size_t k = 0; k < g.members.size(); ++k) {
        g.lo_bases.push_back(pieces[g.members[k]].lo.base);
        slot_[g.members[k]] = k;
      }
      g.tree = PrefixMax(g.members.size());
    }
  }

  void Add(int32_t p) {
    Group& g = groups_[GroupOf(pieces_[p])];
    g.tree.Set(slot_[p], Reach{pieces_[p].hi.base, p});
    g.active.insert(slot_[p]);
  }

  void Remove(int32_t p) {
    Group& g = groups_[GroupOf(pieces_[p])];
    g.tree.Set(slot_[p], Reach{});
    g.active.erase(slot_[p]);
  }

  // Which pieces a query looks at.
  enum class Only { kAll, kFixedLo, kMovingHi };

  // Among the active pieces with lo(row) <= x, the one whose hi(row) is largest. A tie goes to a
  // moving hi, which stays the largest on later rows.
  Reach Farthest(int64_t x, int64_t row, Only only = Only::kAll) const {
    Reach best;
    int64_t best_slope = 0;
    for (int64_t hi_slope : {1, 0}) {
      if (only == Only::kMovingHi && hi_slope == 0) continue;
      for (int64_t lo_slope : {0, 1}) {
        if (only == Only::kFixedLo && lo_slope == 1) continue;
        const Group& g = groups_[2 * lo_slope + hi_slope];
        const auto end = std::upper_bound(g.lo_bases.begin(), g.lo_bases.end(), x - lo_slope * row);
        const Reach r = g.tree.Query(static_cast<size_t>(end - g.lo_bases.begin()));
        if (r.piece < 0) continue;
        const int64_t hi = r.hi + hi_slope * row;
        if (best.piece < 0 || hi > best.hi || (hi == best.hi && hi_slope > best_slope)) {
          best = Reach{hi, r.piece};
          best_slope = hi_slope;
        }
      }
    }
    return best;
  }

  // The smallest lo(row) >= x of an active piece.
  std::optional<int64_t> NextLo(int64_t x, int64_t row, Only only = Only::kAll) const {
    std::optional<int64_t> next;
    for (int64_t lo_slope : {0, 1}) {
      if (only == Only::kFixedLo && lo_slope == 1) continue;
      for (int64_t hi_slope : {0, 1}) {
        const Group& g = groups_[2 * lo_slope + hi_slope];
        const auto first =
            std::lower_bound(g.lo_bases.begin(), g.lo_bases.end(), x - lo_slope * row);
        const auto it = g.active.lower_bound(static_cast<size_t>(first - g.lo_bases.begin()));
        if (it == g.active.end()) continue;
        const int64_t lo = g.lo_bases[*it] + lo_slope * row;
        if (!next || lo < *next) next = lo;
      }
    }
    return next;
  }

 private:
  struct Group {
    std::vector<int32_t> members;   // pieces, sorted by lo base
    std::vector<int64_t> lo_bases;  // lo base of members[k]
    PrefixMax tree{0};              // hi base of the active members
    std::set<size_t> active;        // positions of the active members
  };

  static size_t GroupOf(const Slice& s) { return static_cast<size_t>(2 * s.lo.slope + s.hi.slope); }

  const std::vector<Slice>& pieces_;
  std::vector<size_t> slot_;  // position of each piece in its group
  Group groups_[4];
};

// A maximal run of covered columns: [lo(i), hi(i)) on every row from built_row until its
// event_row, at least.
struct Component {
  AffineColumn lo, hi;
  std::vector<int32_t> chain;    // pieces covering [lo, hi), each overlapping or touching the next
  int64_t open_row = 0;          // first row of the output slice this component continues
  int64_t built_row = 0;         // the row it was walked at
  int64_t chain_event = kNever;  // first row where a link stops reaching the next (d)
  int64_t event_row = kNever;    // first row where any certificate fails
  bool alive = true;             // still in the sweep's set
  bool dirty = false;            // to walk again at the current row
};

// Columns, for looking components up by position.
struct Column {
  int64_t x;
};

using Only = ActivePieces::Only;

class Sweep {
 public:
  Sweep(int64_t length, std::vector<Slice> pieces, int64_t max_slices)
      : length_(length),
        max_slices_(max_slices),
        pieces_(std::move(pieces)),
        active_(pieces_),
        chain_of_(pieces_.size(), -1),
        components_(ByLo{this}) {}
  Sweep(const Sweep&) = delete;
  Sweep& operator=(const Sweep&) = delete;

  Result<std::vector<Slice>> Run();

 private:
  // Orders components by their lo at the current row. Components are disjoint and never cross
  // while they are valid (a component with a failing certificate is off by at most one column at
  // that row), so this order is the same at every row and the set stays sorted.
  struct ByLo {
    using is_transparent = void;
    const Sweep* sweep;
    bool operator()(int32_t a, int32_t b) const { return sweep->Lo(a) < sweep->Lo(b); }
    bool operator()(int32_t a, Column c) const { return sweep->Lo(a) < c.x; }
    bool operator()(Column c, int32_t a) const { return c.x < sweep->Lo(a); }
  };

  int64_t Lo(int32_t id) const { return parts_[id].lo.At(row_); }
  int64_t Hi(int32_t id) const { return parts_[id].hi.At(row_); }

  void MarkDirty(int32_t id);
  void AddPiece(int32_t p);
  void Rebuild();
  void RemoveOverlapping(int64_t* begin, int64_t* end);
  Component Walk(int64_t x) const;
  void Insert(Component c);
  void Schedule(int32_t id);
  Status CloseRow();

  const int64_t length_;
  const int64_t max_slices_;  // most output slices
  const std::vector<Slice> pieces_;
  ActivePieces active_;
  std::vector<int32_t> chain_of_;       // component whose chain holds each piece, or -1
  std::vector<Component> parts_;        // every component ever built, by id
  std::set<int32_t, ByLo> components_;  // ids of the live components, in column order
  // (event_row, id), earliest first; entries whose component died or moved its event are skipped.
  using Event = std::pair<int64_t, int32_t>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  int64_t row_ = 0;  // the row being processed

  // Per row: column ranges [x0, x1] (closed: touching components change too) to walk again,
  // components whose certificates to recompute, and components removed at this row, by bounds,
  // until a new component with the same bounds continues their output slice.
  std::vector<std::pair<int64_t, int64_t>> dirty_;
  std::vector<int32_t> to_schedule_;
  std::multimap<std::tuple<int64_t, int64_t, int64_t, int64_t>, int32_t> closing_;

  std::vector<Slice> out_;
};

void Sweep::MarkDirty(int32_t id) {
  Component& c = parts_[id];
  if (!c.alive || c.dirty) return;
  c.dirty = true;
  // At a row where a certificate fails the component is off by at most one column.
  dirty_.emplace_back(Lo(id) - 1, Hi(id) + 1);
}

void Sweep::AddPiece(int32_t p) {
  const int64_t lo = pieces_[p].lo.At(row_), hi = pieces_[p].hi.At(row_);
  // A piece inside an exact component changes no column of the union, only maybe the rows where
  // the component's certificates (b) and (c) fail.
  const auto after = components_.upper_bound(Column{lo});
  if (after != components_.begin()) {
    const int32_t id = *std::prev(after);
    if (!parts_[id].dirty && hi <= Hi(id)) {
      to_schedule_.push_back(id);
      return;
    }
  }
  dirty_.emplace_back(lo, hi);
}

// Walks the component of the union that starts at column x: from x, repeatedly the piece that
// reaches farthest from the column reached so far, until no piece passes it. A piece with a fixed
// lo at x goes first when there is one: a moving lo at x leaves the component's start on the
// next row, a fixed one stays, so the component keeps its form longer.
// REQUIRES: an active piece starts at x and column x - 1 is not covered.
Component Sweep::Walk(int64_t x) const {
  Component c;
  c.built_row = row_;
  int64_t reached = x;
  if (const Reach fixed = active_.Farthest(x, row_, Only::kFixedLo); fixed.hi > x) {
    c.chain.push_back(fixed.piece);
    reached = fixed.hi;
  }
  for (;;) {
    const Reach r = active_.Farthest(reached, row_);
    if (r.piece < 0 || r.hi <= reached) break;
    c.chain.push_back(r.piece);
    reached = r.hi;
  }
  DCP_CHECK(!c.chain.empty() && pieces_[c.chain.front()].lo.At(row_) == x,
            "no piece starts component at column {}, row {}", x, row_);
  c.lo = pieces_[c.chain.front()].lo;
  c.hi = pieces_[c.chain.back()].hi;
  for (size_t t = 0; t + 1 < c.chain.size(); ++t) {
    const AffineColumn& reach = pieces_[c.chain[t]].hi;
    const AffineColumn& next = pieces_[c.chain[t + 1]].lo;
    if (next.slope == 1 && reach.slope == 0) {
      c.chain_event = std::min(c.chain_event, reach.base - next.base + 1);
    }
  }
  return c;
}

// Removes the components built before this row that overlap or touch the columns
// [*begin, *end], and widens the range to cover them. Components built at this row are final.
// The component before the removed ones gets a new neighbor to merge with (a).
void Sweep::RemoveOverlapping(int64_t* begin, int64_t* end) {
  auto it = components_.upper_bound(Column{*begin});
  while (it != components_.begin()) {
    const int32_t before = *std::prev(it);
    if (parts_[before].built_row == row_ || Hi(before) < *begin) break;
    --it;
    *begin = std::min(*begin, Lo(before));
  }
  bool removed = false;
  while (it != components_.end() && Lo(*it) <= *end) {
    const int32_t id = *it;
    DCP_CHECK(parts_[id].built_row != row_, "component {} rebuilt twice at row {}", id, row_);
    *end = std::max(*end, Hi(id));
    Component& c = parts_[id];
    c.alive = false;
    for (int32_t p : c.chain) {
      if (chain_of_[p] == id) chain_of_[p] = -1;
    }
    std::vector<int32_t>().swap(c.chain);  // dead components keep only what closing them needs
    closing_.emplace(std::tuple{c.lo.base, c.lo.slope, c.hi.base, c.hi.slope}, id);
    it = components_.erase(it);
    removed = true;
  }
  if (removed && it != components_.begin()) to_schedule_.push_back(*std::prev(it));
}

void Sweep::Insert(Component c) {
  c.open_row = row_;
  const auto same = closing_.find(std::tuple{c.lo.base, c.lo.slope, c.hi.base, c.hi.slope});
  if (same != closing_.end()) {  // the same columns on this row: its output slice goes on
    c.open_row = parts_[same->second].open_row;
    closing_.erase(same);
  }
  const auto id = static_cast<int32_t>(parts_.size());
  for (int32_t p : c.chain) chain_of_[p] = id;
  parts_.push_back(std::move(c));
  const auto it = components_.insert(id).first;
  to_schedule_.push_back(id);
  // The component before it now has a new neighbor to merge with (a).
  if (it != components_.begin()) to_schedule_.push_back(*std::prev(it));
}

// Walks again the columns of dirty_, left to right. `done` is the end of the last component built
// at this row: an uncovered column, so a walk may start right of it.
void Sweep::Rebuild() {
  std::sort(dirty_.begin(), dirty_.end());
  int64_t done = std::numeric_limits<int64_t>::min();
  for (auto [x0, x1] : dirty_) {
    if (x1 < done) continue;
    int64_t begin = std::max(x0, done), end = x1;
    RemoveOverlapping(&begin, &end);
    DCP_CHECK(begin >= done, "row {}: component reaches left of column {}", row_, done);
    for (std::optional<int64_t> x = active_.NextLo(begin, row_); x && *x <= end;
         x = active_.NextLo(done, row_)) {
      Component c = Walk(*x);
      const int64_t reached = c.hi.At(row_);
      int64_t from = *x, to = reached;
      RemoveOverlapping(&from, &to);
      end = std::max(end, to);
      done = reached;
      Insert(std::move(c));
    }
  }
  dirty_.clear();
  for (int32_t id : to_schedule_) {
    if (parts_[id].alive) Schedule(id);
  }
  to_schedule_.clear();
}

// Sets the first row after this one where a certificate of the component fails.
void Sweep::Schedule(int32_t id) {
  Component& c = parts_[id];
  int64_t event = c.chain_event;
  // (a) Its moving hi reaches the fixed lo of the next component.
  const auto next = std::next(components_.find(id));
  if (next != components_.end() && c.hi.slope == 1 && parts_[*next].lo.slope == 0) {
    event = std::min(event, parts_[*next].lo.base - c.hi.base);
  }
  // (b) Its moving lo passes the nearest fixed lo at or right of it.
  if (c.lo.slope == 1) {
    if (const std::optional<int64_t> x = active_.NextLo(Lo(id), row_, Only::kFixedLo)) {
      event = std::min(event, *x - c.lo.base + 1);
    }
  }
  // (c) Its fixed hi is passed by the farthest moving hi of a piece starting left of it (from
  // this component, or from one on its left that would merge with it first).
  if (c.hi.slope == 0) {
    const Reach r = active_.Farthest(c.hi.base - 1, row_, Only::kMovingHi);
    if (r.piece >= 0) event = std::min(event, c.hi.base - (r.hi - row_) + 1);
  }
  DCP_CHECK(event > row_, "component {} fails at row {}, built or kept at row {}", id, event, row_);
  if (event == c.event_row) return;
  c.event_row = event;
  if (event <= length_) events_.emplace(event, id);
}

// Ends the output slices of the components removed at this row that no new one continues.
Status Sweep::CloseRow() {
  for (const auto& [bounds, id] : closing_) {
    const Component& c = parts_[id];
    DCP_CHECK(c.open_row < row_, "component {} closes at its first row {}", id, row_);
    if (out_.size() >= static_cast<size_t>(max_slices_)) {
      return Status::InvalidArgument(fmt::format(
          "the union of the slices needs more than {} slices, the limit per mask", max_slices_));
    }
    out_.push_back(Slice{c.open_row, row_, c.lo, c.hi});
  }
  closing_.clear();
  return Status::Ok();
}

Result<std::vector<Slice>> Sweep::Run() {
  const size_t n = pieces_.size();
  std::vector<int32_t> by_begin(n), by_end(n);
  for (size_t p = 0; p < n; ++p) by_begin[p] = by_end[p] = static_cast<int32_t>(p);
  std::sort(by_begin.begin(), by_begin.end(), [&](int32_t a, int32_t b) {
    return std::pair{pieces_[a].row_begin, a} < std::pair{pieces_[b].row_begin, b};
  });
  std::sort(by_end.begin(), by_end.end(), [&](int32_t a, int32_t b) {
    return std::pair{pieces_[a].row_end, a} < std::pair{pieces_[b].row_end, b};
  });
  size_t begun = 0, ended = 0;
  while (true) {
    int64_t row = kNever;
    if (begun < n) row = std::min(row, pieces_[by_begin[begun]].row_begin);
    if (ended < n) row = std::min(row, pieces_[by_end[ended]].row_end);
    if (!events_.empty()) row = std::min(row, events_.top().first);
    if (row > length_) break;
    row_ = row;
    while (!events_.empty() && events_.top().first == row) {
      const int32_t id = events_.top().second;
      events_.pop();
      if (parts_[id].event_row == row) MarkDirty(id);
    }
    for (; ended < n && pieces_[by_end[ended]].row_end == row; ++ended) {
      const int32_t p = by_end[ended];
      active_.Remove(p);
      if (chain_of_[p] >= 0) MarkDirty(chain_of_[p]);
    }
    for (; begun < n && pieces_[by_begin[begun]].row_begin == row; ++begun) {
      active_.Add(by_begin[begun]);
      AddPiece(by_begin[begun]);
    }
    Rebuild();
    DCP_RETURN_IF_ERROR(CloseRow());
  }
  DCP_CHECK(components_.empty(), "{} components left after the last row", components_.size());
  return std::move(out_);
}

}  // namespace

Result<std::vector<Slice>> NormalizeSlices(int64_t length, std::span<const Slice> slices,
                                           int64_t max_slices) {
  std::vector<Slice> pieces;
  pieces.reserve(slices.size());
  for (const Slice& s : slices) AppendPieces(s, length, &pieces);
  Sweep sweep(length, std::move(pieces), max_slices);
  return sweep.Run();
}

}  // namespace dcp::internal
