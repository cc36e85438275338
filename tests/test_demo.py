"""./scripts/demo is the README's first command: it must tell its whole story."""
import os
import re
import subprocess
import sys

import pytest

from shm.names import PREFIX, SHM_DIR

pytestmark = pytest.mark.process


@pytest.mark.slow
def test_demo_tells_the_replication_story_and_loses_nothing(tmp_path):
    before = {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX + "demo")}
    proc = subprocess.run([sys.executable, "-m", "node.demo", "--run-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    killed = re.search(r"step 2: SIGKILL broker (\d), the leader", out)
    elected = re.search(r"the controller elected broker (\d), the first live replica in the "
                        r"ISR, and removed broker (\d) from the ISR", out)
    assert killed and elected, out
    assert elected.group(1) != killed.group(1) and elected.group(2) == killed.group(1)
    assert re.search(rf"broker {killed.group(1)} is back in the ISR", out), out
    assert re.search(r"(leads again|already leads)", out), out
    counted = re.search(r"(\d+) were acknowledged, (\d+) of them found at their offsets, "
                        r"0 lost", out)
    assert counted and counted.group(1) == counted.group(2) and int(counted.group(1)) > 1000, out
    assert out.rstrip().endswith("done: every process stopped, shared memory removed"), out
    tables = _tables(out)
    assert len(tables) >= 4, out
    for rows in tables:  # one consistent cut: nobody ahead of the leader
        leader = [r for r in rows if r[2] == "leader"]
        if leader:
            (_, _, _, leo, hw), = leader
            for r in rows:
                if "-" not in (r[3], r[4], leo, hw):
                    assert int(r[3]) <= int(leo) and int(r[4]) <= int(hw), (rows, out)
    after = {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX + "demo")}
    assert after <= before, f"the demo left shared memory behind: {sorted(after - before)}"


def _tables(out: str) -> list[list[tuple]]:
    """The demo's state tables: per table, (broker, process, role, LEO, HW) rows."""
    tables, current = [], None
    for line in out.splitlines():
        words = line.split()
        if words[:5] == ["broker", "process", "role", "LEO", "HW"]:
            current = []
            tables.append(current)
        elif current is not None and len(words) == 5 and words[0].isdigit():
            current.append(tuple(words))
        else:
            current = None
    return tables
