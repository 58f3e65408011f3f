// SPDX-License-Identifier: Apache-2.0
// The executor: interprets one device's programs over a KernelBackend and a Communicator. It is
// the same code for every backend and communicator; it touches tensor data only through the
// backend and dispatches once per instruction, never per element.
#include "dcp/executor.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <variant>

namespace dcp {
namespace {

// The caller's tensors of one call, by the kind of piece they hold.
struct CallTensors {
  const TensorView* q = nullptr;
  const TensorView* kv = nullptr;
  const TensorView* o = nullptr;
  const TensorView* lse = nullptr;
  const TensorView* d_o = nullptr;
  const TensorView* dq = nullptr;
  const TensorView* dkv = nullptr;

  const TensorView* Of(TensorKind kind) const {
    switch (kind) {
      case TensorKind::kQ:
        return q;
      case TensorKind::kKV:
        return kv;
      case TensorKind::kO:
        return o;
      case TensorKind::kLse:
        return lse;
      case TensorKind::kDO:
        return d_o;
      case TensorKind::kDQ:
        return dq;
      case TensorKind::kDKV:
        return dkv;
      case TensorKind::kDelta:
        return nullptr;
    }
    return nullptr;
  }
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

class Executor::Impl {
 public:
  Impl(Plan part, DeviceId device, KernelBackend& kernels, Communicator& comm, float scale)
      : part_(std::move(part)), device_(device), kernels_(kernels), comm_(comm), scale_(scale) {
    const AttentionShape& s = part_.shape;
    heads_ = s.heads / part_.head_groups;
    kv_heads_ = s.kv_heads / part_.head_groups;
    runs_ = TokenMap::Of(part_).runs[static_cast<size_t>(device.value)];
    local_offset_.assign(part_.blocks.size(), -1);
    for (size_t b = 0; b < part_.blocks.size(); ++b) {
      if (part_.block_owner[b] != device_) continue;
      local_offset_[b] = local_tokens_;
      local_tokens_ += part_.blocks[b].tokens;
    }
    forward_layout_ = LayOutSlots(forward());
    backward_layout_ = LayOutSlots(backward());
    workspace_bytes_ = static_cast<size_t>(std::max(forward_layout_.bytes, backward_layout_.bytes));
  }

  Status AllocateWorkspace() {
    DCP_ASSIGN_OR_RETURN(workspace_, kernels_.Allocate(workspace_bytes_));
    return Status::Ok();
  }

  const Program& forward() const { return part_.forward[0]; }
  const Program& backward() const { return part_.backward[0]; }
  DeviceId device() const { return device_; }
  int64_t local_tokens() const { return local_tokens_; }
  const std::vector<TokenRun>& runs() const { return runs_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  const ExecutionProfile& profile() const { return profile_; }
  // Tells the other ranks this one failed, so none waits for it, and hands the workspace to the
  // communicator, which may still touch the parts of the exchanges it gave up on (a later call
  // allocates a new one).
  void Fail(const Status& reason) {
    comm_.Fail(reason);
    if (workspace_ != nullptr) {
      comm_.KeepAliveAfterFailure(std::shared_ptr<DeviceMemory>(std::move(workspace_)));
    }
  }

  Status Forward(const CallTensors& t) {
    DCP_RETURN_IF_ERROR(CheckViews(t));
    return Run(forward(), t);
  }

  Status Backward(const CallTensors& t) {
    DCP_RETURN_IF_ERROR(CheckViews(t));
    return Run(backward(), t);
  }

 private:
  // Every view the call passes (forward: q, kv, o, lse; backward also d_o, dq, dkv) against the
  // layouts of executor.h: lse fp32, the others fp32 or bf16.
  Status CheckViews(const CallTensors& t) const {
    const AttentionShape& s = part_.shape;
    const std::vector<int64_t> q_like = {local_tokens_, s.heads, s.head_dim};
    const std::vector<int64_t> kv_like = {local_tokens_, 2, s.kv_heads, s.head_dim};
    const std::vector<int64_t> lse = {local_tokens_, s.heads};
    const struct {
      const char* name;
      const TensorView* view;
      const std::vector<int64_t>& shape;
    } views[] = {{"q", t.q, q_like},     {"kv", t.kv, kv_like}, {"o", t.o, q_like},
                 {"lse", t.lse, lse},    {"d_o", t.d_o, q_like}, {"dq", t.dq, q_like},
                 {"dkv", t.dkv, kv_like}};
    for (const auto& [name, view, shape] : views) {
      if (view == nullptr) continue;  // not an argument of this pass
      const Status checked =
          view == t.lse ? CheckView(name, *view, shape, {DType::kFloat32})
                        : CheckView(name, *view, shape, {DType::kFloat32, DType::kBFloat16});
      // The context is formatted only on an error: this runs on every call.
      if (!checked.ok()) return checked.WithContext(fmt::format("device {}", device_.value));
    }
    return Status::Ok();
  }

  Status Run(const Program& program, const CallTensors& t) {
    const auto start = std::chrono::steady_clock::now();
    profile_ = {};
    if (workspace_ == nullptr) DCP_RETURN_IF_ERROR(AllocateWorkspace());
    program_ = &program;
    slots_.clear();
    const SlotLayout& layout = &program == &forward() ? forward_layout_ : backward_layout_;
    for (const int64_t offset : layout.offsets) slots_.push_back(workspace_->data() + offset);
    Status status = RunInstructions(program, t);
    profile_.total = SecondsSince(start);
    return status;
  }

  Status RunInstructions(const Program& program, const CallTensors& t) {
    auto start = std::chrono::steady_clock::now();
    for (const Binding& b : program.inputs) {
      if (Status s = kernels_.Copy(SlotView(b), PieceView(*t.Of(b.kind), b)); !s.ok()) {
        return s.WithContext(fmt::format("device {}: input", device_.value));
      }
    }
    profile_.copies += SecondsSince(start);
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const Instruction& instruction = program.instructions[i];
      start = std::chrono::steady_clock::now();
      Status s = std::visit([this](const auto& op) { return Execute(op); }, instruction);
      const double seconds = SecondsSince(start);
      if (std::holds_alternative<BlockwiseAttention>(instruction)) {
        profile_.attention += seconds;
      } else if (std::holds_alternative<BlockwiseReduction>(instruction) ||
                 std::holds_alternative<BlockwiseCopy>(instruction)) {
        profile_.reduction += seconds;
      } else {
        profile_.communication += seconds;
      }
      if (!s.ok()) {
        return s.WithContext(fmt::format("{} pass, device {}, instruction {}",
                                         ToString(program.pass), device_.value, i));
      }
    }
    start = std::chrono::steady_clock::now();
    for (const Binding& b : program.outputs) {
      if (Status s = kernels_.Copy(PieceView(*t.Of(b.kind), b), SlotView(b)); !s.ok()) {
        return s.WithContext(fmt::format("device {}: output", device_.value));
      }
    }
    profile_.copies += SecondsSince(start);
    return Status::Ok();
  }

  // The piece's part of one of the caller's tensors: its tokens, its head group's heads.
  TensorView PieceView(const TensorView& tensor, const Binding& b) const {
    const PlanBlock& block = part_.blocks[b.piece.block.value];
    const TensorView tokens =
        tensor.Slice(0, local_offset_[b.piece.block.value], block.tokens);
    if (b.kind == TensorKind::kKV || b.kind == TensorKind::kDKV) {
      return tokens.Slice(2, b.piece.head_group * kv_heads_, kv_heads_);
    }
    return tokens.Slice(1, b.piece.head_group * heads_, heads_);
  }

  // A bound slot as a dense tensor of its piece's tokens.
  TensorView SlotView(const Binding& b) const {
    const int64_t tokens = part_.blocks[b.piece.block.value].tokens;
    const int64_t dim = part_.shape.head_dim;
    std::byte* data = slots_[b.slot];
    const DType dtype = program_->slots[b.slot].dtype;
    switch (b.kind) {
      case TensorKind::kKV:
      case TensorKind::kDKV:
        return TensorView::Contiguous(data, dtype, {tokens, 2, kv_heads_, dim});
      case TensorKind::kLse:
      case TensorKind::kDelta:
        return TensorView::Contiguous(data, dtype, {tokens, heads_});
      case TensorKind::kQ:
      case TensorKind::kO:
      case TensorKind::kDO:
      case TensorKind::kDQ:
        break;
    }
    return TensorView::Contiguous(data, dtype, {tokens, heads_, dim});
  }

  SlotRef Ref(SlotId s) const {
    const SlotInfo& info = program_->slots[s];
    return SlotRef{slots_[s], info.dtype, info.bytes / BytesPerElement(info.dtype)};
  }
  float* Floats(SlotId s) const { return reinterpret_cast<float*>(slots_[s]); }

  TileShape ShapeOf(const AttentionTile& tile) const {
    const PlanComputeBlock& c = part_.compute_blocks[tile.block.value];
    return TileShape{.q_tokens = part_.blocks[c.q_block.value].tokens,
                     .kv_tokens = part_.blocks[c.kv_block.value].tokens,
                     .heads = heads_,
                     .kv_heads = kv_heads_,
                     .head_dim = part_.shape.head_dim};
  }

  Status Execute(const BlockwiseAttention& a) {
    const DType dtype = part_.shape.dtype;
    if (a.pass == Pass::kForward) {
      forward_tiles_.clear();
      for (const AttentionTile& tile : a.tiles) {
        const AttentionRow& row = a.RowOf(tile);
        forward_tiles_.push_back({.o = Floats(row.out),
                                  .lse = Floats(row.lse),
                                  .q = slots_[row.q],
                                  .kv = slots_[a.ColumnOf(tile).kv],
                                  .shape = ShapeOf(tile),
                                  .slices = a.SlicesOf(tile)});
      }
      return kernels_.AttendForward(forward_tiles_, dtype, scale_);
    }
    backward_tiles_.clear();
    for (const AttentionTile& tile : a.tiles) {
      const AttentionRow& row = a.RowOf(tile);
      const AttentionColumn& column = a.ColumnOf(tile);
      backward_tiles_.push_back({.dq = Floats(row.dq),
                                 .dkv = Floats(column.dkv),
                                 .q = slots_[row.q],
                                 .kv = slots_[column.kv],
                                 .d_o = slots_[row.d_o],
                                 .lse = Floats(row.lse),
                                 .delta = Floats(row.delta),
                                 .shape = ShapeOf(tile),
                                 .slices = a.SlicesOf(tile)});
    }
    return kernels_.AttendBackward(backward_tiles_, dtype, scale_);
  }

  Status Execute(const BlockwiseReduction& r) {
    const int64_t dim = part_.shape.head_dim;
    for (const ReductionOp& op : r.ops) {
      sources_.clear();
      for (SlotId s : op.sources) sources_.push_back(Ref(s));
      switch (r.kind) {
        case ReductionKind::kLseMerge: {
          lse_sources_.clear();
          for (SlotId s : op.lse_sources) lse_sources_.push_back(Floats(s));
          DCP_RETURN_IF_ERROR(kernels_.MergeLse(Ref(op.destination), Floats(op.lse_destination),
                                                sources_, lse_sources_,
                                                Ref(op.lse_destination).elements, dim));
          break;
        }
        case ReductionKind::kSum:
          DCP_RETURN_IF_ERROR(kernels_.Sum(Ref(op.destination), sources_));
          break;
        case ReductionKind::kDelta:
          DCP_RETURN_IF_ERROR(kernels_.Delta(Floats(op.destination), sources_[0], sources_[1],
                                             Ref(op.destination).elements, dim));
          break;
      }
    }
    return Status::Ok();
  }

  Status Execute(const BlockwiseCopy& c) {
    for (const auto& [from, to] : c.ops) {
      const SlotRef src = Ref(from), dst = Ref(to);
      const int64_t n = std::min(src.elements, dst.elements);
      DCP_RETURN_IF_ERROR(kernels_.Copy(TensorView::Contiguous(dst.data, dst.dtype, {n}),
                                        TensorView::Contiguous(src.data, src.dtype, {n})));
    }
    return Status::Ok();
  }

  // Every slot travels where it lies: one part per slot, no packing.
  Status Execute(const CommLaunch& l) {
    std::vector<SendBuffer> sends;
    std::vector<RecvBuffer> recvs;
    for (const PeerSlots& p : l.sends) {
      SendBuffer& send = sends.emplace_back(SendBuffer{.peer = p.peer});
      for (size_t k = 0; k < p.slots.size(); ++k) {
        send.parts.emplace_back(slots_[p.slots[k]], static_cast<size_t>(p.bytes[k]));
      }
    }
    for (const PeerSlots& p : l.recvs) {
      RecvBuffer& recv = recvs.emplace_back(RecvBuffer{.peer = p.peer});
      for (size_t k = 0; k < p.slots.size(); ++k) {
        recv.parts.emplace_back(slots_[p.slots[k]], static_cast<size_t>(p.bytes[k]));
      }
    }
    return comm_.Launch(l.id, std::move(sends), std::move(recvs));
  }

  Status Execute(const CommWait& w) { return comm_.Wait(w.id); }

  const Plan part_;  // the device's part: tables and its two programs
  const DeviceId device_;
  KernelBackend& kernels_;
  Communicator& comm_;
  const float scale_;
  int64_t heads_ = 0, kv_heads_ = 0;  // per head group
  std::vector<TokenRun> runs_;
  std::vector<int64_t> local_offset_;  // per data block: first local token, -1 when not owned
  int64_t local_tokens_ = 0;
  size_t workspace_bytes_ = 0;
  SlotLayout forward_layout_, backward_layout_;  // where each program's slots lie in workspace_
  std::unique_ptr<DeviceMemory> workspace_;
  ExecutionProfile profile_;
  // State of the running pass.
  const Program* program_ = nullptr;
  std::vector<std::byte*> slots_;  // into workspace_
  // Kernel arguments, kept to reuse their memory.
  std::vector<ForwardTile> forward_tiles_;
  std::vector<BackwardTile> backward_tiles_;
  std::vector<SlotRef> sources_;
  std::vector<const float*> lse_sources_;
};

Result<std::unique_ptr<Executor>> Executor::Create(const Plan& plan, DeviceId device,
                                                   KernelBackend& kernels, Communicator& comm,
                                                   const ExecutorOptions& options) {
  const int32_t devices = plan.topology.devices();
  if (device.value < 0 || device.value >= devices) {
    return Status::InvalidArgument(fmt::format("executor: device {} is not in the plan's {} devices",
                                               device.value, devices));
  }
  if (plan.part_device != -1 && plan.part_device != device.value) {
    return Status::InvalidArgument(fmt::format(
        "executor: the plan is the part of device {}, not of device {}", plan.part_device,
        device.value));
  }
  const size_t programs = plan.part_device == -1 ? static_cast<size_t>(devices) : 1;
  if (plan.forward.size() != programs || plan.backward.size() != programs) {
    return Status::InvalidArgument(fmt::format(
        "executor: the plan has {} forward and {} backward programs, not {} of each",
        plan.forward.size(), plan.backward.size(), programs));
  }
  if (comm.size() != devices || comm.rank() != device.value) {
    return Status::InvalidArgument(fmt::format(
        "executor: the plan has {} devices and this is device {}, but the communicator is rank "
        "{} of {}",
        devices, device.value, comm.rank(), comm.size()));
  }
  if (!(options.softmax_scale >= 0) || !std::isfinite(options.softmax_scale)) {
    return Status::InvalidArgument(fmt::format(
        "executor: softmax_scale {} must be finite and >= 0 (0: 1/sqrt(head_dim))",
        options.softmax_scale));
  }
  const float scale = static_cast<float>(
      options.softmax_scale > 0 ? options.softmax_scale
                                : 1.0 / std::sqrt(static_cast<double>(plan.shape.head_dim)));
  auto impl = std::make_unique<Impl>(PlanPartForDevice(plan, device), device, kernels, comm, scale);
  DCP_RETURN_IF_ERROR(impl->AllocateWorkspace());
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

DeviceId Executor::device() const { return impl_->device(); }
int64_t Executor::local_tokens() const { return impl_->local_tokens(); }
const std::vector<TokenRun>& Executor::token_runs() const { return impl_->runs(); }
size_t Executor::workspace_bytes() const { return impl_->workspace_bytes(); }
const ExecutionProfile& Executor::last_profile() const { return impl_->profile(); }

Status Executor::Forward(const TensorView& q, const TensorView& kv, const TensorView& o,
                         const TensorView& lse) {
  Status s = impl_->Forward({.q = &q, .kv = &kv, .o = &o, .lse = &lse});
  if (!s.ok()) impl_->Fail(s);
  return s;
}

Status Executor::Backward(const TensorView& q, const TensorView& kv, const TensorView& o,
                          const TensorView& lse, const TensorView& d_o, const TensorView& dq,
                          const TensorView& dkv) {
  Status s = impl_->Backward(
      {.q = &q, .kv = &kv, .o = &o, .lse = &lse, .d_o = &d_o, .dq = &dq, .dkv = &dkv});
  if (!s.ok()) impl_->Fail(s);
  return s;
}

}  // namespace dcp
