// SPDX-License-Identifier: Apache-2.0
// The division scheduler (see include/dcp/schedule.h).
//
// Per device, the tiles needing remote data are ordered (those needing data from other nodes in
// the middle, tiles sharing a row as neighbours; row by row, column by column or along a Z curve
// instead where that holds far fewer bytes at once; see OrderRemoteTiles) and cut into divisions
// 1..n-1, followed in the last division by the local tiles that division 0 leaves (LocalHead).
// The number of divisions is the
// one whose modelled timeline (each division's inputs moving while the previous one computes) is
// shortest on the slowest device, trying divisions of equal compute and divisions sized so that
// each one's data moves while the previous one computes. The timeline is of both passes at once:
// each tile's forward and backward FLOPs against its pieces' forward and backward bytes (the
// backward moves 1.5-2x the forward's bytes, and the same divisions hold them).
#include <algorithm>
#include <tuple>

#include "dcp/schedule.h"
#include "util/parallel.h"

namespace dcp {
namespace {

struct PieceSide {
  int32_t block, head_group;
  Side side;
  friend bool operator==(const PieceSide&, const PieceSide&) = default;
};

Status CheckPlacement(const BlockSet& blocks, const Placement& placement,
                      const Topology& topology) {
  if (placement.data_device.size() != blocks.data_blocks.size() ||
      placement.compute_device.size() != blocks.compute_blocks.size()) {
    return Status::InvalidArgument("placement does not match the blocks");
  }
  const auto in_range = [&](DeviceId d) { return d.value >= 0 && d.value < topology.devices(); };
  if (!std::all_of(placement.data_device.begin(), placement.data_device.end(), in_range) ||
      !std::all_of(placement.compute_device.begin(), placement.compute_device.end(), in_range)) {
    return Status::InvalidArgument(
        fmt::format("placement uses a device outside topology {}", topology.ToString()));
  }
  return Status::Ok();
}

// Sorts tiles by key_of(c), computed once a tile: the comparisons then read one packed array, not
// the batch's tiles scattered in memory (comparisons that looked them up made a 16M-token pass's
// scheduling 8% slower: 7.3 s against 6.8 on one thread). Every key names its tile (row, column
// and head group), so the order is the key's alone.
template <typename KeyOf>
void SortByKey(std::vector<int32_t>& tiles, const KeyOf& key_of) {
  std::vector<std::pair<decltype(key_of(0)), int32_t>> keyed;
  keyed.reserve(tiles.size());
  for (int32_t c : tiles) keyed.emplace_back(key_of(c), c);
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 0; i < tiles.size(); ++i) tiles[i] = keyed[i].second;
}

// The parts of equal compute in which PeakBytesAlive counts a tile order's bytes alive: the most
// divisions the division choice gives a pass, which the plans at scale take, so that an order is
// judged about as finely as it will run.
constexpr int32_t kPeakParts = kMaxSearchedDivisions;

class DivisionScheduler {
 public:
  DivisionScheduler(const BlockSet& blocks, const Placement& placement, const Topology& topology,
                    const ScheduleOptions& options)
      : blocks_(blocks), placement_(placement), topology_(topology), options_(options) {
    std::vector<std::vector<int32_t>> remote(topology.devices()), local(topology.devices());
    device_flops_.assign(topology.devices(), 0);
    for (int32_t c = 0; c < static_cast<int32_t>(blocks.compute_blocks.size()); ++c) {
      const int32_t d = placement.compute_device[c].value;
      (IsLocal(c, d) ? local : remote)[d].push_back(c);
      device_flops_[d] += Flops(c);
    }
    local_begin_.push_back(0);
    for (int32_t d = 0; d < topology.devices(); ++d) {
      for (int32_t c : local[d]) local_flops_.push_back(Flops(c));
      local_tile_.insert(local_tile_.end(), local[d].begin(), local[d].end());
      local_begin_.push_back(static_cast<int32_t>(local_tile_.size()));
    }
    for (size_t block = 0; block < blocks.data_blocks.size(); ++block) {
      const NetBytes bytes =
          NetBytesOf(blocks.data_blocks[block], blocks.shape, blocks.head_groups);
      // Both passes, as the compute (Flops): the forward's bytes alone made the model see a
      // third of the traffic and choose too few divisions (LongAlign x4 causal seed 0 in blocks
      // of 4096: 4, 14.1 ms simulated, against 12.0 ms at 8).
      piece_bytes_.push_back(static_cast<double>(bytes.row_fwd + bytes.row_bwd));
      piece_bytes_.push_back(static_cast<double>(bytes.column_fwd + bytes.column_bwd));
    }
    internal::ParallelFor(topology.devices(), options.threads,
                          [&](int32_t d) { OrderRemoteTiles(d, remote[d]); });
    begin_.push_back(0);
    for (int32_t d = 0; d < topology.devices(); ++d) {
      tile_.insert(tile_.end(), remote[d].begin(), remote[d].end());
      begin_.push_back(static_cast<int32_t>(tile_.size()));
    }
    flops_.reserve(tile_.size());
    seconds_.reserve(tile_.size());
    for (int32_t c : tile_) {
      flops_.push_back(Flops(c));
      seconds_.push_back(Seconds(c));
    }
    FindFirstReads();
  }

  bool HasRemoteWork() const { return !tile_.empty(); }

  // A layout of n divisions: the remote tiles' divisions, and how each device's local tiles split
  // between division 0 (its head) and the last division.
  struct Assignment {
    std::vector<int32_t> division;    // per slot
    std::vector<int32_t> head;        // per device: its first local tiles, in division 0
    std::vector<int64_t> head_flops;  // per device
    std::vector<int64_t> tail_flops;  // per device: its local tiles in the last division
  };

  // An assignment with the local tiles split for n divisions: division 0 holds a device's local
  // tiles (all inputs its own) up to an n-th of the device's compute, the rest join the last
  // division. A device whose division 0 ran longer than the others' would hold up every device
  // fetching from it, since its launches for the next divisions would come late.
  Assignment LocalHead(int32_t n) const {
    const int32_t devices = topology_.devices();
    Assignment a{.division = std::vector<int32_t>(tile_.size()),
                 .head = std::vector<int32_t>(devices, 0),
                 .head_flops = std::vector<int64_t>(devices, 0),
                 .tail_flops = std::vector<int64_t>(devices, 0)};
    for (int32_t d = 0; d < devices; ++d) {
      const int64_t budget = device_flops_[d] / n;
      int32_t i = local_begin_[d];
      for (; i < local_begin_[d + 1] && a.head_flops[d] + local_flops_[i] / 2 <= budget; ++i) {
        a.head_flops[d] += local_flops_[i];
      }
      a.head[d] = i - local_begin_[d];
      for (; i < local_begin_[d + 1]; ++i) a.tail_flops[d] += local_flops_[i];
    }
    return a;
  }

  // Divisions sized to hide communication: division t takes tiles until the data they need
  // would take longer to move than division t-1 takes to compute; the last division takes the
  // rest. Small early divisions behind a short division 0, larger ones later. Per slot.
  Assignment AssignHiding(int32_t n) const {
    Assignment a = LocalHead(n);
    std::vector<int32_t>& division = a.division;
    for (int32_t d = 0; d < topology_.devices(); ++d) {
      // Compute of the division before the one being filled.
      double previous = static_cast<double>(a.head_flops[d]) / options_.device_flops;
      int32_t t = 1;
      double moving = 0, computing = 0;
      for (int32_t slot = begin_[d]; slot < begin_[d + 1]; ++slot) {
        if (t < n - 1 && computing > 0 && moving + fetch_seconds_[slot] > previous) {
          previous = computing;
          computing = moving = 0;
          ++t;
        }
        moving += fetch_seconds_[slot];
        computing += seconds_[slot];
        division[slot] = t;
      }
    }
    return a;
  }

  // Divisions for n divisions (n >= 2), per slot: each device's remote tiles, and after them the
  // local tiles left out of division 0, cut into n - 1 divisions of equal compute.
  Assignment Assign(int32_t n) const {
    Assignment a = LocalHead(n);
    std::vector<int32_t>& division = a.division;
    for (int32_t d = 0; d < topology_.devices(); ++d) {
      int64_t total = a.tail_flops[d];
      for (int32_t slot = begin_[d]; slot < begin_[d + 1]; ++slot) total += flops_[slot];
      int64_t prefix = 0;
      for (int32_t slot = begin_[d]; slot < begin_[d + 1]; ++slot) {
        // The division whose share of the compute holds this tile's middle.
        const int64_t middle = prefix + flops_[slot] / 2;
        division[slot] =
            1 + static_cast<int32_t>(std::min<int64_t>(
                    n - 2, static_cast<int64_t>(static_cast<double>(middle) * (n - 1) /
                                                static_cast<double>(std::max<int64_t>(total, 1)))));
        prefix += flops_[slot];
      }
    }
    return a;
  }

  // Every compute block's division: the remote tiles' from the assignment, local tiles in
  // division 0 or, past a device's head, the last division.
  std::vector<int32_t> ComputeDivision(const Assignment& a, int32_t n) const {
    std::vector<int32_t> out(blocks_.compute_blocks.size(), 0);
    for (size_t slot = 0; slot < tile_.size(); ++slot) out[tile_[slot]] = a.division[slot];
    for (int32_t d = 0; d < topology_.devices(); ++d) {
      for (int32_t i = local_begin_[d] + a.head[d]; i < local_begin_[d + 1]; ++i) {
        out[local_tile_[i]] = n - 1;
      }
    }
    return out;
  }

  // Transfers for a division per slot, handed to emit(const Transfer&) one by one (pricing a
  // layout needs no list of them). Each device's first need of a remote piece is the division of
  // its first slot reading it (divisions never decrease along a device's slots: Assign,
  // AssignHiding). A piece moves direct inside a node; across nodes once per node to a relay
  // (the device of that node needing it first), which forwards it to the others.
  template <typename Emit>
  void Route(const std::vector<int32_t>& division, const Emit& emit) const {
    const auto transfer = [&](DeviceId from, const Use& use, int32_t at, int32_t phase) {
      emit(Transfer{.block = DataBlockId{use.piece.block},
                    .head_group = use.piece.head_group,
                    .side = use.piece.side,
                    .source = from,
                    .destination = DeviceId{use.device},
                    .division = at,
                    .phase = phase});
    };
    // first_reads_ is ordered by piece, then node, then device.
    for (size_t begin = 0; begin < first_reads_.size();) {
      const PieceSide& piece = first_reads_[begin].piece;
      const int32_t node = topology_.NodeOf(DeviceId{first_reads_[begin].device});
      size_t end = begin + 1;
      while (end < first_reads_.size() && first_reads_[end].piece == piece &&
             topology_.NodeOf(DeviceId{first_reads_[end].device}) == node) {
        ++end;
      }
      const DeviceId owner{Owner(DataBlockId{piece.block})};
      if (topology_.NodeOf(owner) == node) {
        for (size_t i = begin; i < end; ++i) {
          transfer(owner, first_reads_[i], division[first_reads_[i].slot], 0);
        }
      } else {
        const Use* relay = &first_reads_[begin];
        for (size_t i = begin + 1; i < end; ++i) {
          const Use& use = first_reads_[i];
          if (std::tie(division[use.slot], use.device) <
              std::tie(division[relay->slot], relay->device)) {
            relay = &use;
          }
        }
        // A device needing the piece in the relay's own division would get it in phase 1, a
        // forward that waits for the relay to finish the division before and is not hidden by
        // any compute. From division 2 on the relay fetches it one division early instead, and
        // every forward is phase 0.
        const int32_t first = division[relay->slot];
        const bool shared = std::any_of(
            first_reads_.begin() + begin, first_reads_.begin() + end,
            [&](const Use& use) { return &use != relay && division[use.slot] == first; });
        const bool early = shared && first >= 2;
        transfer(owner, *relay, early ? first - 1 : first, 0);
        for (size_t i = begin; i < end; ++i) {
          const Use& use = first_reads_[i];
          if (&use == relay) continue;
          const int32_t at = division[use.slot];
          transfer(DeviceId{relay->device}, use, at, at == first && !early ? 1 : 0);
        }
      }
      begin = end;
    }
  }

  std::vector<Transfer> Transfers(const std::vector<int32_t>& division) const {
    std::vector<Transfer> transfers;
    Route(division, [&](const Transfer& t) { transfers.push_back(t); });
    return transfers;
  }

  // Modelled time of a pass: division t's inputs move while division t-1 computes, and since
  // an exchange starts only when both ends reach it, every division boundary waits for the slowest
  // device. A device's inputs from other nodes share its node's network with the node's others.
  double ModelledTime(const Assignment& a, int32_t n) const {
    const std::vector<int32_t>& division = a.division;
    const int32_t devices = topology_.devices();
    const auto at = [n](int32_t index, int32_t t) { return static_cast<size_t>(index) * n + t; };
    std::vector<double> compute(static_cast<size_t>(devices) * n, 0);
    std::vector<double> intra(compute.size(), 0), inter(compute.size(), 0);
    std::vector<double> node_inter(static_cast<size_t>(topology_.nodes) * n, 0);
    for (int32_t d = 0; d < devices; ++d) {
      compute[at(d, 0)] = static_cast<double>(a.head_flops[d]) / options_.device_flops;
      compute[at(d, n - 1)] += static_cast<double>(a.tail_flops[d]) / options_.device_flops;
      for (int32_t slot = begin_[d]; slot < begin_[d + 1]; ++slot) {
        compute[at(d, division[slot])] += seconds_[slot];
      }
    }
    Route(division, [&](const Transfer& t) {
      const double b = PieceBytes(t.block.value, t.side);
      const int32_t node = topology_.NodeOf(t.destination);
      if (topology_.NodeOf(t.source) == node) {
        intra[at(t.destination.value, t.division)] += b / options_.intra_node_bytes_per_s;
      } else {
        inter[at(t.destination.value, t.division)] += b;
        node_inter[at(node, t.division)] += b / options_.inter_node_bytes_per_s;
      }
    });
    double time = 0;
    for (int32_t t = 1; t <= n; ++t) {
      double step = 0;
      for (int32_t d = 0; d < devices; ++d) {
        double moving = 0;
        if (t < n) {
          moving = intra[at(d, t)];
          if (inter[at(d, t)] > 0) moving += node_inter[at(topology_.NodeOf(DeviceId{d}), t)];
        }
        step = std::max(step, std::max(compute[at(d, t - 1)], moving));
      }
      time += step;
    }
    return time + n * options_.division_overhead_s;
  }

 private:
  // Orders device d's remote tiles: those needing data from another node in the middle, between
  // two halves (by compute) of those needing data from this node only. Inputs from other nodes
  // then move while the first half computes, and the partial results going back to them while the
  // second half computes, where the network between nodes is slow. Inside each group, tiles
  // sharing a row are neighbours, so a row's inputs arrive once, for the division that first
  // needs them.
  void OrderRemoteTiles(int32_t d, std::vector<int32_t>& tiles) const {
    std::vector<int32_t> intra, inter;
    for (int32_t c : tiles) (NeedsOtherNode(c, d) ? inter : intra).push_back(c);
    const auto ring_key = [&](int32_t c) { return RingKey(c, d); };
    SortByKey(intra, ring_key);
    SortByKey(inter, ring_key);
    int64_t total = 0;
    for (int32_t c : intra) total += Flops(c);
    auto middle = intra.begin();
    for (int64_t prefix = 0; middle != intra.end() && 2 * prefix < total; ++middle) {
      prefix += Flops(*middle);
    }
    tiles.assign(intra.begin(), middle);
    tiles.insert(tiles.end(), inter.begin(), inter.end());
    tiles.insert(tiles.end(), middle, intra.end());
    TakeLeanerOrder(d, tiles);
  }
  // The ring order keeps a row alive from the first owner's group that reads it to the last, and
  // a device whose tiles read rows of many owners holds most of them at once (a 4M-token plan on
  // 32x8: 53 received rows and 61 dQ accumulators, 1.4 GB, where the rows one after another need
  // half). The tiles row by row (columns stay, rows come and go), column by column, or along a Z
  // curve (ZOrder) replace it where that keeps at most kLeanerShare of the ring order's bytes
  // alive (PeakBytesAlive); the leanest of them wins.
  void TakeLeanerOrder(int32_t d, std::vector<int32_t>& tiles) const {
    constexpr double kLeanerShare = 0.5;
    double best = kLeanerShare * PeakBytesAlive(d, tiles);
    std::vector<int32_t> chosen;
    const auto consider = [&](std::vector<int32_t> order) {
      if (const double peak = PeakBytesAlive(d, order); peak < best) {
        best = peak;
        chosen = std::move(order);
      }
    };
    // Per data block, its rank among the device's rows and among its columns, numbered along the
    // row and the column order: the Z curve's coordinates. Kept per thread, as in PeakBytesAlive.
    thread_local std::vector<uint32_t> rank[2];
    for (Side along : {Side::kRow, Side::kColumn}) {
      std::vector<int32_t> order = tiles;
      SortByKey(order, [&](int32_t c) {
        const ComputeBlock& cb = blocks_.compute_blocks[c];
        return along == Side::kRow ? std::tuple{cb.q_block.value, cb.head_group, cb.kv_block.value}
                                   : std::tuple{cb.kv_block.value, cb.head_group, cb.q_block.value};
      });
      std::vector<uint32_t>& ranks = rank[static_cast<int>(along)];
      ranks.resize(blocks_.data_blocks.size());
      uint32_t next = 0;
      for (size_t i = 0; i < order.size(); ++i) {
        const int32_t block = BlockAlong(order[i], along);
        if (i == 0 || block != BlockAlong(order[i - 1], along)) ranks[block] = next++;
      }
      consider(std::move(order));
    }
    consider(
        ZOrder(tiles, rank[static_cast<int>(Side::kRow)], rank[static_cast<int>(Side::kColumn)]));
    if (!chosen.empty()) tiles = std::move(chosen);
  }
  int32_t BlockAlong(int32_t c, Side along) const {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    return (along == Side::kRow ? cb.q_block : cb.kv_block).value;
  }
  // The tiles along a Z curve over the device's rows and columns (by their ranks among the
  // device's own): a stretch of the order reads a few rows and a few columns, where the row and
  // column orders hold all of one side. A device with a strip of a few rows by many columns
  // beside a square of many rows holds one side whole in those (16M tokens on 128x8 in blocks of
  // 4096: 3 rows by 220 columns beside 40 by 44; its backward peaked at 2.84 GB in the ring order,
  // which neither of them halved, and at 2.07 along the curve).
  std::vector<int32_t> ZOrder(std::vector<int32_t> tiles, const std::vector<uint32_t>& row_rank,
                              const std::vector<uint32_t>& column_rank) const {
    // The bits of a 32-bit rank spread to the even bits of a 64-bit word.
    const auto spread = [](uint64_t x) {
      x = (x | (x << 16)) & 0x0000ffff0000ffffULL;
      x = (x | (x << 8)) & 0x00ff00ff00ff00ffULL;
      x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0fULL;
      x = (x | (x << 2)) & 0x3333333333333333ULL;
      return (x | (x << 1)) & 0x5555555555555555ULL;
    };
    SortByKey(tiles, [&](int32_t c) {
      const ComputeBlock& cb = blocks_.compute_blocks[c];
      return std::pair{
          spread(row_rank[cb.q_block.value]) << 1 | spread(column_rank[cb.kv_block.value]),
          cb.head_group};
    });
    return tiles;
  }
  // The most bytes of other devices' pieces device d holds at once computing `order` in
  // kPeakParts parts of equal compute, each piece from the part of its first tile to the part of
  // its last (both passes' bytes, as the divisions' timeline counts them).
  double PeakBytesAlive(int32_t d, const std::vector<int32_t>& order) const {
    // Per piece of the batch: the call that last saw it, and its first and last part. Kept per
    // thread so that a device's call costs its tiles, not the batch's pieces.
    struct Seen {
      int64_t call = -1;
      int32_t first = 0, last = 0;
    };
    thread_local std::vector<Seen> seen;
    thread_local int64_t calls = 0;
    seen.resize(2 * blocks_.data_blocks.size() * blocks_.head_groups);
    const int64_t call = calls++;
    int64_t total = 0;
    for (int32_t c : order) total += Flops(c);
    std::vector<std::pair<size_t, double>> pieces;  // index and bytes of each piece read
    int64_t prefix = 0;
    for (int32_t c : order) {
      const int32_t part = static_cast<int32_t>(std::min<int64_t>(
          kPeakParts - 1, (prefix + Flops(c) / 2) * kPeakParts / std::max<int64_t>(total, 1)));
      prefix += Flops(c);
      const ComputeBlock& cb = blocks_.compute_blocks[c];
      for (auto [side, block] :
           {std::pair{Side::kRow, cb.q_block}, std::pair{Side::kColumn, cb.kv_block}}) {
        if (Owner(block) == d) continue;
        const size_t index = PieceIndex({block.value, cb.head_group, side});
        Seen& s = seen[index];
        if (s.call != call) {
          s = {call, part, part};
          pieces.emplace_back(index, PieceBytes(block.value, side));
        }
        s.last = part;
      }
    }
    std::vector<double> change(kPeakParts + 1, 0);
    for (const auto& [index, bytes] : pieces) {
      change[seen[index].first] += bytes;
      change[seen[index].last + 1] -= bytes;
    }
    double alive = 0, peak = 0;
    for (int32_t part = 0; part < kPeakParts; ++part) {
      peak = std::max(peak, alive += change[part]);
    }
    return peak;
  }
  // Device d's order of tile c: by how far back, round the ring of devices, the owner of its
  // remote input sits (the predecessor first), then by row. At any moment every device then
  // fetches from a different owner, as in ring attention, instead of all of them fetching the
  // same early blocks from one owner at once.
  std::tuple<int32_t, int32_t, int32_t, int32_t> RingKey(int32_t c, int32_t d) const {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    const int32_t devices = topology_.devices();
    const int32_t owner = Owner(cb.kv_block) != d ? Owner(cb.kv_block) : Owner(cb.q_block);
    return {(d - owner + devices) % devices, cb.q_block.value, cb.head_group, cb.kv_block.value};
  }
  bool NeedsOtherNode(int32_t c, int32_t d) const {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    const int32_t node = topology_.NodeOf(DeviceId{d});
    return topology_.NodeOf(DeviceId{Owner(cb.q_block)}) != node ||
           topology_.NodeOf(DeviceId{Owner(cb.kv_block)}) != node;
  }

  // first_reads_: the first slot of each device that reads each remote piece, ordered by piece,
  // then node, then device (devices are numbered node by node: a stable counting sort by
  // PieceIndex of the reads found device by device). And fetch_seconds_ for every slot: the time
  // to move the pieces it is the first of its device's slots to read, at the device's share of
  // its node's network for pieces from other nodes (AssignHiding fills divisions by it).
  void FindFirstReads() {
    const size_t n_pieces = 2 * blocks_.data_blocks.size() * blocks_.head_groups;
    std::vector<int32_t> read_by(n_pieces, 0);  // d + 1 once device d has read the piece
    std::vector<int32_t> start(n_pieces + 1, 0);
    std::vector<Use> found;
    fetch_seconds_.assign(tile_.size(), 0);
    const double inter_per_device = options_.inter_node_bytes_per_s / topology_.devices_per_node;
    for (int32_t d = 0; d < topology_.devices(); ++d) {
      for (int32_t slot = begin_[d]; slot < begin_[d + 1]; ++slot) {
        const ComputeBlock& cb = blocks_.compute_blocks[tile_[slot]];
        for (auto [side, block] :
             {std::pair{Side::kRow, cb.q_block}, std::pair{Side::kColumn, cb.kv_block}}) {
          const PieceSide piece{block.value, cb.head_group, side};
          const size_t index = PieceIndex(piece);
          if (Owner(block) == d || read_by[index] == d + 1) continue;
          read_by[index] = d + 1;
          found.push_back({piece, d, slot});
          ++start[index + 1];
          const bool inter =
              topology_.NodeOf(DeviceId{Owner(block)}) != topology_.NodeOf(DeviceId{d});
          fetch_seconds_[slot] += PieceBytes(block.value, side) /
                                  (inter ? inter_per_device : options_.intra_node_bytes_per_s);
        }
      }
    }
    for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
    first_reads_.resize(found.size());
    for (const Use& use : found) first_reads_[start[PieceIndex(use.piece)]++] = use;
  }

  // Forward and backward bytes of one side of a data block's piece for one head group.
  double PieceBytes(int32_t block, Side side) const {
    return piece_bytes_[2 * static_cast<size_t>(block) + (side == Side::kRow ? 0 : 1)];
  }
  int32_t Owner(DataBlockId block) const { return placement_.data_device[block.value].value; }
  bool IsLocal(int32_t c, int32_t d) const {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    return Owner(cb.q_block) == d && Owner(cb.kv_block) == d;
  }
  double Seconds(int32_t c) const { return static_cast<double>(Flops(c)) / options_.device_flops; }
  int64_t Flops(int32_t c) const {
    return blocks_.FlopsFwd(blocks_.compute_blocks[c]) +
           blocks_.FlopsBwd(blocks_.compute_blocks[c]);
  }

  size_t PieceIndex(const PieceSide& p) const {
    return (static_cast<size_t>(p.block) * blocks_.head_groups + p.head_group) * 2 +
           (p.side == Side::kRow ? 0 : 1);
  }

  // A remote piece a tile reads, on the device computing it.
  struct Use {
    PieceSide piece;
    int32_t device, slot;
  };

  const BlockSet& blocks_;
  const Placement& placement_;
  const Topology& topology_;
  const ScheduleOptions& options_;
  // The local tiles, in block order; device d's are local_tile_[local_begin_[d] ..
  // local_begin_[d + 1]).
  std::vector<int32_t> local_tile_, local_begin_;
  std::vector<int64_t> local_flops_;   // per local tile
  std::vector<int64_t> device_flops_;  // per device: all its tiles
  // The tiles needing remote data, numbered by slot: device d's are slots [begin_[d],
  // begin_[d + 1]) in its order (OrderRemoteTiles). Each layout's work runs over the slots, with
  // their values laid out in that order, rather than over every tile of the batch.
  std::vector<int32_t> tile_;          // per slot: the compute block
  std::vector<int32_t> begin_;         // per device, and one past the last
  std::vector<int64_t> flops_;         // per slot: forward + backward FLOPs
  std::vector<double> seconds_;        // per slot: Seconds(tile)
  std::vector<double> fetch_seconds_;  // per slot (FindFirstReads)
  std::vector<Use> first_reads_;     // per (piece, device) read remotely: its first slot reading it
  // forward + backward bytes of (data block, side): 2 * block + side
  std::vector<double> piece_bytes_;
};

}  // namespace

Status ScheduleOptions::Validate() const {
  if (divisions < 0 || divisions > kMaxDivisions) {
    return Status::InvalidArgument(
        fmt::format("divisions={} is not in [0, {}] (0 = auto)", divisions, kMaxDivisions));
  }
  for (const auto& [name, value] : {std::pair{"device_flops", device_flops},
                                    std::pair{"intra_node_bytes_per_s", intra_node_bytes_per_s},
                                    std::pair{"inter_node_bytes_per_s", inter_node_bytes_per_s}}) {
    if (!(value > 0)) {
      return Status::InvalidArgument(fmt::format("{}={} is not positive", name, value));
    }
  }
  if (!(division_overhead_s >= 0)) {
    return Status::InvalidArgument(
        fmt::format("division_overhead_s={} is negative", division_overhead_s));
  }
  if (threads < 1 || threads > PartitionOptions::kMaxThreads) {
    return Status::InvalidArgument(
        fmt::format("threads={} is not in [1, {}]", threads, PartitionOptions::kMaxThreads));
  }
  return Status::Ok();
}

Result<Schedule> ScheduleDivisions(const BlockSet& blocks, const Placement& placement,
                                   const Topology& topology, const ScheduleOptions& options) {
  DCP_RETURN_IF_ERROR(options.Validate());
  DCP_RETURN_IF_ERROR(topology.Validate());
  DCP_RETURN_IF_ERROR(CheckPlacement(blocks, placement, topology));
  const DivisionScheduler scheduler(blocks, placement, topology, options);
  if (!scheduler.HasRemoteWork()) {
    return Schedule{.n_divisions = std::max(1, options.divisions),
                    .compute_division = std::vector<int32_t>(blocks.compute_blocks.size(), 0),
                    .transfers = {},
                    .reduce_in_node = true};
  }
  if (options.divisions == 1) {
    return Status::InvalidArgument(
        "divisions=1 leaves no division for the tiles that need remote data; use 2 or more");
  }
  const int32_t first = options.divisions > 0 ? options.divisions : 2;
  const int32_t last = options.divisions > 0 ? options.divisions : kMaxSearchedDivisions;
  // Every division count, with equal and with hiding division sizes, priced on the threads; the
  // shortest modelled time wins, the first in this order among equals.
  struct Layout {
    int32_t n;
    bool hiding;
  };
  std::vector<Layout> layouts;
  for (int32_t n = first; n <= last; ++n) {
    for (bool hiding : {false, true}) layouts.push_back({n, hiding});
  }
  const auto make = [&](const Layout& layout) -> DivisionScheduler::Assignment {
    return layout.hiding ? scheduler.AssignHiding(layout.n) : scheduler.Assign(layout.n);
  };
  std::vector<double> time(layouts.size());
  internal::ParallelFor(static_cast<int32_t>(layouts.size()), options.threads, [&](int32_t i) {
    time[i] = scheduler.ModelledTime(make(layouts[i]), layouts[i].n);
  });
  const Layout& chosen = layouts[std::min_element(time.begin(), time.end()) - time.begin()];
  const DivisionScheduler::Assignment assignment = make(chosen);
  Schedule best{.n_divisions = chosen.n,
                .compute_division = scheduler.ComputeDivision(assignment, chosen.n),
                .transfers = scheduler.Transfers(assignment.division),
                .reduce_in_node = true};
  // The schedule's order: by division, then phase (relays forward after they receive).
  std::sort(best.transfers.begin(), best.transfers.end(), [](const Transfer& a, const Transfer& b) {
    return std::tie(a.division, a.phase, a.source, a.destination, a.block, a.head_group, a.side) <
           std::tie(b.division, b.phase, b.source, b.destination, b.block, b.head_group, b.side);
  });
  return best;
}

}  // namespace dcp
