"""The body of the module `prompttune export RUN --to python` writes (`prompttune.export.writers`
puts its own docstring and the run's CONTRACT in place of this docstring and the empty one below,
and copies in the label extraction the import below names): a classifier that calls an
OpenAI-compatible server exactly as the run's verdict scored its prompts.

It mirrors prompttune's openai backend (backends/openai_backend.py, openai_chat.py) and prediction
(scoring/prediction.py), so that production reproduces the confirmed accuracy: the same start-up
probe picks the endpoint and how labels are scored, the same requests score each label or generate
an answer, and the same offsets and extraction turn them into a label. Standard library only, so
the written module runs wherever Python does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re  # noqa: F401  (the label extraction copied in on export uses it)
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Sequence

from prompttune.export.served_helpers import (  # replaced by that module's code on export
    ContractError,
    ServingError,
    constraint,
    echoed_span,
    first_max,
    first_top,
    last_prompt_top,
    next_piece,
    normalized,
)
from prompttune.scoring.extraction import extract_label  # replaced by that code on export

CONTRACT: dict[str, Any] = {}  # replaced by the run's contract on export

TOP_LOGPROBS = 20  # what the run's completions probe and label walk asked for
CHAT_TOP_LOGPROBS = (20, 5)  # asked in turn over chat: the OpenAI API's most, then a cap some servers keep
CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
PREFIX_JOINER = "\n"
PROBE_TEXT, PROBE_CONTINUATION = "The capital of France is", " Paris"
PLAIN_PROBE = [{"role": "user", "content": "What is the capital of France?"}]
PREFILL_PROBE = PLAIN_PROBE + [{"role": "assistant", "content": "The capital of France is"}]
ECHO_TOLERANCE = 0.25  # nats between echoed and next-token log-probs of the same token
# serve choice: the constraint fields servers read (vLLM, llama.cpp, vLLM before structured_outputs), tried in turn
CONSTRAINTS = ("structured_outputs", "grammar", "guided_choice")
NONSENSE_CHOICES = ("qzx", "vwk")  # no model answers these unless a constraint holds it to them


def _fill(segments: Sequence[Sequence[str]], fields: dict[str, str]) -> str:
    """A template's literal text and `("field", name)` slots, with each input in its slot (one pass:
    an input holding another's placeholder, or braces, stays as it is)."""
    missing = sorted({name for kind, name in segments if kind == "field" and name not in fields})
    if missing:
        raise ValueError(f"missing input field(s) {', '.join(missing)}; this prompt takes "
                       f"{', '.join(CONTRACT['input_fields'])}")
    return "".join(str(fields[value]) if kind == "field" else value for kind, value in segments)


class Classifier:
    """One server, probed once (endpoint, how labels are scored) as prompttune probes it; then
    `classify` per input. `model` defaults to the run's, or to the server's only model."""

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0) -> None:
        url = (base_url or os.environ.get("PROMPTTUNE_BASE_URL") or CONTRACT["base_url"] or "").rstrip("/")
        if not url:
            raise ValueError("no server: pass base_url (e.g. http://127.0.0.1:8000/v1) or set PROMPTTUNE_BASE_URL")
        self.base_url = url if urllib.parse.urlsplit(url).path else url + "/v1"
        self.api_key = api_key or os.environ.get(CONTRACT["api_key_env"] or "OPENAI_API_KEY")
        self.timeout = timeout
        self.model = model or CONTRACT["model"]
        self.api = ""  # "completions" or "chat", set by the probe
        self.mode = ""  # "echo", "top_logprobs", "first_token" or "none", set by the probe
        self.echo_shifted = False
        self.prefill = False
        self.top_k = 0
        self._bias: list[float] | None = None
        self._constraint = ""  # serve choice: the constraint form the server honours, found on first use

    # -- HTTP ------------------------------------------------------------------------------------
    def _post(self, path: str, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.base_url + path, json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip().splitlines()
            raise ServingError(f"{self.base_url}{path}: HTTP {exc.code}: {detail[0][:200] if detail else ''}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ServingError(f"{self.base_url}{path}: {type(exc).__name__}: {exc}") from None

    def _served_model(self) -> str:
        request = urllib.request.Request(self.base_url + "/models",
                                         headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                served = [m["id"] for m in json.loads(response.read()).get("data", [])]
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            raise ServingError(f"cannot reach {self.base_url}/models: {exc}") from None
        if len(served) != 1:
            raise ServingError(f"{self.base_url} serves {len(served)} models; pass model= (one of {served})")
        return served[0]

    # -- the start-up probe, as prompttune's openai backend makes it ---------------------------------
    def probe(self) -> None:
        """Endpoint and scoring mode; a no-op once done."""
        if self.api:
            return
        if self.model is None:
            self.model = self._served_model()
        if CONTRACT["api"] != "chat":
            mode = self._probe_completions()
            if mode is not None:
                self.api, self.mode = "completions", mode
                return
        self.api, self.mode = "chat", self._probe_chat()

    def _next_token_body(self, text: str, max_tokens: int, top: int | None) -> dict:
        body = {"model": self.model, "prompt": text, "max_tokens": max_tokens, "temperature": 0.0}
        if top is not None:
            body["logprobs"] = top
        return body

    def _echo_body(self, full: str, top: int = 1) -> dict:
        return {"model": self.model, "prompt": full, "max_tokens": 1, "temperature": 0.0, "echo": True,
                "logprobs": top}

    def _chat_body(self, messages: list[dict[str, str]], max_tokens: int, top: int | None, go_on: bool) -> dict:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.0}
        if top is not None:
            body |= {"logprobs": True, "top_logprobs": top}
        return body | CONTINUE if go_on else body

    def _probe_completions(self) -> str | None:
        try:
            top = self._post("/completions", self._next_token_body(PROBE_TEXT, 1, TOP_LOGPROBS))[
                "choices"][0]["logprobs"]["top_logprobs"][0]
        except (ServingError, KeyError, IndexError, TypeError, ValueError):
            top = None
        if top is None and CONTRACT["api"] == "auto":
            try:
                self._post("/completions", self._next_token_body(PROBE_TEXT, 1, None))
            except ServingError:
                return None
        expected = next_piece(top, PROBE_CONTINUATION) if top else None
        full = PROBE_TEXT + PROBE_CONTINUATION
        try:
            choice = self._post("/completions", self._echo_body(full, TOP_LOGPROBS))["choices"][0]
            echoed = echoed_span(choice["logprobs"], len(PROBE_TEXT), len(full)) \
                if choice["text"].startswith(full) else None
            before = last_prompt_top(choice["logprobs"], len(PROBE_TEXT)) or {}
        except (ServingError, KeyError, IndexError, TypeError, ValueError):
            echoed, before = None, {}
        if echoed and (expected is None or abs(echoed[0] - expected[1]) <= ECHO_TOLERANCE):
            return "echo"
        if echoed and expected:
            self.echo_shifted = abs(before.get(expected[0], math.inf) - expected[1]) <= ECHO_TOLERANCE
        return "top_logprobs" if top else "none"

    def _probe_chat(self) -> str:
        attempts = [(PREFILL_PROBE, CHAT_TOP_LOGPROBS[0], True),
                    *((PLAIN_PROBE, k, False) for k in CHAT_TOP_LOGPROBS), (PLAIN_PROBE, None, False)]
        for messages, top, go_on in attempts:
            try:
                response = self._post("/chat/completions", self._chat_body(messages, 1, top, go_on))
                content = response["choices"][0]["message"]["content"] or ""
                listed = first_top(response)
            except (ServingError, KeyError, IndexError, TypeError, ValueError):
                continue
            self.prefill = go_on and content[:1].isspace() and PROBE_CONTINUATION.startswith(content)
            self.top_k = top if listed and top else 0
            return "first_token" if listed else "none"
        raise ServingError(f"{self.base_url} offers neither /completions nor a usable /chat/completions")

    # -- the prompt ------------------------------------------------------------------------------
    def _request(self, fields: dict[str, str]) -> tuple[Any, tuple[str, ...]]:
        """The completions text or the chat messages for one input, and the label continuations."""
        continuations = tuple(CONTRACT["continuations"])
        if self.api == "completions":
            if CONTRACT["completions_text"] is None:
                raise ContractError("this chat prompt reached /v1/completions through the model's chat template, "
                                    "which the export could not render; serve it over /v1/chat/completions")
            text = _fill(CONTRACT["completions_text"], fields)
            if CONTRACT["text_prompt"]:  # trailing spaces move to the labels, as prompttune renders
                stripped = text.rstrip(" ")
                text, continuations = stripped, tuple(text[len(stripped):] + c for c in continuations)
            return text, continuations
        messages = [{"role": m["role"], "content": _fill(m["content"], fields)} for m in CONTRACT["messages"]]
        prefix = CONTRACT["assistant_prefix"]
        if CONTRACT["text_prompt"]:
            stripped = messages[-1]["content"].rstrip(" ")
            continuations = tuple(messages[-1]["content"][len(stripped):] + c for c in continuations)
            messages[-1]["content"] = stripped
        if prefix and self.prefill:
            messages.append({"role": "assistant", "content": prefix})
        elif prefix:
            messages[-1]["content"] += PREFIX_JOINER + prefix
        return messages, continuations

    # -- label scores ----------------------------------------------------------------------------
    def label_logprobs(self, fields: dict[str, str]) -> list[float]:
        """Each label's log-probability right after the prompt, as the run's backend read it."""
        self.probe()
        if self.mode == "none":
            raise ContractError(f"{self.base_url} returns no log-probs, so labels cannot be scored as the run "
                                "scored them")
        prompt, continuations = self._request(fields)
        if self.mode == "echo":
            return [sum(self._echoed(prompt, c)) for c in continuations]
        if self.mode == "top_logprobs":
            return self._walked(prompt, continuations)
        return self._first_tokens(prompt, continuations)

    def _echoed(self, text: str, continuation: str) -> list[float]:
        full = text + continuation
        choice = self._post("/completions", self._echo_body(full))["choices"][0]
        return echoed_span(choice["logprobs"], len(text), len(full))

    def _walked(self, text: str, continuations: Sequence[str]) -> list[float]:
        """Each label piece by piece through top-20 next-token lists (prefixes asked once)."""
        asked: dict[str, dict[str, float]] = {}
        scores = []
        for continuation in continuations:
            done, total = 0, 0.0
            while done < len(continuation):
                prefix = continuation[:done]
                if prefix not in asked:
                    asked[prefix] = self._next_top(text + prefix)
                found = next_piece(asked[prefix], continuation[done:])
                if found is None:
                    total += min(asked[prefix].values()) - math.log(2.0)  # below everything listed
                    break
                done, total = done + len(found[0]), total + found[1]
            scores.append(total)
        return scores

    def _next_top(self, text: str) -> dict[str, float]:
        response = self._post("/completions", self._next_token_body(text, 1, TOP_LOGPROBS))
        tops = (response["choices"][0].get("logprobs") or {}).get("top_logprobs") or []
        if tops and tops[0]:
            return tops[0]
        if self.echo_shifted:  # the likeliest next token ends the text: the shifted echo holds it
            echoed = self._post("/completions", self._echo_body(text, TOP_LOGPROBS))
            top = last_prompt_top(echoed["choices"][0]["logprobs"], len(text))
            if top:
                return top
        raise ContractError(f"the server gave no next-token log-probs after {text[-40:]!r}")

    def _first_tokens(self, messages: list[dict[str, str]], continuations: Sequence[str]) -> list[float]:
        """Over chat: each label's first token in the answer's first-token top log-probs; refused,
        as the run refuses it, when one is not listed or two labels share one."""
        go_on = self.prefill and messages[-1]["role"] == "assistant"
        labels = [c if go_on else c.lstrip() for c in continuations]
        response = self._post("/chat/completions", self._chat_body(messages, 1, self.top_k, go_on))
        top = first_top(response)
        if top is None:
            raise ContractError("the server sent no top log-probs for the answer's first token")
        known = CONTRACT["first_tokens"]
        tokens = [known[label] if known is not None and label in known else
                  max((t for t in top if t and label.startswith(t)), key=len, default=None) for label in labels]
        for label, token in zip(labels, tokens):
            if token is None or token not in top:
                shown = "" if token is None else f" (first token {token!r})"
                raise ContractError(f"label {label!r}{shown} is not among the top-{self.top_k} first answer tokens "
                                    f"after the prompt ending {messages[-1]['content'][-40:]!r}: its score is unknown "
                                    "over /v1/chat/completions, as it was in the run")
        if len(set(tokens)) < len(tokens):
            raise ContractError("two labels share their first token; over /v1/chat/completions a label is read "
                                "from the first answer token only")
        return [top[token] for token in tokens]

    # -- offsets ---------------------------------------------------------------------------------
    def contextual_bias(self) -> list[float]:
        """Contextual calibration's bias: the mean label probabilities, each normalised over the labels,
        over the content-free inputs (scored once, on this server, as the run scored them)."""
        if self._bias is None:
            rows = [[math.exp(x) for x in normalized(self.label_logprobs(
                {name: value for name in CONTRACT["input_fields"]}))] for value in CONTRACT["content_free_inputs"]]
            self._bias = [sum(column) / len(rows) for column in zip(*rows)]
        return self._bias

    def adjusted(self, logprobs: Sequence[float]) -> list[float]:
        """The label scores the run's verdict compared: raw, or less the shipped offsets."""
        method = CONTRACT["predict"]
        if method == "contextual_calibration":
            return normalized([x - math.log(b) for x, b in zip(normalized(logprobs), self.contextual_bias())])
        if method == "batch_calibration":
            return normalized([x - b for x, b in zip(normalized(logprobs), CONTRACT["label_bias"])])
        return list(logprobs)

    # -- generation, free or constrained -----------------------------------------------------------
    def _answer(self, prompt: Any, max_tokens: int, extra: dict[str, Any]) -> str:
        """The greedy answer to a completions text or chat messages, `extra` added to the request."""
        top = None if self.mode == "none" else 1
        if self.api == "completions":
            return self._post("/completions", self._next_token_body(prompt, max_tokens, top) | extra)[
                "choices"][0]["text"]
        go_on = self.prefill and prompt[-1]["role"] == "assistant"
        response = self._post("/chat/completions", self._chat_body(prompt, max_tokens, top, go_on) | extra)
        return response["choices"][0]["message"].get("content") or ""

    def generate(self, fields: dict[str, str]) -> str:
        """The greedy answer, with the run's token limit and request."""
        self.probe()
        return self._answer(self._request(fields)[0], CONTRACT["max_tokens"], {})

    def constrained(self, fields: dict[str, str]) -> str:
        """serve choice: the label the server's constrained greedy decoding gives, with the run's `logit_bias`,
        in the first constraint form (`CONSTRAINTS`) that holds its answer to nonsense choices."""
        self.probe()
        probe = [{"role": "user", "content": PROBE_TEXT}] if self.api == "chat" else PROBE_TEXT
        for form in () if self._constraint else CONSTRAINTS:
            try:
                if self._answer(probe, 4, constraint(form, NONSENSE_CHOICES)) in NONSENSE_CHOICES:
                    self._constraint = form
                    break
            except (ServingError, KeyError, IndexError, TypeError):
                continue
        if not self._constraint:
            raise ContractError(f"{self.base_url} holds no answer to a choice ({', '.join(CONSTRAINTS)} tried)")
        prompt, continuations = self._request(fields)
        decoded = CONTRACT["constrained"]
        answer = self._answer(prompt, decoded["max_tokens"], constraint(self._constraint, continuations)
                              | {"logit_bias": decoded["logit_bias"] or {}})
        if answer not in continuations:
            raise ContractError(f"the server answered {answer[:40]!r}, none of the labels, under {self._constraint}")
        return CONTRACT["label_words"][continuations.index(answer)]

    # -- the classifier --------------------------------------------------------------------------
    def classify(self, text_fields: dict[str, str]) -> str | None:
        """The label word the run's verdict would give this input; None where the run counted the
        answer invalid (generation naming no label, or several)."""
        labels = CONTRACT["label_words"]
        if CONTRACT["constrained"]:
            return self.constrained(text_fields)
        if CONTRACT["predict"] == "generation":
            found = extract_label(self.generate(text_fields), labels, cot=CONTRACT["cot"])
            return None if found is None else labels[found]
        return labels[first_max(self.adjusted(self.label_logprobs(text_fields)))]


_default: Classifier | None = None


def classify(text_fields: dict[str, str], base_url: str | None = None) -> str | None:
    """`Classifier(base_url).classify(text_fields)`, reusing one classifier (and its probe) per URL."""
    global _default
    if _default is None or (base_url and _default.base_url.rstrip("/") != base_url.rstrip("/")):
        _default = Classifier(base_url)
    return _default.classify(text_fields)


def main(argv: Sequence[str] | None = None) -> int:
    """JSON lines of input fields on stdin; one line per input on stdout, `{"label": ...}`."""
    parser = argparse.ArgumentParser(description="Classify JSON lines from stdin as the prompttune run did.")
    parser.add_argument("--base-url", help="the OpenAI-compatible server (default: $PROMPTTUNE_BASE_URL, else the "
                                           "run's)")
    parser.add_argument("--model", help="the served model's name (default: the run's, else the only one served)")
    args = parser.parse_args(argv)
    classifier = Classifier(args.base_url, args.model)
    for number, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
            if not isinstance(fields, dict):
                raise ValueError("not a JSON object")
            print(json.dumps({"label": classifier.classify(fields)}), flush=True)
        except ValueError as exc:
            print(f"line {number}: {exc}", file=sys.stderr)
            return 2
        except (ContractError, ServingError) as exc:
            print(f"line {number}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
