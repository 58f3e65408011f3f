# SPDX-License-Identifier: Apache-2.0
"""dcp.MaskSpec: every family through its spec text, the canonical text round trip, explicit
slices, and errors naming the offending text."""

import pickle

import pytest

import dcp

SPECS = [
    "causal",
    "full",
    "sliding-window:window=512",
    "lambda:sink=64,window=4096",
    "causal-blockwise:block=256,local=2",
    "shared-question:question=0.25,answers=3",
    "documents:lengths=100/200/50",
    "documents:count=4",
    "modality:images=10-20/40-64",
    "modality:image=16,text=32",
    '{"slices": [{"rows": [0, 100], "lo": [0, 0], "hi": [1, 1]}]}',
]


@pytest.mark.parametrize("text", SPECS)
def test_every_family_parses_and_its_text_round_trips(text):
    spec = dcp.MaskSpec.parse(text)
    again = dcp.MaskSpec.parse(str(spec))
    assert again == spec
    assert str(again) == str(spec)
    assert hash(again) == hash(spec)
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec.family in str(spec) or spec.family == "explicit"


def test_fields_of_a_parsed_spec():
    spec = dcp.MaskSpec.parse("lambda:sink=8,window=32")
    assert (spec.family, spec.sink, spec.window) == ("lambda", 8, 32)
    docs = dcp.MaskSpec.parse("documents:lengths=3/4")
    assert docs.document_lengths == [3, 4]
    images = dcp.MaskSpec.parse("modality:images=1-2/5-9")
    assert images.image_spans == [(1, 2), (5, 9)]


def test_area_matches_a_dense_count():
    length, window = 50, 7
    spec = dcp.MaskSpec.parse(f"sliding-window:window={window}")
    dense = sum(1 for i in range(length) for k in range(length) if i - window < k <= i)
    assert spec.area(length) == dense
    assert dcp.MaskSpec.parse("causal").area(length) == length * (length + 1) // 2
    assert dcp.MaskSpec.parse("full").area(length) == length * length


def test_explicit_slices_round_trip():
    slices = [(0, 10, 0, 0, 1, 1), (10, 20, 0, 0, 5, 0)]
    spec = dcp.MaskSpec.from_slices(slices)
    assert spec.family == "explicit"
    assert spec.slices == slices
    assert dcp.MaskSpec.parse(str(spec)) == spec
    assert spec.area(20) == sum(range(1, 11)) + 10 * 5


@pytest.mark.parametrize(
    "text, message",
    [
        ("window:0", "unknown mask family 'window'"),
        ("sliding-window:window=0", "window"),
        ("lambda:sink=x", "x"),
        ("causal:window=3", "window"),
        ("{not json", "JSON"),
        ('{"slices": [{"rows": [0, 4], "lo": [0, 2], "hi": [1, 1]}]}', "slope 2"),
    ],
)
def test_bad_specs_raise_value_error_naming_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        dcp.MaskSpec.parse(text)


def test_bad_explicit_slices_raise_value_error():
    with pytest.raises(ValueError, match="slope"):
        dcp.MaskSpec.from_slices([(0, 4, 0, 3, 1, 1)])
    with pytest.raises(ValueError, match="rows"):
        dcp.MaskSpec.from_slices([(5, 4, 0, 0, 1, 1)])


def test_a_spec_too_big_for_the_sequence_raises_value_error():
    with pytest.raises(ValueError, match="documents"):
        dcp.MaskSpec.parse("documents:lengths=10/20").area(5)
