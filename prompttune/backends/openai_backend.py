"""Any OpenAI-compatible server (vLLM, llama.cpp, SGLang, TGI, OpenAI), one or several.

The endpoint is chosen by `api`: `/v1/completions`, `/v1/chat/completions` (`openai_chat.py`:
prompts sent as messages, labels read from the first answer token's top log-probs), or `auto`
(completions when the server offers it, else chat). How labels are scored is probed once at
start-up; the mode, and the endpoint, are logged and written into `model_id`, so cached results
of two modes or endpoints never mix:
- `echo`: the server echoes prompt log-probs (`echo` + `logprobs`, with `text_offset`) and they
  agree with its next-token log-probs: exact teacher forcing, one request per label (vLLM).
- `top_logprobs`: no trustworthy echo (llama-cpp-python's echoed log-probs are shifted by one
  token): each label is walked through top-20 next-token lists, taking the longest listed token
  that continues it. Exact when the label's own tokens are listed; otherwise approximate (a path
  through shorter tokens, or a floor below the 20th entry once nothing listed fits).
- `none`: no log-probs at all; only generation works (`--serve generate`).
- `first_token` (chat only): each label's first token looked up in the answer's first-token
  top log-probs; exact, or refused where it cannot be (see `openai_chat.py`).

Reading /v1/completions log-probs is `openai_completions.py`; the tokenizers the backend renders chat
prompts with, `openai_tokenizers.py`; what else the server honours (constrained decoding, `logit_bias`),
`openai_constraints.py`. httpx with asyncio rather than the `openai` client: scoring needs
non-standard fields and raw `text_offset`s, and retries must be visible (counted per server), not hidden
inside a client.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict
from functools import partial
from typing import Any, Literal, Sequence

import httpx

from prompttune.backends import openai_chat as chat
from prompttune.backends import openai_constraints as constraints
from prompttune.backends.backend import Backend, TokenizerBackend, tokenizer_counts
from prompttune.backends.capabilities import EXACT_CHOICE, Capabilities
from prompttune.backends.openai_choice import choose_one
from prompttune.backends.openai_completions import TOP_LOGPROBS, echoed_span, last_prompt_top, next_piece, score_top
from prompttune.backends.openai_http import HttpClient, ServerError
from prompttune.backends.openai_pool import ServerStats
from prompttune.backends.openai_tokenizers import embedded_tokenizer_if_served, load_tokenizer
from prompttune.core.errors import UserError
from prompttune.core.types import (
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    Prompt,
    ScoreRequest,
    ScoreResult,
)

log = logging.getLogger(__name__)

ScoringMode = Literal["echo", "top_logprobs", "first_token", "none"]
Api = Literal["auto", "completions", "chat"]
_PROBE_TEXT, _PROBE_CONTINUATION = "The capital of France is", " Paris"
_ECHO_TOLERANCE = 0.25  # nats between echoed and next-token log-probs of the same token


class OpenAIBackend(Backend):
    """Label scoring and greedy generation over HTTP, spread across `base_urls`."""

    options = ("base_url", "api_key_env", "tokenizer", "api", "concurrency", "timeout", "retries")

    @classmethod
    def check(cls, config: Any) -> None:
        if not config.base_url:
            raise UserError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")

    @classmethod
    def from_config(cls, config: Any) -> "OpenAIBackend":
        backend = cls(config.base_url, config.model, api_key_env=config.api_key_env,
                      tokenizer=load_tokenizer(config.tokenizer) if config.tokenizer else None, api=config.api,
                      concurrency=config.concurrency, timeout=config.timeout, retries=config.retries)
        if config.tokenizer is None:  # the served name is known only once the server answered
            backend.tokenizer = embedded_tokenizer_if_served(backend.model)
        return backend

    def __init__(self, base_urls: list[str], model: str, api_key_env: str | None = None,
                 tokenizer: Any = None, api: Api = "auto", concurrency: int = 8, timeout: float = 60.0,
                 retries: int = 4, backoff_base: float = 0.5, quarantine_base: float = 1.0) -> None:
        """`tokenizer` (a transformers tokenizer) renders chat prompts for completions and names
        labels' first tokens for chat; the server tokenizes."""
        if not base_urls:
            raise UserError("--backend openai needs at least one --base-url")
        self.tokenizer = tokenizer
        self._echo_shifted = False  # set by the probe
        self.prefill = False  # chat: the server continues a final assistant message (set by the probe)
        self.top_k = 0  # chat: top log-probs asked for the answer's first token, as many as the server takes
        self._capabilities: Capabilities | None = None  # probed when first asked
        self.http = HttpClient(base_urls, api_key_env, concurrency, timeout, retries, backoff_base, quarantine_base)
        self.pool = self.http.pool
        try:
            self.model = self.http.run(self._start_up(model))
            self.api, self.mode = self.http.run(self._probe(api))
        except BaseException:
            self.close()
            raise
        self.model_id = (f"openai:{self.model}|{self.mode}" if self.api == "completions"
                         else f"openai:{self.model}|chat|{self.mode}")
        # Approximate label scores warn; no log-probs at all is one line where a run's contract needs them.
        (log.warning if self.mode == "top_logprobs" else log.info)(self.describe())

    def describe(self) -> str:
        """One line for the run log: model, servers, endpoint and which scoring method is in use."""
        if self.api == "chat":
            return self._describe_chat()
        how = {"echo": "exact teacher-forced log-probs (echo + logprobs)",
               "top_logprobs": f"labels walked through top-{TOP_LOGPROBS} next-token log-probs (no "
                               f"trustworthy echo): exact while the label's tokens rank in the top "
                               f"{TOP_LOGPROBS}, approximate otherwise",
               "none": "unavailable (server returns no log-probs; use --serve generate)"}[self.mode]
        return (f"openai backend: model {self.model} on {len(self.pool.servers)} server(s) via /v1/completions; "
                f"label scoring: {how}")

    def _describe_chat(self) -> str:
        prefix = ("continued by the server" if self.prefill else
                  "appended to the last message (the server does not continue an assistant message)")
        firsts = ("the model's tokenizer" if self.tokenizer is not None else
                  "the longest listed token each label starts with (no --tokenizer)")
        how = (f"each label's first token (from {firsts}) read from the answer's first-token top-{self.top_k} "
               f"log-probs: exact while every label's first token is listed and no two labels share one, "
               f"refused otherwise" if self.mode == "first_token" else
               "unavailable (server returns no log-probs; use --serve generate)")
        return (f"openai backend: model {self.model} on {len(self.pool.servers)} server(s) via "
                f"/v1/chat/completions; assistant prefixes: {prefix}; label scoring: {how}")

    def capabilities(self) -> Capabilities:
        """Log-probs as the start-up probe found them; constrained decoding and `logit_bias` probed when first
        asked (`openai_constraints`), by requests no ledger charges."""
        if self._capabilities is None:
            chat_api = self.api == "chat"
            path = "/chat/completions" if chat_api else "/completions"
            body = (self._chat_body(constraints.PROBE_MESSAGES, 1, None, False) if chat_api
                    else self._next_token_body(constraints.PROBE_TEXT, 1, None))  # each form sets its max_tokens
            forms, bias = self.http.run(constraints.probe_constraints(self.http, path, body, self.tokenizer))
            top_k = {"echo": None, "top_logprobs": TOP_LOGPROBS, "first_token": self.top_k, "none": None}[self.mode]
            self._capabilities = Capabilities(self.pool.servers[0].url, "/v1" + path, self.mode != "none", top_k,
                                              forms, bias)
        return self._capabilities

    @property
    def stats(self) -> dict[str, ServerStats]:
        return {s.url: s.stats for s in self.pool.servers}

    def server_counts(self) -> dict[str, dict[str, int]]:
        return {url: asdict(stats) for url, stats in self.stats.items()}

    def close(self) -> None:
        """Close connections and stop the I/O thread; safe to call twice."""
        self.http.close()

    async def _start_up(self, model: str) -> str:
        """Every server must answer GET /models and serve `model` (the single served model
        stands in for the embedded default); returns the name to send."""
        served: list[set[str]] = []
        for server in self.pool.servers:
            try:
                response = await server.client.get(f"{server.url}/models", timeout=self.pool.health_timeout)
                response.raise_for_status()
                served.append({m["id"] for m in response.json().get("data", [])})
            except (httpx.HTTPError, ValueError, KeyError, AttributeError) as exc:
                why = str(exc).splitlines()[0] if str(exc) else "no answer"
                raise UserError(f"cannot reach an OpenAI-compatible server at {server.url} "
                                f"({type(exc).__name__}: {why})") from None
        if model.startswith("embedded:") and len(served[0]) == 1:
            model = next(iter(served[0]))
        for server, models in zip(self.pool.servers, served):
            if models and model not in models:
                raise UserError(f"server {server.url} serves {', '.join(sorted(models))}, not {model!r}: "
                                "pass one of those with --model")
        return model

    async def _probe(self, api: Api) -> tuple[Literal["completions", "chat"], ScoringMode]:
        """The endpoint and its scoring mode; `auto` takes completions when the server offers them."""
        if api != "chat":
            mode = await self._probe_completions(api)
            if mode is not None:
                return "completions", mode
        return "chat", await self._probe_chat()

    async def _probe_completions(self, api: Api) -> ScoringMode | None:
        """Next-token top log-probs for a probe text, then echo of the text plus its likely
        continuation: echo is used only if its log-prob of that token matches the next-token one.
        None (under `auto` only): the server offers no /completions at all."""
        try:
            body = self._next_token_body(_PROBE_TEXT, 1, TOP_LOGPROBS)
            top = (await self.http.post_once("/completions", body))["choices"][0]["logprobs"]["top_logprobs"][0]
        except (ServerError, KeyError, IndexError, TypeError, ValueError):
            top = None
        if top is None and api == "auto" and not await self._answers("/completions",
                                                                      self._next_token_body(_PROBE_TEXT, 1, None)):
            return None
        expected = next_piece(top, _PROBE_CONTINUATION) if top else None
        full = _PROBE_TEXT + _PROBE_CONTINUATION
        try:
            response = await self.http.post_once("/completions", self._echo_body(full, TOP_LOGPROBS))
            choice = response["choices"][0]
            echoed = echoed_span(choice["logprobs"], len(_PROBE_TEXT), len(full))[0] \
                if choice["text"].startswith(full) else None
            before = last_prompt_top(choice["logprobs"], len(_PROBE_TEXT)) or {}
        except (ServerError, KeyError, IndexError, TypeError, ValueError):
            echoed, before = None, {}
        if echoed and (expected is None or abs(echoed[0] - expected[1]) <= _ECHO_TOLERANCE):
            return "echo"
        if echoed and expected:
            # Shifted: the entry one position early holds the next-token log-prob of that token.
            self._echo_shifted = abs(before.get(expected[0], math.inf) - expected[1]) <= _ECHO_TOLERANCE
            log.warning("echoed prompt log-probs %s next-token log-probs (%.2f vs %.2f): not using echo",
                        "are shifted by one token from" if self._echo_shifted else "disagree with",
                        echoed[0], expected[1])
        return "top_logprobs" if top else "none"

    async def _answers(self, path: str, body: dict) -> bool:
        try:
            await self.http.post_once(path, body)
        except ServerError:
            return False
        return True

    async def _probe_chat(self) -> ScoringMode:
        """One-token answers with top log-probs: first to an assistant message the server is asked to
        continue (does it?), then, if the server refuses that, to a plain question, asking for fewer
        top log-probs and then none while it refuses them."""
        attempts = [(chat.PREFILL_PROBE, chat.TOP_LOGPROBS[0], True),
                    *((chat.PLAIN_PROBE, k, False) for k in chat.TOP_LOGPROBS), (chat.PLAIN_PROBE, None, False)]
        error: Exception | None = None
        for messages, top, go_on in attempts:
            try:
                response = await self.http.post_once("/chat/completions", self._chat_body(messages, 1, top, go_on))
                content = response["choices"][0]["message"]["content"] or ""
                listed = chat.first_top(response)
            except (ServerError, KeyError, IndexError, TypeError, ValueError) as exc:
                error = exc
                continue
            self.prefill = go_on and chat.continued_probe(content)
            self.top_k = top if listed and top else 0
            return "first_token" if listed else "none"
        raise UserError(f"{self.pool.servers[0].url} offers neither /completions nor a usable /chat/completions "
                        f"({error})")

    def _echo_body(self, full: str, top: int = 1) -> dict:
        # max_tokens=1, not 0: llama.cpp's server reads 0 as "until the context is full".
        return {"model": self.model, "prompt": full, "max_tokens": 1, "temperature": 0.0,
                "echo": True, "logprobs": top}

    def _next_token_body(self, text: str, max_tokens: int, top: int | None) -> dict:
        body = {"model": self.model, "prompt": text, "max_tokens": max_tokens, "temperature": 0.0}
        if top is not None:
            body["logprobs"] = top
        return body

    def _chat_body(self, messages: list[dict[str, str]], max_tokens: int, top: int | None, go_on: bool) -> dict:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.0}
        if top is not None:
            body |= {"logprobs": True, "top_logprobs": top}
        return body | chat.CONTINUE if go_on else body

    @property
    def renders_chat(self) -> bool:
        """The chat endpoint applies the server's template; completions need the model's tokenizer with one."""
        return self.api == "chat" or bool(getattr(self.tokenizer, "chat_template", None))

    def to_text(self, prompt: Prompt) -> str:
        """Completions: the prompt text (chat messages through the model's template); chat: the
        request's messages, JSON-encoded (`openai_chat.to_wire`)."""
        if self.api == "chat":
            return chat.to_wire(prompt, self.prefill)
        if prompt.messages is None:
            return prompt.text or ""
        if self.tokenizer is None:
            raise UserError("chat prompts need the model's chat template, which /v1/completions does "
                            "not apply: pass --tokenizer (a local path or id of the model's tokenizer)")
        messages = [{"role": role, "content": content} for role, content in prompt.messages]
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return rendered + prompt.assistant_prefix

    def count_tokens(self, texts: Sequence[str], continuation: bool = False) -> list[int]:
        """Prompts: with a tokenizer (`--tokenizer`, or the embedded model's own when a server runs
        it) its count, exact when it is the server's tokenizer (over chat, of the messages through
        its chat template); without one, the base class's byte bound (over chat, of the encoded
        messages: a server template that adds text of its own, such as a default system prompt,
        can pass it). Continuations always get the byte bound: an echoed label may take in a server
        token that straddles the prompt's end, and the top-log-probs walk may take shorter pieces."""
        if self.tokenizer is None or continuation:
            return super().count_tokens(texts, continuation)
        if self.api == "chat":
            texts = [chat.render_wire(self.tokenizer, text, self.prefill) for text in texts]
        return tokenizer_counts(self.tokenizer, texts)

    @property
    def scores_labels(self) -> bool:
        return self.mode != "none"

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        if self.mode == "none":
            raise UserError(f"{self.pool.servers[0].url} returns no log-probs, so labels cannot be "
                            "scored: use --serve generate")
        scorer = {"echo": self._score_echo, "top_logprobs": partial(score_top, self),
                  "first_token": self._score_chat}[self.mode]
        return self.http.gather([scorer(r) for r in requests])

    async def _score_chat(self, request: ScoreRequest) -> ScoreResult:
        """One answer token; each label's first-token log-prob from its top list (`openai_chat`)."""
        messages = chat.from_wire(request.text)
        go_on = chat.continues(messages, self.prefill)
        # A fresh assistant turn starts the answer: the space a continuation carries after a text
        # prompt's "Answer:" is not part of it.
        labels = [c if go_on else c.lstrip() for c in request.continuations]
        response = await self.http.post("/chat/completions", self._chat_body(messages, 1, self.top_k, go_on))
        top = chat.first_top(response)
        if top is None:
            raise ServerError(f"{self.pool.servers[0].url}/chat/completions sent no top log-probs for the answer's "
                              "first token: use --serve generate")
        scores = chat.read_labels(top, labels, chat.first_tokens(self.tokenizer, labels), self.top_k,
                                  messages[-1]["content"])
        usage = response.get("usage") or {}
        return ScoreResult(scores, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 1))

    async def _score_echo(self, request: ScoreRequest) -> ScoreResult:
        start = len(request.text)

        async def one(continuation: str) -> tuple[list[float], int]:
            full = request.text + continuation
            choice = (await self.http.post("/completions", self._echo_body(full)))["choices"][0]
            return echoed_span(choice["logprobs"], start, len(full))

        spans = [await one(c) for c in request.continuations]  # in order: the server's prefix cache hits
        return ScoreResult(tuple(sum(lps) for lps, _ in spans), spans[0][1] if spans else 0,
                           sum(len(lps) for lps, _ in spans))

    @property
    def decodes_together(self) -> bool:
        """A call's requests are sent at once: a server batches concurrent requests (vLLM, llama.cpp's slots)."""
        return self.pool.concurrency * len(self.pool.servers) > 1

    def first_tokens(self, texts: Sequence[str]) -> list[int] | None:
        """With the model's tokenizer (`--tokenizer`, or the embedded one a server runs): what `logit_bias` names."""
        return None if self.tokenizer is None else TokenizerBackend.first_tokens(self, texts)  # type: ignore[arg-type]

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        """serve choice: the server decodes each answer under the first exact constraint it honours (`openai_choice`)."""
        form = next((f for f in self.capabilities().constraints if f in EXACT_CHOICE), None)
        if form is None:
            raise UserError(f"serve choice: {self.capabilities().refusal('choice')}")
        return self.http.gather([choose_one(self, r, form) for r in requests])

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        one = self._generate_chat if self.api == "chat" else self._generate_one
        return self.http.gather([one(r) for r in requests])

    @staticmethod
    def _sampling(request: GenerateRequest) -> dict[str, Any]:
        # The request's seed goes to the server: vLLM and llama.cpp sample deterministically per seed.
        return {"temperature": request.temperature, "seed": request.seed} if request.temperature else {}

    async def _generate_chat(self, request: GenerateRequest) -> GenerateResult:
        messages = chat.from_wire(request.text)
        body = self._chat_body(messages, request.max_new_tokens, None if self.mode == "none" else 1,
                               chat.continues(messages, self.prefill))
        response = await self.http.post("/chat/completions", body | self._sampling(request))
        choice = response["choices"][0]
        tokens = (choice.get("logprobs") or {}).get("content") or []
        token_logprobs = tuple(float(t["logprob"]) for t in tokens)
        usage = response.get("usage") or {}
        return GenerateResult(choice["message"].get("content") or "", token_logprobs, usage.get("prompt_tokens", 0),
                              usage.get("completion_tokens", len(token_logprobs)))

    async def _generate_one(self, request: GenerateRequest) -> GenerateResult:
        top = None if self.mode == "none" else 1
        body = self._next_token_body(request.text, request.max_new_tokens, top) | self._sampling(request)
        response = await self.http.post("/completions", body)
        choice = response["choices"][0]
        token_logprobs = tuple(float(x) for x in ((choice.get("logprobs") or {}).get("token_logprobs") or []))
        usage = response.get("usage") or {}
        return GenerateResult(choice["text"], token_logprobs, usage.get("prompt_tokens", 0),
                              usage.get("completion_tokens", len(token_logprobs)))
