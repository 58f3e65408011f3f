# SPDX-License-Identifier: Apache-2.0
"""dcp.Batch and the length sources: construction, masks per sequence, and errors."""

import struct

import pytest

import dcp


def test_one_mask_for_every_sequence():
    batch = dcp.Batch([100, 20, 3], "causal", heads=4, kv_heads=1, head_dim=64, dtype="fp32")
    assert batch.seqlens == [100, 20, 3]
    assert len(batch) == 3 and batch.total_tokens == 123
    assert batch.masks == [dcp.MaskSpec.parse("causal")] * 3
    assert batch.shape == batch.shape
    assert (batch.shape.heads, batch.shape.kv_heads, batch.shape.head_dim) == (4, 1, 64)
    assert batch.shape.dtype == "fp32"


def test_one_mask_per_sequence_as_text_or_spec():
    window = dcp.MaskSpec.parse("sliding-window:window=8")
    batch = dcp.Batch([10, 20], ["full", window])
    assert batch.masks == [dcp.MaskSpec.parse("full"), window]
    assert dcp.Batch([10], window).masks == [window]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seqlens=[]), "sequence"),
        (dict(seqlens=[0, 5]), "0"),
        (dict(seqlens=[10, 5], masks=["causal", "full", "full"]), "3"),
        (dict(seqlens=[10], masks="documents:lengths=20"), "documents"),
        (dict(seqlens=[10], masks="nope"), "nope"),
        (dict(seqlens=[10], heads=6, kv_heads=4), "kv_heads"),
        (dict(seqlens=[10], head_dim=0), "head_dim"),
        (dict(seqlens=[10], dtype="fp16"), "fp16"),
    ],
)
def test_bad_batches_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dcp.Batch(**kwargs)


def test_a_mask_of_the_wrong_type_raises_type_error():
    with pytest.raises(TypeError):
        dcp.Batch([10], [3])


def test_synthetic_lengths_are_seeded():
    a = dcp.synthetic_lengths(50, "longalign", seed=3)
    assert a == dcp.synthetic_lengths(50, "longalign", seed=3)
    assert len(a) == 50 and min(a) >= 1
    packed = dcp.synthetic_batch_lengths(65536, "ldc", seed=1)
    assert 0 < sum(packed) <= 65536
    with pytest.raises(ValueError, match="nope"):
        dcp.synthetic_lengths(5, "nope")


def test_megatron_index_is_read(tmp_path):
    lengths = [7, 300, 12]
    path = tmp_path / "data.idx"
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(lengths), len(lengths) + 1)
    body = struct.pack(f"<{len(lengths)}i", *lengths)
    body += struct.pack(f"<{len(lengths)}q", *[0] * len(lengths))  # pointers
    body += struct.pack(f"<{len(lengths) + 1}q", *range(len(lengths) + 1))  # document indices
    path.write_bytes(header + body)
    assert dcp.read_megatron_index(str(path)) == lengths
    batch = dcp.batch_from_idx(str(path), "causal")
    assert batch.seqlens == lengths


def test_megatron_index_skips_empty_sequences(tmp_path):
    lengths = [7, 0, 12]  # Megatron-LM writes length 0 for an empty document
    path = tmp_path / "empty.idx"
    header = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, len(lengths), 0)
    body = struct.pack(f"<{len(lengths)}i", *lengths) + struct.pack(f"<{len(lengths)}q", 0, 28, 28)
    path.write_bytes(header + body)
    assert dcp.read_megatron_index(str(path)) == [7, 12]


def test_missing_or_damaged_length_files_raise_value_error(tmp_path):
    with pytest.raises(ValueError, match="missing.idx"):
        dcp.read_megatron_index(str(tmp_path / "missing.idx"))
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"MMIDIDX\x00\x00\x01")
    with pytest.raises(ValueError):
        dcp.read_megatron_index(str(bad))
    text = tmp_path / "lengths.txt"
    text.write_text("5\n# comment\n\n7\n")
    assert dcp.read_lengths_file(str(text)) == [5, 7]
