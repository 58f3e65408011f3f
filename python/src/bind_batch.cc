// SPDX-License-Identifier: Apache-2.0
// dcp.AttentionShape, dcp.Batch (the input of planning) and the length sources of batch.h: a
// Megatron-LM index file and the seeded synthetic distributions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "dcp/batch.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

// One spec (a str or a MaskSpec) for every sequence, or a sequence of them, one per sequence.
std::vector<MaskSpec> MaskSpecsFrom(const py::handle& masks) {
  auto one = [](const py::handle& h) -> MaskSpec {
    if (py::isinstance<py::str>(h)) return ValueOrThrow(MaskSpec::Parse(h.cast<std::string>()));
    if (py::isinstance<MaskSpec>(h)) return h.cast<MaskSpec>();
    throw py::type_error("a mask is a spec string or a dcp.MaskSpec, not " +
                         py::repr(py::type::of(h)).cast<std::string>());
  };
  if (py::isinstance<py::str>(masks) || py::isinstance<MaskSpec>(masks)) return {one(masks)};
  std::vector<MaskSpec> specs;
  for (const py::handle& h : py::iter(masks)) specs.push_back(one(h));
  return specs;
}

AttentionShape ShapeFrom(int64_t heads, int64_t kv_heads, int64_t head_dim,
                         const std::string& dtype) {
  AttentionShape shape{.heads = heads, .kv_heads = kv_heads, .head_dim = head_dim};
  shape.dtype = ValueOrThrow(ParseDType(dtype));
  ThrowIfError(shape.Validate());
  return shape;
}

LengthDistribution DistributionFrom(const std::string& name) {
  return ValueOrThrow(ParseLengthDistribution(name));
}

}  // namespace

void BindBatch(py::module_& m) {
  py::class_<AttentionShape>(m, "AttentionShape",
                             "The attention layer's shape: query heads, KV heads (GQA), elements\n"
                             "per head and the storage dtype ('bf16' or 'fp32').")
      .def_readonly("heads", &AttentionShape::heads)
      .def_readonly("kv_heads", &AttentionShape::kv_heads)
      .def_readonly("head_dim", &AttentionShape::head_dim)
      .def_property_readonly("dtype",
                             [](const AttentionShape& s) { return std::string(ToString(s.dtype)); })
      .def(
          "__eq__", [](const AttentionShape& a, const AttentionShape& b) { return a == b; },
          py::is_operator())
      .def("__repr__", [](const AttentionShape& s) {
        return "AttentionShape(heads=" + std::to_string(s.heads) +
               ", kv_heads=" + std::to_string(s.kv_heads) +
               ", head_dim=" + std::to_string(s.head_dim) + ", dtype='" +
               std::string(ToString(s.dtype)) + "')";
      });

  py::class_<Batch>(m, "Batch",
                    R"(A batch of packed variable-length sequences: the input of planning.

Batch(seqlens, masks="causal", heads=8, kv_heads=2, head_dim=128, dtype="bf16"): `masks` is one
spec (a str or a MaskSpec) for every sequence or one per sequence. ValueError names a bad length,
mask or shape. Immutable.)")
      .def(py::init([](std::vector<int64_t> seqlens, const py::object& masks, int64_t heads,
                       int64_t kv_heads, int64_t head_dim, const std::string& dtype) {
             return ValueOrThrow(Batch::Create(std::move(seqlens), MaskSpecsFrom(masks),
                                               ShapeFrom(heads, kv_heads, head_dim, dtype)));
           }),
           py::arg("seqlens"), py::arg("masks") = "causal", py::arg("heads") = 8,
           py::arg("kv_heads") = 2, py::arg("head_dim") = 128, py::arg("dtype") = "bf16")
      .def_property_readonly("seqlens", &Batch::seqlens)
      .def_property_readonly("masks", &Batch::mask_specs, "One MaskSpec per sequence.")
      .def_property_readonly("shape", &Batch::shape)
      .def_property_readonly("total_tokens", &Batch::total_tokens)
      .def("__len__", [](const Batch& b) { return b.seqlens().size(); })
      .def("__repr__", [](const Batch& b) {
        return "Batch(" + std::to_string(b.seqlens().size()) + " sequences, " +
               std::to_string(b.total_tokens()) + " tokens)";
      });

  m.def(
      "read_megatron_index",
      [](const std::string& path) { return ValueOrThrow(ReadMegatronIndex(path)).lengths; },
      py::arg("path"),
      "The sequence lengths of a Megatron-LM indexed dataset, from its .idx file; sequences of "
      "length 0 (empty documents) are left out.");
  m.def(
      "read_lengths_file",
      [](const std::string& path) { return ValueOrThrow(ReadLengthsFile(path)); }, py::arg("path"),
      "Lengths from a text file, one per line ('#' starts a comment).");
  m.def(
      "synthetic_lengths",
      [](int64_t count, const std::string& distribution, double scale, uint64_t seed) {
        const SyntheticOptions options{
            .distribution = DistributionFrom(distribution), .scale = scale, .seed = seed};
        return ValueOrThrow(SampleLengths(options, count));
      },
      py::arg("count"), py::arg("distribution") = "ldc", py::arg("scale") = 1.0,
      py::arg("seed") = 0,
      "`count` lengths drawn from a seeded distribution of the DCP paper ('ldc', 'longalign').");
  m.def(
      "synthetic_batch_lengths",
      [](int64_t tokens, const std::string& distribution, double scale, uint64_t seed) {
        const SyntheticOptions options{
            .distribution = DistributionFrom(distribution), .scale = scale, .seed = seed};
        return ValueOrThrow(SyntheticBatch(options, tokens));
      },
      py::arg("tokens"), py::arg("distribution") = "ldc", py::arg("scale") = 1.0,
      py::arg("seed") = 0,
      "The lengths of one packed batch of about `tokens` tokens drawn from the distribution.");
}

}  // namespace dcp::python
