"""The tiny presets: Qwen2-shaped models built and warm-started here, offline, in minutes.

A tiny preset is a Qwen2-shaped causal LM with a byte-level BPE tokenizer trained here, then
warm-started by supervised fine-tuning (SFT) on the tasks' demonstrations, so that GRPO starts
from rewards that are non-zero but clearly improvable. The result is cached under
``results/models/<preset>-<key>/``; the key hashes the architecture, tokenizer and SFT settings
and the demonstrations themselves, so adding or changing a task rebuilds the model.

The demonstrations use the tasks' compact prompts (:data:`TINY_TASK_SETTINGS`), the ones the tiny
models are then trained and evaluated with.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.core.model_marker import ModelMarker
from mrbench.engine.runs import phases

log = logging.getLogger(__name__)

# Bump to invalidate every cached tiny model. 4: built on one thread whatever the caller uses, so
# the weights no longer depend on the machine's cores (models built before may differ in rounding).
BUILDER_VERSION = 4
BUILD_THREADS = 1
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyPreset:
    """Architecture and warm-start recipe of one tiny model (parameter counts in the docstring table)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    sft_steps: int
    sft_lr: float
    vocab_size: int = 2048
    max_position_embeddings: int = 1024
    sft_batch_size: int = 16
    demos_per_task: int = 1500
    drop_final_line_fraction: float = 0.5
    """Share of demonstrations whose final line is left out before SFT (see :func:`drop_final_lines`)."""


# Each rung has roughly 4× the parameters of the previous one (~0.56M, 1.9M, 8.4M, 32.5M).
# The SFT budget is deliberately short: the warm start should teach the output formats,
# not solve the tasks, so that GRPO has room to improve.
TINY_PRESETS: dict[str, TinyPreset] = {
    "tiny": TinyPreset(96, 3, 4, 2, 384, sft_steps=1000, sft_lr=3e-3),
    "tiny-s": TinyPreset(160, 4, 4, 2, 640, sft_steps=400, sft_lr=2e-3),
    "tiny-m": TinyPreset(256, 8, 8, 4, 1024, sft_steps=400, sft_lr=1e-3),
    "tiny-l": TinyPreset(512, 8, 8, 4, 2048, sft_steps=400, sft_lr=5e-4),
}


TINY_TASK_SETTINGS: dict[str, Any] = {"prompt_style": "compact"}
"""Task settings the tiny presets are built for: their warm start teaches the tasks' compact
prompts (a few hundred tokens of a 1,024-token context, in a vocabulary trained on them), not the
chat prompts a pretrained instruction model follows (the tasks' default)."""


def count_parameters(preset: TinyPreset) -> int:
    """Parameters of the model a preset builds (tied input/output embeddings)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with _torch_meta():
        model = Qwen2ForCausalLM(Qwen2Config(**qwen2_kwargs(preset)))
    return sum(p.numel() for p in model.parameters())


class _torch_meta:
    """Build on the meta device (no memory, no init time) for counting."""

    def __enter__(self) -> None:
        import torch

        self._ctx = torch.device("meta")
        self._ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


def qwen2_kwargs(preset: TinyPreset) -> dict[str, Any]:
    """``Qwen2Config`` keyword arguments for ``preset``'s architecture.

    The special-token ids are fixed small values, right for a model that is never decoded with a
    tokenizer (parameter counting, the associative-recall probe); :func:`untrained_model`
    replaces them with its tokenizer's ids.
    """
    return {
        "vocab_size": preset.vocab_size,
        "hidden_size": preset.hidden_size,
        "num_hidden_layers": preset.num_hidden_layers,
        "num_attention_heads": preset.num_attention_heads,
        "num_key_value_heads": preset.num_key_value_heads,
        "intermediate_size": preset.intermediate_size,
        "max_position_embeddings": preset.max_position_embeddings,
        "tie_word_embeddings": True,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }


# --------------------------------------------------------------------------- demonstrations


def collect_demonstrations(
    per_task: int, seed: int = 0, *, drop_fraction: float = 0.0
) -> tuple[list[tuple[list[dict], str]], list[str]]:
    """Demonstrations from every task that can be built here, and the names of those tasks.

    ``drop_fraction``: share of each task's multi-line completions whose final line is left
    out (:func:`drop_final_lines`), except for a task whose ``demos_keep_final_line`` is true
    (agent security: every turn of an episode must be well formed, so a flaw per turn would
    compound over the episode instead of leaving one thing for GRPO to fix).

    A task whose package is not available (ImportError) is left out with a log line; the cache
    key covers which tasks were used, so the model is rebuilt once the task appears.
    """
    import mrbench.tasks as tasks

    demos: list[tuple[list[dict], str]] = []
    used: list[str] = []
    names = tasks.TASKS.builtin_names()
    with phases.phase("demonstrations", len(names), "tasks") as progress:
        for done, name in enumerate(names):
            progress.update(done)
            settings = tasks.get_task_entry(name).params
            compact = {k: v for k, v in TINY_TASK_SETTINGS.items() if k in settings}
            try:
                task = tasks.build_task(name, compact)
            except ImportError as exc:
                log.warning("warm start: task %s unavailable (%s); not included", name, exc)
                continue
            try:
                own = task.demonstrations(per_task, seed)
            finally:
                task.close()
            if drop_fraction > 0 and not task.demos_keep_final_line:
                own = drop_final_lines(own, drop_fraction, seed=f"{seed}/{task.name}")
            demos.extend(own)
            used.append(f"{task.name}@{task.version}")
        progress.update(len(names))
    if not demos:
        raise UserError("no task could provide demonstrations for the tiny model's warm start")
    return demos, used


def drop_final_lines(
    demos: list[tuple[list[dict], str]], fraction: float, seed: int | str
) -> list[tuple[list[dict], str]]:
    r"""Remove the last line of ``fraction`` of the multi-line completions.

    Why: a model fine-tuned on perfect demonstrations starts RL near its imitation ceiling with
    little entropy, and greedy evaluation cannot show what GRPO adds. The single-turn tasks'
    output formats end with a closing line (``</tool_call>``, a closing code fence), so a warm
    start that leaves it out about half of the time has one flaw that the format and
    correctness rewards penalise, that sampling explores, and that GRPO can fix: rewards start
    non-zero but clearly improvable. (Multi-turn agent security opts out, see
    :func:`collect_demonstrations`; its room to improve is the attack success rate.)

    >>> drop_final_lines([([], "a\nb\nc")], 1.0, seed=0)[0][1]
    'a\nb'
    >>> drop_final_lines([([], "single line")], 1.0, seed=0)[0][1]
    'single line'
    """
    rng = random.Random(seed)
    out = []
    for prompt, completion in demos:
        lines = completion.rstrip("\n").split("\n")
        if len(lines) >= 2 and rng.random() < fraction:
            completion = "\n".join(lines[:-1])
        out.append((prompt, completion))
    return out


def _demos_digest(demos: list[tuple[list[dict], str]]) -> str:
    h = hashlib.sha256()
    for prompt, completion in demos:
        h.update(json.dumps([prompt, completion], sort_keys=True).encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- tokenizer


QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""The pre-tokenizer split of Qwen2's tokenizer (one digit per piece, words with one leading
non-letter). ``AutoTokenizer`` loads any tokenizer saved next to a ``qwen2`` config as
``Qwen2Tokenizer``, which rebuilds its normalizer and pre-tokenizer from this pattern and keeps
only the vocabulary and merges. The tiny tokenizers are trained with the same split so that the
text the warm start was trained on is cut exactly as the loaded tokenizer cuts it."""


def train_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, with Qwen-style chat markup as special tokens.

    Normalizer and pre-tokenizer are Qwen2's (see :data:`QWEN2_PRETOKENIZE_REGEX`), so the
    tokenizer cuts text the same way before and after a save and ``AutoTokenizer`` load.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def check_tokenizer_round_trip(trained: Any, loaded: Any, texts: list[str]) -> None:
    """Raise ``RuntimeError`` unless ``loaded`` (the saved tokenizer read back) encodes ``texts``
    to the same ids as ``trained``.

    Why: a model warm-started on one tokenization and then run with another sees its inputs
    out of distribution (numbers especially), and nothing else fails loudly.
    """
    for text in texts:
        a = trained(text, add_special_tokens=False)["input_ids"]
        b = loaded(text, add_special_tokens=False)["input_ids"]
        if list(a) != list(b):
            raise RuntimeError(
                f"the saved tokenizer reloads as {type(loaded).__name__} and cuts text differently "
                f"from the one trained: {text[:80]!r} gives {list(a)[:12]} vs {list(b)[:12]}"
            )


# --------------------------------------------------------------------------- build


def tiny_cache_key(name: str, preset: TinyPreset, demos_digest: str, tasks_used: list[str]) -> str:
    """Hash of everything that determines the built model."""
    payload = {
        "v": BUILDER_VERSION,
        "name": name,
        "preset": asdict(preset),
        "demos": demos_digest,
        "tasks": tasks_used,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def _encode_demo(tok: Any, prompt: list[dict], completion: str, max_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels of one demonstration: ``prompt`` + ``completion`` as the next assistant turn.

    Labels are -100 except on assistant text, each turn with its ``<|im_end|>``: the completion
    and every earlier assistant message of a multi-turn ``prompt``. So a whole demonstrated
    episode trains every one of its turns in one sequence (a single-turn prompt has no
    assistant message and only the completion is trained). Cut to the last ``max_len`` tokens.
    """
    messages = [*prompt, {"role": "assistant", "content": completion}]
    text = tok.apply_chat_template(messages, tokenize=False).removesuffix("\n")
    spans = []  # character spans of assistant text + "<|im_end|>"
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            start = len(tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True))
            if text[start : start + len(message["content"])] != message["content"]:
                raise ValueError("chat template does not render assistant turns verbatim")
            spans.append((start, start + len(message["content"]) + len("<|im_end|>")))
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    labels = [
        token if any(s <= a and b <= e for s, e in spans) else -100
        for token, (a, b) in zip(ids, enc["offset_mapping"], strict=True)
    ]
    return ids[-max_len:], labels[-max_len:]


def sft_warm_start(
    model: Any, tok: Any, demos: list[tuple[list[dict], str]], preset: TinyPreset, seed: int
) -> float:
    """Supervised fine-tuning on (prompt, completion) pairs, loss on completion tokens only.

    A plain loop (not TRL's SFTTrainer): it is a few hundred steps on a sub-10M model, and the
    explicit loop keeps the warm start fast and easy to read. Returns the final mean loss.
    """
    import torch

    rng = random.Random(seed)
    encoded = [_encode_demo(tok, p, c, preset.max_position_embeddings) for p, c in demos]
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=preset.sft_lr, weight_decay=0.0)
    warmup = max(1, preset.sft_steps // 10)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, preset.sft_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    losses: list[float] = []
    batches: list[list[tuple[list[int], list[int]]]] = []
    warm = phases.start("warm start", preset.sft_steps, "steps")
    for _ in range(preset.sft_steps):
        if not batches:
            batches = _bucketed_batches(encoded, preset.sft_batch_size, rng)
        batch = batches.pop()
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(batch):  # right padding for training
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            attention[row, : len(ids)] = 1
        loss = _completion_loss(model, input_ids, attention, labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        warm.advance()
    warm.end()
    model.eval()
    tail = losses[-20:]
    return sum(tail) / len(tail)


_BUCKET_GROUP = 8
"""Batches drawn together and cut by length (see :func:`_bucketed_batches`)."""


def _bucketed_batches(
    encoded: list[tuple[list[int], list[int]]], batch_size: int, rng: random.Random
) -> list[list[tuple[list[int], list[int]]]]:
    """:data:`_BUCKET_GROUP` random batches' worth of examples, cut into batches of similar length.

    Why: a batch is as wide as its longest example, and the tasks' lengths differ by about 3×,
    so random batches are ~40 % padding. Sorting only within a small random group (not the
    whole set) keeps every batch a fresh random draw and keeps the tasks interleaved over
    training; a globally sorted order would train the tasks one after another and forget the
    first ones. Returned in random order, to be consumed with ``pop()``.
    """
    size = min(batch_size, len(encoded))
    pool = [encoded[rng.randrange(len(encoded))] for _ in range(size * _BUCKET_GROUP)]
    pool.sort(key=lambda pair: len(pair[0]))
    batches = [pool[i : i + size] for i in range(0, len(pool), size)]
    rng.shuffle(batches)
    return batches


def _completion_loss(model: Any, input_ids: Any, attention: Any, labels: Any) -> Any:
    """Mean next-token cross-entropy over completion tokens: the value of ``model(labels=...).loss``.

    Shapes: ``input_ids``/``attention``/``labels`` [B, T]; ``labels`` is -100 on prompt and padding.
    Only the positions that predict a completion token go through the output layer (about an
    eighth of all positions here), which saves most of the vocabulary projection's work.
    """
    import torch

    hidden = model.model(input_ids=input_ids, attention_mask=attention).last_hidden_state  # [B, T, H]
    targets = labels[:, 1:]  # position t predicts token t + 1
    keep = targets != -100  # [B, T-1]
    logits = model.lm_head(hidden[:, :-1][keep])  # [N, V]
    return torch.nn.functional.cross_entropy(logits.float(), targets[keep])


def untrained_model(preset: TinyPreset, tok: Any, *, seed: int = 0) -> Any:
    """A randomly initialised Qwen2 of ``preset``'s shape for tokenizer ``tok`` (its special ids set).

    The SFT fields of ``preset`` are not used. Input and output embeddings are tied.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    kwargs = qwen2_kwargs(preset)
    kwargs.update(
        vocab_size=len(tok),
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )
    model = Qwen2ForCausalLM(Qwen2Config(**kwargs))
    model.generation_config.eos_token_id = kwargs["eos_token_id"]
    model.generation_config.pad_token_id = kwargs["pad_token_id"]
    model.generation_config.bos_token_id = kwargs["bos_token_id"]
    return model


def build_tiny_model(
    preset: TinyPreset, out_dir: Path, demos: list[tuple[list[dict], str]], seed: int = 0
) -> dict[str, Any]:
    """Train the tokenizer, initialise the model, warm-start it and save both to ``out_dir``."""

    start = time.perf_counter()
    texts = []
    for prompt, completion in demos:
        texts.extend(m["content"] for m in prompt)
        texts.append(completion)
    texts.extend(CHAT_TEMPLATE.split("{%"))  # keep markup fragments in the merges
    out_dir.mkdir(parents=True, exist_ok=True)
    with phases.phase("tokenizer"):
        trained = train_tokenizer(texts, preset.vocab_size)
    model = untrained_model(preset, trained, seed=seed)
    # Warm-start with the tokenizer exactly as every later user loads it: AutoTokenizer picks
    # its class from the model config (Qwen2Tokenizer), so the config is saved first. The check
    # makes a loader that cuts text differently fail the build instead of the model.
    model.config.save_pretrained(out_dir)
    trained.save_pretrained(out_dir)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out_dir), padding_side="left")
    check_tokenizer_round_trip(trained, tok, texts[:: max(1, len(texts) // 200)])
    # One thread, whatever the caller's policy or MRBENCH_THREADS: a different number of threads
    # sums in another order, and the model is shared by every cell built on it.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        sft_loss = sft_warm_start(model, tok, demos, preset, seed)
    finally:
        torch.set_num_threads(before)
    model.save_pretrained(out_dir)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "sft_final_loss": round(sft_loss, 4),
        "build_seconds": round(time.perf_counter() - start, 1),
        "demonstrations": len(demos),
    }


def prepare_tiny(name: str, root: Path) -> str:
    """The folder of tiny preset ``name`` under ``root``, built and warm-started on first use.

    Concurrent callers (sweep workers) are serialised by a file lock; a half-built model is
    never visible because the folder is renamed into place only when complete.
    """
    from filelock import FileLock

    preset = TINY_PRESETS[name]
    demos, used = collect_demonstrations(
        preset.demos_per_task, seed=0, drop_fraction=preset.drop_final_line_fraction
    )
    key = tiny_cache_key(name, preset, _demos_digest(demos), used)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{name}-{key}"
    with FileLock(str(root / f".{name}-{key}.lock")):
        if ModelMarker.present(final):
            return str(final)
        tmp = root / f".building-{name}-{key}"
        shutil.rmtree(tmp, ignore_errors=True)
        log.info("building tiny model %s (%s) from %d demonstrations of %s", name, key, len(demos), used)
        # The build seed is fixed: the model is shared by every cell (seeds vary the RL run, not the start).
        meta = build_tiny_model(preset, tmp, demos, seed=0)
        meta.update(preset=name, key=key, tasks=used)
        ModelMarker(TINY_TASK_SETTINGS, meta).write(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    return str(final)
