# SPDX-License-Identifier: Apache-2.0
"""examples/train_gpt.py, run as a user runs it: a tiny GPT trained on 4 gloo ranks with dcp
must match the same model run densely in one process (losses 1e-5, gradients 1e-4 relative)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"


@pytest.mark.parametrize("args", [[], ["--kernels", "torch"]], ids=["default", "torch-kernels"])
def test_train_gpt_matches_the_dense_run(args):
    run = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: dcp on 4 ranks matches the dense run" in run.stdout
    assert len([l for l in run.stdout.splitlines() if l.strip()[:1].isdigit()]) == 3
