"""A fuzz test of the whole command line (issue 36): every command, every option, values of its
declared type at and beyond its bounds, run in this process through the Typer app exactly as
``mrbench`` runs it (:func:`mrbench.cli.app._run`, which maps every outcome to an exit code).

Each command runs where nothing is trained or served: ``run`` and ``eval`` against a tracking
server that does not answer (every check of the options comes first; the store check is the last
refusal), ``sweep --dry-run`` on a temporary store, ``report`` on an empty one, ``ui`` against a
server that does not answer, and ``simulate`` up to the moment it would simulate (the lab's
runner and store writer are replaced by a recorder: everything before them is real). The
property: exit 0 or 2 (``score``: 1 too, for lines it could not score), never "unexpected", never
a traceback, within seconds and a bounded memory; an exit 2 names the option (or the setting, or
the value) it refuses, unless the options were fine and the store is what is refused.

The probe's cases are kept as explicit examples, and :func:`test_the_probe_cases` checks each is
refused with its own message. The default profile is derandomized and small; ``-m slow`` runs
:func:`test_fuzz_every_command_slow`, with many more examples per command.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mrbench.cli.app import _run, app

UNREACHABLE = "http://127.0.0.1:1"
"""A tracking server that refuses connections at once."""
EXAMPLE_SECONDS = 60.0
"""Longest an example may take (the first one of a command imports its libraries; on a loaded
2-core machine)."""
PEAK_RSS_BYTES = 6 * 2**30
"""The test process's peak memory: the probe's ``simulate --seeds 100000000`` reached 11 GB."""
FAST_EXAMPLES = 16
SLOW_EXAMPLES = 150


# ----------------------------------------------------------------------------------- invoking


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str
    seconds: float


def invoke(args: list[str]) -> Outcome:
    """``mrbench ARGS`` in this process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["mrbench", *args]
    start = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _run(app)
    finally:
        sys.argv = argv
    return Outcome(
        code if isinstance(code, int) else 1, out.getvalue(), err.getvalue(), time.monotonic() - start
    )


class _Recorder:
    """Stands in for the lab's store writer and runner: the options were accepted, nothing runs."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def check(self) -> None:
        pass


def _would_simulate(*args: object, **kwargs: object) -> None:
    raise SystemExit(0)  # what simulate would do next is simulate; its options were all accepted


@dataclass(frozen=True)
class Place:
    root: Path
    store: str


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory, _empty_store_file: Path) -> Iterator[Place]:
    """A working folder (the commands' current directory, results under it) with the files the
    cases name: an input for ``score``, sweep files, a file where a folder is expected, a model
    folder of a type transformers does not know."""
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copyfile(_empty_store_file, root / "mlflow.db")
    (root / "in.jsonl").write_text('{"dataset": "embedded", "id": "eval-00000", "completion": "x"}\n')
    (root / "deep.jsonl").write_text(
        '{"dataset": "embedded", "id": "eval-00000", "completion": "x"}\n' + "[" * 100_000 + "\n"
    )
    (root / "afile").write_text("")
    (root / "n-seeds.yaml").write_text("name: big\nn_seeds: 100000\n")
    (root / "lab-seeds.yaml").write_text("name: lab\nlab_seeds: 100000000\n")
    (root / "workers.yaml").write_text("name: w\nworkers: 1000\n")
    custom = root / "custom-model"
    custom.mkdir()
    (custom / "config.json").write_text('{"model_type": "not-a-transformers-type", "auto_map": {}}')
    (custom / "model.safetensors").write_bytes(b"")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MRBENCH_RESULTS", str(root / "results"))
        mp.setenv("HF_HUB_OFFLINE", "1")  # a hub id is a quick "not in the cache", never a download
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.delenv("MRBENCH_TRACKING_RETRY_S", raising=False)
        mp.setattr("mrbench.lab.writer.LabWriter", _Recorder)
        mp.setattr("mrbench.lab.runner.run_lab_with", _would_simulate)
        yield Place(root, f"sqlite:///{root / 'mlflow.db'}")


# ---------------------------------------------------------------------------------- commands

BASE: dict[str, list[str]] = {
    "run": ["run", "--tracking-uri", UNREACHABLE],
    "eval": ["eval", "--model", "tiny", "--task", "tool-calling", "--tracking-uri", UNREACHABLE],
    "sweep": ["sweep", "--dry-run", "--methods", "grpo", "--tasks", "tool-calling", "--models", "tiny"],
    "report": ["report"],
    "simulate": ["simulate", "--scenario", "scale", "--methods", "grpo"],
    "score": ["score", "--task", "tool-calling", "--input", "in.jsonl"],
    "advantages": ["advantages", "--method", "grpo", "--rewards", "1,0;0,1;1,1;0,0"],
    "export-lm-eval": ["export-lm-eval", "--task", "tool-calling", "--out", "exported"],
    "ui": ["ui", "--tracking-uri", UNREACHABLE],
    "methods": ["methods"],
    "tasks": ["tasks"],
}
"""Per command, the arguments that keep it where nothing trains or serves; the fuzzed options
come after them (a repeated option's last value wins, for every option but the repeatable ones)."""
FIXED = {"--tracking-uri", "--dry-run"}
"""Options never fuzzed: they keep the command off real training and serving."""
KEYS = {
    "--param": ["eps", "tau", "bogus"],
    "--task-param": ["n_train", "n_eval", "seed", "max_completion_tokens", "dataset", "bogus"],
    "--train": ["steps", "num_generations", "prompts_per_step", "learning_rate", "eval_limit", "bogus"],
}
"""Keys given to the ``key=value`` options: declared ones and one that is not."""

NUMBERS = st.sampled_from(
    [-1, 0, 1, 2, 2**31, 2**32 - 1, 2**32, 2**63, 10**30, 20_000, 99_999_999_999, 100_000_000]
) | st.integers(-(10**6), 10**6)
FLOATS = st.sampled_from(["nan", "inf", "-inf", "1e308", "-0.0", "0.5", "1e-320"]) | st.floats(
    allow_nan=False
).map(repr)
TEXT = st.sampled_from(
    ["", "a/b", "/tmp/x/ABS", "../up", ".hidden", "x" * 300, "[" * 1000, "tiny", "grpo", "auto", "²", "-1"]
) | st.text(max_size=12)
PATHS = st.sampled_from(["afile", "afile/sub", "/proc/x", "missing.yaml", "n-seeds.yaml", "out", "in.jsonl"])


def _options(command: str) -> list[tuple[str, str, int | float | None, int | float | None, bool]]:
    """(flag, kind, min, max, is_flag) of each option of ``command`` that may be fuzzed; kind is
    ``int``, ``float``, ``path``, ``kv`` (key=value), ``text`` or ``argument``."""
    from typer.main import get_command

    found = []
    for param in get_command(app).commands[command].params:
        annotation = param.type_descriptor.annotation
        if param.param_type_name == "argument":
            found.append((param.name, "argument", None, None, False))
            continue
        flag = param.opts[0]
        if flag in FIXED:
            continue
        kind = (
            "kv"
            if flag in KEYS
            else "int"
            if annotation is int
            else "float"
            if annotation is float
            else "path"
            if annotation is Path
            else "text"
        )
        found.append((flag, kind, param.min, param.max, bool(param.is_flag)))
    return found


def _value(draw: st.DrawFn, flag: str, kind: str, low: float | None, high: float | None) -> str:
    if kind == "int":
        edges = [v for b in (low, high) if b is not None for v in (int(b) - 1, int(b), int(b) + 1)]
        return str(draw(st.sampled_from(edges) | NUMBERS if edges else NUMBERS))
    if kind == "float":
        edges = [repr(float(b) + d) for b in (low, high) if b is not None for d in (-1e-9, 0.0, 1.0)]
        return draw(st.sampled_from(edges) | FLOATS if edges else FLOATS)
    if kind == "path":
        return draw(PATHS)
    if kind == "kv":
        return f"{draw(st.sampled_from(KEYS[flag]))}={draw(NUMBERS.map(str) | FLOATS | TEXT)}"
    return draw(TEXT | NUMBERS.map(str))


@st.composite
def arguments(draw: st.DrawFn, command: str) -> list[str]:
    """One to three of ``command``'s options with generated values (an argument: a value)."""
    options = _options(command)
    chosen = draw(st.lists(st.sampled_from(options), min_size=1, max_size=3, unique_by=lambda o: o[0]))
    args: list[str] = []
    for flag, kind, low, high, is_flag in chosen:
        if kind == "argument":
            args.insert(0, draw(TEXT.filter(lambda t: not t.startswith("-"))))
        elif is_flag:
            args.append(flag)
        else:
            args += [flag, _value(draw, flag, kind, low, high)]
    return args


# -------------------------------------------------------------------------------- the property

FINAL_REFUSALS = (
    UNREACHABLE.removeprefix("http://"),
    "no sweep named",
    "not in the local Hugging Face cache",
)
"""What a command refuses once every option was accepted: the store that does not answer, the
empty store's missing sweep, a hub model offline."""


def check_outcome(command: str, args: list[str], place: Place) -> Outcome:
    argv = list(BASE[command])
    if command in ("sweep", "report", "simulate"):
        argv += ["--tracking-uri", place.store]
    if command == "report" and (not args or args[0].startswith("-")):
        args = ["sweep-x", *args]  # SWEEP is required; the fuzzed options after it
    argv += args
    outcome = invoke(argv)
    if os.environ.get("H8_SLOW_EXAMPLES") and outcome.seconds > 2:
        print(f"\n{outcome.seconds:.1f}s {argv[-6:]}", file=sys.__stderr__)
    shown = outcome.out + outcome.err
    context = f"mrbench {' '.join(argv)!r}: exit {outcome.code}\n{shown[-3000:]}"
    assert "Traceback" not in shown, context
    assert "unexpected" not in outcome.err, context
    allowed = {0, 1, 2} if command == "score" else {0, 2}
    assert outcome.code in allowed, context
    if command == "ui":  # the server never answers: always refused (a bad option first)
        assert outcome.code == 2, context
    if outcome.code == 2:
        named = [a.split("=", 1)[0] for a in args] + [a.split("=", 1)[-1] for a in args]
        values = [a.split("=", 1)[-1] for a in args]
        named += (
            [a[:60] for a in args] + [repr(v)[:60] for v in values] + [repr(v.strip())[:60] for v in values]
        )
        named += [a.lstrip("-").replace("-", "_") for a in args if a.startswith("--")]
        named += [a.lstrip("-") for a in args if a.startswith("--")]
        named += ["SWEEP", "sweep setting", "Missing", "No such option"]
        assert any(n and n in outcome.err for n in named) or any(r in outcome.err for r in FINAL_REFUSALS), (
            context
        )
    assert outcome.seconds < EXAMPLE_SECONDS, context
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert peak < PEAK_RSS_BYTES, f"{context}\npeak memory {peak / 2**30:.1f} GiB"
    return outcome


def _fuzz(command: str, examples: int):
    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(args=arguments(command))
    def fuzz(place: Place, args: list[str]) -> None:
        check_outcome(command, args, place)

    return fuzz


COMMANDS = tuple(BASE)

PROBE = {
    "run": [
        ["--experiment", "/tmp/x/ABS"],
        ["--experiment", ""],
        ["--model", "/etc"],
        ["--model", "custom-model"],
        ["--task-param", "n_eval=99999999999"],
        ["--task-param", "n_eval=20000"],
        ["--seed", "4294967296"],
        ["--task-param", "seed=4294967296"],
        ["--checkpoint-every", "²"],
    ],
    "eval": [["--experiment", ""], ["--seed", "4294967296"], ["--limit", "-1"]],
    "sweep": [
        ["--name", "x" * 300],
        ["--n-seeds", "100000"],
        ["--workers", "1000"],
        ["--config", "n-seeds.yaml"],
        ["--config", "lab-seeds.yaml"],
        ["--config", "workers.yaml"],
        ["--seeds", "4294967296"],
    ],
    "report": [["/tmp/x/ABS"], [""], ["x" * 300]],
    "simulate": [["--seeds", "100000000"], ["--steps", "100000000"], ["--seeds", "100000"]],
    "score": [["--input", "deep.jsonl"]],
    "export-lm-eval": [["--out", "/proc/x"], ["--out", "afile"]],
    "ui": [[]],
    "advantages": [["--group-size", "0"]],
}
"""The probe's cases (issue 36), each also an explicit example of the fuzz test."""


@pytest.mark.parametrize("command", COMMANDS)
def test_fuzz_every_command(place: Place, command: str) -> None:
    test = _fuzz(command, FAST_EXAMPLES)
    for args in PROBE.get(command, []):
        test = example(args=args)(test)
    test(place)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_fuzz_every_command_slow(place: Place, command: str) -> None:
    _fuzz(command, SLOW_EXAMPLES)(place)


REFUSED = [
    # Item 1: names that become paths or experiments.
    ("run", ["--experiment", "/tmp/x/ABS"], "--experiment: '/tmp/x/ABS' is not a valid name"),
    ("run", ["--experiment", ""], "--experiment: '' is not a valid name"),
    ("eval", ["--experiment", "a/b"], "--experiment: 'a/b' is not a valid name"),
    ("report", ["/tmp/x/ABS"], "SWEEP: '/tmp/x/ABS' is not a valid name"),
    ("sweep", ["--name", "x" * 300], "is not a valid sweep name"),
    # Item 2: counts and seeds bounded where declared, before anything starts.
    ("simulate", ["--seeds", "100000000"], "Invalid value for '--seeds'"),
    ("simulate", ["--steps", "100000000"], "Invalid value for '--steps'"),
    ("simulate", ["--seeds", "100000", "--methods", "grpo,gdpo,corrgrpo"], "give fewer --seeds"),
    ("sweep", ["--config", "n-seeds.yaml"], "sweep setting 'n_seeds' in n-seeds.yaml: expected an integer"),
    ("sweep", ["--config", "workers.yaml"], "sweep setting 'workers' in workers.yaml: expected an integer"),
    ("sweep", ["--config", "lab-seeds.yaml"], "sweep setting 'lab_seeds' in lab-seeds.yaml"),
    ("run", ["--task-param", "n_eval=99999999999"], "bad value 99999999999 for parameter 'n_eval'"),
    ("run", ["--task-param", "n_eval=20000"], "bad value 20000 for parameter 'n_eval'"),
    ("run", ["--seed", "4294967296"], "Invalid value for '--seed'"),
    ("run", ["--task-param", "seed=4294967296"], "bad value 4294967296 for parameter 'seed'"),
    ("run", ["--train", "steps=100000000"], "steps=100000000 (must be <= 100000)"),
    # Item 3: the user's errors, not bugs.
    ("run", ["--model", "/etc"], "model '/etc': the folder /etc holds no config.json"),
    ("run", ["--model", "custom-model"], "names model_type 'not-a-transformers-type'"),
    ("export-lm-eval", ["--out", "/proc/x"], "--out: cannot write the lm-eval task to '/proc/x'"),
    ("export-lm-eval", ["--out", "afile"], "--out 'afile' cannot be a folder: 'afile' is a file"),
    # Item 5: a tracking server that does not answer, without SWEEP.
    ("ui", [], "127.0.0.1:1"),
]


@pytest.mark.parametrize(
    ("command", "args", "says"), REFUSED, ids=lambda v: " ".join(v)[:50] if isinstance(v, list) else v
)
def test_the_probe_cases(place: Place, command: str, args: list[str], says: str) -> None:
    """Each case of the probe (issue 36) is refused before anything starts, with its own message."""
    outcome = check_outcome(command, args, place)
    assert outcome.code == 2 and says in outcome.err, outcome.err


def test_a_line_nested_too_deeply_is_that_lines_error_and_the_others_are_scored(place: Place) -> None:
    outcome = invoke(["score", "--task", "tool-calling", "--input", "deep.jsonl", "--json"])
    assert outcome.code == 1 and "unexpected" not in outcome.err, outcome.err  # 1: a line was not scored
    report = json.loads(outcome.out)
    assert [item["line"] for item in report["items"]] == [1]
    assert report["errors"] == [{"line": 2, "error": "not valid JSON here: nested too deeply"}]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_export_onto_a_read_only_folder(place: Place) -> None:
    folder = place.root / "read-only"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    outcome = invoke(["export-lm-eval", "--task", "tool-calling", "--out", "read-only/x"])
    assert outcome.code == 2 and "--out: cannot write the lm-eval task" in outcome.err, outcome.err


def test_every_numeric_option_declares_an_upper_bound() -> None:
    """Item 2: each int or float option carries its bound where it is declared (a sweep setting's
    option: in its reader, :mod:`mrbench.sweeps.settings`)."""
    from mrbench.sweeps.settings import BY_KEY

    by_flag = {s.option.flag: s for s in BY_KEY.values() if s.option is not None}
    unbounded = []
    for command in COMMANDS:
        for flag, kind, _low, high, _is_flag in _options(command):
            if kind not in ("int", "float") or high is not None:
                continue
            bound = (
                getattr(by_flag[flag].read, "bound", None) if command == "sweep" and flag in by_flag else None
            )
            if bound is None or (bound.le is None and bound.lt is None):
                unbounded.append(f"{command} {flag}")
    assert unbounded == []
