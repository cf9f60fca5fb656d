"""`serve: choice` is scored as a server decodes constrained to the labels (`backends/constrained.py`): held here to
transformers' own `generate` with a mask built by brute force over the vocabulary (every token whose decoded text
keeps the answer a prefix of a label, the end token once it is one) and `sequence_bias` for `logit_bias`, an
implementation that shares nothing with the walk but the model. AG News's labels (` Sci/Tech` is several tokens),
labels that share a first token, and first-token offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from prompttune.backends.constrained import ChoiceWalk
from prompttune.core.config import RunConfig
from prompttune.core.types import ChoiceRequest
from prompttune.search_spaces import default_space
from prompttune.search_spaces.prompt import render
from prompttune.tasks import load_run_task


def _reference(backend, text: str, choices: tuple[str, ...], bias: dict[int, float], vocab: list[str]) -> int | None:
    """Greedy `generate` under a brute-force choice mask and `sequence_bias` on the biased tokens."""
    tokenizer = backend.tokenizer
    prompt = tokenizer(text).input_ids
    eos = tokenizer.eos_token_id

    masks: dict[str, list[int]] = {}

    def allowed(_: int, ids: torch.Tensor) -> list[int]:
        so_far = tokenizer.decode(ids[len(prompt):].tolist(), clean_up_tokenization_spaces=False)
        if so_far not in masks:
            ok = [i for i, piece in enumerate(vocab) if piece and any(c.startswith(so_far + piece) for c in choices)]
            masks[so_far] = ok + [eos] if so_far in choices else ok
        return masks[so_far]

    with torch.inference_mode():
        out = backend.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                     max_new_tokens=12, do_sample=False, prefix_allowed_tokens_fn=allowed,
                                     sequence_bias={(t,): b for t, b in bias.items()} or None,
                                     eos_token_id=eos, pad_token_id=eos)
    answer = tokenizer.decode(out[0, len(prompt):].tolist(), skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return choices.index(answer) if answer in choices else None


@pytest.mark.integration
def test_constrained_decoding_matches_generate_under_the_choice_mask(data_dir: Path, embedded_model_fp32) -> None:
    backend = embedded_model_fp32
    config = RunConfig(task="agnews", data_dir=str(data_dir), train_size=20, dev_size=10, test_size=8)
    task = load_run_task(config)
    spec = default_space(task).default_candidate().spec
    prompts = [render(spec, ex, []) for ex in task.splits["test"]]
    texts = [backend.to_text(p) for p in prompts]
    labels = (" World", " Sports", " Business", " Sci/Tech")  # AG News's own label names
    assert any(len(ids) > 1 for ids in backend.tokenizer(list(labels), add_special_tokens=False).input_ids)
    vocab = [backend.tokenizer.decode([i]) for i in range(len(backend.tokenizer))]
    shared = (" Sci", " Sci/Tech", " Sci/Fi")  # one first token: every answer is decided after it
    first = backend.first_tokens(list(shared))
    assert first[0] == first[1] == first[2]
    cases = [(labels, ()), (labels, (1.5, -0.5, 0.8, 2.5)), (shared, ())]
    for choices, bias in cases:
        results = backend.choose([ChoiceRequest(t, choices, bias) for t in texts])
        by_token = dict(zip(backend.first_tokens(list(choices)), bias))
        expected = [_reference(backend, t, choices, by_token, vocab) for t in texts]
        assert [r.choice for r in results] == expected, (choices, bias)


def test_a_walk_waits_while_two_choices_share_the_text() -> None:
    pieces = {" S": [1], "ci": [2], " Sci": [3], "/Tech": [4], " Sports": [5], "ports": [6]}
    walk = ChoiceWalk((" Sci", " Sci/Tech", " Sports"), pieces, {}, (0,))
    assert walk.allowed() == [1, 3, 5]
    walk.step([0.0, 0.9, 0.1, 0.2, 0.0, 0.3, 0.0])  # ` S`: still three choices
    assert not walk.done and walk.allowed() == [2, 6]
    walk.step([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.4])  # `ci`: ` Sci` is whole, ` Sci/Tech` goes on
    assert not walk.done and walk.allowed() == [0, 4]
    walk.step([0.7, 0.0, 0.0, 0.0, 0.6, 0.0, 0.0])  # the end token
    assert walk.done and walk.answer == 0
    biased = ChoiceWalk((" Sci", " Sports"), pieces, {3: -5.0}, (0,))
    biased.step([0.0, 0.0, 0.0, 0.9, 0.0, 0.1, 0.0])  # the bias turns ` Sci` below ` Sports`
    assert biased.done and biased.answer == 1
