// SPDX-License-Identifier: Apache-2.0
// dcp.MaskSpec: a mask specification (docs/mask_spec.md), parsed from its text or JSON form or
// built from explicit slices; immutable from Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "dcp/mask.h"

namespace py = pybind11;

namespace dcp::python {
namespace {

// (row_begin, row_end, lo_base, lo_slope, hi_base, hi_slope)
using SliceTuple = std::array<int64_t, 6>;

MaskSpec FromSlices(const std::vector<SliceTuple>& slices) {
  MaskSpec spec;
  spec.family = MaskFamily::kExplicit;
  for (const SliceTuple& s : slices) {
    spec.slices.push_back(Slice{.row_begin = s[0],
                                .row_end = s[1],
                                .lo = {.base = s[2], .slope = s[3]},
                                .hi = {.base = s[4], .slope = s[5]}});
  }
  // The JSON form's parser checks slopes and row ranges; ToString() is that form.
  return ValueOrThrow(MaskSpec::Parse(spec.ToString()));
}

std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>> SliceTuples(
    const MaskSpec& spec) {
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>> out;
  for (const Slice& s : spec.slices) {
    out.emplace_back(s.row_begin, s.row_end, s.lo.base, s.lo.slope, s.hi.base, s.hi.slope);
  }
  return out;
}

}  // namespace

void BindMask(py::module_& m) {
  py::class_<MaskSpec>(m, "MaskSpec", R"(An attention mask specification (docs/mask_spec.md).

It does not know the sequence length: the same spec builds the mask of every sequence of a
batch. Build one with MaskSpec.parse("causal"), MaskSpec.parse("lambda:sink=64,window=4096"),
MaskSpec.parse('{"slices": [...]}') or MaskSpec.from_slices([...]); str() gives the canonical
text, which parse() reads back into an equal spec.)")
      .def_static(
          "parse", [](const std::string& spec) { return ValueOrThrow(MaskSpec::Parse(spec)); },
          py::arg("spec"),
          "Parses a text spec ('causal', 'sliding-window:window=512', ...) or, when it starts\n"
          "with '{', the JSON form. ValueError names the offending text.")
      .def_static("from_slices", &FromSlices, py::arg("slices"),
                  "An explicit mask from slices (row_begin, row_end, lo_base, lo_slope, hi_base,\n"
                  "hi_slope): row i of [row_begin, row_end) attends to columns\n"
                  "[lo_base + lo_slope * i, hi_base + hi_slope * i), slopes 0 or 1.")
      .def_property_readonly(
          "family", [](const MaskSpec& s) { return std::string(ToString(s.family)); },
          "'causal', 'full', 'sliding-window', 'lambda', 'causal-blockwise', "
          "'shared-question', 'documents', 'modality' or 'explicit'.")
      .def_readonly("window", &MaskSpec::window)
      .def_readonly("sink", &MaskSpec::sink)
      .def_readonly("block", &MaskSpec::block)
      .def_readonly("local", &MaskSpec::local)
      .def_readonly("question", &MaskSpec::question)
      .def_readonly("answers", &MaskSpec::answers)
      .def_readonly("document_lengths", &MaskSpec::document_lengths)
      .def_readonly("document_count", &MaskSpec::document_count)
      .def_readonly("image_spans", &MaskSpec::image_spans)
      .def_readonly("text_tokens", &MaskSpec::text_tokens)
      .def_readonly("image_tokens", &MaskSpec::image_tokens)
      .def_property_readonly("slices", &SliceTuples,
                             "Explicit slices as (row_begin, row_end, lo_base, lo_slope, hi_base, "
                             "hi_slope); empty for the other families.")
      .def(
          "area",
          [](const MaskSpec& s, int64_t length) {
            return ValueOrThrow(s.Build(length)).TotalArea();
          },
          py::arg("length"),
          "Allowed (query, key) pairs of the mask of one sequence of `length` tokens.")
      .def("__str__", &MaskSpec::ToString)
      .def("__repr__",
           [](const MaskSpec& s) {
             return "MaskSpec.parse(" + py::repr(py::str(s.ToString())).cast<std::string>() + ")";
           })
      .def(
          "__eq__", [](const MaskSpec& a, const MaskSpec& b) { return a == b; }, py::is_operator())
      .def("__hash__", [](const MaskSpec& s) { return std::hash<std::string>()(s.ToString()); })
      .def(py::pickle([](const MaskSpec& s) { return s.ToString(); },
                      [](const std::string& text) { return ValueOrThrow(MaskSpec::Parse(text)); }));
}

}  // namespace dcp::python
