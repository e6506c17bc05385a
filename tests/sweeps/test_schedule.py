"""The order free workers take cells in (mrbench/sweeps/schedule.py): seed by seed, unseen kinds
in grid order, then the kind of cell that took longest."""

from __future__ import annotations

from dataclasses import dataclass

from mrbench.sweeps.cell import Cell
from mrbench.sweeps.schedule import LongestFirst


@dataclass(frozen=True)
class Spec:
    method: str
    task: str
    model: str
    seed: int

    def label(self) -> str:
        return f"{self.method}|{self.task}|{self.model}|s{self.seed}"


def grid(seeds=(0, 1), methods=("grpo", "gdpo"), tasks=("code", "tools", "security")) -> list[Cell]:
    """Seed → method → task, as the sweep's grid."""
    return [Cell(Spec(m, t, "tiny", s), f"{m}-{t}-{s}") for s in seeds for m in methods for t in tasks]


def drain(order: LongestFirst, queue: list[Cell], seconds: dict[str, float]) -> list[str]:
    """Take every cell in turn, as one worker would, each finishing after its task's seconds."""
    taken = []
    while queue:
        cell = queue.pop(order.pick(queue))
        taken.append(cell.key)
        order.finished(cell, seconds[cell.spec.task])
    return taken


def test_unseen_kinds_keep_the_grid_order_and_known_ones_go_longest_first() -> None:
    order = LongestFirst()
    taken = drain(order, grid(), {"code": 15.0, "tools": 22.0, "security": 38.0})
    # Seed 0: nothing known, so the grid's order until every kind has run once; then the longest.
    assert taken[:3] == ["grpo-code-0", "grpo-tools-0", "grpo-security-0"]
    assert taken[3:6] == ["gdpo-security-0", "gdpo-tools-0", "gdpo-code-0"]
    # Seed 1: every kind known, longest first; no cell of seed 1 before seed 0 is done.
    assert taken[6:] == [
        "grpo-security-1", "gdpo-security-1", "grpo-tools-1", "gdpo-tools-1", "grpo-code-1", "gdpo-code-1"
    ]  # fmt: skip


def test_a_kind_counts_its_shortest_time_since_the_first_cells_also_wait_for_the_build() -> None:
    order = LongestFirst()
    queue = grid(seeds=(0,), methods=("grpo", "gdpo", "corrgrpo"))
    order.finished(queue[0], 124.0)  # grpo|code waited for the model's build
    order.finished(queue[3], 14.0)  # gdpo|code did not
    order.finished(queue[1], 22.0)
    order.finished(queue[2], 38.0)
    rest = queue[6:]  # corrgrpo's three cells
    assert rest[order.pick(rest)].spec.task == "security"
    assert order.seconds[("code", "tiny")] == 14.0


def test_cells_without_task_model_or_seed_run_in_grid_order() -> None:
    @dataclass(frozen=True)
    class Bare:
        n: int

        def label(self) -> str:
            return str(self.n)

    order = LongestFirst()
    queue = [Cell(Bare(i), str(i)) for i in range(4)]
    for i, cell in enumerate(queue):
        order.finished(cell, float(10 - i))
    assert [queue.pop(order.pick(queue)).key for _ in range(4)] == ["0", "1", "2", "3"]
