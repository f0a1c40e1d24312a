"""Issue 50, item 1: the Python API gets the command's OpenMP setting (threads that sleep, not spin, while they
wait), without overriding what the user set, and says so once when torch was imported too early for it.
benchmarks/api_threads.py measures what it is for (the same training from Python and from the command, on a busy
machine)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # Python processes of their own, each importing torch

PROBE = """
import os, sys
{first}
import corpusforge
import torch
torch.set_num_threads(2)
from corpusforge.models.training import spin_warning
said = spin_warning()
print(os.environ.get("OMP_WAIT_POLICY"), "|", said is not None, "|", spin_warning() is None)
"""


def probe(first: str = "", **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], capture_output=True, text=True,
                          env=environ, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return [part.strip() for part in done.stdout.strip().splitlines()[-1].split("|")] + [done.stderr]


def test_import_corpusforge_sets_passive_waiting_unless_the_user_chose():
    policy, warned, once, stderr = probe()
    assert policy == "PASSIVE" and warned == "False" and "spin" not in stderr
    policy, warned, _, stderr = probe(OMP_WAIT_POLICY="ACTIVE")  # the user's choice stands
    assert policy == "ACTIVE" and warned == "False"


def test_torch_imported_first_is_said_once_on_stderr():
    policy, warned, once, stderr = probe(first="import torch")
    assert policy == "PASSIVE"  # set for the processes this one starts; too late for this one's OpenMP
    assert warned == "True" and once == "True"
    (line,) = [line for line in stderr.splitlines() if "spin" in line]
    assert "OMP_WAIT_POLICY=PASSIVE" in line and "import corpusforge first" in line.lower()
    # the user set it before Python started: nothing to say
    _, warned, _, _ = probe(first="import torch", OMP_WAIT_POLICY="PASSIVE")
    assert warned == "False"
