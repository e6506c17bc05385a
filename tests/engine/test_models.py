import itertools

import pytest

from mrbench.core.errors import UserError
from mrbench.engine.evaluation.generation import HFGenerator
from mrbench.engine.models.catalog import load_model, load_tokenizer, prepare_model, validate_model_name
from mrbench.engine.models.tiny import TINY_PRESETS, count_parameters, tiny_cache_key


def test_ladder_grows_about_4x_per_rung():
    sizes = [count_parameters(TINY_PRESETS[name]) for name in ("tiny", "tiny-s", "tiny-m", "tiny-l")]
    for small, large in itertools.pairwise(sizes):
        assert 3.0 <= large / small <= 5.5, sizes


@pytest.mark.parametrize("name", ["tiny", "tiny-m", "Qwen/Qwen2.5-0.5B-Instruct"])
def test_valid_model_names(name):
    validate_model_name(name)


def test_unknown_model_name_suggests_preset():
    with pytest.raises(UserError, match="Did you mean 'tiny-s'"):
        validate_model_name("tiny-ss")


def test_hub_id_passes_through_unbuilt():
    assert prepare_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


def test_cache_key_covers_demonstrations_and_tasks():
    preset = TINY_PRESETS["tiny"]
    base = tiny_cache_key("tiny", preset, "abc", ["tool-calling@1"])
    assert tiny_cache_key("tiny", preset, "abd", ["tool-calling@1"]) != base
    assert tiny_cache_key("tiny", preset, "abc", ["tool-calling@1", "code-generation@1"]) != base
    assert tiny_cache_key("tiny", preset, "abc", ["tool-calling@1"]) == base


def test_micro_model_tokenizer_and_generation(micro_model_dir):
    tok = load_tokenizer(str(micro_model_dir))
    text = tok.apply_chat_template(
        [{"role": "user", "content": "add 1 2"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\nadd 1 2<|im_end|>\n<|im_start|>assistant\n"
    assert tok.padding_side == "left" and tok.pad_token is not None
    ids = tok("<|im_start|>", add_special_tokens=False)["input_ids"]
    assert len(ids) == 1  # chat markup is one special token each
    gen = HFGenerator(load_model(str(micro_model_dir)), tok)
    out = gen(
        [[{"role": "user", "content": "add 1 2"}], [{"role": "user", "content": "add 3 4"}]], max_new_tokens=8
    )
    assert len(out) == 2 and all(isinstance(o, str) for o in out)
    assert not any("<|im_end|>" in o for o in out)


def test_completion_loss_equals_transformers_loss(micro_model_dir):
    import torch

    from mrbench.engine.models.tiny import _completion_loss

    model = load_model(str(micro_model_dir))
    torch.manual_seed(0)
    input_ids = torch.randint(3, 50, (3, 12))
    attention = torch.ones_like(input_ids)
    attention[2, 9:] = 0  # right padding on one row
    labels = input_ids.clone()
    labels[:, :5] = -100  # prompt positions
    labels[2, 9:] = -100  # padding
    expected = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    got = _completion_loss(model, input_ids, attention, labels)
    assert torch.allclose(got, expected, atol=1e-5)


def test_bucketed_batches_are_full_random_and_length_sorted_within():
    import random

    from mrbench.engine.models.tiny import _BUCKET_GROUP, _bucketed_batches

    # Two "tasks": short and long examples, interleaved in the source list.
    encoded = [([0] * (5 if i % 2 else 50), [0]) for i in range(100)]
    batches = _bucketed_batches(encoded, 4, random.Random(0))
    assert len(batches) == _BUCKET_GROUP and all(len(b) == 4 for b in batches)
    widths = [max(len(ids) for ids, _ in b) for b in batches]
    padded = sum(w * len(b) for w, b in zip(widths, batches, strict=True))
    real = sum(len(ids) for b in batches for ids, _ in b)
    assert padded - real <= 45 * 3  # at most one batch mixes the two lengths
    # The batches come in random order, not shortest first (that would be a length curriculum).
    orders = [[len(b[0][0]) for b in _bucketed_batches(encoded, 4, random.Random(s))] for s in range(10)]
    assert any(order != sorted(order) for order in orders)


def test_built_tokenizer_loads_back_cutting_text_as_trained(micro_model_dir):
    """The warm start and every later run must see the same token ids (numbers above all)."""
    from transformers import PreTrainedTokenizerFast

    from mrbench.engine.models.tiny import check_tokenizer_round_trip

    loaded = load_tokenizer(str(micro_model_dir))
    as_trained = PreTrainedTokenizerFast(tokenizer_file=str(micro_model_dir / "tokenizer.json"))
    texts = ["Pay IONA-27 the amount 96.", "def f(x):\n    return x * 1931\n", '{"to": "a@b.com"}']
    check_tokenizer_round_trip(as_trained, loaded, texts)
    pieces = [loaded.decode([i]) for i in loaded("amount 1931", add_special_tokens=False)["input_ids"]]
    assert pieces[-4:] == ["1", "9", "3", "1"]  # one digit per token, as Qwen2 cuts numbers


def test_round_trip_check_rejects_a_loader_that_cuts_differently(tmp_path, micro_model_dir):
    """A GPT-2-style tokenizer saved next to a qwen2 config reloads as Qwen2Tokenizer, which
    re-cuts numbers: the check must name that, not let a warm start train on other ids."""
    import shutil

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from mrbench.engine.models.tiny import check_tokenizer_round_trip

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2 split: "1931" stays whole
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False)
    core.train_from_iterator(["amount 1931 1931 1931 and 1931"] * 50, trainer=trainer)
    gpt2_style = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    gpt2_style.save_pretrained(tmp_path)
    shutil.copy(micro_model_dir / "config.json", tmp_path / "config.json")
    loaded = load_tokenizer(str(tmp_path))
    with pytest.raises(RuntimeError, match="cuts text differently"):
        check_tokenizer_round_trip(gpt2_style, loaded, ["amount 1931"])


def test_demo_labels_cover_every_assistant_turn(micro_model_dir):
    from mrbench.engine.models.tiny import _encode_demo

    tok = load_tokenizer(str(micro_model_dir))
    user = [{"role": "user", "content": "add 1 2"}]
    call, answer = "call add(1, 2)", "it is 3"

    def trained(ids, labels):
        return tok.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])

    # Single turn: the prompt exactly as generation sees it, then the completion and <|im_end|>.
    ids, labels = _encode_demo(tok, user, answer, 1024)
    prompt_ids = tok(
        tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )["input_ids"]
    assert ids[: len(prompt_ids)] == prompt_ids and set(labels[: len(prompt_ids)]) == {-100}
    assert trained(ids, labels) == f"{answer}<|im_end|>"
    # Multi-turn: the earlier assistant turn is trained too; the tool result and markup are not.
    episode = [*user, {"role": "assistant", "content": call}, {"role": "tool", "content": "3"}]
    ids, labels = _encode_demo(tok, episode, answer, 1024)
    assert trained(ids, labels) == f"{call}<|im_end|>{answer}<|im_end|>"
    assert (ids[-6:], labels[-6:]) == _encode_demo(tok, episode, answer, 6)  # cut from the left


def test_the_warm_start_runs_on_one_thread_whatever_the_caller_uses(monkeypatch, tmp_path):
    """The built weights must not depend on the machine: a build from a process with two threads
    warm-starts on one (and gives the caller its threads back)."""
    import torch

    from mrbench.engine.models import tiny

    preset = tiny.TinyPreset(32, 1, 2, 1, 64, sft_steps=3, sft_lr=5e-3, vocab_size=400)
    prompt = [{"role": "system", "content": "Call add."}, {"role": "user", "content": "add 1 2"}]
    demos = [(prompt, '<tool_call>{"name": "add", "a": 1, "b": 2}</tool_call>')] * 8

    seen = []
    real = tiny.sft_warm_start

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(tiny, "sft_warm_start", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tiny.build_tiny_model(preset, tmp_path / "model", demos, seed=0)
        assert seen == [tiny.BUILD_THREADS] == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
