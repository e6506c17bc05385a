"""Which runs a report uses, and what their tags say about methods and tasks.

A sweep's experiment holds every attempt of every cell: re-runs after a failure, runs with
changed settings, sweep invocations (parent runs), and — when two sweeps raced on one store —
several FINISHED runs of one run key. :func:`select_runs` keeps the latest FINISHED run per run
key (:func:`latest`: the latest end time, then start time, then run id), then the latest per
method label × task × model × seed, and records what the report must warn about (including
those duplicates). Method labels tell apart one method run with several hyper-parameter settings;
:func:`task_info` reads a task's reward components and metrics from its runs' tags.
All names are read through :mod:`mrbench.core.layout`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from mrbench.core import layout
from mrbench.store.reader import RunRecord

BASELINE = "grpo"
"""The method every other is compared with (probability of improvement); listed first."""


@dataclass(frozen=True)
class Duplicate:
    """A run key with more than one FINISHED run (e.g. two sweeps raced on it)."""

    label: str  # the cell, ``method|task|model|sSEED``
    finished: int  # how many FINISHED runs it has
    used: str  # the run id the report uses: the :func:`latest` of them


@dataclass
class Selection:
    """The runs a report uses and what it must warn about."""

    cells: dict[tuple[str, str], dict[str, list[RunRecord]]]  # (task, model) → method label → runs by seed
    failed: list[RunRecord] = field(default_factory=list)  # latest attempt of keys that never finished
    recovered: int = 0  # failed/killed attempts whose key later FINISHED
    superseded: list[str] = field(default_factory=list)  # cells with several configs; latest kept
    parents: list[RunRecord] = field(default_factory=list)  # sweep invocations, oldest first
    duplicates: list[Duplicate] = field(default_factory=list)  # run keys with several FINISHED runs

    def runs(self) -> list[RunRecord]:
        """Every selected run, cell by cell (task × model, then method, then seed)."""
        return [r for methods in self.cells.values() for rs in methods.values() for r in rs]


def run_end(run: RunRecord) -> int:
    """When a run ended (its start when it has no end time): what "latest" compares."""
    return run.end_time or run.start_time


def latest(runs: Sequence[RunRecord]) -> RunRecord:
    """The run that counts among several: the latest end time (:func:`run_end`), then the latest
    start, then the greatest run id — a total order, so the choice never depends on read order."""
    return max(runs, key=lambda r: (run_end(r), r.start_time, r.run_id))


def cell_label(run: RunRecord) -> str:
    """``method|task|model|sSEED`` of a cell run, as the sweep names cells."""
    t = run.tags
    method, task = layout.read_tag(t, layout.METHOD), layout.read_tag(t, layout.TASK)
    model, seed = layout.read_tag(t, layout.MODEL), layout.read_tag(t, layout.SEED)
    return layout.cell_label(method, task, model, seed)


def method_labels(runs: list[RunRecord]) -> dict[str, str]:
    """``run_id → method label``: the method name, plus its differing hyper-parameters when one
    method was run with several settings in the sweep (e.g. ``corrgrpo(floor=1.0)``)."""
    by_method: dict[str, set[tuple[tuple[str, str], ...]]] = defaultdict(set)
    signature = {}
    for run in runs:
        hp = tuple(
            sorted(
                (layout.strip_prefix(layout.METHOD_PARAM, k), v)
                for k, v in run.params.items()
                if k.startswith(layout.METHOD_PARAM)
            )
        )
        signature[run.run_id] = hp
        by_method[run.tags[layout.tag(layout.METHOD)]].add(hp)
    labels = {}
    for run in runs:
        method = run.tags[layout.tag(layout.METHOD)]
        variants = by_method[method]
        if len(variants) == 1:
            labels[run.run_id] = method
            continue
        differing = {k for variant in variants for k, v in variant if any((k, v) not in o for o in variants)}
        shown = ",".join(f"{k}={v}" for k, v in signature[run.run_id] if k in differing)
        labels[run.run_id] = f"{method}({shown})"
    return labels


def _latest_per_key(
    children: list[RunRecord],
) -> tuple[list[RunRecord], list[RunRecord], int, list[Duplicate]]:
    """``(chosen, failed, recovered, duplicates)``: the :func:`latest` FINISHED run of each run key;
    the latest attempt of keys that never finished; how many failed/killed attempts a later
    FINISHED run replaced; the keys with several FINISHED runs (sorted by cell)."""
    by_key: dict[str, list[RunRecord]] = defaultdict(list)
    for run in children:
        by_key[run.tags[layout.tag(layout.RUN_KEY)]].append(run)
    chosen, failed, recovered, duplicates = [], [], 0, []
    for attempts in by_key.values():
        finished = [r for r in attempts if r.status == "FINISHED"]
        if finished:
            used = latest(finished)
            chosen.append(used)
            recovered += sum(r.status in ("FAILED", "KILLED") for r in attempts)
            if len(finished) > 1:
                duplicates.append(Duplicate(cell_label(used), len(finished), used.run_id))
        else:
            failed.append(max(attempts, key=lambda r: (r.start_time, r.run_id)))
    duplicates.sort(key=lambda d: (d.label, d.used))
    return chosen, failed, recovered, duplicates


def select_runs(runs: list[RunRecord]) -> Selection:
    """The :func:`latest` FINISHED run per run key, then per (method label, task, model, seed)."""
    parents = sorted(
        (r for r in runs if layout.read_tag(r.tags, layout.ROLE) == layout.ROLE_SWEEP),
        key=lambda r: r.start_time,
    )
    chosen, failed, recovered, duplicates = _latest_per_key(
        [r for r in runs if layout.read_tag(r.tags, layout.RUN_KEY)]
    )
    labels = method_labels(chosen)
    by_cell: dict[tuple[str, str, str, str], list[RunRecord]] = defaultdict(list)
    for run in chosen:
        t = run.tags
        by_cell[
            (
                labels[run.run_id],
                layout.read_tag(t, layout.TASK, "?"),
                layout.read_tag(t, layout.MODEL, "?"),
                layout.read_tag(t, layout.SEED, "0"),
            )
        ].append(run)
    cells: dict[tuple[str, str], dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    superseded = []
    for (label, task, model, seed), group in sorted(by_cell.items()):
        if len(group) > 1:
            superseded.append(f"{layout.cell_label(label, task, model, seed)} ({len(group)} settings)")
        cells[(task, model)][label].append(latest(group))
    for methods in cells.values():
        for runs_ in methods.values():
            runs_.sort(key=lambda r: int(layout.read_tag(r.tags, layout.SEED, "0")))
    failed.sort(
        key=lambda r: tuple(
            layout.read_tag(r.tags, name) for name in (layout.TASK, layout.MODEL, layout.METHOD, layout.SEED)
        )
    )
    return Selection(
        {k: dict(v) for k, v in cells.items()}, failed, recovered, superseded, parents, duplicates
    )


def common(values: Sequence[str], default: str = "") -> str:
    """The most frequent value (the first seen among equals), or ``default`` for none."""
    return Counter(values).most_common(1)[0][0] if values else default


def ordered(names: set[str] | list[str], preferred: Sequence[str]) -> list[str]:
    """``names`` in the ``preferred`` order (the sweep config's), then the rest sorted with the
    baseline first; each name once (a model that several tasks of a sweep name comes up once per
    task in the config's order).

    >>> ordered({"b", "c", "a"}, ["c", "b", "c"])
    ['c', 'b', 'a']
    """
    names = set(names)
    head = [n for n in dict.fromkeys(preferred) if n in names]
    rest = sorted(names - set(head), key=lambda n: (n != BASELINE, n))
    return head + rest


@dataclass
class TaskInfo:
    """What the runs of one task say about it (from their tags)."""

    components: list[str]
    primary: str
    lower_is_better: set[str]

    @property
    def primary_lower_is_better(self) -> bool:
        """True when a smaller value of the primary metric is better."""
        return self.primary in self.lower_is_better


def task_info(runs: list[RunRecord]) -> TaskInfo:
    """The task's reward components, primary metric and lower-is-better metrics; each the value
    most of its runs carry (runs of an older task version may differ)."""

    def most(name: str) -> str:
        return common([layout.read_tag(r.tags, name) for r in runs])

    return TaskInfo(
        layout.split_list(most(layout.REWARD_COMPONENTS)),
        most(layout.PRIMARY_METRIC),
        set(layout.split_list(most(layout.LOWER_IS_BETTER))),
    )
