"""The code-generation task: contract, settings, samples, demonstrations, gold scoring."""

from __future__ import annotations

import pytest

import mrbench.tasks as tasks
from mrbench.core.contracts import RewardComponent, Sample, Task
from mrbench.core.errors import RegistryError
from mrbench.tasks.code_generation import COMPONENTS, code_generation
from mrbench.tasks.code_generation.task import DATASETS, CodeGenerationTask, dataset_split


@pytest.fixture(scope="module")
def task():
    t = code_generation()
    yield t
    t.close()


def test_builds_through_the_registry_with_string_settings():
    built = tasks.build_task(
        "code-generation", {"n_train": "10", "weights": "paper", "timeout_s": "2", "n_sampled": "4"}
    )
    assert isinstance(built, CodeGenerationTask) and len(built.train_samples()) == 10 and built.n_sampled == 4
    assert built.reward_components()[4].weight == 0.6
    entry = tasks.get_task_entry("code-generation")
    assert entry.params["dataset"] == "embedded" and entry.params["weights"] == "equal"


def test_satisfies_the_task_contract_with_scoring(task):
    assert isinstance(task, Task) and task.score_datasets() == list(DATASETS)
    assert all(getattr(CodeGenerationTask, h) is not getattr(Task, h) for h in ("gold_items", "score_items"))
    assert task.name == "code-generation" and task.primary_metric == "sampled_pass_at_1"
    assert task.version == "2" and task.n_sampled == 16 and "n_sampled=16" in repr(task)
    assert task.max_completion_tokens == 64 and task.lower_is_better == frozenset()
    assert code_generation(dataset="humaneval").max_completion_tokens == 512
    assert code_generation(max_completion_tokens=80).max_completion_tokens == 80


def test_building_starts_nothing_and_loads_nothing():
    t = code_generation()
    assert t.scorer._sandbox is None  # processes start on first scoring only


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": "apps"}, r"unknown code-generation dataset 'apps'; choose from embedded, humaneval"),
        ({"eval_dataset": "apps"}, r"unknown code-generation eval_dataset 'apps'"),
        ({"weights": "heavy"}, r"unknown weights 'heavy'.*equal, paper"),
        (
            {"n_train": 0},
            r"bad value 0 for parameter 'n_train' of 'code-generation': "
            r"must be an integer >= 1 and <= 5000, or None",
        ),
        ({"n_eval": -1}, r"'n_eval' of 'code-generation': must be an integer >= 1 and <= 5000, or None"),
        ({"n_eval": 2.5}, r"'n_eval' of 'code-generation': must be an integer >= 1 and <= 5000, or None"),
        ({"timeout_s": 0}, r"'timeout_s' of 'code-generation': must be > 0 and <= 600"),
        ({"timeout_s": 601}, r"'timeout_s' of 'code-generation': must be > 0 and <= 600"),
        ({"max_completion_tokens": -5}, r"'max_completion_tokens' of 'code-generation': must be >= 0"),
        ({"seed": "x"}, r"bad value 'x' for parameter 'seed' of 'code-generation': must be >= 0 and <= 4294"),
        ({"n_sampled": 0}, r"bad value 0 for parameter 'n_sampled' of 'code-generation': must be >= 1"),
        ({"n_sampled": True}, r"bad value True for parameter 'n_sampled'"),
    ],
)
def test_bad_settings_name_the_value_and_the_choices(kwargs, message):
    with pytest.raises(ValueError, match=message):
        code_generation(**kwargs)


def test_samples_are_chat_prompts_with_columns_and_disjoint(task):
    train, evals = task.train_samples(), task.eval_samples()
    assert len(train) == 146 and len(evals) == 42
    assert not {s.id for s in train} & {s.id for s in evals}
    sample = train[0]
    assert isinstance(sample, Sample) and sample.prompt[0]["role"] == "user"
    assert set(sample.columns) == {"problem_id", "dataset"} and sample.columns["dataset"] == "embedded"
    assert all(isinstance(v, str) for s in train for v in s.columns.values())


def test_subsets_are_seeded_and_deterministic():
    a = [s.id for s in code_generation(n_train=20, seed=1).train_samples()]
    assert a == [s.id for s in code_generation(n_train=20, seed=1).train_samples()]
    assert a != [s.id for s in code_generation(n_train=20, seed=2).train_samples()]
    assert len(code_generation(n_eval=5).eval_samples()) == 5
    assert len(code_generation(n_train=146, n_eval=42).eval_samples()) == 42  # the whole splits


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"n_train": 147},
            r"^n_train=147 but the train split of 'embedded' has only 146 problems; give at most 146",
        ),
        (
            {"n_eval": 1000},
            r"^n_eval=1000 but the eval split of 'embedded' has only 42 problems; give at most 42",
        ),
        ({"n_eval": 165, "eval_dataset": "humaneval"}, r"^n_eval=165 but 'humaneval' has only 164 problems"),
        ({"n_eval": 34, "dataset": "humaneval"}, r"^n_eval=34 but the eval split of 'humaneval' has only 33"),
    ],
)
def test_a_subset_larger_than_its_split_is_refused_when_the_task_is_built(kwargs, message):
    """Before any run exists (``mrbench run`` exits 2), not when the cell first reads the split."""
    with pytest.raises(RegistryError, match=message):
        code_generation(**kwargs)
    with pytest.raises(RegistryError, match=r"or leave n_\w+ unset for all of them$"):
        tasks.build_task("code-generation", {k: str(v) for k, v in kwargs.items()})


def test_eval_on_another_dataset_uses_all_of_it():
    t = code_generation(eval_dataset="humaneval")
    assert len(t.eval_samples()) == 164 and t.eval_samples()[0].columns["dataset"] == "humaneval"
    train, evals = dataset_split("humaneval")
    assert len(train) + len(evals) == 164 and len(evals) == 33
    assert len(code_generation(dataset="humaneval").train_samples()) == 131


def test_demonstrations_come_from_training_problems(task):
    demos = task.demonstrations(400, seed=3)
    assert len(demos) == 400 and demos == task.demonstrations(400, seed=3)
    train_prompts = {s.prompt[0]["content"] for s in task.train_samples()}
    eval_prompts = {s.prompt[0]["content"] for s in task.eval_samples()}
    for prompt, completion in demos:
        assert prompt[0]["content"] in train_prompts and prompt[0]["content"] not in eval_prompts
        assert completion.startswith("```python\ndef ") and completion.endswith("\n```")
    assert len({p[0]["content"] for p, _ in demos}) == len(train_prompts)  # cycles through all of them


def test_reward_components_in_order_with_weights(task):
    components = task.reward_components()
    assert [c.name for c in components] == list(COMPONENTS)
    assert all(
        isinstance(c, RewardComponent) and (c.low, c.high, c.weight) == (0.0, 1.0, 1.0) for c in components
    )
    assert [c.fn.__name__ for c in components] == list(COMPONENTS)


@pytest.mark.parametrize("dataset", ["embedded", "humaneval"])
def test_every_reference_solution_passes(task, dataset):
    items = task.gold_items(dataset)
    scored = task.score_items(items)
    failures = [(s.id, s.status) for s in scored if s.status != "passed"]
    assert failures == []
    assert all(s.rewards["format"] == 1.0 and s.rewards["ast_similarity"] == 1.0 for s in scored)


def test_score_items_reports_bad_items_per_item(task):
    scored = task.score_items(
        [
            {
                "dataset": "embedded",
                "id": "add_3",
                "completion": "```python\ndef add_3(x):\n    return x + 3\n```",
            },
            {"dataset": "embedded", "id": "nope", "completion": ""},
            {"dataset": "apps", "id": "1", "completion": ""},
        ]
    )
    assert [s.status for s in scored] == ["passed", "unknown_id", "unknown_dataset"]
    assert scored[1].error == "unknown id 'nope' in dataset 'embedded'"
    assert "choose from" in scored[2].error and scored[2].rewards == {}
    assert task.score_datasets() == list(DATASETS)
    assert task.problem_for("embedded", "add_3").entry_point == "add_3"
    assert task.problem_for("embedded", "nope") is None and task.problem_for("apps", "x") is None


def test_outcomes_of_scores_pairs_together_in_order(task):
    samples = {s.columns["problem_id"]: s for s in task.train_samples()}
    gold = task.problem_for("embedded", "add_3").gold_completion()
    unknown = Sample(id="embedded:nope", prompt=[], columns={"problem_id": "nope", "dataset": "embedded"})
    pairs = [
        (samples["add_3"], gold),
        (unknown, gold),
        (samples["add_3"], "no code"),
        (samples["add_3"], gold),
    ]
    outcomes = task.outcomes_of(pairs)
    assert [o and o.status for o in outcomes] == ["passed", None, "syntax_error", "passed"]
    assert outcomes[0] is outcomes[3]  # one sandbox run per distinct completion
    assert (
        task.outcome_of(samples["add_3"], gold).status == "passed" and task.outcome_of(unknown, gold) is None
    )
