"""./scripts/demo is the README's first command: it must tell its whole story."""
import os
import re
import subprocess
import sys

import pytest

from shm.names import PREFIX, SHM_DIR


@pytest.mark.slow
def test_demo_moves_the_controller_and_recovers_the_log(tmp_path):
    before = {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX + "demo")}
    proc = subprocess.run([sys.executable, "-m", "node.demo", "--run-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    killed = re.search(r"SIGKILL broker (\d)", out)
    moved = re.search(r"after ([\d.]+) s: /controller = broker (\d), /controller_epoch = 2", out)
    assert killed and moved, out
    assert moved.group(2) != killed.group(1)
    assert float(moved.group(1)) >= 1.0  # the dead broker's session had to time out first
    assert re.search(r"read [1-9]\d* records below HW", out), out
    assert ("recovery cut" in out) or ("below the recovery point" in out) or (
        "active segment is empty" in out), out
    assert out.rstrip().endswith("done: every process stopped, shared memory removed"), out
    after = {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX + "demo")}
    assert after <= before, f"the demo left shared memory behind: {sorted(after - before)}"
