"""The openai backend against a real llama.cpp server, and its retry/routing logic against tiny
fake servers (prompttune/testing/fake_openai.py) that fail on command."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Iterator

import pytest

from prompttune.backends.factory import build_backend
from prompttune.backends.openai_backend import Api, OpenAIBackend
from prompttune.backends.openai_chat import render_wire
from prompttune.backends.transformers_backend import TransformersBackend
from prompttune.backends.transformers_setup import EMBEDDED_MODEL
from prompttune.core.config import BackendConfig
from prompttune.core.errors import BackendUnavailable, UserError
from prompttune.core.types import GenerateRequest, Prompt, ScoreRequest
from prompttune.search_spaces import default_space, render
from prompttune.tasks import SplitSizes, load_task
from prompttune.testing.fake_openai import FakeServer
from prompttune.testing.llama_server import free_port
from tests.llama_server import llama_server  # noqa: F401  (session fixture)


def _backend(urls: list[str], concurrency: int = 8, retries: int = 4, timeout: float = 60.0,
             api: Api = "auto") -> OpenAIBackend:
    """Fast back-off and quarantine, so retry tests take milliseconds."""
    return OpenAIBackend(urls, "fake", api=api, concurrency=concurrency, retries=retries, timeout=timeout,
                         backoff_base=0.01, quarantine_base=0.2)


def test_503_twice_then_ok_is_one_call_with_two_retries(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer())
    backend = _backend([fakes[0].url])
    assert backend.mode == "echo" and backend.model_id == "openai:fake|echo"
    fakes[0].failures = [503, 503]
    [result] = backend.score([ScoreRequest("ab", ("cd",))])
    assert result.logprobs == (-2.0,) and result.completion_tokens == 2
    stats = backend.stats[fakes[0].url]
    assert (stats.requests, stats.retries, stats.failures) == (1, 2, 0)
    backend.close()


def test_429_is_retried_and_exhausted_retries_are_one_clear_error(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer())
    backend = _backend([fakes[0].url], retries=2)
    fakes[0].failures = [429]
    assert backend.generate([GenerateRequest("hi", 3)])[0].text == "xxx"
    assert backend.stats[fakes[0].url].retries == 1
    fakes[0].failures = [429, 503, 500]
    with pytest.raises(UserError, match=r"giving up after 2 retries \(HTTP 500: busy\)$"):
        backend.generate([GenerateRequest("hi", 3)])
    stats = backend.stats[fakes[0].url]
    assert (stats.requests, stats.retries, stats.failures) == (1, 3, 1)
    fakes[0].failures = [400]
    with pytest.raises(UserError, match="HTTP 400"):
        backend.generate([GenerateRequest("hi", 3)])
    assert backend.stats[fakes[0].url].retries == 3
    backend.close()


def test_without_echo_labels_are_walked_through_top_logprobs(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(echo=False))
    backend = _backend([fakes[0].url])
    assert backend.mode == "top_logprobs" and backend.model_id == "openai:fake|top_logprobs"
    [result] = backend.score([ScoreRequest("ab", (" x", " xyz", "q"))])
    # " x" = " " + "x"; " xyz" = " " + "xy" (the longest piece) + "z", which is not in the top
    # list: a floor below its smallest entry; "q" gets that floor at once
    floor = -3.0 - math.log(2.0)
    assert result.logprobs == pytest.approx((-2.0, -4.0 + floor, floor))
    assert result.completion_tokens == 4
    assert backend.stats[fakes[0].url].requests == 3  # after "", " " and " xy", each asked once
    backend.close()


# --- /v1/chat/completions ---------------------------------------------------------------------------

TEXT = Prompt(text="Item: a red thing\nColour:", label_continuations=(" red", " green", " blue"))


def test_auto_takes_chat_on_a_chat_only_server_and_reads_labels_from_the_first_token(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(completions=False))
    backend = _backend([fakes[0].url])
    assert (backend.api, backend.mode, backend.top_k, backend.prefill) == ("chat", "first_token", 20, False)
    assert backend.model_id == "openai:fake|chat|first_token" and "/v1/chat/completions" in backend.describe()
    text = backend.to_text(TEXT)
    assert json.loads(text) == [{"role": "user", "content": TEXT.text}]  # a text prompt is one user message
    [result] = backend.score([ScoreRequest(text, TEXT.label_continuations)])
    assert result.logprobs == (-0.5, -1.5, -2.5) and result.completion_tokens == 1
    assert fakes[0].chat_bodies[-1] | {"messages": None} == {"model": "fake", "messages": None, "max_tokens": 1,
                                                             "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
    [out] = backend.generate([GenerateRequest(text, 3, temperature=0.7, seed=5)])
    assert (out.text, out.token_logprobs, out.completion_tokens) == ("xxx", (-1.0,) * 3, 3)
    assert fakes[0].chat_bodies[-1]["seed"] == 5 and fakes[0].chat_bodies[-1]["top_logprobs"] == 1
    # A chat prompt's assistant prefix, which this server does not continue, ends the user message.
    chat = Prompt(messages=(("system", "Be brief."), ("user", "Item: a red thing")), assistant_prefix="Colour:")
    assert json.loads(backend.to_text(chat)) == [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Item: a red thing\nColour:"}]
    backend.close()


def test_chat_asks_for_fewer_top_logprobs_where_the_server_caps_them(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(max_top=5))
    backend = _backend([fakes[0].url], api="chat")
    assert (backend.api, backend.top_k) == ("chat", 5)  # 20 refused
    assert fakes[0].chat_bodies[-1]["top_logprobs"] == 5
    backend.close()


def test_an_assistant_prefix_the_server_continues_is_sent_as_the_last_message(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(prefill=True, chat_top={" red": -0.2, " green": -2.0, " blue": -3.0}))
    backend = _backend([fakes[0].url], api="chat")
    assert backend.prefill and "continued by the server" in backend.describe()
    chat = Prompt(messages=(("user", "Item: a red thing"),), assistant_prefix="Colour:",
                  label_continuations=(" red", " green", " blue"))
    text = backend.to_text(chat)
    assert json.loads(text)[-1] == {"role": "assistant", "content": "Colour:"}
    [result] = backend.score([ScoreRequest(text, chat.label_continuations)])
    assert result.logprobs == (-0.2, -2.0, -3.0)  # the continuation keeps its space after the prefix
    body = fakes[0].chat_bodies[-1]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    backend.close()


@pytest.mark.parametrize("continuations,message", [
    ((" red", " purple"), r"label 'purple' is not among the top-20 first answer tokens after the prompt ending "
                          r"'Item: a red thing\\nColour:': over /v1/chat/completions its score is unknown; "
                          r"use --serve generate or --api completions"),
    ((" red", " reddish"), r"labels 'red' and 'reddish' share their first token 'red': over /v1/chat/completions a "
                           r"label is read from the first answer token only; use --serve generate"),
])
def test_labels_a_first_token_cannot_tell_apart_are_refused_in_one_line(
        fakes: list[FakeServer], continuations: tuple[str, ...], message: str) -> None:
    fakes.append(FakeServer(completions=False))
    backend = _backend([fakes[0].url])
    with pytest.raises(UserError, match=message) as raised:
        backend.score([ScoreRequest(backend.to_text(TEXT), continuations)])
    assert "\n" not in str(raised.value)
    backend.close()


def test_chat_without_log_probs_generates_only(fakes: list[FakeServer]) -> None:
    fakes.append(FakeServer(completions=False, max_top=0))
    backend = _backend([fakes[0].url])
    assert (backend.api, backend.mode) == ("chat", "none") and backend.model_id == "openai:fake|chat|none"
    assert backend.generate([GenerateRequest(backend.to_text(TEXT), 2)])[0].text == "xx"
    with pytest.raises(UserError, match="returns no log-probs"):
        backend.score([ScoreRequest(backend.to_text(TEXT), TEXT.label_continuations)])
    backend.close()


def test_unreachable_server_at_start_up_is_a_user_error_naming_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    config = BackendConfig(backend="openai", base_url=[url], model="x")
    with pytest.raises(UserError, match=f"cannot reach .* at {url} "):
        build_backend(config)


def test_an_option_the_backend_does_not_read_is_an_error() -> None:
    with pytest.raises(UserError, match="--batch-size does not apply to --backend openai"):
        build_backend(BackendConfig(backend="openai", base_url=["http://127.0.0.1:1/v1"], batch_size=4))
    with pytest.raises(UserError, match="--base-url does not apply to --backend transformers"):
        build_backend(BackendConfig(base_url=["http://127.0.0.1:1/v1"]))


def test_least_loaded_routing_and_concurrency_limit(fakes: list[FakeServer]) -> None:
    fakes += [FakeServer(delay=0.3), FakeServer()]
    slow, fast = fakes
    backend = _backend([slow.url, fast.url], concurrency=2)
    results = backend.score([ScoreRequest(f"q{i}", ("a",)) for i in range(20)])
    assert all(r.logprobs == (-1.0,) for r in results)
    stats = backend.stats
    assert stats[slow.url].requests + stats[fast.url].requests == 20
    assert 1 <= stats[slow.url].requests and stats[fast.url].requests > 3 * stats[slow.url].requests
    assert slow.max_in_flight <= 2 and fast.max_in_flight <= 2
    backend.close()


def test_a_big_batch_wakes_one_waiting_call_per_freed_slot_over_a_client_per_server(
        fakes: list[FakeServer], monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps the pool's rate N x one server's (benchmarks/server_pool.py): waking every waiting call at
    every release costs ~calls² looks for a server, and one httpx client over all servers scans all their
    connections for every request."""
    fakes.extend(FakeServer(delay=0.01, keep_alive=True) for _ in range(2))
    backend = _backend([f.url for f in fakes], concurrency=2)
    pick, looks = backend.pool._pick, []
    monkeypatch.setattr(backend.pool, "_pick", lambda: looks.append(1) or pick())
    results = backend.score([ScoreRequest(f"item {i}:", (" a",)) for i in range(200)])
    assert len(results) == 200 and sum(f.completions for f in fakes) >= 200
    assert len(looks) <= 3 * 200  # a first look per call and about one per wake-up (every waiter woken: ~10,000)
    assert len({id(server.client) for server in backend.pool.servers}) == 2
    backend.close()


def test_a_calls_texts_are_decoded_together_unless_one_server_takes_one_request_at_a_time(
        fakes: list[FakeServer]) -> None:
    """What reflect's `parents` default reads: requests sent at once are batched by the server (vLLM, llama.cpp's
    slots); one server at concurrency 1 gets them one after another."""
    fakes += [FakeServer(), FakeServer()]
    for urls, concurrency, together in (([fakes[0].url], 8, True), ([fakes[0].url], 1, False),
                                        ([f.url for f in fakes], 1, True)):
        backend = _backend(urls, concurrency=concurrency)
        assert backend.decodes_together is together
        backend.close()


def test_dead_server_is_quarantined_and_readmitted_when_healthy(fakes: list[FakeServer]) -> None:
    fakes += [FakeServer(), FakeServer()]
    backend = _backend([fakes[0].url, fakes[1].url])
    dead_url, port = fakes[0].url, fakes[0].httpd.server_address[1]
    fakes[0].stop()
    assert len(backend.score([ScoreRequest(f"q{i}", ("a",)) for i in range(6)])) == 6
    stats = backend.stats
    assert stats[dead_url].quarantines == 1 and stats[dead_url].retries >= 1
    assert stats[dead_url].requests == 0 and stats[fakes[1].url].requests == 6
    fakes[0] = FakeServer(port=port)  # back up on the same address
    time.sleep(1.0)  # past the quarantine back-off (0.2 s, doubled per failed health check)
    backend.score([ScoreRequest(f"r{i}", ("a",)) for i in range(6)])
    assert backend.stats[dead_url].requests >= 1 and fakes[0].completions >= 1
    assert (stats[dead_url].quarantines, stats[dead_url].readmissions) == (1, 1)
    backend.close()


def test_a_server_that_never_returns_ends_the_call_at_the_outage_deadline(fakes: list[FakeServer]) -> None:
    fakes += [FakeServer(), FakeServer()]
    backend = _backend([f.url for f in fakes], timeout=0.5, retries=2)  # out together for 1 s: give up
    for fake in fakes:
        fake.stop()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as raised:
        backend.score([ScoreRequest(f"q{i}", ("a",)) for i in range(20)])
    waited = time.monotonic() - started
    assert 1.0 <= waited < 2.5, f"gave up after {waited:.2f} s"
    message = str(raised.value)
    assert message.startswith("no server answered for 1 s: ") and "\n" not in message
    assert all(f"{f.url} (health check: ConnectError" in message for f in fakes), message
    # 20 calls failed on two servers, yet each was taken out once and checked on its own back-off.
    assert [s.quarantines for s in backend.stats.values()] == [1, 1]
    backend.close()


# --- the real llama.cpp server on the embedded model -------------------------------------------

@pytest.fixture
def agnews_prompts(data_dir: Path) -> list[Prompt]:
    task = load_task("agnews", str(data_dir), SplitSizes(10, 10, 30))
    spec = default_space(task).default_candidate().spec
    return [render(spec, ex, []) for ex in task.splits["test"]]


@pytest.fixture(scope="module")
def reference(embedded_model_fp32: TransformersBackend) -> TransformersBackend:
    return embedded_model_fp32


@pytest.fixture(scope="module")
def served(llama_server: str) -> Iterator[OpenAIBackend]:  # noqa: F811
    config = BackendConfig(backend="openai", base_url=[llama_server], model=EMBEDDED_MODEL, concurrency=4)
    backend = build_backend(config)
    assert isinstance(backend, OpenAIBackend)
    yield backend
    backend.close()


def test_llama_server_scores_labels_like_the_transformers_backend(
        served: OpenAIBackend, reference: TransformersBackend, agnews_prompts: list[Prompt]) -> None:
    assert served.mode == "top_logprobs", served.describe()  # llama-cpp-python shifts echo by one
    requests = [ScoreRequest(served.to_text(p), p.label_continuations) for p in agnews_prompts]
    got, want = served.score(requests), reference.score(requests)
    assert all(len(g.logprobs) == len(r.continuations) for g, r in zip(got, requests))
    assert all(math.isfinite(x) and x < 0 for g in got for x in g.logprobs)
    agree = sum(max(range(len(g.logprobs)), key=g.logprobs.__getitem__)
                == max(range(len(w.logprobs)), key=w.logprobs.__getitem__) for g, w in zip(got, want))
    assert agree >= 0.9 * len(requests), f"{agree}/{len(requests)} argmax agreement"
    # The token reserve (embedded tokenizer for prompts, byte bound for labels) covers what the server reports.
    assert all(b >= g.prompt_tokens + g.completion_tokens for b, g in zip(served.token_bounds(requests), got))
    assert served.stats[served.pool.servers[0].url].retries == 0


def test_llama_server_generates_and_renders_chat_like_transformers(
        served: OpenAIBackend, reference: TransformersBackend) -> None:
    chat = Prompt(messages=(("user", "Name a colour."),), assistant_prefix="Colour:")
    assert served.to_text(chat) == reference.to_text(chat)
    [out] = served.generate([GenerateRequest(served.to_text(chat), 8)])
    assert out.text.strip() and 1 <= out.completion_tokens <= 8
    assert len(out.token_logprobs) == out.completion_tokens and out.prompt_tokens > 5
    assert served.count_tokens([served.to_text(chat)]) == [out.prompt_tokens]  # the server's own count
    # The likeliest next token ends the text, so llama.cpp returns no completion log-probs; the
    # backend falls back to the (shifted) echo for them.
    ended = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\nOK."
    stats = served.stats[served.pool.servers[0].url]
    before = stats.requests
    [result] = served.score([ScoreRequest(ended, ("\n", " Yes"))])
    assert all(math.isfinite(x) and x < 0 for x in result.logprobs)
    assert stats.requests - before == 2  # the next-token request, then the echo


@pytest.mark.integration
def test_the_llama_cpp_server_is_probed_as_honouring_grammar_and_logit_bias(served: OpenAIBackend) -> None:
    counted = served.stats[served.pool.servers[0].url].requests
    capabilities = served.capabilities()
    assert (capabilities.endpoint, capabilities.logprobs, capabilities.top_k) == ("/v1/completions", True, 20)
    assert capabilities.constraints[0] == "grammar" and capabilities.logit_bias is True  # the flip, under grammar
    assert capabilities.contracts() == ("logprobs", "generate", "choice")
    assert served.stats[served.pool.servers[0].url].requests == counted  # the probe is in no run's counts


@pytest.fixture(scope="module")
def served_chat(llama_server: str) -> Iterator[OpenAIBackend]:  # noqa: F811
    config = BackendConfig(backend="openai", base_url=[llama_server], model=EMBEDDED_MODEL, api="chat", concurrency=4)
    backend = build_backend(config)
    assert isinstance(backend, OpenAIBackend)
    yield backend
    backend.close()


def test_llama_server_chat_scores_labels_as_its_completions_endpoint_does(
        served_chat: OpenAIBackend, served: OpenAIBackend, data_dir: Path) -> None:
    # llama-cpp-python does not continue a final assistant message, and it keeps OpenAI's top-20.
    assert (served_chat.mode, served_chat.prefill, served_chat.top_k) == ("first_token", False, 20)
    task = load_task("sst2", str(data_dir), SplitSizes(10, 10, 12))
    spec = default_space(task).default_candidate().spec  # sst2's labels rank in the top 20 here; agnews' often do not
    prompts = [render(spec, ex, []) for ex in task.splits["test"]]
    requests = [ScoreRequest(served_chat.to_text(p), p.label_continuations) for p in prompts]
    got = served_chat.score(requests)
    # The same messages through the server's chat template, scored over /v1/completions: each label
    # ("negative", "positive", no leading space in a fresh answer) is one token, so the scores agree
    # (to the noise of llama.cpp's quantized kernels, which its two endpoints batch differently).
    rendered = [ScoreRequest(render_wire(served.tokenizer, r.text, False), tuple(c.lstrip() for c in r.continuations))
                for r in requests]
    want = served.score(rendered)
    assert [g.logprobs for g in got] == [pytest.approx(w.logprobs, abs=0.05) for w in want]
    assert [g.prompt_tokens for g in got] == served_chat.count_tokens([r.text for r in requests])  # exact
    assert all(b >= g.prompt_tokens + g.completion_tokens for b, g in zip(served_chat.token_bounds(requests), got))
    with pytest.raises(UserError, match="label 'Zebra' .*is not among the top-20 first answer tokens"):
        served_chat.score([ScoreRequest(requests[0].text, (" positive", " Zebra"))])


def test_llama_server_chat_generates_as_its_completions_endpoint_does(
        served_chat: OpenAIBackend, served: OpenAIBackend) -> None:
    chat = Prompt(messages=(("user", "Name a colour."),), assistant_prefix="Colour:")
    text = served_chat.to_text(chat)
    assert json.loads(text) == [{"role": "user", "content": "Name a colour.\nColour:"}]
    [out] = served_chat.generate([GenerateRequest(text, 8)])
    [same] = served.generate([GenerateRequest(render_wire(served.tokenizer, text, False), 8)])
    assert out.text.strip() and out.text == same.text and 1 <= out.completion_tokens <= 8
    assert len(out.token_logprobs) == out.completion_tokens and all(x <= 0 for x in out.token_logprobs)
    assert served_chat.count_tokens([text]) == [out.prompt_tokens]
