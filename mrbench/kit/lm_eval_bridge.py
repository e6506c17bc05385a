"""Greedy generation and scoring through lm-evaluation-harness (0.4.x) on local samples.

Any single-turn task can be evaluated the way the field evaluates models — lm-eval's request
building, chat-template application, batching, stop sequences and metric aggregation — while
the data stays local (no hub) and the scoring stays the task's own code::

    from mrbench.kit.lm_eval_bridge import run_generation_task

    run = run_generation_task(
        generator,                      # anything with .model (transformers) and .tokenizer
        samples,                        # list[Sample]: [system?, user] prompts + columns
        task_name="mrbench_tool_calling",
        score_fn=score_sample,          # (Sample, completion) -> {metric: float}; or "module:attr"
        metric_names=["exact_match", "format"],
        max_new_tokens=64,
    )
    run.completions[i], run.scores[i]["exact_match"], run.metrics["exact_match"]

How it maps onto lm-eval: the samples become a ``datasets.DatasetDict`` returned by the task
config's ``custom_dataset`` (one row per sample: ``idx``, ``id``, ``system``, ``user``,
``target``, and the sample's ``prompt``/``columns`` as JSON); ``description: system`` and
``doc_to_text: user`` rebuild the chat (system message + user turn) that lm-eval renders with
the tokenizer's chat template (``apply_chat_template=True``, ``fewshot_as_multiturn=True``).
Worked examples that a prompt holds as earlier user/assistant turns become lm-eval's few-shot
examples (``num_fewshot``, ``fewshot_config: {sampler: first_n, samples: [...]}``), which it
renders as those same turns between the system message and the request;
``output_type: generate_until`` with ``do_sample: false`` (greedy), ``max_gen_toks`` and
``until`` (lm-eval always adds the tokenizer's EOS); ``process_results`` rebuilds the
:class:`~mrbench.core.contracts.Sample` from the row and calls ``score_fn``, and every metric aggregates
by ``mean``. The in-memory model and tokenizer are wrapped by lm-eval's ``HFLM``
(``pretrained=model``), so it runs on whatever device the model is on (CPU here), in the caller's
precision: lm-eval wraps ``generate`` in its own ``torch.autocast``, which is switched off unless
``HFLM`` gets a ``mixed_precision_dtype``, so the bridge passes the dtype of the autocast it is
called under (:func:`caller_autocast_dtype`; none: float32 stays float32).

Using the same task from the lm-eval CLI: :func:`export_lm_eval_task` writes
``<dir>/<task>.yaml``, ``<dir>/<task>.jsonl`` and ``<dir>/<task>_utils.py`` (score function
given as ``"module:attr"``); then, in an environment where mrbench is installed::

    lm_eval --model hf --model_args pretrained=PATH --include_path DIR --tasks TASK \\
        --apply_chat_template --fewshot_as_multiturn --batch_size 16

``run_generation_task(..., export_dir=DIR)`` goes through exactly those files, which is how the
tests check that both routes agree.

Limitations: prompts must be ``[system?, (user, assistant)*, user]`` with the same worked
examples ``(user, assistant)*`` in every sample of a run (lm-eval's few-shot examples belong to
the task, not the item; multi-turn tasks use their own runner), and an empty system message is
dropped (lm-eval adds a system turn only when it has text); HFLM may set a missing pad token on the
tokenizer (to EOS/UNK) — harmless for generation. The model's train/eval mode is restored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrbench.core.contracts import Sample

ScoreFn = Callable[[Sample, str], Mapping[str, float]]
"""``score_fn(sample, completion) -> {metric name: value}`` for one item (NaN = unscorable)."""


@dataclass(frozen=True)
class GenerationRun:
    """What one bridged evaluation produced, in sample order.

    ``completions[i]``: the greedy completion for ``samples[i]`` (stop sequences removed).
    ``scores[i]``: ``score_fn(samples[i], completions[i])`` as computed inside lm-eval.
    ``metrics``: mean of each metric over the items where it is finite (equals lm-eval's
    ``mean`` aggregate when no value is NaN).
    ``lm_eval``: lm-eval's own aggregate row for the task (``"<metric>,none"`` keys, alias, …).
    """

    completions: list[str]
    scores: list[dict[str, float]]
    metrics: dict[str, float]
    lm_eval: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- documents


Shot = tuple[str, str]
"""A worked example: the user turn and the assistant's answer."""


def split_prompt(sample: Sample) -> tuple[str, list[Shot], str]:
    """``(system, worked examples, request)`` of a prompt ``[system?, (user, assistant)*, user]``;
    ``ValueError`` for any other shape.

    >>> split_prompt(Sample("a", [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]))
    ('s', [], 'u')
    """
    messages = list(sample.prompt)
    roles = [m.get("role") for m in messages]
    system = messages[0]["content"] if roles[:1] == ["system"] else ""
    body = roles[1:] if roles[:1] == ["system"] else roles
    pairs_ok = all(r == ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(body))
    if not body or len(body) % 2 == 0 or not pairs_ok:
        raise ValueError(
            f"sample {sample.id!r}: the lm-eval bridge takes prompts [system?, (user, assistant)*, user], "
            f"got roles {roles}"
        )
    turns = messages[len(roles) - len(body) :]
    shots = [(turns[i]["content"], turns[i + 1]["content"]) for i in range(0, len(turns) - 1, 2)]
    return system, shots, turns[-1]["content"]


def shared_shots(samples: Sequence[Sample]) -> list[Shot]:
    """The worked examples every sample's prompt holds; ``ValueError`` unless they are the same in all."""
    shots = split_prompt(samples[0])[1]
    for sample in samples[1:]:
        if split_prompt(sample)[1] != shots:
            raise ValueError(
                f"sample {sample.id!r} holds other worked examples than sample {samples[0].id!r}: the "
                "lm-eval bridge takes one set of examples for all samples (lm-eval's few-shot is per task)"
            )
    return shots


def sample_to_row(index: int, sample: Sample) -> dict[str, Any]:
    """One dataset row (an lm-eval "doc") for a sample; ``ValueError`` for a prompt of another shape
    (see :func:`split_prompt`). The worked examples are not in the row: they are the task's.

    >>> row = sample_to_row(0, Sample("a", [{"role": "user", "content": "hi"}], {"k": 1}))
    >>> row["system"], row["user"], row["columns"]
    ('', 'hi', '{"k": 1}')
    """
    system, _, user = split_prompt(sample)
    return {
        "idx": index,
        "id": str(sample.id),
        "system": system,
        "user": user,
        "target": "",
        "prompt": json.dumps(sample.prompt, ensure_ascii=False),
        "columns": json.dumps(sample.columns, ensure_ascii=False),
    }


def row_to_sample(row: Mapping[str, Any]) -> Sample:
    """Inverse of :func:`sample_to_row`.

    >>> s = Sample("a", [{"role": "user", "content": "hi"}], {"k": 1})
    >>> row_to_sample(sample_to_row(3, s)) == s
    True
    """
    return Sample(id=row["id"], prompt=json.loads(row["prompt"]), columns=json.loads(row["columns"]))


def rows_dataset(rows: list[dict[str, Any]]) -> Any:
    """A ``datasets.DatasetDict`` with one ``test`` split holding ``rows``."""
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def dataset_from_jsonl(path: str | Path) -> Any:
    """``rows_dataset`` of a JSON-lines file written by :func:`export_lm_eval_task`."""
    with Path(path).open(encoding="utf-8") as fh:
        return rows_dataset([json.loads(line) for line in fh if line.strip()])


def resolve_score_fn(score_fn: ScoreFn | str) -> ScoreFn:
    """A callable score function from itself or a ``"module:attr"`` reference."""
    if callable(score_fn):
        return score_fn
    from mrbench.core.registry import import_target

    return import_target(str(score_fn))  # type: ignore[no-any-return]


def process_results_from(
    score_fn: ScoreFn | str, metric_names: Sequence[str]
) -> Callable[[Mapping[str, Any], Sequence[str]], dict[str, float]]:
    """lm-eval ``process_results(doc, results)``: ``score_fn`` on ``results[0]``, kept to ``metric_names``.

    Only declared metrics are returned because lm-eval needs an aggregation for every key.
    """
    fn = resolve_score_fn(score_fn)
    names = list(metric_names)

    def process_results(doc: Mapping[str, Any], results: Sequence[str]) -> dict[str, float]:
        completion = results[0] if results else ""
        scores = fn(row_to_sample(doc), completion)
        missing = [m for m in names if m not in scores]
        if missing:
            raise ValueError(f"score_fn returned no {missing} for item {doc.get('id')!r}")
        return {m: float(scores[m]) for m in names}

    return process_results


# --------------------------------------------------------------------------- task config


def _config(
    samples: Sequence[Sample],
    *,
    task_name: str,
    metric_names: Sequence[str],
    max_new_tokens: int,
    until: Sequence[str],
    lower_is_better: Collection[str],
    version: str,
) -> dict[str, Any]:
    """The task config shared by the inline and the exported route (callables added by the caller),
    the arguments checked first (ValueError); the samples' shared worked examples as its few-shot turns."""
    _check_args(samples, task_name, metric_names, max_new_tokens)
    shots = shared_shots(samples)
    config: dict[str, Any] = {
        "task": task_name,
        "test_split": "test",
        "output_type": "generate_until",
        "description": "system",  # a column name: lm-eval uses doc["system"] as the system message
        "doc_to_text": "user",
        "doc_to_target": "target",
        "num_fewshot": len(shots),
    }
    if shots:  # the same examples for every item, in order, as the turns before the request
        config["fewshot_config"] = {
            "sampler": "first_n",
            "samples": [{"user": user, "target": answer} for user, answer in shots],
        }
    return config | {
        "generation_kwargs": {"until": list(until), "do_sample": False, "max_gen_toks": int(max_new_tokens)},
        "metric_list": [
            {"metric": m, "aggregation": "mean", "higher_is_better": m not in lower_is_better}
            for m in metric_names
        ],
        "metadata": {"version": version},
    }


def _check_args(
    samples: Sequence[Sample], task_name: str, metric_names: Sequence[str], max_new_tokens: int
) -> None:
    if not samples:
        raise ValueError("no samples to evaluate")
    if not task_name or any(c in task_name for c in "/ ,"):
        raise ValueError(f"task_name {task_name!r} must be non-empty without '/', ',' or spaces")
    if not metric_names:
        raise ValueError("metric_names must name at least one metric returned by score_fn")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def export_lm_eval_task(
    samples: Sequence[Sample],
    directory: str | Path,
    *,
    task_name: str,
    score_fn: str,
    metric_names: Sequence[str],
    max_new_tokens: int,
    until: Sequence[str] = (),
    lower_is_better: Collection[str] = (),
    version: str = "1",
) -> Path:
    """Write an lm-eval task folder for ``--include_path``; returns the YAML path.

    ``score_fn`` must be an importable ``"module:attr"`` (the generated utils module resolves it
    when lm-eval loads the task).
    """
    config = _config(
        samples,
        task_name=task_name,
        metric_names=metric_names,
        max_new_tokens=max_new_tokens,
        until=until,
        lower_is_better=lower_is_better,
        version=version,
    )
    return _write_task(samples, directory, config, score_fn)


def _write_task(
    samples: Sequence[Sample], directory: str | Path, config: dict[str, Any], score_fn: str
) -> Path:
    """Write the task folder (rows, utils module, YAML) for the task ``config``; the YAML path."""
    import yaml

    resolve_score_fn(score_fn)  # fail now, not inside lm-eval
    task_name = config["task"]
    metric_names = [m["metric"] for m in config["metric_list"]]
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    rows = [sample_to_row(i, s) for i, s in enumerate(samples)]
    (out / f"{task_name}.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    utils = out / f"{task_name}_utils.py"
    utils.write_text(
        f'"""Generated by mrbench.kit.lm_eval_bridge for lm-eval task {task_name!r}."""\n\n'
        "from pathlib import Path\n\n"
        "from mrbench.kit.lm_eval_bridge import dataset_from_jsonl, process_results_from\n\n"
        f"_DATA = Path(__file__).with_name({task_name + '.jsonl'!r})\n"
        f"process_results = process_results_from({score_fn!r}, {metric_names!r})\n\n\n"
        "def load_dataset(**kwargs):\n"
        "    return dataset_from_jsonl(_DATA)\n",
        encoding="utf-8",
    )
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    text += f"custom_dataset: !function {utils.stem}.load_dataset\n"
    text += f"process_results: !function {utils.stem}.process_results\n"
    path = out / f"{task_name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- running


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def run_generation_task(
    generator: Any,
    samples: Sequence[Sample],
    *,
    task_name: str,
    score_fn: ScoreFn | str,
    metric_names: Sequence[str],
    max_new_tokens: int,
    until: Sequence[str] = (),
    lower_is_better: Collection[str] = (),
    batch_size: int = 16,
    version: str = "1",
    export_dir: str | Path | None = None,
) -> GenerationRun:
    """Greedy-generate one completion per sample through lm-eval and score each with ``score_fn``.

    Args:
        generator: object with ``.model`` (a transformers causal LM) and ``.tokenizer`` (with a
            chat template), e.g. :class:`mrbench.core.contracts.Generator`.
        samples: prompts ``[system?, (user, assistant)*, user]``, the same worked examples in all
            (:func:`split_prompt`); their ``columns`` reach ``score_fn``.
        task_name: lm-eval task name (no ``/``, ``,`` or spaces).
        score_fn: ``(sample, completion) -> {metric: value}``, or ``"module:attr"`` naming one.
        metric_names: the keys of ``score_fn``'s result that lm-eval aggregates (mean).
        max_new_tokens: generation budget per completion (tokens).
        until: extra stop strings (lm-eval adds the tokenizer's EOS); text from a stop string on
            is removed from the completion.
        lower_is_better: metric names where smaller is better (recorded in lm-eval's results).
        batch_size: generation batch size (left padding).
        version: task version recorded by lm-eval.
        export_dir: if set, write the task with :func:`export_lm_eval_task` there and load it
            from that folder (``score_fn`` must then be a ``"module:attr"`` string).

    Returns:
        :class:`GenerationRun` with completions and scores in sample order.
    """
    samples = list(samples)
    config = _config(
        samples,
        task_name=task_name,
        metric_names=metric_names,
        max_new_tokens=max_new_tokens,
        until=until,
        lower_is_better=lower_is_better,
        version=version,
    )
    if export_dir is None:
        manager, spec = _inline_task(samples, config, score_fn, metric_names)
    else:
        manager, spec = _exported_task(samples, config, score_fn, export_dir)
    results = _evaluate(generator, manager, spec, batch_size)
    if results is None:  # only on non-zero ranks of a distributed launch
        return GenerationRun([], [], {})
    return _collect(results, task_name, metric_names, len(samples))


def _inline_task(
    samples: list[Sample], config: dict[str, Any], score_fn: ScoreFn | str, metric_names: Sequence[str]
) -> tuple[Any, dict[str, Any]]:
    """lm-eval's task manager and the task as a config dict with the rows and ``score_fn`` in it."""
    from lm_eval.tasks import TaskManager

    rows = [sample_to_row(i, s) for i, s in enumerate(samples)]
    # lm-eval calls custom_dataset(**metadata); the rows are already built.
    config["custom_dataset"] = lambda **_: rows_dataset(rows)
    config["process_results"] = process_results_from(score_fn, metric_names)
    return TaskManager(include_defaults=False), config  # skip indexing lm-eval's ~10k built-in YAMLs


def _exported_task(
    samples: list[Sample], config: dict[str, Any], score_fn: ScoreFn | str, export_dir: str | Path
) -> tuple[Any, str]:
    """lm-eval's task manager over the task written to ``export_dir``, and the task's name."""
    from lm_eval.tasks import TaskManager

    if not isinstance(score_fn, str):
        raise ValueError("export_dir needs score_fn as an importable 'module:attr' string")
    _write_task(samples, export_dir, config, score_fn)
    return TaskManager(include_path=str(export_dir), include_defaults=False), config["task"]


def _evaluate(generator: Any, manager: Any, spec: Any, batch_size: int) -> dict[str, Any] | None:
    """lm-eval's results for the task ``spec`` (None on the non-zero ranks of a distributed launch);
    the model's train/eval mode is restored."""
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM

    model = generator.model
    was_training = bool(getattr(model, "training", False))
    try:
        # add_bos_token=False: the chat template already writes any markup the model expects.
        # mixed_precision_dtype: lm-eval runs generate under its own torch.autocast, which without
        # a dtype is autocast *off*; hand it the caller's, so the evaluation keeps its precision.
        lm = HFLM(
            pretrained=model,
            tokenizer=generator.tokenizer,
            batch_size=batch_size,
            add_bos_token=False,
            mixed_precision_dtype=caller_autocast_dtype(model),
        )
        results: dict[str, Any] | None = evaluate(
            lm=lm,
            task_dict=manager.load([spec]),
            bootstrap_iters=0,
            log_samples=True,
            apply_chat_template=True,
            fewshot_as_multiturn=True,  # keep the system message a separate chat turn
        )
    finally:
        model.train(was_training)
    return results


def caller_autocast_dtype(model: Any) -> Any:
    """The dtype of the ``torch.autocast`` this call runs under on ``model``'s device type
    (``torch.bfloat16`` inside ``torch.autocast("cpu", dtype=torch.bfloat16)``), or ``None``
    when autocast is off there."""
    import torch

    device = getattr(model, "device", None)
    device_type = device.type if isinstance(device, torch.device) else "cpu"
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def _collect(
    results: dict[str, Any], task_name: str, metric_names: Sequence[str], n_samples: int
) -> GenerationRun:
    """Completions and scores in sample order (lm-eval logs them by its own order), and the means."""
    logged = sorted(results["samples"][task_name], key=lambda ex: ex["doc"]["idx"])
    if len(logged) != n_samples:
        raise RuntimeError(f"lm-eval returned {len(logged)} results for {n_samples} samples")
    completions = [str(ex["filtered_resps"][0]) for ex in logged]
    scores = [{m: float(ex[m]) for m in metric_names} for ex in logged]
    metrics = {m: _nanmean([s[m] for s in scores]) for m in metric_names}
    return GenerationRun(completions, scores, metrics, dict(results["results"].get(task_name, {})))
