"""The GPU path's correctness, checked on a CPU: precision, one copy of the policy, one device per
cell process, failures that end the cell, multi-process rollouts in step, vLLM's context cap, and a
GPU smoke script that compares like with like (issue: "The GPU path, read against TRL 1.16")."""

from __future__ import annotations

import gc
import importlib.util
import json
import re
import tomllib
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file
from test_distributed_cell import TASK as DISTRIBUTED_TASK

from mrbench.core import layout
from mrbench.core.errors import UserError
from mrbench.engine.cell import runner
from mrbench.engine.config import resolve_spec
from mrbench.engine.evaluation import policy
from mrbench.engine.models.catalog import Precision
from mrbench.engine.processes.devices import gpus_for_slot, pin_for_cell, visible_gpus
from mrbench.engine.training import grpo_setup, rollout_adapter
from mrbench.engine.training.trainer import MultiRewardGRPOTrainer

REPO = Path(__file__).resolve().parents[2]
FIXED = DISTRIBUTED_TASK  # rewards that differ within groups
SMALL = {"num_generations": "4", "prompts_per_step": "2", "eval_limit": "1"}


def _layer_weights(path: Path) -> dict[str, torch.Tensor]:
    """The transformer blocks' matrices of a saved model (every one of them gets a gradient)."""
    weights = load_file(str(path / "model.safetensors"))
    return {k: v.float() for k, v in weights.items() if ".layers." in k and v.dim() == 2}


def _changed_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    changed = sum(int((before[k] != after[k]).sum()) for k in before)
    return changed / sum(v.numel() for v in before.values())


# ------------------------------------------------------------------ 1. precision


def test_weights_move_under_bf16_mixed_precision_at_the_papers_learning_rate(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """precision=bf16: float32 master weights under bfloat16 autocast, so 3 steps at lr 1e-6 move
    nearly every weight; bfloat16 weights (the earlier policy dtype) keep nearly all of them."""
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    train = {**SMALL, "steps": "3", "learning_rate": "1e-6", "precision": "bf16"}
    spec = resolve_spec("grpo", FIXED, str(micro_model_dir), 0, train=train)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = runner.run_cell(spec, tracking_uri=uri, experiment="bf16", progress=False)
    assert result.status == "FINISHED"
    run = MlflowClient(uri).get_run(result.run_id)
    assert run.data.params["train.precision"] == "bf16"
    before, after = _layer_weights(micro_model_dir), _layer_weights(Path(result.checkpoint_dir))
    assert all(after[k].dtype == torch.float32 for k in after)  # checkpointed in float32
    assert _changed_share(before, after) > 0.9

    # The mechanism: the same size of update on bfloat16 weights rounds away.
    torch.manual_seed(0)
    weights = torch.nn.Parameter((torch.randn(256, 256) * 0.02).bfloat16())
    start = weights.detach().clone()
    opt = torch.optim.AdamW([weights], lr=1e-6, weight_decay=0.0)
    for _ in range(3):
        weights.grad = torch.randn_like(weights)
        opt.step()
    assert float((weights.detach() == start).float().mean()) > 0.9


def test_precision_setting_sets_trls_config(micro_model_dir: Path, tmp_path: Path) -> None:
    from mrbench.tasks import build_task

    def config(**train: Any) -> Any:
        spec = resolve_spec("grpo", "tool-calling", str(micro_model_dir), 0, train={**SMALL, **train})
        task = build_task(spec.task, spec.task_params)
        try:
            precision = Precision.of(spec.train.precision)
            return grpo_setup.grpo_config(spec, task, str(tmp_path), progress=False, precision=precision)
        finally:
            task.close()

    assert not config().bf16  # auto on a CPU: float32
    assert config(precision="bf16").bf16 and not config(precision="fp32").bf16
    kl = config(precision="bf16", beta=0.01)
    assert kl.model_init_kwargs == {"dtype": "bfloat16", "device_map": None}  # the reference model
    assert config(beta=0.01).model_init_kwargs == {"dtype": "float32", "device_map": None}
    with pytest.raises(UserError, match="precision='fp16'"):
        config(precision="fp16")


# ------------------------------------------------------------------ 2. one copy of the policy


def test_with_a_kl_term_the_evaluated_policy_is_the_trained_one(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """beta > 0: the model of the pre-training evaluation is the trainer's policy, and only it and
    TRL's reference model are alive while training (no stale copy of a 7B model on the GPU)."""
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    loaded: list[weakref.ref] = []
    real_load = policy.load_policy

    def load_policy(path: str, **kwargs: Any) -> Any:
        model, tokenizer = real_load(path, **kwargs)
        loaded.append(weakref.ref(model))
        return model, tokenizer

    seen: dict[str, Any] = {}
    real_train = MultiRewardGRPOTrainer.train

    def train(self: MultiRewardGRPOTrainer, *args: Any, **kwargs: Any) -> Any:
        gc.collect()
        cls = type(self.model)
        seen["alive"] = sum(1 for o in gc.get_objects() if type(o) is cls)
        seen["same"] = loaded[0]() is self.model
        seen["reference"] = self.ref_model is not None
        return real_train(self, *args, **kwargs)

    monkeypatch.setattr(policy, "load_policy", load_policy)
    monkeypatch.setattr(MultiRewardGRPOTrainer, "train", train)
    spec = resolve_spec("grpo", FIXED, str(micro_model_dir), 0, train={**SMALL, "steps": "1", "beta": "0.01"})
    result = runner.run_cell(
        spec, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="kl", progress=False
    )
    assert result.status == "FINISHED"
    assert seen == {"alive": 2, "same": True, "reference": True}


# ------------------------------------------------------------------ 3. one device per cell process


def test_each_cell_process_sees_its_own_gpus() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}) == ["0", "1", "2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert [gpus_for_slot(["0", "1", "2", "3"], s) for s in range(5)] == ["0", "1", "2", "3", "0"]
    assert [gpus_for_slot(["0", "1", "2", "3"], s, per_cell=2) for s in range(3)] == ["0,1", "2,3", "0,1"]
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6"}
    pin_for_cell(env, slot=1)
    assert env == {"CUDA_VISIBLE_DEVICES": "5"}
    cpu_only = {"CUDA_VISIBLE_DEVICES": ""}
    pin_for_cell(cpu_only)
    assert cpu_only == {"CUDA_VISIBLE_DEVICES": ""}


def test_a_one_process_cell_that_sees_several_gpus_stops_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    spec = resolve_spec("grpo", "tool-calling", "tiny", 0)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with pytest.raises(UserError, match="sees 4 GPUs and trains on one: set CUDA_VISIBLE_DEVICES"):
        runner.run_cell(spec, tracking_uri=uri, experiment="gpus", progress=False)
    assert MlflowClient(uri).get_experiment_by_name("gpus") is None


# ------------------------------------------------------------------ 4. failures end the cell


def test_out_of_memory_in_a_multi_turn_rollout_ends_the_cell_failed(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))

    def sampler(trainer: MultiRewardGRPOTrainer) -> Any:
        def generate(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        return generate

    monkeypatch.setattr(rollout_adapter, "policy_sampler", sampler)
    params = {"n_train": "8", "n_eval": "4"}
    spec = resolve_spec("grpo", "agent-security", str(micro_model_dir), 0, task_params=params, train=SMALL)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with pytest.raises(torch.OutOfMemoryError):
        runner.run_cell(spec, tracking_uri=uri, experiment="oom", progress=False)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("oom").experiment_id])
    assert run.info.status == "FAILED"
    assert "OutOfMemoryError: CUDA out of memory" in run.data.tags[layout.tag(layout.ERROR)]


# ------------------------------------------------------------------ 5. ranks in step


BALANCE = '<tool_call>\n{"name": "balance", "parameters": {}}\n</tool_call>'
"""A call every world answers."""


def _episodes_on_rank(rank: int, world: int, rendezvous: str, out: str) -> None:
    """Rank ``rank``: episodes of 1 turn (rank 0) or 3 turns (rank 1) through the real turn loop,
    counting its ``generate`` calls; the turn sync is an all-reduce over gloo."""
    import torch.distributed as dist

    from mrbench.engine.models.tiny import train_tokenizer
    from mrbench.tasks.agent_security.rollout import run_token_episodes
    from mrbench.tasks.agent_security.scenarios import EmbeddedEnv, generate

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    scenarios = [s for s in generate(40, 0, 0, ["important_instructions"])[0] if not s.attacked]
    two_step = [s for s in scenarios if len(s.gold) == 2][:3]
    texts = [t for s in two_step for t in s.gold] + [
        m["content"] for m in EmbeddedEnv(two_step[0]).initial_messages()
    ]
    texts.append(BALANCE)
    tok = train_tokenizer(texts, vocab_size=400)
    calls = 0

    def generate_fn(batch: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        nonlocal calls
        calls += 1
        # Rank 0 answers at once (1 turn); rank 1 calls a tool twice first (3 turns).
        outs = []
        for ids in batch:
            turn = tok.decode(ids).count("<|im_start|>assistant") - 1
            text = BALANCE if rank == 1 and turn < 2 else "<response>done</response>"
            outs.append([*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id])
        return outs

    def any_live(live: bool) -> bool:
        flag = torch.tensor([int(live)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    from mrbench.tasks.agent_security.episode import Limits

    envs = [EmbeddedEnv(s) for s in two_step]
    *_, results = run_token_episodes(
        envs, tok, generate_fn, limits=Limits(max_turns=4), max_new_tokens=48,
        eos_token_ids=[tok.eos_token_id], any_live=any_live,
    )  # fmt: skip
    Path(out).joinpath(f"rank{rank}.json").write_text(
        json.dumps({"calls": calls, "turns": [len(r.turns) for r in results]})
    )
    dist.destroy_process_group()


@pytest.mark.slow
def test_ranks_whose_episodes_end_at_different_turns_make_the_same_generate_calls(tmp_path: Path) -> None:
    """Under FSDP or ZeRO-3 each generate call is collective: a rank whose episodes ended keeps
    calling (a discarded continuation) while another rank's episodes go on."""
    import torch.multiprocessing as mp

    mp.spawn(_episodes_on_rank, args=(2, str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["turns"] == [1, 1, 1] and ranks[1]["turns"] == [3, 3, 3]
    assert ranks[0]["calls"] == ranks[1]["calls"] == 3


# ------------------------------------------------------------------ 6. vLLM's context


def test_vllm_context_is_capped_from_the_task(micro_model_dir: Path, tmp_path: Path) -> None:
    from mrbench.engine.evaluation.generation import vllm_context_cap
    from mrbench.engine.models.catalog import load_tokenizer
    from mrbench.tasks import build_task

    tok = load_tokenizer(str(micro_model_dir))
    tools = build_task("tool-calling", {"n_train": 16, "prompt_style": "compact"})
    prompts = [
        tok.apply_chat_template(s.prompt, add_generation_prompt=True, tokenize=False)
        for s in tools.train_samples()
    ]
    longest = max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    assert vllm_context_cap(tools, tok, 64, None) == longest + 64
    assert vllm_context_cap(tools, tok, 64, 100) == 100  # never past the model's context
    agent = build_task("agent-security", {"n_train": 8, "n_eval": 4, "prompt_style": "compact"})
    assert agent.completion_budget(48) == 4 * 48 + 3 * (1500 // 2 + 16)  # turns and tool results
    agent.close()
    spec = resolve_spec(
        "grpo", "tool-calling", str(micro_model_dir), 0, task_params={"n_train": 16}, train={"use_vllm": True}
    )
    config = grpo_setup.grpo_config(
        spec,
        tools,
        str(tmp_path),
        progress=False,
        precision=Precision.of(spec.train.precision),
        vllm_max_length=777,
    )
    assert config.vllm_max_model_length == 777


# ------------------------------------------------------------------ 7. the smoke script


def test_gpu_smoke_gives_plain_trl_the_cells_policy_and_precision(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    path = REPO / "benchmarks" / "gpu_smoke.py"
    loader = importlib.util.spec_from_file_location("gpu_smoke", path)
    smoke = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(smoke)
    args = smoke.parse_args(["--tiny", "--steps", "1", "--precision", "bf16", "--device", "cpu"])
    trainer, task = smoke.plain_trl_trainer(args, str(micro_model_dir), False, str(tmp_path / "trl"))
    try:
        assert trainer.args.bf16  # the cell's mixed precision ...
        assert next(trainer.model.parameters()).dtype == torch.float32  # ... over float32 weights
        assert trainer.args.save_strategy == "no"  # no checkpoint while timed, as the mrbench rows
    finally:
        task.close()


# ------------------------------------------------------------------ 8. the vLLM extra


def test_vllm_extra_pins_the_transformers_ci_tests_the_engine_on() -> None:
    """vLLM 0.31 (the newest TRL 1.16 takes) requires transformers < 5.18: the extra says so, and
    .ci/run runs the engine tests on the transformers it pins."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    pin = next(r for r in extra if r.startswith("transformers"))
    assert "<5.18" in pin
    ci = (REPO / ".ci" / "run").read_text()
    tested = re.search(r"transformers==(5\.1[0-7][.\d]*)", ci)
    assert tested, ".ci/run installs no transformers < 5.18 for the engine tests"
    assert "tests/engine" in ci[tested.start() :]


# ------------------------------------------------------------------ 9. out of memory in an evaluation


def test_out_of_memory_in_the_agent_security_evaluation_fails_the_cell_and_caches_nothing(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 3 of issue 33: an evaluation that runs out of GPU memory is no row of
    ``policy_error`` episodes; the cell ends FAILED and the cache keeps no bogus "before" figure."""
    from mrbench.engine.evaluation.generation import HFGenerator

    results = tmp_path / "results"
    monkeypatch.setenv("MRBENCH_RESULTS", str(results))

    def out_of_memory(self: Any, conversations: Any, *, max_new_tokens: int) -> list[str]:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(HFGenerator, "__call__", out_of_memory)
    params = {"n_train": "8", "n_eval": "4"}
    spec = resolve_spec("grpo", "agent-security", str(micro_model_dir), 0, task_params=params, train=SMALL)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with pytest.raises(torch.OutOfMemoryError):
        runner.run_cell(spec, tracking_uri=uri, experiment="eval-oom", progress=False)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("eval-oom").experiment_id])
    assert run.info.status == "FAILED"
    assert "OutOfMemoryError" in run.data.tags[layout.tag(layout.ERROR)]
    assert not list((results / "eval_cache").glob("*.json"))


# ------------------------------------------------------------------ 10. vLLM's precision


def test_vllm_generates_in_the_cells_precision(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 12 of issue 33: TRL 1.16 builds ``vllm.LLM`` without a dtype, and vLLM's ``auto``
    turns a float32 folder into bfloat16 (float16 before Ampere) whatever the cell's precision. The
    real trainer, built as a cell builds it, hands vLLM the cell's precision (vLLM itself is a
    stand-in here: it needs a GPU)."""
    from trl.generation import vllm_generation

    import mrbench.methods as methods
    from mrbench.engine.models.catalog import load_tokenizer
    from mrbench.tasks import build_task

    built: list[dict[str, Any]] = []

    class FakeLLM:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    monkeypatch.setattr(vllm_generation, "LLM", FakeLLM, raising=False)
    # TRL's colocated vLLM writes RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT into
    # this process's environment; left there, every later cell started from this pytest process
    # would take itself for a rank of a multi-process group on port 29500.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)  # undone at teardown: back to what it was (absent or its value)
    tok = load_tokenizer(str(micro_model_dir))
    for precision, dtype in [("bf16", "bfloat16"), ("fp32", "float32")]:
        train = {**SMALL, "use_vllm": "true", "precision": precision}
        spec = resolve_spec(
            "grpo", "tool-calling", str(micro_model_dir), 0, task_params={"n_train": 16}, train=train
        )
        task = build_task(spec.task, spec.task_params)
        try:
            resolved = Precision.of(precision)
            with grpo_setup.vllm_engine_options(spec, resolved):
                MultiRewardGRPOTrainer(
                    model=str(micro_model_dir),
                    reward_funcs=[c.fn for c in task.reward_components()],
                    args=grpo_setup.grpo_config(
                        spec, task, str(tmp_path / precision), progress=False, precision=resolved
                    ),
                    train_dataset=grpo_setup.train_dataset(task.train_samples()),
                    processing_class=tok,
                    method_fn=methods.get_method("grpo").obj,
                )
        finally:
            task.close()
        assert built[-1]["dtype"] == dtype and built[-1]["model"] == str(micro_model_dir)
        assert vllm_generation.LLM is FakeLLM  # put back
    assert len(built) == 2


# ------------------------------------------------------------------ 11. the vLLM install


def _pins(name: str) -> dict[str, str]:
    """``{package: version}`` of a constraints file's ``package==version`` lines."""
    lines = (REPO / name).read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in lines]
    return {p.split("==")[0].lower(): p.split("==")[1] for p in pins if p}


def test_the_vllm_install_line_resolves_to_versions_every_requirement_accepts() -> None:
    """Finding 12 of issue 33: ``pip install ".[vllm]" -c constraints.txt`` cannot resolve (5.24 is
    outside the extra's transformers range), so the documented line is ``-c constraints-vllm.txt``,
    whose pins each requirement of pyproject (base and extra) and TRL's vLLM range accept."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["vllm"]]
    trl_vllm = [Requirement(r) for r in requires("trl") or [] if 'extra == "vllm"' in r]
    reqs += [r for r in trl_vllm if r.name == "vllm"]
    assert any(r.name == "vllm" for r in reqs), "TRL's vllm extra names no vllm range"
    vllm_pins, base_pins = _pins("constraints-vllm.txt"), _pins("constraints.txt")
    for req in reqs:
        if req.name.lower() in vllm_pins:
            assert req.specifier.contains(vllm_pins[req.name.lower()]), f"{req} refuses {vllm_pins[req.name]}"
    extra = next(
        Requirement(r) for r in project["optional-dependencies"]["vllm"] if r.startswith("transformers")
    )
    assert not extra.specifier.contains(base_pins["transformers"])  # why constraints.txt cannot serve
    assert set(vllm_pins) == set(base_pins) | {"vllm"}
    changed = {k for k in base_pins if vllm_pins[k] != base_pins[k]}
    assert changed <= {"transformers", "numpy"}  # only what vLLM's requirements move
    ci = re.search(r"transformers==([\d.]+)", (REPO / ".ci" / "run").read_text())
    assert ci and ci.group(1) == vllm_pins["transformers"]  # CI's engine tests on the vLLM transformers
    cluster = (REPO / "docs" / "cluster.md").read_text()
    assert 'pip install -e ".[vllm]" -c constraints-vllm.txt' in cluster


# ------------------------------------------------------------------ 12. the smoke script, like with like


def _smoke_module() -> Any:
    loader = importlib.util.spec_from_file_location("gpu_smoke", REPO / "benchmarks" / "gpu_smoke.py")
    smoke = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(smoke)
    return smoke


def test_gpu_smoke_rows_write_no_checkpoint_while_timed(
    micro_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 10 of issue 33: the mrbench rows wrote a training checkpoint every tenth of the steps
    (optimizer state included, fsync'd) inside their timed training, plain TRL none."""
    smoke = _smoke_module()
    calls: list[dict[str, Any]] = []

    def recording_run_cell(spec: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise RuntimeError("recorded")

    monkeypatch.setattr(runner, "run_cell", recording_run_cell)
    args = smoke.parse_args(["--tiny", "--steps", "20", "--device", "cpu"])
    with pytest.raises(RuntimeError, match="recorded"):
        smoke.run_mrbench(args, str(micro_model_dir), "grpo", False, "sqlite:///unused.db")
    assert calls[0]["checkpoint_every"] == 0 and calls[0]["save"] == "none"


def test_gpu_smoke_peak_memory_is_the_trainings_alone() -> None:
    """The peak is reset as ``train()`` starts and read as it ends: not the evaluations' nor the
    loading's (finding 10 of issue 33)."""
    smoke = _smoke_module()
    events: list[str] = []

    class Base:
        def train(self) -> str:
            events.append("train")
            return "trained"

    class Trainer(Base):
        pass

    with smoke.training_peak(Trainer, reset=lambda: events.append("reset"), read=lambda: 1.5) as peak:
        events.append("evaluate before")
        assert Trainer().train() == "trained"
        events.append("evaluate after")
    assert events == ["evaluate before", "reset", "train", "evaluate after"]
    assert peak == {"peak_gb": 1.5}
    assert "train" not in vars(Trainer)  # the inherited method again


def test_gpu_smoke_gives_each_run_one_gpu() -> None:
    """Each run's process sees the first visible GPU only: a cell process that sees several stops
    (check_one_device), and plain TRL would use DataParallel (finding 10 of issue 33)."""
    smoke = _smoke_module()
    assert smoke.row_env({"CUDA_VISIBLE_DEVICES": "2,3", "HOME": "/h"}) == {
        "CUDA_VISIBLE_DEVICES": "2",
        "HOME": "/h",
    }
    assert smoke.row_env({"CUDA_VISIBLE_DEVICES": ""}) == {"CUDA_VISIBLE_DEVICES": ""}  # --device cpu


def test_a_cell_builds_its_trainer_inside_the_vllm_options(
    micro_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner builds the trainer (where TRL builds ``vllm.LLM``) inside
    :func:`~mrbench.engine.training.grpo_setup.vllm_engine_options` of the cell's spec and its
    precision, resolved once."""
    import contextlib

    import mrbench.engine.training.trainer as trainer_module

    monkeypatch.setenv("MRBENCH_RESULTS", str(tmp_path / "results"))
    active: list[Any] = []
    seen: list[list[Any]] = []

    @contextlib.contextmanager
    def recording(spec: Any, precision: Any) -> Any:
        active.append((spec, precision))
        try:
            yield
        finally:
            active.pop()

    class Stop(Exception):
        pass

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            seen.append(list(active))
            raise Stop

    monkeypatch.setattr(runner, "vllm_engine_options", recording)
    monkeypatch.setattr(trainer_module, "MultiRewardGRPOTrainer", Recorder)
    spec = resolve_spec("grpo", FIXED, str(micro_model_dir), 0, train=SMALL)
    with pytest.raises(Stop):
        runner.run_cell(spec, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="x", progress=False)
    assert seen == [[(spec, Precision.of(spec.train.precision))]]
