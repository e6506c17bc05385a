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
