// SPDX-License-Identifier: Apache-2.0
// The executor: interprets one device's Program over the kernels and a Communicator. It is the
// same code for every backend; dispatch happens once per instruction, never per element.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "dcp/runtime.h"

namespace dcp {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Slot memory kept from one run to the next: training runs the same plans step after step, and
// allocating and first touching hundreds of megabytes per pass costs more than small kernels do.
class WorkspacePool {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
  };
  static WorkspacePool& Instance() {
    static WorkspacePool pool;
    return pool;
  }
  // The smallest kept buffer that holds `bytes`, or a new one.
  Buffer Take(size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      auto best = buffers_.end();
      for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
        if (it->bytes >= bytes && (best == buffers_.end() || it->bytes < best->bytes)) best = it;
      }
      if (best != buffers_.end()) {
        Buffer buffer = std::move(*best);
        buffers_.erase(best);
        kept_bytes_ -= buffer.bytes;
        return buffer;
      }
    }
    return Buffer{std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
  }
  // Keeps the buffer, dropping the smallest kept ones beyond kMaxKeptBytes.
  void Give(Buffer buffer) {
    std::lock_guard lock(mutex_);
    kept_bytes_ += buffer.bytes;
    buffers_.push_back(std::move(buffer));
    std::sort(buffers_.begin(), buffers_.end(),
              [](const Buffer& a, const Buffer& b) { return a.bytes > b.bytes; });
    while (kept_bytes_ > kMaxKeptBytes) {
      kept_bytes_ -= buffers_.back().bytes;
      buffers_.pop_back();
    }
  }

 private:
  static constexpr size_t kMaxKeptBytes = size_t{4} << 30;
  std::mutex mutex_;
  std::vector<Buffer> buffers_;
  size_t kept_bytes_ = 0;
};

// Where a piece lives in the batch tensors.
struct PieceLayout {
  int64_t first_token = 0;  // in the packed batch
  int64_t tokens = 0;
  int64_t first_head = 0, heads = 0;        // query heads of the group
  int64_t first_kv_head = 0, kv_heads = 0;  // KV heads of the group
};

class DeviceRun {
 public:
  DeviceRun(const Plan& plan, const Program& program, Communicator& comm, BatchTensors& tensors,
            const ExecutorOptions& options)
      : plan_(plan), program_(program), comm_(comm), t_(tensors) {
    const AttentionShape& s = plan.shape;
    scale_ = static_cast<float>(options.softmax_scale > 0
                                    ? options.softmax_scale
                                    : 1.0 / std::sqrt(static_cast<double>(s.head_dim)));
    heads_ = s.heads / plan.head_groups;
    kv_heads_ = s.kv_heads / plan.head_groups;
    int64_t begin = 0;
    for (int64_t len : plan.seqlens) {
      sequence_begin_.push_back(begin);
      begin += len;
    }
    // One workspace for all slots, each 64-byte aligned. Not zeroed: every slot is written
    // (input, receive, identity or result) before it is read.
    std::vector<size_t> offsets;
    size_t total = 0;
    for (const SlotInfo& info : program.slots) {
      offsets.push_back(total);
      total += (static_cast<size_t>(info.bytes) + 63) / 64 * 64;
    }
    workspace_ = WorkspacePool::Instance().Take(total);
    for (size_t offset : offsets) slots_.push_back(workspace_.data.get() + offset);
  }
  ~DeviceRun() { WorkspacePool::Instance().Give(std::move(workspace_)); }
  DeviceRun(const DeviceRun&) = delete;
  DeviceRun& operator=(const DeviceRun&) = delete;

  // Times every instruction into `profile` by kind.
  Status Run(ExecutionProfile& profile) {
    for (const Binding& b : program_.inputs) Gather(b);
    for (size_t i = 0; i < program_.instructions.size(); ++i) {
      const Instruction& instruction = program_.instructions[i];
      const auto start = std::chrono::steady_clock::now();
      Status s = std::visit([this](const auto& op) { return Execute(op); }, instruction);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (std::holds_alternative<BlockwiseAttention>(instruction)) {
        profile.attention += seconds;
      } else if (std::holds_alternative<BlockwiseReduction>(instruction) ||
                 std::holds_alternative<BlockwiseCopy>(instruction)) {
        profile.reduction += seconds;
      } else {
        profile.communication += seconds;
      }
      if (!s.ok()) {
        return s.WithContext(fmt::format("device {} instruction {}", program_.device.value, i));
      }
    }
    for (const Binding& b : program_.outputs) Scatter(b);
    return Status::Ok();
  }

 private:
  PieceLayout Layout(const Piece& piece) const {
    const PlanBlock& block = plan_.blocks[piece.block.value];
    return PieceLayout{.first_token = sequence_begin_[block.sequence.value] + block.token_begin,
                       .tokens = block.tokens,
                       .first_head = piece.head_group * heads_,
                       .heads = heads_,
                       .first_kv_head = piece.head_group * kv_heads_,
                       .kv_heads = kv_heads_};
  }
  std::byte* Slot(SlotId s) { return slots_[s]; }
  float* SlotFloats(SlotId s) { return reinterpret_cast<float*>(slots_[s]); }
  DType SlotType(SlotId s) const { return program_.slots[s].dtype; }
  int64_t SlotElements(SlotId s) const {
    return program_.slots[s].bytes / BytesPerElement(program_.slots[s].dtype);
  }

  // Calls fn(global, local, n) for each token's run of `heads` x `dim` contiguous elements: the
  // batch tensor has `total_heads` heads per token, the slot `slot_heads_per_token` of which the
  // run starts at `slot_head_offset` (stride 2 interleaves K and V).
  template <typename Fn>
  void ForEachRun(const PieceLayout& p, int64_t first_head, int64_t heads, int64_t total_heads,
                  int64_t dim, int64_t slot_heads_per_token, int64_t slot_head_offset, Fn&& fn) {
    for (int64_t t = 0; t < p.tokens; ++t) {
      fn(((p.first_token + t) * total_heads + first_head) * dim,
         (t * slot_heads_per_token + slot_head_offset) * dim, heads * dim);
    }
  }

  void Gather(const Binding& b) {
    const PieceLayout p = Layout(b.piece);
    const AttentionShape& s = plan_.shape;
    std::byte* slot = Slot(b.slot);
    const DType dtype = SlotType(b.slot);
    const auto load = [&](const std::vector<float>& src, int64_t first_head, int64_t heads,
                          int64_t total_heads, int64_t dim, int64_t per_token, int64_t offset) {
      ForEachRun(p, first_head, heads, total_heads, dim, per_token, offset,
                 [&](int64_t g, int64_t l, int64_t n) { StoreRun(slot, dtype, l, &src[g], n); });
    };
    switch (b.kind) {
      case TensorKind::kQ:
        load(t_.q, p.first_head, p.heads, s.heads, s.head_dim, p.heads, 0);
        break;
      case TensorKind::kO:
        load(t_.o, p.first_head, p.heads, s.heads, s.head_dim, p.heads, 0);
        break;
      case TensorKind::kDO:
        load(t_.d_o, p.first_head, p.heads, s.heads, s.head_dim, p.heads, 0);
        break;
      case TensorKind::kLse:
        load(t_.lse, p.first_head, p.heads, s.heads, 1, p.heads, 0);
        break;
      case TensorKind::kKV:
        load(t_.k, p.first_kv_head, p.kv_heads, s.kv_heads, s.head_dim, 2 * p.kv_heads, 0);
        load(t_.v, p.first_kv_head, p.kv_heads, s.kv_heads, s.head_dim, 2 * p.kv_heads, p.kv_heads);
        break;
      case TensorKind::kDelta:
      case TensorKind::kDQ:
      case TensorKind::kDKV:
        break;  // never inputs
    }
  }

  void Scatter(const Binding& b) {
    const PieceLayout p = Layout(b.piece);
    const AttentionShape& s = plan_.shape;
    const std::byte* slot = Slot(b.slot);
    const DType dtype = SlotType(b.slot);
    const auto store = [&](std::vector<float>& dst, int64_t first_head, int64_t heads,
                           int64_t total_heads, int64_t dim, int64_t per_token, int64_t offset) {
      ForEachRun(p, first_head, heads, total_heads, dim, per_token, offset,
                 [&](int64_t g, int64_t l, int64_t n) { LoadRun(slot, dtype, l, &dst[g], n); });
    };
    switch (b.kind) {
      case TensorKind::kO:
        store(t_.o, p.first_head, p.heads, s.heads, s.head_dim, p.heads, 0);
        break;
      case TensorKind::kLse:
        store(t_.lse, p.first_head, p.heads, s.heads, 1, p.heads, 0);
        break;
      case TensorKind::kDQ:
        store(t_.dq, p.first_head, p.heads, s.heads, s.head_dim, p.heads, 0);
        break;
      case TensorKind::kDKV:
        store(t_.dk, p.first_kv_head, p.kv_heads, s.kv_heads, s.head_dim, 2 * p.kv_heads, 0);
        store(t_.dv, p.first_kv_head, p.kv_heads, s.kv_heads, s.head_dim, 2 * p.kv_heads,
              p.kv_heads);
        break;
      case TensorKind::kQ:
      case TensorKind::kKV:
      case TensorKind::kDO:
      case TensorKind::kDelta:
        break;  // never outputs
    }
  }

  TileShape ShapeOf(const AttentionTile& tile) const {
    const PlanComputeBlock& c = plan_.compute_blocks[tile.block.value];
    return TileShape{.q_tokens = plan_.blocks[c.q_block.value].tokens,
                     .kv_tokens = plan_.blocks[c.kv_block.value].tokens,
                     .heads = heads_,
                     .kv_heads = kv_heads_,
                     .head_dim = plan_.shape.head_dim};
  }

  Status Execute(const BlockwiseAttention& a) {
    const DType dtype = plan_.shape.dtype;
    for (const AttentionTile& tile : a.tiles) {
      if (a.pass == Pass::kForward) {
        AttendForward(SlotFloats(tile.out), SlotFloats(tile.lse), Slot(tile.q), Slot(tile.kv),
                      dtype, ShapeOf(tile), tile.slices, scale_);
      } else {
        AttendBackward(SlotFloats(tile.dq), SlotFloats(tile.dkv), Slot(tile.q), Slot(tile.kv),
                       Slot(tile.d_o), SlotFloats(tile.lse), SlotFloats(tile.delta), dtype,
                       ShapeOf(tile), tile.slices, scale_);
      }
    }
    return Status::Ok();
  }

  Status Execute(const BlockwiseReduction& r) {
    for (const ReductionOp& op : r.ops) {
      switch (r.kind) {
        case ReductionKind::kLseMerge:
          MergeLse(op);
          break;
        case ReductionKind::kSum:
          Sum(op);
          break;
        case ReductionKind::kDelta:
          Delta(op);
          break;
      }
    }
    return Status::Ok();
  }

  // (O, LSE) = log-sum-exp merge of the sources, in fp32; no sources give O = 0, LSE = -inf.
  void MergeLse(const ReductionOp& op) {
    const int64_t rows = SlotElements(op.lse_destination);  // tokens x heads
    const int64_t dim = plan_.shape.head_dim;
    std::vector<float> weight(op.sources.size());
    std::vector<float> acc(static_cast<size_t>(dim));
    row_.resize(static_cast<size_t>(dim));
    for (int64_t row = 0; row < rows; ++row) {
      float max = kNegInf;
      for (SlotId s : op.lse_sources) max = std::max(max, SlotFloats(s)[row]);
      float total = 0;
      for (size_t i = 0; i < op.sources.size(); ++i) {
        const float lse = SlotFloats(op.lse_sources[i])[row];
        weight[i] = max == kNegInf ? 0.f : std::exp(lse - max);
        total += weight[i];
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      if (total > 0) {
        for (size_t i = 0; i < op.sources.size(); ++i) {
          if (weight[i] == 0) continue;
          const float w = weight[i] / total;
          LoadRun(Slot(op.sources[i]), SlotType(op.sources[i]), row * dim, row_.data(), dim);
          for (int64_t d = 0; d < dim; ++d) acc[d] += w * row_[d];
        }
      }
      StoreRun(Slot(op.destination), SlotType(op.destination), row * dim, acc.data(), dim);
      SlotFloats(op.lse_destination)[row] = total > 0 ? max + std::log(total) : kNegInf;
    }
  }

  // In chunks, every source read before the destination (possibly a source) is written.
  void Sum(const ReductionOp& op) {
    constexpr int64_t kChunk = 4096;
    const int64_t n = SlotElements(op.destination);
    std::vector<float> total(kChunk);
    row_.resize(kChunk);
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t count = std::min(kChunk, n - begin);
      std::fill_n(total.begin(), count, 0.f);
      for (SlotId s : op.sources) {
        LoadRun(Slot(s), SlotType(s), begin, row_.data(), count);
        for (int64_t i = 0; i < count; ++i) total[i] += row_[i];
      }
      StoreRun(Slot(op.destination), SlotType(op.destination), begin, total.data(), count);
    }
  }

  // Delta = rowsum(O * dO) per token and head, in fp32.
  void Delta(const ReductionOp& op) {
    const int64_t rows = SlotElements(op.destination);
    const int64_t dim = plan_.shape.head_dim;
    const SlotId o = op.sources[0], d_o = op.sources[1];
    std::vector<float> o_row(static_cast<size_t>(dim)), d_o_row(static_cast<size_t>(dim));
    for (int64_t row = 0; row < rows; ++row) {
      LoadRun(Slot(o), SlotType(o), row * dim, o_row.data(), dim);
      LoadRun(Slot(d_o), SlotType(d_o), row * dim, d_o_row.data(), dim);
      float total = 0;
      for (int64_t d = 0; d < dim; ++d) total += o_row[d] * d_o_row[d];
      SlotFloats(op.destination)[row] = total;
    }
  }

  Status Execute(const BlockwiseCopy& c) {
    for (const auto& [from, to] : c.ops) {
      const int64_t n = std::min(SlotElements(from), SlotElements(to));
      row_.resize(static_cast<size_t>(n));
      LoadRun(Slot(from), SlotType(from), 0, row_.data(), n);
      StoreRun(Slot(to), SlotType(to), 0, row_.data(), n);
    }
    return Status::Ok();
  }

  // Slots to one peer are packed back to back into one buffer per peer.
  Status Execute(const CommLaunch& l) {
    Exchange& x = exchanges_[l.id];
    std::vector<SendBuffer> sends;
    std::vector<RecvBuffer> recvs;
    for (const PeerSlots& p : l.sends) {
      std::vector<std::byte>& buffer = x.send.emplace_back();
      for (size_t k = 0; k < p.slots.size(); ++k) {
        const std::byte* begin = Slot(p.slots[k]);
        buffer.insert(buffer.end(), begin, begin + p.bytes[k]);
      }
      sends.push_back({p.peer, {std::span<const std::byte>(buffer)}});
    }
    for (const PeerSlots& p : l.recvs) {
      int64_t bytes = 0;
      for (int64_t b : p.bytes) bytes += b;
      std::vector<std::byte>& buffer = x.recv.emplace_back(static_cast<size_t>(bytes));
      x.recv_lists.push_back(&p);
      recvs.push_back({p.peer, {std::span<std::byte>(buffer)}});
    }
    return comm_.Launch(l.id, std::move(sends), std::move(recvs));
  }

  Status Execute(const CommWait& w) {
    DCP_RETURN_IF_ERROR(comm_.Wait(w.id));
    auto it = exchanges_.find(w.id);
    if (it == exchanges_.end())
      return Status::Internal(fmt::format("wait {} without launch", w.id));
    for (size_t i = 0; i < it->second.recv.size(); ++i) {
      const std::byte* from = it->second.recv[i].data();
      const PeerSlots& list = *it->second.recv_lists[i];
      for (size_t k = 0; k < list.slots.size(); ++k) {
        std::copy_n(from, list.bytes[k], Slot(list.slots[k]));
        from += list.bytes[k];
      }
    }
    exchanges_.erase(it);
    return Status::Ok();
  }

  struct Exchange {
    std::vector<std::vector<std::byte>> send, recv;
    std::vector<const PeerSlots*> recv_lists;  // point into the program
  };

  const Plan& plan_;
  const Program& program_;
  Communicator& comm_;
  BatchTensors& t_;
  float scale_ = 1;
  int64_t heads_ = 0, kv_heads_ = 0;
  std::vector<int64_t> sequence_begin_;
  WorkspacePool::Buffer workspace_;
  std::vector<std::byte*> slots_;  // into workspace_
  std::map<int32_t, Exchange> exchanges_;
  std::vector<float> row_;  // scratch of the reductions and copies
};

}  // namespace

BatchTensors BatchTensors::ZerosFor(const Plan& plan) {
  const int64_t tokens = std::accumulate(plan.seqlens.begin(), plan.seqlens.end(), int64_t{0});
  const AttentionShape& s = plan.shape;
  const auto n = [&](int64_t heads, int64_t dim) {
    return static_cast<size_t>(tokens * heads * dim);
  };
  BatchTensors t;
  t.q = t.o = t.d_o = t.dq = std::vector<float>(n(s.heads, s.head_dim), 0.f);
  t.k = t.v = t.dk = t.dv = std::vector<float>(n(s.kv_heads, s.head_dim), 0.f);
  t.lse = std::vector<float>(n(s.heads, 1), 0.f);
  return t;
}

Status ExecuteProgram(const Plan& plan, const Program& program, Communicator& comm,
                      BatchTensors& tensors, const ExecutorOptions& options,
                      ExecutionProfile* profile) {
  const auto start = std::chrono::steady_clock::now();
  ExecutionProfile local;
  ExecutionProfile& p = profile != nullptr ? *profile : local;
  p = {};
  // Fail before the run's buffers go: the communicator gives up on the exchanges still pending
  // on them (it sends and receives in place).
  DeviceRun run(plan, program, comm, tensors, options);
  Status s = run.Run(p);
  p.total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok()) comm.Fail(s);
  return s;
}

Status RunPlanInProcess(const Plan& plan, BatchTensors& tensors, const ExecutorOptions& options,
                        double comm_timeout_s,
                        std::vector<std::vector<ExecutionProfile>>* profiles) {
  const int32_t devices = plan.topology.devices();
  if (static_cast<int32_t>(plan.forward.size()) != devices ||
      static_cast<int32_t>(plan.backward.size()) != devices) {
    return Status::InvalidArgument("running in process needs a whole plan");
  }
  if (profiles != nullptr) profiles->assign(2, std::vector<ExecutionProfile>(devices));
  for (const std::vector<Program>* pass : {&plan.forward, &plan.backward}) {
    const size_t pass_index = pass == &plan.forward ? 0 : 1;
    DCP_ASSIGN_OR_RETURN(
        std::vector<std::unique_ptr<Communicator>> group,
        MakeLocalGroup(LocalGroupOptions{.size = devices, .timeout_s = comm_timeout_s}));
    std::vector<Status> status(devices);
    std::vector<std::thread> threads;
    for (int32_t d = 0; d < devices; ++d) {
      threads.emplace_back(
          [&, d] {
            ExecutionProfile* profile =
                profiles != nullptr ? &(*profiles)[pass_index][d] : nullptr;
            status[d] = ExecuteProgram(plan, (*pass)[d], *group[d], tensors, options, profile);
          });
    }
    for (std::thread& t : threads) t.join();
    // The root cause, not the failures it caused on the other ranks.
    for (const Status& s : status) {
      if (!s.ok() && s.code() != StatusCode::kCommFailure) return s;
    }
    for (const Status& s : status) {
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace dcp
