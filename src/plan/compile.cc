// SPDX-License-Identifier: Apache-2.0
// The compiler: Placement + Schedule -> one forward and one backward Program per device.
//
// Every device's program has the same skeleton, so communication ids line up across devices:
//   division 0: launch A1; attention(0); wait A1; launch B1
//   division t: wait Bt; launch A(t+1); attention(t); wait A(t+1); launch B(t+1)
//   outputs:    send partial results to their owners; wait; reduce into the outputs
// A(t) carries the phase-0 transfers of division t (owners and relays that already hold the
// data), B(t) the phase-1 ones (relays forwarding what they received in A(t)). Launch ids: A(t) is
// 2t - 1, B(t) is 2t, the output exchange 2n + 1 for n divisions. A(n), at the last division,
// exists only for the early returns and carried gradients below, B(n) after it only for the
// partials summed inside a node.
//
// Early returns: a partial result (O with its LSE, dQ, dKV) computed for another device's piece
// goes to its owner in the first A launch after the division of its last tile, so it moves while
// the next division computes; only the last division's partials wait for the output exchange.
//
// With Schedule::carry_gradients (ring attention), partial dKV follows its KV round the ring one
// division behind it: a device that forwarded a KV piece to exactly one device sends that device,
// in its first A launch after its last tile on the piece and after the previous hop's partial has
// arrived, the sum of its own partial and the one it received. What is still away from its owner
// at the end goes home in the output exchange, like every other partial result.
//
// With Schedule::reduce_in_node, the backward's partial dQ and dKV of a piece owned on another
// node cross the network once per node where that costs no time: among the devices of the node
// with a partial of the piece, the one whose last tile on it comes latest is the aggregator. A
// device whose last tile comes earlier carries its partial there (an A launch, as a ring hop) and
// the aggregator returns the sum when it would have returned its own partial. Partials of the
// aggregator's own division go straight home, except in the last division: those reach the
// aggregator in B(n), right after it, and the sums cross in the output exchange. So do partials
// whose last tile comes more than kMaxCarryLead divisions before the aggregator's: a carried
// partial waits at the aggregator until its last tile, and an aggregator of many pieces piled
// them up (a 1M-token plan on 16x8 held 87 such dKV, 0.18 of its 0.45 GB). The price is bytes
// between nodes (9-18% more on pinned passes of 1M-16M tokens), moving while later divisions
// compute.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "dcp/plan.h"
#include "plan/program_builder.h"
#include "util/parallel.h"

namespace dcp {
namespace {

using internal::ProgramBuilder;

int32_t LaunchA(int32_t division) { return 2 * division - 1; }
int32_t LaunchB(int32_t division) { return 2 * division; }
int32_t LaunchOutputs(int32_t n_divisions) { return 2 * n_divisions + 1; }

// How many divisions before its aggregator's last tile a node-mate's last tile on a piece may come
// for its partial to be carried to the aggregator rather than sent home (PlanNodeSums).
constexpr int32_t kMaxCarryLead = 2;

// Slot types of one piece (block_size tokens, one head group).
class SlotTypes {
 public:
  SlotTypes(const AttentionShape& shape, int64_t block_size, int64_t head_groups)
      : storage_(shape.dtype),
        tokens_(block_size),
        q_elems_(shape.heads / head_groups * shape.head_dim),
        kv_elems_(2 * shape.kv_heads / head_groups * shape.head_dim),
        heads_(shape.heads / head_groups) {}

  SlotInfo Of(TensorKind kind, bool accumulator = false) const {
    const DType dtype = accumulator ? DType::kFloat32 : storage_;
    switch (kind) {
      case TensorKind::kQ:
      case TensorKind::kO:
      case TensorKind::kDO:
      case TensorKind::kDQ:
        return Make(kind, dtype, q_elems_);
      case TensorKind::kKV:
      case TensorKind::kDKV:
        return Make(kind, dtype, kv_elems_);
      case TensorKind::kLse:
      case TensorKind::kDelta:
        return Make(kind, DType::kFloat32, heads_);
    }
    return {};
  }

 private:
  SlotInfo Make(TensorKind kind, DType dtype, int64_t elems) const {
    return SlotInfo{
        .kind = kind, .dtype = dtype, .bytes = tokens_ * elems * BytesPerElement(dtype)};
  }
  DType storage_;
  int64_t tokens_, q_elems_, kv_elems_, heads_;
};

// The mask of a tile in tile coordinates, into *out. A slice that allows every column of the tile
// on its rows becomes the rectangle of those rows, so that the many full tiles of a sequence
// have the same mask and share it (BlockwiseAttention::AddTile).
void TileSlices(const Mask& mask, const DataBlock& q, const DataBlock& kv,
                std::vector<Slice>* out) {
  out->clear();
  const int64_t q0 = q.token_begin, k0 = kv.token_begin;
  for (const Slice& s : mask.slices()) {
    const int64_t begin = std::max(s.row_begin, q0), end = std::min(s.row_end, q0 + q.tokens);
    if (begin >= end) continue;
    Slice local{.row_begin = begin - q0,
                .row_end = end - q0,
                .lo = {.base = s.lo.base + s.lo.slope * q0 - k0, .slope = s.lo.slope},
                .hi = {.base = s.hi.base + s.hi.slope * q0 - k0, .slope = s.hi.slope}};
    // Column bounds never decrease along the rows: the last row's lo and the first row's hi
    // are the tightest. A full slice has rows, so its area is not 0 (most tiles are full: their
    // area is not worth computing).
    if (local.lo.At(local.row_end - 1) <= 0 && local.hi.At(local.row_begin) >= kv.tokens) {
      local.lo = {.base = 0, .slope = 0};
      local.hi = {.base = kv.tokens, .slope = 0};
    } else if (SliceArea(local, 0, q.tokens, 0, kv.tokens) == 0) {
      continue;
    }
    out->push_back(local);
  }
}

// The tensors that travel for one side of a tile, in the order they are packed.
std::span<const TensorKind> SideTensors(Pass pass, Side side) {
  static constexpr TensorKind kColumn[] = {TensorKind::kKV};
  static constexpr TensorKind kForwardRow[] = {TensorKind::kQ};
  static constexpr TensorKind kBackwardRow[] = {TensorKind::kQ, TensorKind::kDO, TensorKind::kLse,
                                                TensorKind::kDelta};
  if (side == Side::kColumn) return kColumn;
  if (pass == Pass::kForward) return kForwardRow;
  return kBackwardRow;
}

class Compiler {
 public:
  // The per-device parts of the plan-wide tables are found on `threads` threads.
  Compiler(const Batch& batch, const BlockSet& blocks, const Placement& placement,
           const Schedule& schedule, const Topology& topology, int32_t threads)
      : batch_(batch),
        blocks_(blocks),
        placement_(placement),
        schedule_(schedule),
        topology_(topology),
        types_(blocks.shape, blocks.block_size, blocks.head_groups) {
    transfers_.resize(TransferIndex(topology.devices(), 0, 0));
    for (const Transfer& t : schedule.transfers) {
      for (DeviceId d : {t.source, t.destination}) {
        transfers_[TransferIndex(d.value, t.division, t.phase)].push_back(&t);
      }
    }
    GroupTiles();
    if (schedule.carry_gradients) PlanCarries();
    const std::vector<LastTile> last_backward = LastTiles(Pass::kBackward, threads);
    if (schedule.reduce_in_node) PlanNodeSums(last_backward);
    carries_of_ = CarriesOf(carries_);
    last_sums_of_ = CarriesOf(last_sums_);
    for (Pass pass : {Pass::kForward, Pass::kBackward}) {
      PlanReturns(pass, pass == Pass::kBackward ? last_backward : LastTiles(pass, threads));
      returns_of_[static_cast<int>(pass)] = CarriesOf(returns_[static_cast<int>(pass)]);
      std::vector<std::pair<int32_t, Key>>& incoming = incoming_[static_cast<int>(pass)];
      const std::vector<std::vector<Key>> partials =
          PerDevice(threads, [&](int32_t d) { return PartialKeys(d, pass); });
      for (int32_t d = 0; d < topology.devices(); ++d) {
        for (const Key& key : partials[d]) incoming.push_back({d, key});
      }
      // By owner, each in (sender, key) order: the order the owner posts its receives in.
      std::stable_sort(incoming.begin(), incoming.end(), [this](const auto& a, const auto& b) {
        return Owner(DataBlockId{a.second.block}) < Owner(DataBlockId{b.second.block});
      });
    }
  }

  // Scratch of one side's PeerLists: per peer, its list in Take (-1: none) and its entry count
  // (0), both left as found; the entries (peer, slot, bytes) added and the peers they name.
  struct PeerScratch {
    explicit PeerScratch(int32_t devices) : list_of(devices, -1), count_of(devices, 0) {}
    std::vector<int32_t> list_of, count_of;
    std::vector<std::tuple<int32_t, SlotId, int64_t>> entries;
    std::vector<int32_t> peers;
  };
  // The scratch of both sides, a table per peer each: made once per thread of CompilePlan and
  // reused for its devices, as one per device made compiling quadratic in the devices (a
  // 1000-token batch on 2048x8 filled 8 GiB of tables per candidate).
  struct PeerTables {
    explicit PeerTables(int32_t devices) : sends(devices), recvs(devices) {}
    PeerScratch sends, recvs;
  };

  Program Build(DeviceId device, Pass pass, PeerTables* tables) const;

 private:
  struct Key {  // a piece's tensor on this device
    int32_t block, head_group;
    TensorKind kind;
    friend auto operator<=>(const Key&, const Key&) = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>{}(static_cast<uint64_t>(static_cast<uint32_t>(k.block)) << 32 ^
                                   static_cast<uint64_t>(static_cast<uint32_t>(k.head_group)) << 8 ^
                                   static_cast<uint64_t>(k.kind));
    }
    size_t operator()(const std::pair<Key, int32_t>& on_device) const {
      return (*this)(on_device.first) * 0x9e3779b97f4a7c15ULL ^
             static_cast<uint32_t>(on_device.second);
    }
  };
  // What an owner receives for one of its pieces: a partial result and, for O, its LSE.
  struct Partial {
    SlotId value, lse;
  };
  // The per-peer slot lists of one side of a launch. Entries are gathered in one array and Take
  // makes each peer's list at its final size, in ascending peer order (lists grown entry by
  // entry spent about a twelfth of the 128K pinned pass's compile in reallocation).
  class PeerLists {
   public:
    explicit PeerLists(PeerScratch* scratch) : scratch_(scratch) { scratch_->entries.clear(); }
    PeerLists(const PeerLists&) = delete;
    PeerLists& operator=(const PeerLists&) = delete;
    void Add(int32_t peer, SlotId slot, int64_t bytes) {
      scratch_->entries.emplace_back(peer, slot, bytes);
    }
    std::vector<PeerSlots> Take() {
      std::vector<int32_t>& list_of = scratch_->list_of;
      std::vector<int32_t>& count_of = scratch_->count_of;
      std::vector<int32_t>& peers = scratch_->peers;
      peers.clear();
      for (const auto& [peer, slot, bytes] : scratch_->entries) {
        if (count_of[peer]++ == 0) peers.push_back(peer);
      }
      std::sort(peers.begin(), peers.end());
      std::vector<PeerSlots> lists(peers.size());
      for (size_t i = 0; i < peers.size(); ++i) {
        list_of[peers[i]] = static_cast<int32_t>(i);
        lists[i].peer = DeviceId{peers[i]};
        lists[i].slots.reserve(count_of[peers[i]]);
        lists[i].bytes.reserve(count_of[peers[i]]);
      }
      for (const auto& [peer, slot, bytes] : scratch_->entries) {
        PeerSlots& list = lists[list_of[peer]];
        list.slots.push_back(slot);
        list.bytes.push_back(bytes);
      }
      for (int32_t peer : peers) {
        list_of[peer] = -1;
        count_of[peer] = 0;
      }
      scratch_->entries.clear();
      return lists;
    }

   private:
    PeerScratch* scratch_;
  };
  // The tensor kinds a device holds as inputs or receives (Q, KV, O, LSE, dO, Delta).
  static constexpr size_t kHeldKinds = 6;
  // The kinds of partial results (O, LSE, dQ, dKV).
  static constexpr size_t kResultKinds = 4;
  struct State {
    State(DeviceId device, Pass pass, size_t pieces, PeerTables* tables)
        : builder(device, pass),
          have(pieces * kHeldKinds, -1),
          row_at(pieces, -1),
          column_at(pieces, -1),
          sends(tables->sends),
          recvs(tables->recvs),
          accumulator(pieces * kResultKinds, -1) {}
    ProgramBuilder builder;
    // Per (piece, held kind): the slot of an input present (or arriving) on the device, or -1.
    // Looked up per tile. Tables here and in PeerLists rather than hash maps and ordered maps
    // took 18% fewer instructions to compile the 128K-token pinned pass.
    std::vector<SlotId> have;
    // Per piece: its row and its column in the attention call being built, or -1.
    std::vector<int32_t> row_at, column_at;
    std::vector<size_t> rows_of, columns_of;  // Compute's scratch: the pieces with a row, a column
    std::vector<Slice> mask;                  // Compute's scratch: one tile's mask
    PeerScratch &sends, &recvs;               // of the PeerLists of a launch (PeerTables)
    // Per (piece, result kind): the slot of a partial result computed here, or -1; `accumulated`
    // lists the keys ever set, unordered and possibly repeated (AccumulatedKeys sorts them). A
    // table rather than an ordered map: a map node per result was a twelfth of the compile.
    std::vector<SlotId> accumulator;
    std::vector<Key> accumulated;
    // Partials received and not yet summed into the device's own: backward, carried here from a
    // ring hop or a node-mate (fp32); returned early to the owner (storage dtype), in arrival
    // order. Their bytes, and the bytes of the device's inputs, which bound them (FoldWaiting).
    std::map<Key, std::vector<SlotId>> carried;
    std::map<Key, std::vector<Partial>> returned;
    int64_t waiting_bytes = 0, input_bytes = 0;
  };
  // A partial result moving to another device in the A launch made at `division` (so
  // A(division + 1)): a ring hop of partial dKV, or an early return to the owner.
  struct Carry {
    int32_t division, from, to;
    Key key;
    friend auto operator<=>(const Carry&, const Carry&) = default;
  };

  size_t Index(int32_t device, int32_t division) const {
    return static_cast<size_t>(device) * schedule_.n_divisions + division;
  }
  // Transfers arrive for divisions 1 .. n_divisions (the last: outputs), in phase 0 or 1.
  size_t TransferIndex(int32_t device, int32_t division, int32_t phase) const {
    return (static_cast<size_t>(device) * (schedule_.n_divisions + 1) + division) * 2 + phase;
  }
  int32_t Owner(DataBlockId b) const { return placement_.data_device[b.value].value; }
  // A piece's index among the pieces (block, head group).
  size_t PieceIndex(int32_t block, int32_t head_group) const {
    return static_cast<size_t>(block) * blocks_.head_groups + head_group;
  }
  // The slot the device holds for `key` (an input kind), -1 while none.
  SlotId& Have(State& st, const Key& key) const {
    DCP_CHECK(static_cast<size_t>(key.kind) < kHeldKinds, "{} is not a held kind",
              ToString(key.kind));
    const size_t piece = PieceIndex(key.block, key.head_group);
    return st.have[piece * kHeldKinds + static_cast<size_t>(key.kind)];
  }
  // The slot of the partial result `key` computed on the device, -1 while none. Set one with
  // Accumulate, which records the key; clear one by assigning -1.
  SlotId& Accumulator(State& st, const Key& key) const {
    // By TensorKind: the index among the result kinds, -1 for the others.
    static constexpr int kResultIndex[] = {-1, -1, 0, 1, -1, -1, 2, 3};
    const int kind = kResultIndex[static_cast<size_t>(key.kind)];
    DCP_CHECK(kind >= 0, "{} is not a result kind", ToString(key.kind));
    return st.accumulator[PieceIndex(key.block, key.head_group) * kResultKinds +
                          static_cast<size_t>(kind)];
  }
  void Accumulate(State& st, const Key& key, SlotId slot) const {
    Accumulator(st, key) = slot;
    st.accumulated.push_back(key);
  }
  // Accumulator's slot, which must exist.
  SlotId Accumulated(State& st, const Key& key) const {
    const SlotId slot = Accumulator(st, key);
    DCP_CHECK(slot >= 0, "device {} has no partial {} of block {} group {}",
              st.builder.device().value, ToString(key.kind), key.block, key.head_group);
    return slot;
  }
  // The keys with a partial result on the device, in Key order.
  std::vector<Key> AccumulatedKeys(State& st) const {
    std::vector<Key>& keys = st.accumulated;
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::erase_if(keys, [&](const Key& key) { return Accumulator(st, key) < 0; });
    return keys;
  }
  // Have's slot, which must exist.
  SlotId Held(State& st, const Key& key) const {
    const SlotId slot = Have(st, key);
    DCP_CHECK(slot >= 0, "device {} holds no {} of block {} group {}", st.builder.device().value,
              ToString(key.kind), key.block, key.head_group);
    return slot;
  }

  // A sorted carry list split by device: each device's carries (those it sends or receives) in
  // the list's order, so sorted by division. Exchange reads one division of one device's list;
  // scanning the whole list there cost devices^2 x divisions (TE on 256 devices: minutes).
  using CarriesByDevice = std::vector<std::vector<Carry>>;
  CarriesByDevice CarriesOf(const std::vector<Carry>& sorted) const {
    CarriesByDevice of(topology_.devices());
    for (const Carry& c : sorted) {
      of[c.from].push_back(c);
      if (c.to != c.from) of[c.to].push_back(c);
    }
    return of;
  }
  // The carries of `device` launched at `division`.
  static std::span<const Carry> CarriesAt(const CarriesByDevice& of, int32_t device,
                                          int32_t division) {
    const std::vector<Carry>& list = of[device];
    const auto begin = std::partition_point(list.begin(), list.end(),
                                            [&](const Carry& c) { return c.division < division; });
    const auto end = std::partition_point(begin, list.end(),
                                          [&](const Carry& c) { return c.division == division; });
    return {begin, end};
  }

  // Appends a message entry: `slot` (of type `info`) holding a piece of data block `block`; only
  // the block's tokens travel.
  void AddEntry(PeerLists& lists, int32_t peer, SlotId slot, const SlotInfo& info,
                int32_t block) const {
    lists.Add(peer, slot, info.bytes / blocks_.block_size * blocks_.data_blocks[block].tokens);
  }
  static void EmitLaunch(State& st, CommLaunch launch, PeerLists& sends, PeerLists& recvs) {
    launch.sends = sends.Take();
    launch.recvs = recvs.Take();
    st.builder.Emit(std::move(launch));
  }
  // ((device, key), the division of the device's last tile adding to the key's partial), in
  // (device, key) order.
  using LastTile = std::pair<std::pair<int32_t, Key>, int32_t>;
  std::vector<LastTile> LastTiles(Pass pass, int32_t threads) const;
  // f(d) for every device d, on `threads` threads.
  template <typename F>
  std::vector<std::invoke_result_t<const F&, int32_t>> PerDevice(int32_t threads,
                                                                 const F& f) const {
    std::vector<std::invoke_result_t<const F&, int32_t>> out(topology_.devices());
    internal::ParallelFor(topology_.devices(), threads, [&](int32_t d) { out[d] = f(d); });
    return out;
  }
  void PlanCarries();
  void PlanNodeSums(const std::vector<LastTile>& last_backward);
  void PlanReturns(Pass pass, const std::vector<LastTile>& last);
  // Calls f with the key of each partial result a tile adds to in `pass`.
  template <typename F>
  static void ForEachResultKey(const ComputeBlock& cb, Pass pass, F f) {
    if (pass == Pass::kForward) {
      f(Key{cb.q_block.value, cb.head_group, TensorKind::kO});
    } else {
      f(Key{cb.q_block.value, cb.head_group, TensorKind::kDQ});
      f(Key{cb.kv_block.value, cb.head_group, TensorKind::kDKV});
    }
  }
  // Drops a result key equal to the last one of its kind passed in: a device's tiles come in q
  // block order, so O and dQ keys repeat along each row (the forward pass's sorts and hash
  // lookups were one key per tile).
  class RepeatFilter {
   public:
    bool IsNew(const Key& key) {
      std::optional<Key>& last = last_[key.kind == TensorKind::kDKV ? 1 : 0];
      if (last == key) return false;
      last = key;
      return true;
    }

   private:
    std::optional<Key> last_[2];  // the last O or dQ key, the last dKV key
  };
  void SendReturns(State& st, DeviceId device, Pass pass, int32_t launch_division, PeerLists& sends,
                   PeerLists& recvs) const;
  // Whether B(n) follows the last division, for partials summed inside a node.
  bool SumsAfterLastDivision() const { return !last_sums_.empty(); }
  // Whether the last division launches A(n) for early returns or carries.
  bool LastDivisionLaunches(Pass pass) const {
    const int32_t last = schedule_.n_divisions - 1;
    const auto at_last = [&](const std::vector<Carry>& list) {
      return !list.empty() && list.back().division == last;
    };
    return at_last(returns_[static_cast<int>(pass)]) ||
           (pass == Pass::kBackward && at_last(carries_));
  }
  SlotId MergeCarried(State& st, BlockwiseReduction& sums, const Key& key) const;
  // Every key's carried partials merged with the device's own (MergeCarried), the sum its own.
  void MergeAllCarried(State& st, BlockwiseReduction& sums) const {
    while (!st.carried.empty()) {
      const Key key = st.carried.begin()->first;
      Accumulate(st, key, MergeCarried(st, sums, key));
    }
  }
  void FoldWaiting(State& st, Pass pass) const;
  // Bytes of a returned partial of `key`: its value in the storage dtype, with its LSE for O.
  int64_t PartialBytes(const Key& key) const {
    return types_.Of(key.kind).bytes +
           (key.kind == TensorKind::kO ? types_.Of(TensorKind::kLse).bytes : 0);
  }
  void AddInputs(State& st, DeviceId device, Pass pass) const;
  void Exchange(State& st, DeviceId device, Pass pass, int32_t division, int32_t phase) const;
  void Compute(State& st, DeviceId device, Pass pass, int32_t division) const;
  // The slot accumulating `key`'s partial result, new (initialised by `init`) if there is none.
  SlotId NewAccumulator(State& st, BlockwiseReduction& init, Key key) const;
  void ReduceOutputs(State& st, DeviceId device, Pass pass) const;
  std::vector<Key> PartialKeys(int32_t device, Pass pass) const;

  const Batch& batch_;
  const BlockSet& blocks_;
  const Placement& placement_;
  const Schedule& schedule_;
  const Topology& topology_;
  SlotTypes types_;
  // The compute blocks of each (device, division), ascending: tiles_[tiles_begin_[Index(d, t)]
  // .. tiles_begin_[Index(d, t) + 1]) (one array: a plan has millions of tiles).
  std::vector<int32_t> tiles_;
  std::vector<size_t> tiles_begin_;
  std::span<const int32_t> TilesOf(int32_t device, int32_t division) const {
    const size_t i = Index(device, division);
    return std::span<const int32_t>(tiles_).subspan(tiles_begin_[i],
                                                    tiles_begin_[i + 1] - tiles_begin_[i]);
  }
  // Fills tiles_ and tiles_begin_ by a counting sort of the compute blocks.
  void GroupTiles() {
    const auto n = static_cast<int32_t>(blocks_.compute_blocks.size());
    const auto bucket = [&](int32_t c) {
      return Index(placement_.compute_device[c].value, schedule_.compute_division[c]);
    };
    tiles_begin_.assign(topology_.devices() * static_cast<size_t>(schedule_.n_divisions) + 1, 0);
    for (int32_t c = 0; c < n; ++c) ++tiles_begin_[bucket(c) + 1];
    for (size_t i = 1; i < tiles_begin_.size(); ++i) tiles_begin_[i] += tiles_begin_[i - 1];
    std::vector<size_t> next(tiles_begin_.begin(), tiles_begin_.end() - 1);
    tiles_.resize(n);
    for (int32_t c = 0; c < n; ++c) tiles_[next[bucket(c)]++] = c;
  }
  // Per (device, division, phase): the transfers the device sends or receives (TransferIndex).
  std::vector<std::vector<const Transfer*>> transfers_;
  std::vector<Carry> carries_;     // sorted: partials sent on in A launches (ring, node sums)
  std::vector<Carry> last_sums_;   // sorted: last-division partials to their aggregator, in B(n)
  std::vector<Carry> returns_[2];  // per pass, sorted
  CarriesByDevice carries_of_, last_sums_of_, returns_of_[2];  // the lists above, by device
  // Per pass, (sender, key) of every partial sent to its owner at the end (PartialKeys), ordered by
  // owner, then sender and key.
  std::vector<std::pair<int32_t, Key>> incoming_[2];
};

std::vector<Compiler::LastTile> Compiler::LastTiles(Pass pass, int32_t threads) const {
  // A device's keys, each with its last tile's division, by key.
  const auto of_device = [&](int32_t d) {
    std::vector<std::pair<Key, int32_t>> keys;  // (key, division) of the tiles, repeats dropped
    for (int32_t t = 0; t < schedule_.n_divisions; ++t) {
      RepeatFilter repeats;
      for (int32_t c : TilesOf(d, t)) {
        ForEachResultKey(blocks_.compute_blocks[c], pass, [&](const Key& key) {
          if (repeats.IsNew(key)) keys.push_back({key, t});
        });
      }
    }
    // By key, then division: the last of each key's run is its last tile's division.
    std::sort(keys.begin(), keys.end());
    const auto last = std::unique(keys.rbegin(), keys.rend(),
                                  [](const auto& a, const auto& b) { return a.first == b.first; });
    keys.erase(keys.begin(), last.base());
    return keys;
  };
  std::vector<LastTile> last;
  const auto per_device = PerDevice(threads, of_device);
  for (int32_t d = 0; d < topology_.devices(); ++d) {
    for (const auto& [key, division] : per_device[d]) last.push_back({{d, key}, division});
  }
  return last;
}

// A device returns its partial of a piece early, in the first A launch after its last tile on it,
// unless it sends it on (to a ring's next hop or its node's aggregator) or takes part in a ring.
// Partials carried to an aggregator arrive by then.
void Compiler::PlanReturns(Pass pass, const std::vector<LastTile>& last) {
  std::unordered_set<std::pair<Key, int32_t>, KeyHash> carrying;  // (key, device) sending it on
  if (pass == Pass::kBackward) {
    for (const Carry& c : carries_) {
      carrying.insert({c.key, c.from});
      if (schedule_.carry_gradients) carrying.insert({c.key, c.to});  // a ring keeps it
    }
  }
  std::vector<Carry>& returns = returns_[static_cast<int>(pass)];
  for (const auto& [where, division] : last) {
    const auto& [device, key] = where;
    const int32_t owner = Owner(DataBlockId{key.block});
    if (owner == device || division + 1 >= schedule_.n_divisions) continue;
    if (carrying.contains({key, device})) continue;
    returns.push_back({division + 1, device, owner, key});
  }
  std::sort(returns.begin(), returns.end());
}

void Compiler::PlanNodeSums(const std::vector<LastTile>& last_backward) {
  const int32_t last = schedule_.n_divisions - 1;
  // Per (key, node away from its owner): (division of the last tile, device) of each partial.
  std::map<std::pair<Key, int32_t>, std::vector<std::pair<int32_t, int32_t>>> groups;
  for (const auto& [where, division] : last_backward) {
    const auto& [device, key] = where;
    const int32_t node = topology_.NodeOf(DeviceId{device});
    if (node == topology_.NodeOf(DeviceId{Owner(DataBlockId{key.block})})) continue;
    groups[{key, node}].push_back({division, device});
  }
  // Partials each device aggregates so far. Among the contributors whose last tile comes latest
  // (often all of them, in the last division), the one aggregating fewest is chosen, the lowest
  // device among equals: the lowest alone took 288 partials (2.4 GB) of 52 pieces from its
  // node-mates on a 4M-token plan on 32x8, while the others took none.
  std::vector<int64_t> aggregated(topology_.devices(), 0);
  for (const auto& [where, contributors] : groups) {
    const auto [latest, aggregator] = *std::max_element(
        contributors.begin(), contributors.end(), [&](const auto& a, const auto& b) {
          return std::tuple{a.first, -aggregated[a.second], -a.second} <
                 std::tuple{b.first, -aggregated[b.second], -b.second};
        });
    for (const auto& [division, device] : contributors) {
      if (device == aggregator) continue;
      if (latest - division > kMaxCarryLead) continue;  // home directly, as an early return
      if (division < latest) {
        carries_.push_back({division + 1, device, aggregator, where.first});
      } else if (division == last) {
        last_sums_.push_back({division, device, aggregator, where.first});
      } else {
        continue;
      }
      ++aggregated[aggregator];
    }
  }
  std::sort(carries_.begin(), carries_.end());
  std::sort(last_sums_.begin(), last_sums_.end());
}

void Compiler::PlanCarries() {
  // Per dKV piece, where its KV is forwarded from each device: (piece, from, to), sorted.
  struct Hop {
    Key key;
    int32_t from, to;
    auto operator<=>(const Hop&) const = default;
  };
  std::vector<Hop> hops;
  for (const Transfer& t : schedule_.transfers) {
    if (t.side != Side::kColumn) continue;
    hops.push_back(
        {{t.block.value, t.head_group, TensorKind::kDKV}, t.source.value, t.destination.value});
  }
  std::sort(hops.begin(), hops.end());
  // Each device's last tile on each piece.
  std::unordered_map<std::pair<Key, int32_t>, int32_t, KeyHash> last_tile;
  for (int32_t c = 0; c < static_cast<int32_t>(blocks_.compute_blocks.size()); ++c) {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    int32_t& last = last_tile
                        .try_emplace({Key{cb.kv_block.value, cb.head_group, TensorKind::kDKV},
                                      placement_.compute_device[c].value},
                                     -1)
                        .first->second;
    last = std::max(last, schedule_.compute_division[c]);
  }
  const int32_t last_launch = schedule_.n_divisions - 1;  // A launches happen at 0 .. n - 1
  // Per device, for the piece at hand: its one next hop, or kNone / kMany (no chain through it).
  constexpr int32_t kNone = -1, kMany = -2;
  std::vector<int32_t> next(topology_.devices(), kNone);
  std::vector<char> visited(topology_.devices(), 0);
  std::vector<int32_t> path;
  for (size_t begin = 0, end = 0; begin < hops.size(); begin = end) {
    const Key key = hops[begin].key;
    for (end = begin; end < hops.size() && hops[end].key == key; ++end) {
      int32_t& n = next[hops[end].from];
      n = n == kNone ? hops[end].to : kMany;
    }
    int32_t device = Owner(DataBlockId{key.block});
    int32_t arrived = -1;  // the launch division of the partial `device` received, or -1
    path.clear();
    while (true) {
      visited[device] = 1;
      path.push_back(device);
      const int32_t to = next[device];
      if (to < 0 || visited[to]) break;
      auto last = last_tile.find({key, device});
      const int32_t ready = std::max(last == last_tile.end() ? -1 : last->second, arrived);
      if (ready < 0) {  // nothing to carry from here: the next hop starts afresh
        device = to;
        arrived = -1;
        continue;
      }
      if (ready + 1 > last_launch) break;
      carries_.push_back({ready + 1, device, to, key});
      device = to;
      arrived = ready + 1;
    }
    for (int32_t d : path) visited[d] = 0;
    for (size_t i = begin; i < end; ++i) next[hops[i].from] = kNone;
  }
  std::sort(carries_.begin(), carries_.end());
}

// One slot with the sum of this device's partial of `key` and the partials carried to it, adding
// the sum to `sums` when there is more than one; -1 when it has none.
SlotId Compiler::MergeCarried(State& st, BlockwiseReduction& sums, const Key& key) const {
  std::vector<SlotId> parts;
  if (SlotId& own = Accumulator(st, key); own >= 0) {
    parts.push_back(own);
    own = -1;
  }
  if (auto it = st.carried.find(key); it != st.carried.end()) {
    parts.insert(parts.end(), it->second.begin(), it->second.end());
    st.waiting_bytes -=
        static_cast<int64_t>(it->second.size()) * types_.Of(key.kind, /*accumulator=*/true).bytes;
    st.carried.erase(it);
  }
  if (parts.empty()) return -1;
  if (parts.size() > 1) sums.ops.push_back(ReductionOp{.destination = parts[0], .sources = parts});
  return parts[0];
}

// When the partials waiting on the device (FoldWaiting is called after each wait) take more bytes
// than its inputs, sums them into its own: a carried one as the device sends it (MergeCarried;
// the sum becomes the device's own, which may still take tiles), returned ones into the owner's
// accumulator (a new fp32 one when it has none and two or more wait; one alone keeps waiting).
// Summed only at the end, an aggregator of a 4M-token batch on 32x8 held 288 fp32 dQ partials
// (2.4 GB) against 0.1 GB of inputs. Below that bound they wait for the end, where one reduction
// reads them all: a fold costs a read and a write of the accumulator, and folding every arrival
// made the bench's default plans 0.1% slower (up to 2.6% on lambda masks).
void Compiler::FoldWaiting(State& st, Pass pass) const {
  if (st.waiting_bytes <= st.input_bytes) return;
  BlockwiseReduction sums{
      .kind = pass == Pass::kForward ? ReductionKind::kLseMerge : ReductionKind::kSum, .ops = {}};
  MergeAllCarried(st, sums);
  for (auto it = st.returned.begin(); it != st.returned.end();) {
    const Key key = it->first;
    const std::vector<Partial>& partials = it->second;
    const Key lse_key{key.block, key.head_group, TensorKind::kLse};
    const bool merge = key.kind == TensorKind::kO;
    ReductionOp op;
    if (const SlotId own = Accumulator(st, key); own >= 0) {
      op.destination = own;
      op.sources.push_back(own);
      if (merge) {
        op.lse_destination = Accumulated(st, lse_key);
        op.lse_sources.push_back(op.lse_destination);
      }
    } else if (partials.size() >= 2) {
      op.destination = st.builder.NewBuffer(types_.Of(key.kind, /*accumulator=*/true));
      Accumulate(st, key, op.destination);
      if (merge) {
        op.lse_destination = st.builder.NewBuffer(types_.Of(TensorKind::kLse));
        Accumulate(st, lse_key, op.lse_destination);
      }
    } else {
      ++it;
      continue;
    }
    for (const Partial& p : partials) {
      op.sources.push_back(p.value);
      if (merge) op.lse_sources.push_back(p.lse);
    }
    st.waiting_bytes -= static_cast<int64_t>(partials.size()) * PartialBytes(key);
    sums.ops.push_back(std::move(op));
    it = st.returned.erase(it);
  }
  if (!sums.ops.empty()) st.builder.Emit(std::move(sums));
}

void Compiler::AddInputs(State& st, DeviceId device, Pass pass) const {
  static constexpr TensorKind kForwardInputs[] = {TensorKind::kQ, TensorKind::kKV};
  static constexpr TensorKind kBackwardInputs[] = {TensorKind::kQ, TensorKind::kKV, TensorKind::kO,
                                                   TensorKind::kLse, TensorKind::kDO};
  const std::span<const TensorKind> kinds =
      pass == Pass::kForward ? std::span<const TensorKind>(kForwardInputs) : kBackwardInputs;
  BlockwiseReduction deltas{.kind = ReductionKind::kDelta, .ops = {}};
  for (int32_t b = 0; b < static_cast<int32_t>(blocks_.data_blocks.size()); ++b) {
    if (Owner(DataBlockId{b}) != device.value) continue;
    for (int32_t g = 0; g < blocks_.head_groups; ++g) {
      for (TensorKind kind : kinds) {
        const SlotId slot = st.builder.NewBuffer(types_.Of(kind));
        st.builder.AddInput(kind, Piece{DataBlockId{b}, g}, slot);
        st.input_bytes += types_.Of(kind).bytes;
        Have(st, {b, g, kind}) = slot;
      }
      if (pass == Pass::kBackward) {
        const SlotId delta = st.builder.NewBuffer(types_.Of(TensorKind::kDelta));
        deltas.ops.push_back(ReductionOp{
            .destination = delta,
            .sources = {Held(st, {b, g, TensorKind::kO}), Held(st, {b, g, TensorKind::kDO})}});
        Have(st, {b, g, TensorKind::kDelta}) = delta;
      }
    }
  }
  if (!deltas.ops.empty()) st.builder.Emit(std::move(deltas));
}

// Launches the exchange of one division and phase: sends what this device holds, receives into
// new buffers. Lists are built from the schedule's sorted transfers, so both ends agree on order.
void Compiler::Exchange(State& st, DeviceId device, Pass pass, int32_t division,
                        int32_t phase) const {
  CommLaunch launch{
      .id = phase == 0 ? LaunchA(division) : LaunchB(division), .sends = {}, .recvs = {}};
  PeerLists sends(&st.sends), recvs(&st.recvs);
  for (const Transfer* transfer : transfers_[TransferIndex(device.value, division, phase)]) {
    const Transfer& t = *transfer;
    for (TensorKind kind : SideTensors(pass, t.side)) {
      const Key key{t.block.value, t.head_group, kind};
      if (t.source == device) {
        AddEntry(sends, t.destination.value, Held(st, key), types_.Of(kind), t.block.value);
      } else {
        const SlotId slot = st.builder.NewBuffer(types_.Of(kind));
        AddEntry(recvs, t.source.value, slot, types_.Of(kind), t.block.value);
        Have(st, key) = slot;
      }
    }
  }
  if (pass == Pass::kBackward) {
    BlockwiseReduction sums{.kind = ReductionKind::kSum, .ops = {}};
    for (const Carry& c :
         CarriesAt(phase == 0 ? carries_of_ : last_sums_of_, device.value, division - 1)) {
      const SlotInfo partial = types_.Of(c.key.kind, /*accumulator=*/true);
      if (c.from == device.value) {
        const SlotId slot = MergeCarried(st, sums, c.key);
        DCP_CHECK(slot >= 0, "carry of block {} from device {} has no partial", c.key.block,
                  c.from);
        AddEntry(sends, c.to, slot, partial, c.key.block);
      } else if (c.to == device.value) {
        const SlotId slot = st.builder.NewBuffer(partial);
        AddEntry(recvs, c.from, slot, partial, c.key.block);
        st.carried[c.key].push_back(slot);
        st.waiting_bytes += partial.bytes;
      }
    }
    if (!sums.ops.empty()) st.builder.Emit(std::move(sums));
  }
  if (phase == 0) SendReturns(st, device, pass, division - 1, sends, recvs);
  EmitLaunch(st, std::move(launch), sends, recvs);
}

// The early returns launched at `launch_division`: partials converted to the storage dtype go to
// their owners (O with its fp32 LSE), who keep them for the final reduction (or FoldWaiting).
void Compiler::SendReturns(State& st, DeviceId device, Pass pass, int32_t launch_division,
                           PeerLists& sends, PeerLists& recvs) const {
  BlockwiseReduction sums{.kind = ReductionKind::kSum, .ops = {}};
  BlockwiseCopy convert;
  for (const Carry& r :
       CarriesAt(returns_of_[static_cast<int>(pass)], device.value, launch_division)) {
    const Key lse_key{r.key.block, r.key.head_group, TensorKind::kLse};
    if (r.from == device.value) {
      const SlotId packed = st.builder.NewBuffer(types_.Of(r.key.kind));
      convert.ops.emplace_back(MergeCarried(st, sums, r.key), packed);
      AddEntry(sends, r.to, packed, types_.Of(r.key.kind), r.key.block);
      if (r.key.kind == TensorKind::kO) {
        AddEntry(sends, r.to, Accumulated(st, lse_key), types_.Of(TensorKind::kLse), r.key.block);
        Accumulator(st, lse_key) = -1;
      }
    } else if (r.to == device.value) {
      Partial p{st.builder.NewBuffer(types_.Of(r.key.kind)), -1};
      AddEntry(recvs, r.from, p.value, types_.Of(r.key.kind), r.key.block);
      if (r.key.kind == TensorKind::kO) {
        p.lse = st.builder.NewBuffer(types_.Of(TensorKind::kLse));
        AddEntry(recvs, r.from, p.lse, types_.Of(TensorKind::kLse), r.key.block);
      }
      st.returned[r.key].push_back(p);
      st.waiting_bytes += PartialBytes(r.key);
    }
  }
  if (!sums.ops.empty()) st.builder.Emit(std::move(sums));
  if (!convert.ops.empty()) st.builder.Emit(std::move(convert));
}

SlotId Compiler::NewAccumulator(State& st, BlockwiseReduction& init, Key key) const {
  if (const SlotId slot = Accumulator(st, key); slot >= 0) return slot;
  const SlotId slot = st.builder.NewBuffer(types_.Of(key.kind, /*accumulator=*/true));
  Accumulate(st, key, slot);
  if (key.kind == TensorKind::kO) {
    const SlotId lse = st.builder.NewBuffer(types_.Of(TensorKind::kLse));
    Accumulate(st, {key.block, key.head_group, TensorKind::kLse}, lse);
    init.ops.push_back(
        ReductionOp{.destination = slot, .sources = {}, .lse_destination = lse, .lse_sources = {}});
  } else {
    init.ops.push_back(ReductionOp{.destination = slot, .sources = {}});
  }
  return slot;
}

// Initialises the division's new accumulators, then runs all its tiles in one call.
void Compiler::Compute(State& st, DeviceId device, Pass pass, int32_t division) const {
  BlockwiseReduction init_lse{.kind = ReductionKind::kLseMerge, .ops = {}};
  BlockwiseReduction init_sum{.kind = ReductionKind::kSum, .ops = {}};
  BlockwiseAttention attention{.pass = pass, .division = division};
  const std::span<const int32_t> tiles = TilesOf(device.value, division);
  attention.tiles.reserve(tiles.size());
  // The call's row of each q piece and column of each kv piece (st.row_at, st.column_at, cleared
  // at the end through st.rows_of and st.columns_of, the pieces of the call's rows and columns).
  std::vector<size_t>& rows_of = st.rows_of;
  std::vector<size_t>& columns_of = st.columns_of;
  // Count the rows and columns first, so that each list is allocated once, at its size.
  const auto count = [](std::vector<int32_t>& at, std::vector<size_t>& of, size_t piece) {
    if (at[piece] == -1) {
      at[piece] = 0;
      of.push_back(piece);
    }
  };
  for (int32_t c : tiles) {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    count(st.row_at, rows_of, PieceIndex(cb.q_block.value, cb.head_group));
    count(st.column_at, columns_of, PieceIndex(cb.kv_block.value, cb.head_group));
  }
  attention.rows.reserve(rows_of.size());
  attention.columns.reserve(columns_of.size());
  for (size_t piece : rows_of) st.row_at[piece] = -1;
  for (size_t piece : columns_of) st.column_at[piece] = -1;
  rows_of.clear();
  columns_of.clear();
  const auto row_of = [&](int32_t q, int32_t g) {
    int32_t& at = st.row_at[PieceIndex(q, g)];
    if (at >= 0) return at;
    at = static_cast<int32_t>(attention.rows.size());
    rows_of.push_back(PieceIndex(q, g));
    AttentionRow row{.q = Held(st, {q, g, TensorKind::kQ})};
    if (pass == Pass::kForward) {
      row.out = NewAccumulator(st, init_lse, {q, g, TensorKind::kO});
      row.lse = Accumulated(st, {q, g, TensorKind::kLse});
    } else {
      row.d_o = Held(st, {q, g, TensorKind::kDO});
      row.lse = Held(st, {q, g, TensorKind::kLse});
      row.delta = Held(st, {q, g, TensorKind::kDelta});
      row.dq = NewAccumulator(st, init_sum, {q, g, TensorKind::kDQ});
    }
    attention.rows.push_back(row);
    return static_cast<int32_t>(attention.rows.size() - 1);
  };
  const auto column_of = [&](int32_t kv, int32_t g) {
    int32_t& at = st.column_at[PieceIndex(kv, g)];
    if (at >= 0) return at;
    at = static_cast<int32_t>(attention.columns.size());
    columns_of.push_back(PieceIndex(kv, g));
    AttentionColumn column{.kv = Held(st, {kv, g, TensorKind::kKV})};
    if (pass == Pass::kBackward)
      column.dkv = NewAccumulator(st, init_sum, {kv, g, TensorKind::kDKV});
    attention.columns.push_back(column);
    return static_cast<int32_t>(attention.columns.size() - 1);
  };
  std::vector<Slice>& mask = st.mask;
  for (int32_t c : tiles) {
    const ComputeBlock& cb = blocks_.compute_blocks[c];
    const int32_t q = cb.q_block.value, kv = cb.kv_block.value, g = cb.head_group;
    const int32_t row = row_of(q, g), column = column_of(kv, g);
    TileSlices(batch_.masks()[cb.sequence.value], blocks_.data_blocks[q], blocks_.data_blocks[kv],
               &mask);
    attention.AddTile(ComputeBlockId{c}, row, column, mask);
  }
  for (size_t piece : rows_of) st.row_at[piece] = -1;
  for (size_t piece : columns_of) st.column_at[piece] = -1;
  if (!init_lse.ops.empty()) st.builder.Emit(std::move(init_lse));
  if (!init_sum.ops.empty()) st.builder.Emit(std::move(init_sum));
  if (!attention.tiles.empty()) st.builder.Emit(std::move(attention));
}

// The partial results a device computes for pieces it does not own, in the order it sends them
// (Key order: AccumulatedKeys).
std::vector<Compiler::Key> Compiler::PartialKeys(int32_t device, Pass pass) const {
  std::vector<Key> keys;
  RepeatFilter repeats;
  for (int32_t t = 0; t < schedule_.n_divisions; ++t) {
    for (int32_t c : TilesOf(device, t)) {
      ForEachResultKey(blocks_.compute_blocks[c], pass, [&](const Key& key) {
        if (repeats.IsNew(key)) keys.push_back(key);
      });
    }
  }
  std::vector<Key> gone;          // returned early, or (backward) carried away
  if (pass == Pass::kBackward) {  // partials carried here stay, those carried away are gone
    for (const auto* of : {&carries_of_, &last_sums_of_}) {
      for (const Carry& c : (*of)[device]) {
        if (c.to == device) keys.push_back(c.key);
        if (c.from == device) gone.push_back(c.key);
      }
    }
  }
  for (const Carry& r : returns_of_[static_cast<int>(pass)][device]) {
    if (r.from == device) gone.push_back(r.key);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::sort(gone.begin(), gone.end());
  std::erase_if(keys, [&](const Key& k) {
    return Owner(DataBlockId{k.block}) == device || std::binary_search(gone.begin(), gone.end(), k);
  });
  return keys;
}

// Sends partial results to their owners (in the storage dtype; LSE in fp32) and reduces every
// owned piece's contributions into its output, in fp32.
void Compiler::ReduceOutputs(State& st, DeviceId device, Pass pass) const {
  static constexpr TensorKind kForwardResults[] = {TensorKind::kO};
  static constexpr TensorKind kBackwardResults[] = {TensorKind::kDQ, TensorKind::kDKV};
  const std::span<const TensorKind> results =
      pass == Pass::kForward ? std::span<const TensorKind>(kForwardResults) : kBackwardResults;
  const auto owner_of = [&](const Key& key) { return Owner(DataBlockId{key.block}); };
  BlockwiseReduction sums{.kind = ReductionKind::kSum, .ops = {}};
  MergeAllCarried(st, sums);
  if (!sums.ops.empty()) st.builder.Emit(std::move(sums));
  BlockwiseCopy convert;
  PeerLists sends(&st.sends), recvs(&st.recvs);
  for (const Key& key : AccumulatedKeys(st)) {
    if (key.kind == TensorKind::kLse || owner_of(key) == device.value) continue;
    const SlotId packed = st.builder.NewBuffer(types_.Of(key.kind));
    convert.ops.emplace_back(Accumulated(st, key), packed);
    AddEntry(sends, owner_of(key), packed, types_.Of(key.kind), key.block);
    if (key.kind == TensorKind::kO) {
      AddEntry(sends, owner_of(key), Accumulated(st, {key.block, key.head_group, TensorKind::kLse}),
               types_.Of(TensorKind::kLse), key.block);
    }
  }
  if (!convert.ops.empty()) st.builder.Emit(std::move(convert));

  // What every other device sends here, in the order it packs it (Key order: AccumulatedKeys),
  // after what was returned early.
  std::map<std::pair<int32_t, int32_t>, std::map<TensorKind, std::vector<Partial>>> received;
  for (auto& [key, partials] : st.returned) {
    received[{key.block, key.head_group}][key.kind] = std::move(partials);
  }
  CommLaunch launch{.id = LaunchOutputs(schedule_.n_divisions), .sends = {}, .recvs = {}};
  const std::vector<std::pair<int32_t, Key>>& incoming = incoming_[static_cast<int>(pass)];
  const auto begin = std::partition_point(incoming.begin(), incoming.end(), [&](const auto& e) {
    return owner_of(e.second) < device.value;
  });
  const auto end = std::partition_point(
      begin, incoming.end(), [&](const auto& e) { return owner_of(e.second) == device.value; });
  for (auto it = begin; it != end; ++it) {
    const auto& [peer, key] = *it;
    Partial p{st.builder.NewBuffer(types_.Of(key.kind)), -1};
    AddEntry(recvs, peer, p.value, types_.Of(key.kind), key.block);
    if (key.kind == TensorKind::kO) {
      p.lse = st.builder.NewBuffer(types_.Of(TensorKind::kLse));
      AddEntry(recvs, peer, p.lse, types_.Of(TensorKind::kLse), key.block);
    }
    received[{key.block, key.head_group}][key.kind].push_back(p);
  }
  EmitLaunch(st, std::move(launch), sends, recvs);
  st.builder.Emit(CommWait{.id = LaunchOutputs(schedule_.n_divisions)});

  BlockwiseReduction merge{.kind = ReductionKind::kLseMerge, .ops = {}};
  BlockwiseReduction sum{.kind = ReductionKind::kSum, .ops = {}};
  for (int32_t b = 0; b < static_cast<int32_t>(blocks_.data_blocks.size()); ++b) {
    if (Owner(DataBlockId{b}) != device.value) continue;
    for (int32_t g = 0; g < blocks_.head_groups; ++g) {
      for (TensorKind kind : results) {
        ReductionOp op{.destination = st.builder.NewBuffer(types_.Of(kind))};
        st.builder.AddOutput(kind, Piece{DataBlockId{b}, g}, op.destination);
        if (const SlotId own = Accumulator(st, {b, g, kind}); own >= 0) {
          op.sources.push_back(own);
          if (kind == TensorKind::kO)
            op.lse_sources.push_back(Accumulated(st, {b, g, TensorKind::kLse}));
        }
        for (const Partial& p : received[{b, g}][kind]) {
          op.sources.push_back(p.value);
          if (kind == TensorKind::kO) op.lse_sources.push_back(p.lse);
        }
        if (kind == TensorKind::kO) {
          op.lse_destination = st.builder.NewBuffer(types_.Of(TensorKind::kLse));
          st.builder.AddOutput(TensorKind::kLse, Piece{DataBlockId{b}, g}, op.lse_destination);
          merge.ops.push_back(std::move(op));
        } else {
          sum.ops.push_back(std::move(op));
        }
      }
    }
  }
  if (!merge.ops.empty()) st.builder.Emit(std::move(merge));
  if (!sum.ops.empty()) st.builder.Emit(std::move(sum));
}

Program Compiler::Build(DeviceId device, Pass pass, PeerTables* tables) const {
  State st(device, pass, blocks_.data_blocks.size() * static_cast<size_t>(blocks_.head_groups),
           tables);
  AddInputs(st, device, pass);
  const int32_t n = schedule_.n_divisions;
  const bool last_launches = LastDivisionLaunches(pass);
  for (int32_t t = 0; t < n; ++t) {
    if (t > 0) st.builder.Emit(CommWait{.id = LaunchB(t)});
    const bool launch_a = t + 1 < n || last_launches;
    if (launch_a) Exchange(st, device, pass, t + 1, 0);
    Compute(st, device, pass, t);
    if (launch_a) {
      st.builder.Emit(CommWait{.id = LaunchA(t + 1)});
      FoldWaiting(st, pass);
    }
    if (t + 1 < n) Exchange(st, device, pass, t + 1, 1);
  }
  if (pass == Pass::kBackward && SumsAfterLastDivision()) {
    Exchange(st, device, pass, n, 1);
    st.builder.Emit(CommWait{.id = LaunchB(n)});
    FoldWaiting(st, pass);
  }
  ReduceOutputs(st, device, pass);
  return st.builder.Finish();
}

}  // namespace

Result<Plan> CompilePlan(const Batch& batch, const BlockSet& blocks, const Placement& placement,
                         const Schedule& schedule, const Topology& topology, int32_t threads) {
  DCP_RETURN_IF_ERROR(topology.Validate());
  if (placement.data_device.size() != blocks.data_blocks.size() ||
      placement.compute_device.size() != blocks.compute_blocks.size() ||
      schedule.compute_division.size() != blocks.compute_blocks.size() ||
      batch.seqlens().size() + 1 != blocks.sequence_first_block.size()) {
    return Status::InvalidArgument("placement, schedule and blocks do not belong together");
  }
  Plan plan{.topology = topology,
            .shape = blocks.shape,
            .block_size = blocks.block_size,
            .head_groups = blocks.head_groups,
            .seqlens = batch.seqlens(),
            .n_divisions = schedule.n_divisions};
  plan.blocks.reserve(blocks.data_blocks.size());
  for (const DataBlock& d : blocks.data_blocks) {
    plan.blocks.push_back({d.sequence, d.token_begin, d.tokens});
  }
  plan.block_owner = placement.data_device;
  plan.compute_blocks.reserve(blocks.compute_blocks.size());  // millions: grow it once
  for (const ComputeBlock& c : blocks.compute_blocks) {
    plan.compute_blocks.push_back({c.q_block, c.kv_block, c.head_group, c.area});
  }
  const Compiler compiler(batch, blocks, placement, schedule, topology, threads);
  plan.forward.resize(topology.devices());
  plan.backward.resize(topology.devices());
  // PeerTables not in use, one per thread at most; a device's are dropped if its Build throws.
  std::mutex idle_mutex;
  std::vector<std::unique_ptr<Compiler::PeerTables>> idle;
  internal::ParallelFor(topology.devices(), threads, [&](int32_t d) {
    std::unique_ptr<Compiler::PeerTables> tables;
    {
      const std::lock_guard<std::mutex> lock(idle_mutex);
      if (!idle.empty()) {
        tables = std::move(idle.back());
        idle.pop_back();
      }
    }
    if (!tables) tables = std::make_unique<Compiler::PeerTables>(topology.devices());
    plan.forward[d] = compiler.Build(DeviceId{d}, Pass::kForward, tables.get());
    plan.backward[d] = compiler.Build(DeviceId{d}, Pass::kBackward, tables.get());
    const std::lock_guard<std::mutex> lock(idle_mutex);
    idle.push_back(std::move(tables));
  });
  return plan;
}

}  // namespace dcp
