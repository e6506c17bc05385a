import itertools

import pytest

from harness.errors import UserError
from harness.generation import HFGenerator
from harness.models import (
    TINY_PRESETS,
    count_parameters,
    load_model,
    load_tokenizer,
    prepare_model,
    tiny_cache_key,
    validate_model_name,
)


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

    from harness.models import _completion_loss

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

    from harness.models import _BUCKET_GROUP, _bucketed_batches

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
