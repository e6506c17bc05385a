"""A multi-process cell and its launcher (``mrbench run --processes-per-cell 2``, a sweep's worker):
the launcher killed with SIGKILL leaves no rank training as an orphan (each stops as on Ctrl-C, its
run would end KILLED, within seconds), and a rank that finds no room on the disk is the launcher's
:class:`~mrbench.store.faults.OutOfRoom`, as in a one-process cell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


@dataclass
class SleepySpec:
    """What the launcher reads of a spec."""

    name: str
    train: Any = field(init=False)

    def __post_init__(self) -> None:
        self.train = type("Train", (), {"prompts_per_step": 2})()

    def run_key(self) -> str:
        return f"sleepy-{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SleepySpec:
        return cls(**data)


def sleepy_cell(spec: SleepySpec, *, record: str) -> None:
    """Every rank: write its pid, then "train" for two minutes; say so if it is stopped."""
    rank = os.environ.get("RANK", "0")
    (Path(record) / f"{rank}.pid").write_text(str(os.getpid()))
    try:
        time.sleep(120)
    except KeyboardInterrupt:
        (Path(record) / f"{rank}.end").write_text("interrupted")
        raise


LAUNCHER = """
import sys
from mrbench.engine.processes.distributed import launch_cell
from test_launcher_death import SleepySpec
launch_cell(
    SleepySpec("x"), processes=2, cell_fn="test_launcher_death:sleepy_cell", record=sys.argv[1],
    fork=sys.argv[2] == "fork",
)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


FORK = pytest.mark.parametrize("fork", [False, True], ids=["accelerate-launch", "forked"])
"""The ranks started by ``accelerate launch`` or forked by a sweep's worker (engine/rank_fork.py)."""


@pytest.mark.slow  # accelerate launch and two ranks: ~15 s on a loaded 2-core machine
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc (Linux)")
@FORK
def test_ranks_stop_when_their_launcher_is_killed(fork: bool, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    env = {**os.environ, "MRBENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    how = "fork" if fork else "accelerate"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(record), how], env=env)
    try:
        deadline = time.monotonic() + 180
        while len(list(record.glob("*.pid"))) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.1)
        ranks = [int(p.read_text()) for p in record.glob("*.pid")]
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in ranks if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, "ranks still train after their launcher died"
        assert sorted(p.read_text() for p in record.glob("*.end")) == ["interrupted", "interrupted"]
    finally:
        launcher.kill()


def full_disk_cell(spec: SleepySpec, *, record: str) -> None:
    """Rank 0 finds no room for its checkpoint (its run would end KILLED); rank 1 waits."""
    from mrbench.store.faults import OutOfRoom

    if os.environ.get("RANK", "0") == "0":
        raise OutOfRoom(28, "a training checkpoint needs about 2.0 MB and the disk has 0.3 MB free", record)
    time.sleep(60)


@pytest.mark.slow  # accelerate launch and two ranks
@FORK
def test_a_rank_out_of_room_is_the_launchers_out_of_room(fork: bool, tmp_path: Path, monkeypatch) -> None:
    """`mrbench run --processes-per-cell 2` on a full disk says what one process does: the folder, the
    disk, and that the run resumes (not an unexpected RuntimeError)."""
    from mrbench.engine.processes.distributed import launch_cell
    from mrbench.store.faults import OutOfRoom

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(HERE))  # a forked rank imports the cell function here
    with pytest.raises(OutOfRoom) as err:
        launch_cell(
            SleepySpec("y"),
            processes=2,
            cell_fn="test_launcher_death:full_disk_cell",
            record=str(tmp_path),
            fork=fork,
        )
    assert err.value.errno == 28 and err.value.filename == str(tmp_path)
    assert "the disk has 0.3 MB free" in err.value.strerror
