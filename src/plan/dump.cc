// SPDX-License-Identifier: Apache-2.0
// Readable listings of programs and plans.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dcp/plan.h"

namespace dcp {
namespace {



struct Printer {
  std::string& out;

  void operator()(const BlockwiseAttention& a) {
    fmt::format_to(std::back_inserter(out), "BlockwiseAttention {} division {}: {} tiles\n",
                   ToString(a.pass), a.division, a.tiles.size());
    for (const AttentionTile& t : a.tiles) {
      fmt::format_to(std::back_inserter(out), "      compute block {}: ", t.block.value);
      if (!a.Holds(t)) {
        fmt::format_to(std::back_inserter(out), "row {} column {} (not in the call)\n", t.row,
                       t.column);
        continue;
      }
      const AttentionRow& r = a.RowOf(t);
      const AttentionColumn& c = a.ColumnOf(t);
      fmt::format_to(std::back_inserter(out), "q {} kv {}", r.q, c.kv);
      if (a.pass == Pass::kForward) {
        fmt::format_to(std::back_inserter(out), " -> out {} lse {}", r.out, r.lse);
      } else {
        fmt::format_to(std::back_inserter(out), " dO {} lse {} delta {} -> dq {} dkv {}", r.d_o,
                       r.lse, r.delta, r.dq, c.dkv);
      }
      fmt::format_to(std::back_inserter(out), ", {} slices\n", t.n_slices);
    }
  }
  void operator()(const BlockwiseReduction& r) {
    fmt::format_to(std::back_inserter(out), "BlockwiseReduction {}: {} ops\n",
                   ToString(r.kind), r.ops.size());
    for (const ReductionOp& op : r.ops) {
      fmt::format_to(std::back_inserter(out), "      {} <- [{}]", op.destination,
                     fmt::join(op.sources, " "));
      if (op.lse_destination >= 0) {
        fmt::format_to(std::back_inserter(out), ", lse {} <- [{}]", op.lse_destination,
                       fmt::join(op.lse_sources, " "));
      }
      out += '\n';
    }
  }
  void operator()(const BlockwiseCopy& c) {
    fmt::format_to(std::back_inserter(out), "BlockwiseCopy: {} ops:", c.ops.size());
    for (const auto& [from, to] : c.ops)
      fmt::format_to(std::back_inserter(out), " {}->{}", from, to);
    out += '\n';
  }
  void operator()(const CommLaunch& l) {
    fmt::format_to(std::back_inserter(out), "CommLaunch {}:", l.id);
    const auto list = [&](std::string_view verb, const PeerSlots& p) {
      int64_t bytes = 0;
      for (int64_t b : p.bytes) bytes += b;
      fmt::format_to(std::back_inserter(out), " {} {} [{}] {} B", verb, p.peer.value,
                     fmt::join(p.slots, " "), bytes);
    };
    for (const PeerSlots& p : l.sends) list("send to", p);
    for (const PeerSlots& p : l.recvs) list("recv from", p);
    out += '\n';
  }
  void operator()(const CommWait& w) {
    fmt::format_to(std::back_inserter(out), "CommWait {}\n", w.id);
  }
};

}  // namespace

std::string DumpProgram(const Program& program) {
  std::string out = fmt::format("{} program, device {}: {} slots ({} bytes), {} instructions\n",
                                ToString(program.pass), program.device.value, program.slots.size(),
                                program.PeakBufferBytes(), program.instructions.size());
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const SlotInfo& info = program.slots[s];
    fmt::format_to(std::back_inserter(out), "  slot {}: {} {} {} bytes\n", s, ToString(info.kind),
                   ToString(info.dtype), info.bytes);
  }
  for (const auto& [name, bindings] :
       {std::pair{"input", &program.inputs}, std::pair{"output", &program.outputs}}) {
    for (const Binding& b : *bindings) {
      fmt::format_to(std::back_inserter(out), "  {} {} of block {} group {}: slot {}\n", name,
                     ToString(b.kind), b.piece.block.value, b.piece.head_group, b.slot);
    }
  }
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "  [{}] ", i);
    std::visit(Printer{out}, program.instructions[i]);
  }
  return out;
}

std::string DumpPlan(const Plan& plan) {
  std::string out = fmt::format(
      "plan: topology {}, {} sequences, {} data blocks of {} tokens, {} compute blocks, {} "
      "divisions\n",
      plan.topology.ToString(), plan.seqlens.size(), plan.blocks.size(), plan.block_size,
      plan.compute_blocks.size(), plan.n_divisions);
  for (const auto* programs : {&plan.forward, &plan.backward}) {
    for (const Program& p : *programs) out += DumpProgram(p);
  }
  return out;
}

}  // namespace dcp
