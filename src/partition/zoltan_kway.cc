// SPDX-License-Identifier: Apache-2.0
#include "partition/zoltan_kway.h"

#ifdef DCP_WITH_ZOLTAN

#include <mpi.h>
#include <zoltan.h>

#include <algorithm>
#include <mutex>

// Exported by libtrilinos_zoltan but declared only in a header Debian does not ship: reseeds the
// generator PHG draws from (a null state means the global one).
extern "C" void Zoltan_Srand(unsigned int seed, unsigned int* state);

namespace dcp::internal {
namespace {

// The subset as Zoltan sees it: objects 0..n-1 and the nets with at least two pins in the subset.
struct ZoltanInput {
  std::vector<float> object_weight;
  std::vector<ZOLTAN_ID_TYPE> net_id;
  std::vector<int> net_begin;
  std::vector<ZOLTAN_ID_TYPE> pins;
  std::vector<float> net_weight;
};

int NumObjects(void* data, int* ierr) {
  *ierr = ZOLTAN_OK;
  return static_cast<int>(static_cast<ZoltanInput*>(data)->object_weight.size());
}

void ObjectList(void* data, int, int, ZOLTAN_ID_PTR global_ids, ZOLTAN_ID_PTR local_ids, int,
                float* weights, int* ierr) {
  const auto* in = static_cast<ZoltanInput*>(data);
  for (size_t i = 0; i < in->object_weight.size(); ++i) {
    global_ids[i] = static_cast<ZOLTAN_ID_TYPE>(i);
    local_ids[i] = static_cast<ZOLTAN_ID_TYPE>(i);
    weights[i] = in->object_weight[i];
  }
  *ierr = ZOLTAN_OK;
}

void HypergraphSize(void* data, int* num_lists, int* num_pins, int* format, int* ierr) {
  const auto* in = static_cast<ZoltanInput*>(data);
  *num_lists = static_cast<int>(in->net_id.size());
  *num_pins = static_cast<int>(in->pins.size());
  *format = ZOLTAN_COMPRESSED_EDGE;
  *ierr = ZOLTAN_OK;
}

void HypergraphPins(void* data, int, int num_lists, int num_pins, int, ZOLTAN_ID_PTR list_ids,
                    int* list_begin, ZOLTAN_ID_PTR pin_ids, int* ierr) {
  const auto* in = static_cast<ZoltanInput*>(data);
  std::copy_n(in->net_id.begin(), num_lists, list_ids);
  std::copy_n(in->net_begin.begin(), num_lists, list_begin);
  std::copy_n(in->pins.begin(), num_pins, pin_ids);
  *ierr = ZOLTAN_OK;
}

void NetWeightsSize(void* data, int* num_edges, int* ierr) {
  *num_edges = static_cast<int>(static_cast<ZoltanInput*>(data)->net_id.size());
  *ierr = ZOLTAN_OK;
}

void NetWeights(void* data, int, int, int num_edges, int, ZOLTAN_ID_PTR edge_ids, ZOLTAN_ID_PTR,
                float* weights, int* ierr) {
  const auto* in = static_cast<ZoltanInput*>(data);
  std::copy_n(in->net_id.begin(), num_edges, edge_ids);
  std::copy_n(in->net_weight.begin(), num_edges, weights);
  *ierr = ZOLTAN_OK;
}

ZoltanInput MakeInput(const Hypergraph& g, const std::vector<int32_t>& subset) {
  std::vector<int32_t> local(g.n_vertices(), -1);
  for (size_t i = 0; i < subset.size(); ++i) local[subset[i]] = static_cast<int32_t>(i);
  double compute = 0, memory = 0, max_net = 1;
  for (int32_t v : subset) {
    compute += static_cast<double>(g.compute_weight[v]);
    memory += static_cast<double>(g.memory_weight[v]);
  }
  for (int64_t w : g.net_weight) max_net = std::max(max_net, static_cast<double>(w));
  // Weights relative to the compute total; memory scaled to outweigh all compute 100 times.
  const double compute_unit = std::max(compute, 1.0) / 1e6;
  const double memory_scale = memory > 0 ? 100.0 * std::max(compute, 1.0) / memory : 0;
  ZoltanInput in;
  for (int32_t v : subset) {
    in.object_weight.push_back(
        static_cast<float>((static_cast<double>(g.compute_weight[v]) +
                            memory_scale * static_cast<double>(g.memory_weight[v])) /
                           compute_unit));
  }
  for (int32_t n = 0; n < g.n_nets(); ++n) {
    const size_t begin = in.pins.size();
    for (int32_t i = g.net_begin[n]; i < g.net_begin[n + 1]; ++i) {
      if (local[g.pins[i]] >= 0) in.pins.push_back(static_cast<ZOLTAN_ID_TYPE>(local[g.pins[i]]));
    }
    if (in.pins.size() - begin < 2) {
      in.pins.resize(begin);
      continue;
    }
    in.net_id.push_back(static_cast<ZOLTAN_ID_TYPE>(n));
    in.net_begin.push_back(static_cast<int>(begin));
    in.net_weight.push_back(
        static_cast<float>(static_cast<double>(g.net_weight[n]) / max_net * 1e4));
  }
  return in;
}

// Zoltan needs MPI; a process that has not started it runs as a singleton (no launcher needed).
Status EnsureZoltanInitialized() {
  static std::once_flag once;
  static int status = ZOLTAN_OK;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    float version = 0;
    status = Zoltan_Initialize(0, nullptr, &version);
  });
  if (status != ZOLTAN_OK) return Status::Internal("Zoltan_Initialize failed");
  return Status::Ok();
}

}  // namespace

Result<std::vector<int32_t>> ZoltanKway(const Hypergraph& g, const std::vector<int32_t>& subset,
                                        int32_t k, double /*compute_cap*/, double memory_cap,
                                        uint64_t seed) {
  std::vector<int32_t> part(g.n_vertices(), -1);
  if (k == 1 || subset.empty()) {
    for (int32_t v : subset) part[v] = 0;
    return part;
  }
  DCP_RETURN_IF_ERROR(EnsureZoltanInitialized());
  ZoltanInput in = MakeInput(g, subset);
  double memory = 0;
  for (int32_t v : subset) memory += static_cast<double>(g.memory_weight[v]);
  const double tolerance = memory > 0 ? std::max(1.0, memory_cap * k / memory) : 1.05;

  Zoltan_Srand(static_cast<unsigned int>(seed), nullptr);
  Zoltan_Struct* zz = Zoltan_Create(MPI_COMM_SELF);
  const std::pair<const char*, std::string> params[] = {
      {"DEBUG_LEVEL", "0"},
      {"LB_METHOD", "HYPERGRAPH"},
      {"HYPERGRAPH_PACKAGE", "PHG"},
      {"LB_APPROACH", "PARTITION"},
      {"PHG_CUT_OBJECTIVE", "CONNECTIVITY"},
      {"NUM_GID_ENTRIES", "1"},
      {"NUM_LID_ENTRIES", "1"},
      {"OBJ_WEIGHT_DIM", "1"},
      {"EDGE_WEIGHT_DIM", "1"},
      {"RETURN_LISTS", "PART"},
      {"CHECK_HYPERGRAPH", "0"},
      {"NUM_GLOBAL_PARTS", std::to_string(k)},
      {"IMBALANCE_TOL", fmt::format("{:.6f}", tolerance)},
  };
  for (const auto& [key, value] : params) Zoltan_Set_Param(zz, key, value.c_str());
  Zoltan_Set_Num_Obj_Fn(zz, NumObjects, &in);
  Zoltan_Set_Obj_List_Fn(zz, ObjectList, &in);
  Zoltan_Set_HG_Size_CS_Fn(zz, HypergraphSize, &in);
  Zoltan_Set_HG_CS_Fn(zz, HypergraphPins, &in);
  Zoltan_Set_HG_Size_Edge_Wts_Fn(zz, NetWeightsSize, &in);
  Zoltan_Set_HG_Edge_Wts_Fn(zz, NetWeights, &in);

  int changes = 0, gid_entries = 0, lid_entries = 0, n_import = 0, n_export = 0;
  ZOLTAN_ID_PTR import_gids = nullptr, import_lids = nullptr, export_gids = nullptr,
                export_lids = nullptr;
  int *import_procs = nullptr, *import_parts = nullptr, *export_procs = nullptr,
      *export_parts = nullptr;
  const int rc =
      Zoltan_LB_Partition(zz, &changes, &gid_entries, &lid_entries, &n_import, &import_gids,
                          &import_lids, &import_procs, &import_parts, &n_export, &export_gids,
                          &export_lids, &export_procs, &export_parts);
  Status status = Status::Ok();
  if (rc != ZOLTAN_OK) {
    status = Status::Internal(fmt::format("Zoltan_LB_Partition failed with code {}", rc));
  } else {
    for (int32_t v : subset) part[v] = 0;  // objects Zoltan does not list stay in part 0
    for (int i = 0; i < n_export; ++i) {
      const int32_t v = subset[export_gids[i]];
      if (export_parts[i] < 0 || export_parts[i] >= k) {
        status = Status::Internal(fmt::format("Zoltan returned part {}", export_parts[i]));
        break;
      }
      part[v] = export_parts[i];
    }
  }
  Zoltan_LB_Free_Part(&import_gids, &import_lids, &import_procs, &import_parts);
  Zoltan_LB_Free_Part(&export_gids, &export_lids, &export_procs, &export_parts);
  Zoltan_Destroy(&zz);
  if (!status.ok()) return status;
  return part;
}

}  // namespace dcp::internal

#else  // !DCP_WITH_ZOLTAN

namespace dcp::internal {

Result<std::vector<int32_t>> ZoltanKway(const Hypergraph&, const std::vector<int32_t>&, int32_t,
                                        double, double, uint64_t) {
  return Status::Unsupported("dcp was built without Zoltan (install libtrilinos-zoltan-dev)");
}

}  // namespace dcp::internal

#endif
