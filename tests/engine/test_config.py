import pytest

from mrbench.core.errors import UserError
from mrbench.engine.config import RunSpec, TrainSettings, resolve_spec


def test_run_key_is_stable_and_sensitive():
    a = resolve_spec("grpo", "tool-calling", "tiny", 0)
    b = resolve_spec("grpo", "tool-calling", "tiny", 0)
    assert a.run_key() == b.run_key() and len(a.run_key()) == 12
    assert resolve_spec("grpo", "tool-calling", "tiny", 1).run_key() != a.run_key()
    assert resolve_spec("gdpo", "tool-calling", "tiny", 0).run_key() != a.run_key()
    changed = resolve_spec("grpo", "tool-calling", "tiny", 0, method_params={"eps": "1e-4"})
    assert changed.run_key() != a.run_key()
    assert resolve_spec("grpo", "tool-calling", "tiny", 0, train={"steps": 3}).run_key() != a.run_key()


def test_defaults_are_made_explicit():
    spec = resolve_spec("corrgrpo", "tool-calling", "tiny", 0)
    assert spec.method_params  # every hyper-parameter with its default, so the key covers it
    assert spec.task_params


def test_round_trip_through_dict():
    spec = resolve_spec("gdpo", "tool-calling", "tiny", 2, train={"num_generations": "4"})
    again = RunSpec.from_dict(spec.to_dict())
    assert again == spec and again.run_key() == spec.run_key()
    assert spec.train.num_generations == 4
    params = spec.flat_params()
    assert params["method"] == "gdpo" and params["train.num_generations"] == "4"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "grpoo"}, "did you mean 'grpo'"),
        ({"task": "tool-caling"}, "did you mean 'tool-calling'"),
        ({"model": "tiny-xl"}, "unknown model 'tiny-xl'"),
        ({"method_params": {"epss": "1"}}, "unknown parameter 'epss'"),
        ({"train": {"stepz": 3}}, "unknown train setting 'stepz'"),
        ({"train": {"steps": 0}}, "steps=0"),
        ({"train": {"learning_rate": "fast"}}, "expected float"),
        ({"seed": -1}, "seed must be a non-negative integer"),
    ],
)
def test_bad_input_names_the_value(kwargs, message):
    args = {"method": "grpo", "task": "tool-calling", "model": "tiny", "seed": 0}
    args.update(kwargs)
    with pytest.raises(UserError) as err:
        resolve_spec(args.pop("method"), args.pop("task"), args.pop("model"), args.pop("seed"), **args)
    assert message.lower() in str(err.value).lower()


def test_train_settings_validate_directly():
    with pytest.raises(UserError, match="num_generations=1"):
        TrainSettings(num_generations=1)


def test_task_train_defaults_come_before_the_callers_overrides():
    """agent-security asks for a smaller learning rate; the caller's value still wins."""
    from mrbench.tasks.agent_security.task import AgentSecurityTask

    wanted = AgentSecurityTask.train_defaults["learning_rate"]
    assert wanted != TrainSettings().learning_rate
    assert resolve_spec("grpo", "agent-security", "tiny", 0).train.learning_rate == wanted
    default = TrainSettings().learning_rate
    assert resolve_spec("grpo", "tool-calling", "tiny", 0).train.learning_rate == default
    mine = resolve_spec("grpo", "agent-security", "tiny", 0, train={"learning_rate": "2e-4", "steps": 3})
    assert (mine.train.learning_rate, mine.train.steps) == (2e-4, 3)


def test_a_tasks_bad_train_default_is_named_as_the_tasks(monkeypatch):
    from mrbench.tasks.agent_security.task import AgentSecurityTask

    monkeypatch.setattr(AgentSecurityTask, "train_defaults", {"learnng_rate": 1e-4})
    with pytest.raises(
        UserError, match="task 'agent-security' has bad train_defaults: unknown train setting 'learnng_rate'"
    ):
        resolve_spec("grpo", "agent-security", "tiny", 0)
