"""The run layout: every MLflow tag, param, metric and artifact name mrbench writes or reads.

A cell (method × task × model × seed) is one MLflow run; a sweep invocation is one parent run
over its cells. The runner and the sweep write through this module and the report reads through
it, so no name is spelled anywhere else (the tracking schema is this file).

Tags (all prefixed ``mrbench.``)::

    cell:  method task task_version model seed run_key git_sha sweep primary_metric
           lower_is_better reward_components error schema
    sweep: role=sweep sweep command git_sha host pid preset unavailable_tasks version.<package>
           heartbeat claim.<run key> schema

Every run mrbench creates carries ``schema``, the version of this layout (:data:`SCHEMA_VERSION`);
readers refuse a run of a later one (:func:`check_readable`).

A cell under a sweep also carries MLflow's own ``mlflow.parentRunId`` (:data:`PARENT_RUN_TAG`).

Params: ``method``, ``method.<hp>``, ``task``, ``task.<setting>``, ``model``, ``seed``,
``train.<field>``.

Metrics: ``rewards/<component>/{mean,std}``, ``reward``, ``reward_std``, ``adv/<name>``,
``adv/share/<component>``, ``train/<TRL key>`` per step; ``eval_before/<metric>`` (step 0) and
``eval/<metric>`` (step 0 and the last step); ``perf/<name>`` at the end.

Shadow-estimator metrics (per step; see :mod:`mrbench.methods.diagnostics`): every other
registered method is run on the batch the cell trains on and compared with the method in use:
``adv/resolution`` (the method in use), and for each shadow method
``adv/shadow/<method>/sign_agree``, ``adv/shadow/<method>/rank_corr`` and
``adv/shadow/<method>/resolution``. Their run means are in ``diagnostics.json``: ``resolution``
(the method in use) and ``shadow`` (``{method: {sign_agree, rank_corr, resolution, steps}}``).

>>> tag("run_key")
'mrbench.run_key'
>>> eval_metric("exact_match"), eval_before_metric("exact_match")
('eval/exact_match', 'eval_before/exact_match')
>>> reward_mean("format"), adv_share("format")
('rewards/format/mean', 'adv/share/format')
>>> strip_prefix(EVAL, "eval/pass@1")
'pass@1'
>>> shadow_metric("gdpo", "sign_agree"), ADV_RESOLUTION
('adv/shadow/gdpo/sign_agree', 'adv/resolution')
"""

from __future__ import annotations

from collections.abc import Mapping

from mrbench.core.errors import UserError

# --- tags -------------------------------------------------------------------------------------

TAG_PREFIX = "mrbench."

SCHEMA = "schema"
SCHEMA_VERSION = 1
"""The version of this layout, tagged ``mrbench.schema`` on every run mrbench creates (cells,
evaluations, sweep and lab parents and their children). Runs without it were written before the
layout was versioned (layout 0) and read as layout 1 reads them: the names did not change. A run
of a later layout is refused by the readers, naming its version (:func:`check_readable`)."""

# Cell tags.
METHOD = "method"
TASK = "task"
TASK_VERSION = "task_version"
MODEL = "model"
SEED = "seed"
RUN_KEY = "run_key"
GIT_SHA = "git_sha"
SWEEP = "sweep"
PRIMARY_METRIC = "primary_metric"
LOWER_IS_BETTER = "lower_is_better"
REWARD_COMPONENTS = "reward_components"
ERROR = "error"
# The run whose pre-training evaluation this cell reused (mrbench.engine.evaluation.eval_cache); absent when
# the cell computed its own.
EVAL_BEFORE_FROM = "eval_before_from"

# Sweep parent-run tags.
ROLE = "role"
ROLE_SWEEP = "sweep"
COMMAND = "command"
HOST = "host"
PID = "pid"
PRESET = "preset"
UNAVAILABLE_TASKS = "unavailable_tasks"
VERSION = "version."  # + package name, "python", or VERSION_CPU
VERSION_CPU = "cpu"  # the sweeping machine's CPU kind (core/provenance.cpu_kind), among the versions
HEARTBEAT = "heartbeat"  # epoch seconds, refreshed while the invocation lives
CLAIM = "claim."  # + run key: the invocation runs (or ran) that cell; value: the cell label

# MLflow's own tag that nests a cell's run under its sweep's parent run.
PARENT_RUN_TAG = "mlflow.parentRunId"

# MLflow UI tags (`mrbench ui`). Every experiment mrbench creates declares its kind as model
# training; the MLflow 3.17 UI itself picks its GenAI or Model-training view from the
# ``workflowType`` URL parameter, which ``mrbench ui`` puts in the URL it prints.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND_TRAINING = "custom_model_development"
# An experiment tag ``mlflow.sharedViewState.<id>`` holds a saved runs-table view (the UI's
# "Views" menu; the URL parameter ``viewStateShareKey=<id>`` opens it). ``mrbench ui`` writes
# COMPARISON_VIEW: the cells grouped by task with their primary metric's columns.
SAVED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
COMPARISON_VIEW = "mrbench-comparison"


def run_schema(tags: Mapping[str, str]) -> int:
    """The layout version a run was written with (0 when it carries none).

    >>> run_schema({"mrbench.schema": "1"}), run_schema({})
    (1, 0)
    """
    raw = tags.get(tag(SCHEMA), "").strip()
    return int(raw) if raw.isdigit() else 0


def check_readable(tags: Mapping[str, str], what: str) -> None:
    """:class:`UserError` when ``what`` (a run, named for the message) was written with a later
    layout than this mrbench reads: its names may mean something else there."""
    version = run_schema(tags)
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{what} was written by a newer mrbench (run layout {version}; this one reads layouts up to "
            f"{SCHEMA_VERSION}): upgrade mrbench to read it"
        )


def cell_label(method: str, task: str, model: str, seed: int | str) -> str:
    """How every message, progress line and report names one cell: ``method|task|model|sSEED``.

    >>> cell_label("grpo", "tool-calling", "tiny", 0)
    'grpo|tool-calling|tiny|s0'
    """
    return f"{method}|{task}|{model}|s{seed}"


def tag(name: str) -> str:
    """The full MLflow tag key of a layout tag name (``"seed"`` → ``"mrbench.seed"``)."""
    return TAG_PREFIX + name


def read_tag(tags: Mapping[str, str], name: str, default: str = "") -> str:
    """The value of layout tag ``name`` in a run's ``tags`` (``default`` when absent)."""
    return tags.get(TAG_PREFIX + name, default)


def join_list(values: list[str] | tuple[str, ...] | frozenset[str] | set[str]) -> str:
    """Encode a list-valued tag (components, lower-is-better metrics, unavailable tasks)."""
    return ",".join(values)


def split_list(value: str) -> list[str]:
    """Decode a list-valued tag; the empty string is the empty list.

    >>> split_list("a,b"), split_list("")
    (['a', 'b'], [])
    """
    return [v for v in value.split(",") if v]


def cell_tags(
    *,
    method: str,
    task: str,
    task_version: str,
    model: str,
    seed: int,
    run_key: str,
    git_sha: str,
    sweep: str | None,
    primary_metric: str,
    lower_is_better: frozenset[str] | set[str],
    reward_components: list[str],
) -> dict[str, str]:
    """The tags of one cell's run, keyed by their full MLflow names."""
    values = {
        METHOD: method,
        TASK: task,
        TASK_VERSION: str(task_version),
        MODEL: model,
        SEED: str(seed),
        RUN_KEY: run_key,
        GIT_SHA: git_sha,
        SWEEP: sweep or "",
        PRIMARY_METRIC: primary_metric,
        LOWER_IS_BETTER: join_list(sorted(lower_is_better)),
        REWARD_COMPONENTS: join_list(reward_components),
        SCHEMA: str(SCHEMA_VERSION),
    }
    return {tag(k): v for k, v in values.items()}


# --- params -----------------------------------------------------------------------------------

PARAM_METHOD = "method"
PARAM_TASK = "task"
PARAM_MODEL = "model"
PARAM_SEED = "seed"
METHOD_PARAM = "method."  # + hyper-parameter
TASK_PARAM = "task."  # + task setting
TRAIN_PARAM = "train."  # + TrainSettings field
PARAM_TRAIN_PRECISION = TRAIN_PARAM + "precision"  # what `mrbench eval run:<id>` evaluates under


def cell_params(
    *,
    method: str,
    task: str,
    model: str,
    seed: int,
    method_params: Mapping[str, object],
    task_params: Mapping[str, object],
    train: Mapping[str, object],
) -> dict[str, str]:
    """The params of one cell's run: names above, every value as ``str``.

    >>> cell_params(method="gdpo", task="t", model="m", seed=1, method_params={"eps": 1e-6},
    ...             task_params={}, train={"steps": 2})
    {'method': 'gdpo', 'task': 't', 'model': 'm', 'seed': '1', 'method.eps': '1e-06', 'train.steps': '2'}
    """
    flat = {PARAM_METHOD: method, PARAM_TASK: task, PARAM_MODEL: model, PARAM_SEED: str(seed)}
    flat.update({METHOD_PARAM + k: str(v) for k, v in method_params.items()})
    flat.update({TASK_PARAM + k: str(v) for k, v in task_params.items()})
    flat.update({TRAIN_PARAM + k: str(v) for k, v in train.items()})
    return flat


# --- metrics ----------------------------------------------------------------------------------

REWARD = "reward"
REWARD_STD = "reward_std"
REWARDS = "rewards/"  # + component + /mean or /std
ADV = "adv/"  # + diagnostic name
ADV_SHARE = "adv/share/"  # + component
TRAIN = "train/"  # + TRL log key
EVAL = "eval/"  # + metric
EVAL_BEFORE = "eval_before/"  # + metric
PERF = "perf/"  # + name

PERF_WALL_S = PERF + "wall_s"
PERF_TRAIN_S = PERF + "train_s"
PERF_EVAL_S = PERF + "eval_s"
PERF_MODEL_PREPARE_S = PERF + "model_prepare_s"


def reward_mean(component: str) -> str:
    """Per-step mean training reward of one component."""
    return f"{REWARDS}{component}/mean"


def reward_std(component: str) -> str:
    """Per-step standard deviation of one component's training reward."""
    return f"{REWARDS}{component}/std"


def adv_metric(name: str) -> str:
    """A per-step advantage diagnostic (``adv/<name>``)."""
    return ADV + name


def adv_share(component: str) -> str:
    """Per-step share of the advantage that one component carries."""
    return ADV_SHARE + component


def eval_metric(metric: str) -> str:
    """An evaluation metric: logged at step 0 (before training) and at the last step."""
    return EVAL + metric


def eval_before_metric(metric: str) -> str:
    """An evaluation metric before training (logged once, at step 0)."""
    return EVAL_BEFORE + metric


def step_metric(key: str) -> str:
    """The metric name of one of TRL's per-step log keys.

    Per-component rewards, the weighted total and the advantage diagnostics keep their names
    (they already are layout names); everything else TRL logs goes under ``train/``.

    >>> step_metric("rewards/format/mean"), step_metric("adv/std"), step_metric("reward")
    ('rewards/format/mean', 'adv/std', 'reward')
    >>> step_metric("loss")
    'train/loss'
    """
    if key.startswith((REWARDS, ADV)) or key in (REWARD, REWARD_STD):
        return key
    return TRAIN + key


def strip_prefix(prefix: str, key: str) -> str:
    """``key`` without the namespace ``prefix`` (unchanged when it has another prefix)."""
    return key.removeprefix(prefix)


# --- shadow estimators ------------------------------------------------------------------------
# Per-step comparisons of the method in use with every other registered method on the same batch.

ADV_RESOLUTION = ADV + "resolution"  # distinct advantages per distinct reward vector, method in use
ADV_SHADOW = ADV + "shadow/"  # + method + / + statistic
SHADOW_STATS = ("sign_agree", "rank_corr", "resolution")


def shadow_metric(method: str, stat: str) -> str:
    """A shadow method's per-step comparison with the method in use (``adv/shadow/<method>/<stat>``).

    ``stat`` is one of :data:`SHADOW_STATS`. A character MLflow may reject in a name (or a ``/``,
    which would nest the name) becomes ``_``, so a plugin's ``module:function`` name is safe.

    >>> shadow_metric("corrgrpo", "rank_corr"), shadow_metric("pkg.mod:fn", "resolution")
    ('adv/shadow/corrgrpo/rank_corr', 'adv/shadow/pkg.mod_fn/resolution')
    """
    if stat not in SHADOW_STATS:
        raise ValueError(f"unknown shadow statistic {stat!r}; expected one of {SHADOW_STATS}")
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "_-.") else "_" for c in method)
    return f"{ADV_SHADOW}{safe}/{stat}"


# --- count metrics ----------------------------------------------------------------------------
# The convention that tells counts from scores among a task's eval metrics (no task declares it).

COUNT_PREFIX = "n_"
"""An eval metric named ``n_<what>`` is a count (``n_clean``, ``n_attacked``: how many samples the
evaluation saw), not a score: reports show it as an integer, with no direction and no interval,
and never rank methods by it. A score must not be named ``n_…``."""


def is_count_metric(metric: str) -> bool:
    """True for a count eval metric (:data:`COUNT_PREFIX`), given without its ``eval/`` prefix.

    >>> is_count_metric("n_attacked"), is_count_metric("joint"), is_count_metric("ndcg")
    (True, False, False)
    """
    return metric.startswith(COUNT_PREFIX)


# --- artifacts --------------------------------------------------------------------------------

CONFIG_ARTIFACT = "config.json"  # the resolved RunSpec with its run key
DIAGNOSTICS_ARTIFACT = "diagnostics.json"  # components, mean corr_matrix, mean share
COMPLETIONS_ARTIFACT = "samples/completions.jsonl"  # last batch with per-component rewards, advantages
EVAL_SAMPLES_BEFORE = "eval/samples_before.jsonl"
EVAL_SAMPLES_AFTER = "eval/samples_after.jsonl"
CELL_LOG_ARTIFACT = "logs/cell.log"  # what the libraries printed during the cell (engine.cell.console)
EVAL_LOG_ARTIFACT = "logs/eval.log"  # what the libraries printed during `mrbench eval` (its run's)
REWARDS_ARTIFACT = "rewards.npz"  # every training batch's per-rollout rewards (rewards_record.RewardsRecord)
SWEEP_ARTIFACT = "sweep.json"  # on the parent run: config, command, grid, unavailable tasks
REPORT_DIR = "report"  # on the parent run: the generated report


# --- run options and checkpoints --------------------------------------------------------------
# Params of a cell that are not part of its run key (they change what it keeps, not what it
# computes), and its checkpoint (see mrbench.engine.cell.checkpoints).

PARAM_SAVE = "save"  # none | final | every:N
PARAM_CHECKPOINT_DIR = "checkpoint_dir"  # absolute path of the saved policy + tokenizer; only once saved
PARAM_N_PARAMS = "n_params"  # the policy's parameter count (the report's model-size axis)
CHECKPOINT_SIZE_MB = "checkpoint/size_mb"  # size of that folder, at the last step
# Resume inside a cell (mrbench.engine.cell.resume): a param, not in the run key, and a tag.
PARAM_CHECKPOINT_EVERY = "checkpoint_every"  # training checkpoints every N optimizer steps (0: none)
RESUMED_FROM = "resumed_from"  # tag: the checkpoint steps the run was resumed from, e.g. "10" or "10,20"


# --- lab (``mrbench simulate``) ---------------------------------------------------------------
# One experiment per scenario (``lab-<scenario>``), one parent run per invocation (role=lab,
# scenario, command, git_sha; params ``lab.<scenario field>``; artifacts LAB_ARTIFACT and the
# summary under REPORT_DIR), one child run per method (tag method, scenario; params ``method``,
# ``method.<hp>``, ``lab.<setting>``). Child metrics per step: ``rewards/<component>/mean`` and
# ``reward`` (expected, mean over seeds), ``lab/normalised/<component>``, ``lab/objective``,
# ``lab/sign_disagree``, ``lab/resolution``, ``adv/max_abs``; at the end ``lab/iqm/<score>``,
# ``lab/ci_low/<score>``, ``lab/ci_high/<score>`` and ``lab/poi/<score>`` (scores in
# mrbench.lab.metrics). A lab run made by a sweep (mrbench.lab.in_sweep) also carries the tags
# ``sweep`` (its name) and LAB_KEY on its parent run.

ROLE_LAB = "lab"
SCENARIO = "scenario"  # tag
LAB_PARAM = "lab."  # + scenario field or run setting
LAB = "lab/"  # + lab metric
LAB_ARTIFACT = "lab.json"  # on the parent run: scenario, seeds, per-seed scores, statistics
LAB_EXPERIMENT_PREFIX = "lab-"
LAB_KEY = "lab_key"  # tag: hash of everything a sweep's lab result depends on (resume skips it)
LIKE_TASK = "like_task"  # tag: a sweep's lab run on the scenario fitted to that task's cells' rewards


def like_scenario(sweep: str, task: str) -> str:
    """The name of the lab scenario fitted to ``task``'s rewards in ``sweep`` (``mrbench simulate
    --like sweep:<sweep>``; its experiment is :func:`lab_experiment` of it).

    >>> like_scenario("smol", "tool-calling")
    'like-smol-tool-calling'
    """
    return f"like-{name_slug(sweep)}-{name_slug(task)}"


def name_slug(text: str) -> str:
    """``text`` with every character other than letters, digits, ``-``, ``_`` and ``.`` made ``-``."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text) or "-"


def lab_metric(name: str) -> str:
    """A lab metric (``lab/<name>``).

    >>> lab_metric("normalised/format"), lab_experiment("scale")
    ('lab/normalised/format', 'lab-scale')
    """
    return LAB + name


def lab_experiment(scenario: str) -> str:
    """The MLflow experiment of a lab scenario."""
    return LAB_EXPERIMENT_PREFIX + scenario


# --- extra evaluations (a sweep's ``eval`` key) ---------------------------------------------
# A sweep's ``eval`` setting names extra datasets per task (mrbench.engine.evaluation.extra_evals). Once the
# cells have trained, each FINISHED cell's saved policy is evaluated on them and the metrics go into
# the cell's own run: ``eval_extra/<dataset>/<metric>`` at the cell's last step, and the base
# model's ``eval_extra_before/<dataset>/<metric>`` at step 0 (one evaluation per model, task
# settings and dataset, shared by every method and seed). Artifact per dataset:
# ``eval_extra/<dataset>/samples.jsonl``. A cell whose policy could not be evaluated gets the tag
# ``eval_extra_skipped.<dataset>`` = the reason.

EVAL_EXTRA = "eval_extra/"  # + dataset + / + metric
EVAL_EXTRA_BEFORE = "eval_extra_before/"  # + dataset + / + metric
EVAL_EXTRA_SKIPPED = "eval_extra_skipped."  # tag + dataset: why the cell's policy was not evaluated


def extra_eval_metric(dataset: str, metric: str) -> str:
    """An extra dataset's metric of the trained policy (logged at the cell's last step).

    >>> extra_eval_metric("humaneval", "pass_at_1"), extra_eval_before_metric("bfcl-simple", "exact_match")
    ('eval_extra/humaneval/pass_at_1', 'eval_extra_before/bfcl-simple/exact_match')
    """
    return f"{EVAL_EXTRA}{dataset}/{metric}"


def extra_eval_before_metric(dataset: str, metric: str) -> str:
    """An extra dataset's metric of the model before training (logged at step 0)."""
    return f"{EVAL_EXTRA_BEFORE}{dataset}/{metric}"


def split_extra_eval_metric(key: str, *, before: bool = False) -> tuple[str, str] | None:
    """``(dataset, metric)`` of an extra-evaluation metric name (``before``: the pre-training one);
    None for any other name.

    >>> split_extra_eval_metric("eval_extra/bfcl-simple/exact_match"), split_extra_eval_metric("eval/x")
    (('bfcl-simple', 'exact_match'), None)
    """
    prefix = EVAL_EXTRA_BEFORE if before else EVAL_EXTRA
    if not key.startswith(prefix):
        return None
    dataset, _, metric = key.removeprefix(prefix).partition("/")
    return (dataset, metric) if dataset and metric else None


def extra_eval_samples(dataset: str) -> str:
    """The artifact with an extra dataset's per-sample records of the trained policy."""
    return f"{EVAL_EXTRA}{dataset}/samples.jsonl"


def extra_eval_skipped_tag(dataset: str) -> str:
    """The full tag key saying why a cell's policy was not evaluated on ``dataset``."""
    return tag(EVAL_EXTRA_SKIPPED + dataset)


# --- evaluation (``mrbench eval``) ------------------------------------------------------------
# One run per evaluation of a model (a tiny preset, a hub id, a local folder, or a cell's saved
# checkpoint) in experiment EVAL_EXPERIMENT unless another is named. Tags: role=eval, task,
# task_version, model, primary_metric, lower_is_better, git_sha; for a cell's checkpoint also
# method and eval_of (the cell's run id). Params: task, task.<setting>, model, model_path, seed,
# eval.dataset, eval.limit, eval.samples. Metrics: eval/<metric> (step 0) and perf/wall_s,
# perf/eval_s, perf/model_prepare_s. Artifact: EVAL_SAMPLES. An evaluation has no run_key tag,
# so reports and resumed sweeps never take it for a cell.

ROLE_EVAL = "eval"
EVAL_OF = "eval_of"  # tag: id of the training run whose checkpoint was evaluated
EVAL_EXPERIMENT = "mrbench-eval"
PARAM_MODEL_PATH = "model_path"  # what was loaded: a folder or a hub id
EVAL_PARAM = "eval."  # + dataset | limit | samples | precision
EVAL_SAMPLES = "eval/samples.jsonl"


def eval_tags(
    *,
    task: str,
    task_version: str,
    model: str,
    git_sha: str,
    primary_metric: str,
    lower_is_better: frozenset[str] | set[str],
    method: str = "",
    eval_of: str = "",
) -> dict[str, str]:
    """The tags of one evaluation run, keyed by their full MLflow names; ``method`` and ``eval_of``
    only for a cell's checkpoint.

    >>> sorted(eval_tags(task="t", task_version="1", model="tiny", git_sha="x", primary_metric="m",
    ...                  lower_is_better=set(), eval_of="abc"))[:3]
    ['mrbench.eval_of', 'mrbench.git_sha', 'mrbench.lower_is_better']
    """
    values = {
        ROLE: ROLE_EVAL,
        TASK: task,
        TASK_VERSION: str(task_version),
        MODEL: model,
        GIT_SHA: git_sha,
        PRIMARY_METRIC: primary_metric,
        LOWER_IS_BETTER: join_list(sorted(lower_is_better)),
        SCHEMA: str(SCHEMA_VERSION),
    }
    if method:
        values[METHOD] = method
    if eval_of:
        values[EVAL_OF] = eval_of
    return {tag(k): v for k, v in values.items()}


def eval_params(
    *,
    task: str,
    task_params: Mapping[str, object],
    model: str,
    model_path: str,
    seed: int,
    dataset: str,
    limit: int,
    samples: int,
    precision: str = "auto",
) -> dict[str, str]:
    """The params of one evaluation run, every value as ``str``.

    >>> eval_params(task="t", task_params={"n_eval": 4}, model="tiny", model_path="/m", seed=0,
    ...             dataset="embedded", limit=2, samples=1, precision="bf16")["eval.precision"]
    'bf16'
    """
    flat = {PARAM_TASK: task, PARAM_MODEL: model, PARAM_MODEL_PATH: model_path, PARAM_SEED: str(seed)}
    flat.update({TASK_PARAM + k: str(v) for k, v in task_params.items()})
    options = {"dataset": dataset, "limit": limit, "samples": samples, "precision": precision}
    flat.update({EVAL_PARAM + k: str(v) for k, v in options.items()})
    return flat
