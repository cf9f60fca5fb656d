"""Shared-prefix reuse changes only the speed: scores and greedy text equal the full-prompt path.

Requests come from the evaluator itself (so its prefix hints are the ones tested), on real
agnews prompts and the embedded model in fp32; each is scored with reuse on and off.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from prompttune.backends.backend import Backend
from prompttune.backends.transformers_backend import TransformersBackend
from prompttune.core.types import GenerateRequest, ScoreRequest, ScoreResult
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.records import Mode, Query
from prompttune.search_spaces import default_space
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks import SplitSizes, load_task
from prompttune.tasks.task import Task

pytestmark = pytest.mark.integration


class RecordingBackend(Backend):
    """Passes calls through and keeps the requests the evaluator built."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.model_id, self.requests = inner, inner.model_id, []

    def to_text(self, prompt):
        return self.inner.to_text(prompt)

    def score(self, requests):
        self.requests = requests
        return self.inner.score(requests)

    def generate(self, requests):
        self.requests = requests
        return self.inner.generate(requests)


@pytest.fixture(scope="module")
def backend(embedded_model_fp32: TransformersBackend) -> TransformersBackend:
    return embedded_model_fp32


@pytest.fixture
def task(data_dir: Path) -> Task:
    return load_task("agnews", str(data_dir), SplitSizes(8, 8, 8))


def _requests(backend: TransformersBackend, task: Task, specs: list[PromptSpec], mode: Mode,
              n: int) -> list[ScoreRequest] | list[GenerateRequest]:
    """What the evaluator hands the backend, in one call, for `n` dev examples under each spec."""
    recorder = RecordingBackend(backend)
    evaluator = Evaluator(recorder, {e.id: e for e in task.splits["dev"]},
                          {e.id: e for e in task.splits["train"]}, ResultCache(), BudgetLedger(),
                          max_new_tokens=8)
    ids = [e.id for e in task.splits["dev"][:n]]
    evaluator.outputs_many([Query(spec, ids) for spec in specs], mode)
    requests = recorder.requests
    assert len(requests) == n * len(specs)
    assert all(r.prefix and r.text.startswith(r.prefix) for r in requests)
    return requests


def _both_paths(backend: TransformersBackend, call, requests: list) -> tuple[list, list]:
    backend.prefix_reuse = True
    reused = call(requests)
    backend.prefix_reuse = False
    try:
        full = call(requests)
    finally:
        backend.prefix_reuse = True
    return reused, full


@pytest.mark.parametrize("demos,chat,multi_token", [(0, False, True), (4, False, False), (8, False, False),
                                                    (2, True, False)])
def test_prefix_reuse_scores_equal_full_prompt_scores(backend: TransformersBackend, task: Task, demos: int,
                                                      chat: bool, multi_token: bool) -> None:
    spec = default_space(task).default_candidate().spec.with_updates(
        demo_ids=tuple(e.id for e in task.splits["train"][:demos]), chat=chat)
    if multi_token:  # a multi-token label sends its request down the teacher-forced path
        spec = spec.with_updates(label_words=("World", "Sports", "Business", "Science and technology"))
    requests = _requests(backend, task, [spec], "score", n=2 if multi_token or demos > 4 else 3)
    reused, full = _both_paths(backend, backend.score, requests)
    assert [r.prompt_tokens for r in reused] == [r.prompt_tokens for r in full]
    diff = max(abs(a - b) for r, f in zip(reused, full) for a, b in zip(r.logprobs, f.logprobs))
    assert diff < 1e-4


def test_prefix_reuse_generates_what_the_full_prompt_generates(backend: TransformersBackend,
                                                               task: Task) -> None:
    plain = default_space(task).default_candidate().spec.with_updates(
        demo_ids=tuple(e.id for e in task.splits["train"][:1]))
    requests = _requests(backend, task, [plain, plain.with_updates(chat=True)], "generate", n=2)
    reused, full = _both_paths(backend, backend.generate, requests)
    assert [r.text for r in reused] == [f.text for f in full]
    assert [r.completion_tokens for r in reused] == [f.completion_tokens for f in full]


def test_a_seeded_sample_depends_on_its_seed_alone(backend: TransformersBackend, task: Task) -> None:
    """Sampled generation (DSPy's proposals at temperature 1.0) is deterministic per seed, whatever
    else is in the call, and leaves the greedy requests beside it unchanged."""
    [greedy] = _requests(backend, task, [default_space(task).default_candidate().spec], "generate", n=1)
    text = greedy.text
    drawn = backend.generate([greedy, GenerateRequest(text, 12, temperature=1.0, seed=1),
                              GenerateRequest(text, 12, temperature=1.0, seed=2)])
    [alone] = backend.generate([GenerateRequest(text, 12, temperature=1.0, seed=1)])
    assert alone.text == drawn[1].text and drawn[1].text != drawn[2].text
    assert drawn[0].text == backend.generate([greedy])[0].text


def test_batch_composition_changes_no_score_in_fp32(backend: TransformersBackend, data_dir: Path) -> None:
    """The determinism guarantee's footing: what a request scores does not depend on the requests batched
    with it (fp32; bf16 is not invariant, see benchmarks/batch_invariance.py)."""
    task = load_task("agnews", str(data_dir), SplitSizes(8, 16, 8))
    spec = default_space(task).default_candidate().spec
    requests = _requests(backend, task, [spec], "score", n=16)

    def scored_in_batches_of(size: int) -> list[ScoreResult]:
        default, backend.batch_size = backend.batch_size, size
        try:
            return backend.score(requests)
        finally:
            backend.batch_size = default
    batched, alone = scored_in_batches_of(16), scored_in_batches_of(1)
    assert [int(np.argmax(s.logprobs)) for s in batched] == [int(np.argmax(s.logprobs)) for s in alone]
    assert max(abs(a - b) for r, f in zip(batched, alone) for a, b in zip(r.logprobs, f.logprobs)) < 1e-4


def test_appending_cache_decodes_what_stock_generate_decodes(backend: TransformersBackend, task: Task) -> None:
    """Decoding on `AppendLayer`s (views of buffers with room, no per-step concatenation) gives
    stock `generate`'s tokens and log-probs bit for bit: greedy batches with a shared prefix and
    padding, and a seeded sample long enough to outgrow the buffers once."""
    plain = default_space(task).default_candidate().spec.with_updates(
        demo_ids=tuple(e.id for e in task.splits["train"][:1]))
    greedy = _requests(backend, task, [plain, plain.with_updates(chat=True)], "generate", n=3)
    sampled = [GenerateRequest("Once upon a time, a cat", 96, temperature=1.0, seed=3)]
    if not backend.append_cache:
        pytest.skip("this transformers has no per-layer caches")
    results = []
    for append in (True, False):
        backend.append_cache = append
        try:
            results.append([(r.text, r.token_logprobs, r.completion_tokens)
                            for r in backend.generate(greedy) + backend.generate(sampled)])
        finally:
            backend.append_cache = True
    assert results[0] == results[1]
    assert results[0][-1][2] > 70  # the sample outgrew its first buffer (room for its prompt + 64 tokens)


@pytest.mark.parametrize("demos", [0, 2])
def test_labels_continuing_the_prompt_score_what_one_row_per_label_scores(backend: TransformersBackend, task: Task,
                                                                          demos: int) -> None:
    """Several-token labels (of different lengths, beside one-token and empty ones) scored off one pass
    over each prompt give the log-probs of teacher-forcing prompt + label on a row per label, and run
    fewer tokens."""
    spec = default_space(task).default_candidate().spec.with_updates(
        demo_ids=tuple(e.id for e in task.splits["train"][:demos]),
        label_words=("World", "Sports news", "Business", "Science and technology"))
    requests = _requests(backend, task, [spec], "score", n=4)
    requests.append(replace(requests[0], continuations=("", " Sports news", " a free-text answer, as POSIX scores")))
    if not backend.continue_labels:
        pytest.skip("this transformers has no per-layer caches")
    scored, tokens = [], []
    for continuing in (True, False):
        backend.continue_labels = continuing
        before = backend.tokens_processed
        try:
            scored.append(backend.score(requests))
        finally:
            backend.continue_labels = True
        tokens.append(backend.tokens_processed - before)
    continued, rows = scored
    assert [r.prompt_tokens for r in continued] == [r.prompt_tokens for r in rows]
    assert max(abs(a - b) for c, r in zip(continued, rows) for a, b in zip(c.logprobs, r.logprobs)) < 1e-4
    assert tokens[0] < tokens[1] / 2


def test_a_kept_prefix_scores_what_a_fresh_one_scores(backend: TransformersBackend, task: Task) -> None:
    """A prefix's states kept from an earlier call (as DSPy's threads send one program's valset in
    many calls) give the scores computing it afresh gives, bit for bit, without its forward pass."""
    spec = default_space(task).default_candidate().spec.with_updates(
        demo_ids=tuple(e.id for e in task.splits["train"][:2]))
    requests = _requests(backend, task, [spec], "score", n=3)

    def scored() -> tuple[list[ScoreResult], int]:
        before = backend.tokens_processed
        return backend.score(requests), backend.tokens_processed - before

    memo, backend.prefix_memo_bytes = backend.prefix_memo_bytes, 0
    backend._prefixes.clear()
    try:
        fresh, fresh_tokens = scored()
    finally:
        backend.prefix_memo_bytes = memo
    backend._prefixes.clear()
    first, _ = scored()
    kept, kept_tokens = scored()
    assert first == kept == fresh
    assert kept_tokens < fresh_tokens - 8  # the prefix did not run again


def test_only_full_attention_models_decode_on_the_appending_cache() -> None:
    """Sliding-window layers keep the caches `generate` builds for them (they drop old positions)."""
    transformers = pytest.importorskip("transformers")
    from prompttune.backends.transformers_cache import DynamicLayer, full_attention_only

    if DynamicLayer is None:
        pytest.skip("this transformers has no per-layer caches")
    assert full_attention_only(transformers.LlamaConfig(num_hidden_layers=2))
    assert not full_attention_only(transformers.MistralConfig(num_hidden_layers=2, sliding_window=64))


def test_prompts_asked_together_score_as_each_alone(backend: TransformersBackend, task: Task) -> None:
    """Big batches must not move results: requests of different groups (`ScoreRequest.group`, what
    `Meter.prefetch` sends for several prompts in one call) are never batched together, even where their
    prompts share a prefix, so each scores bit for bit as in a call of its own."""
    spec = default_space(task).default_candidate().spec
    other = replace(spec, output_template="Answer: {}")  # after the input: the same prefix hint
    first, second = (_requests(backend, task, [s], "score", n=8) for s in (spec, other))
    assert first[0].prefix == second[0].prefix
    default, backend.batch_size = backend.batch_size, 3  # merged, the 16 rows would batch otherwise
    try:
        alone = backend.score(first) + backend.score(second)
        together = backend.score([replace(r, group=g) for g, requests in enumerate((first, second)) for r in requests])
    finally:
        backend.batch_size = default
    assert together == alone
