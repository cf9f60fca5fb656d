"""The shipped prompt as data: its template with `{field}` slots, how the verdict read a label from the
model (generation, label log-probabilities raw or less the shipped offsets), the calibration production
needs, and the `json` and `openai-chat` export formats built from them. Pure functions of a spec and the
run's config: `prompttune.export.writers` writes them, `RunResult.save` and the reports read them.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from prompttune.backends import openai_chat as chat
from prompttune.backends.constrained import choice_token_cap
from prompttune.backends.openai_chat import wire_messages
from prompttune.backends.openai_constraints import constraint_fields
from prompttune.core.config import RunConfig
from prompttune.core.types import Example, Prompt
from prompttune.scoring import contract
from prompttune.scoring.evaluator import COT_MAX_NEW_TOKENS, MAX_NEW_TOKENS
from prompttune.scoring.prediction import CONTENT_FREE
from prompttune.scoring.prompt_sources import OPENAI_CHAT_FORMAT
from prompttune.search_spaces.prompt import PromptSpec, render

FORMAT = "prompttune-prompt/1"


Contract = Literal["logprobs", "generate", "choice"]


def serving_contract(config: RunConfig) -> Contract:
    """How production serves the shipped prompt: the run's serving contract (a run made before `serve` existed
    reads its `scoring` as one, core.config). Every export reads it here."""
    return config.contract


OFFSETS = {"label_logprobs": "", "batch_calibration": " less batch-calibration offsets",
           "contextual_calibration": " with contextual calibration"}


def prediction(spec: PromptSpec, config: RunConfig) -> str:
    """How the verdict turned the model's output into this prompt's label: generation (the contract,
    or a CoT prompt), or label log-probabilities raw or less the shipped offsets."""
    if serving_contract(config) == "generate" or spec.cot:
        return "generation"
    if spec.calibrate:
        return "contextual_calibration"
    return "batch_calibration" if spec.label_bias else "label_logprobs"


def input_fields(spec: PromptSpec) -> list[str]:
    return list(dict.fromkeys(name for name, _ in spec.passage_templates + spec.input_templates))


def filled(spec: PromptSpec, demos: list[Example], value_of: dict[str, str]) -> Prompt:
    """The prompt rendered with `value_of[field]` in place of each input (a placeholder, a marker, a probe)."""
    return render(spec, Example("{input}", {name: value_of[name] for name in input_fields(spec)}, 0), demos)


def template(spec: PromptSpec, demos: list[Example]) -> Prompt:
    """The rendered prompt with `{field}` in place of each input value."""
    return filled(spec, demos, {name: f"{{{name}}}" for name in input_fields(spec)})


def content_free_prompts(spec: PromptSpec, demos: list[Example]) -> list[Prompt]:
    """The prompts calibration scores for the bias: every input replaced by each content-free value."""
    return [filled(spec, demos, {name: value for name in input_fields(spec)}) for value in CONTENT_FREE]


def calibrated(spec: PromptSpec, config: RunConfig) -> bool:
    """Whether the run predicted this prompt calibrated: contextually by the run's scoring, or under
    logit scoring by the spec's own choice, contextual or batch (CoT prompts answer by generation:
    no label scores)."""
    return prediction(spec, config) in ("contextual_calibration", "batch_calibration")


def batch_calibrated(spec: PromptSpec, config: RunConfig) -> bool:
    return prediction(spec, config) == "batch_calibration"


def as_text(prompt: Prompt) -> str:
    if prompt.messages is None:
        return prompt.text or ""
    turns = [f"[{role}]\n{content}" for role, content in prompt.messages]
    return "\n\n".join(turns + [f"[assistant]\n{prompt.assistant_prefix}"])


def prompt_shape(prompt: Prompt) -> dict[str, Any]:
    """A prompt as the json export holds it: its text, or its chat messages and assistant prefix."""
    if prompt.messages is None:
        return {"text": prompt.text}
    return {"messages": [{"role": r, "content": c} for r, c in prompt.messages],
            "assistant_prefix": prompt.assistant_prefix}


def answer(spec: PromptSpec, config: RunConfig, prompt: Prompt) -> dict[str, Any]:
    """How the run read a label from the model: generation with extraction, or label scores."""
    if prediction(spec, config) == "generation":
        after = " after the last 'Final answer'" if spec.cot else ""
        return {"method": "generation", "cot": spec.cot,
                "max_new_tokens": COT_MAX_NEW_TOKENS if spec.cot else MAX_NEW_TOKENS,
                "continuations": list(prompt.label_continuations),
                "read": f"greedy answer; the label is the one label word found{after} as a whole word, ignoring "
                        "case (none or several: no label)"}
    return {"method": "label_logprobs", "cot": False, "continuations": list(prompt.label_continuations),
            "read": "the label whose continuation is likeliest right after the prompt (after the assistant "
                    "prefix, for chat messages)" + (", calibrated (see calibration)" if calibrated(spec, config)
                                                    else "") + "; over a chat-completions API whose answer "
                    "opens a fresh turn, each label word's first token in the answer's first-token "
                    "top_logprobs, as prompttune's --api chat reads it (exact while every label's first "
                    "token is listed and no two share one)"}


def calibration(spec: PromptSpec, config: RunConfig, demos: list[Example],
                shape: Any) -> dict[str, Any] | None:
    """What production needs to calibrate as the run did (None for an uncalibrated prompt); `shape`
    turns each content-free prompt into the export's own form."""
    if not calibrated(spec, config):
        return None
    if batch_calibrated(spec, config):
        return {"method": "batch calibration (Zhou et al. 2024): normalise the label log-probabilities over the "
                          "labels, subtract bias (one value per label word, in order), take the largest",
                "bias": list(spec.label_bias),
                "bias_from": "the mean normalised label log-probabilities over unlabelled dev inputs, estimated "
                             "by the optimizer when it made the prompt and fixed since (part of the prompt)"}
    return {"method": "contextual calibration (Zhao et al. 2021): normalise the label probabilities over the "
                      "labels, divide by bias, normalise again, take the largest",
            "content_free_inputs": list(CONTENT_FREE),
            "content_free_prompts": [shape(p) for p in content_free_prompts(spec, demos)],
            "bias": None,
            "bias_from": "not in the run's records, which keep calibrated scores only: score each content-free "
                         "prompt once on the production model, as `answer` says; bias is the mean of their "
                         "label probabilities, each normalised over the labels"}


def as_json(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path | None) -> dict[str, Any]:
    prompt = template(spec, demos)
    return {"format": FORMAT, "source_run": str(run_dir) if run_dir else None, "task": config.task, "model": config.model,
            "scoring": config.scoring, "serve": serving_contract(config), "input_fields": input_fields(spec),
            "template": prompt_shape(prompt),
            "label_words": list(spec.label_words), "continuations": list(prompt.label_continuations),
            "answer": answer(spec, config, prompt), "calibrate": calibrated(spec, config),
            "calibration": calibration(spec, config, demos, prompt_shape),
            "demos": [{"id": ex.id, "fields": ex.fields, "label": spec.label_words[ex.label]} for ex in demos],
            "spec": asdict(spec)}


def chat_messages(prompt: Prompt) -> list[dict[str, str]]:
    """The messages before the assistant prefix; a text prompt is one user message."""
    return wire_messages(Prompt(text=prompt.text, messages=prompt.messages), prefill=False)


def as_openai_chat(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path | None) -> dict[str, Any]:
    """The shipped prompt for a chat-completions client: `messages` with `{field}` placeholders
    (filled by plain replacement), then `assistant_prefix` as the start of the answer — as a final
    assistant message the server continues, or, where it cannot, after a newline at the end of the
    last message (what prompttune's --api chat does)."""
    prompt = template(spec, demos)
    scored_with = {"backend": config.backend, "api": config.api if config.backend == "openai" else None,
                   "scoring": config.scoring}
    serve = serving_contract(config)
    served = {"serve": serve, "request": request_parameters(spec, config), "how_to_apply": how_to_apply(spec, config)}
    if serve == "choice":
        served["choice"] = choice_block(spec, config, prompt)
    return {"format": OPENAI_CHAT_FORMAT, "source_run": str(run_dir) if run_dir else None, "task": config.task,
            "model": config.model, "scored_with": scored_with, **served,
            "input_fields": input_fields(spec), "chat": prompt.messages is not None,
            "messages": chat_messages(prompt), "assistant_prefix": prompt.assistant_prefix,
            "label_words": list(spec.label_words), "answer": answer(spec, config, prompt),
            "calibrate": calibrated(spec, config),
            "calibration": calibration(spec, config, demos, lambda p: {"messages": chat_messages(p),
                                                                       "assistant_prefix": p.assistant_prefix}),
            "demo_ids": list(spec.demo_ids)}


def request_parameters(spec: PromptSpec, config: RunConfig) -> dict[str, Any]:
    """What a chat-completions body carries besides `model` and `messages` to be read as the verdict was:
    greedy generation at the pinned token limit, or one answer token with its top log-probs."""
    if prediction(spec, config) == "generation":
        return {"temperature": 0.0, "max_tokens": COT_MAX_NEW_TOKENS if spec.cot else MAX_NEW_TOKENS}
    return {"temperature": 0.0, "max_tokens": 1, "logprobs": True, "top_logprobs": chat.TOP_LOGPROBS[0]}


def how_to_apply(spec: PromptSpec, config: RunConfig) -> str:
    """One paragraph: from the messages to the label the verdict would give, under the run's contract."""
    method = prediction(spec, config)
    if serving_contract(config) == "choice":
        return ("Send `messages` with each `{field}` replaced by its input (one pass, by plain replacement) and the "
                "`assistant_prefix` as `answer` says, adding your server's body from `choice.requests` (vLLM's "
                "structured outputs or llama.cpp's grammar decode exactly as the run did, its `logit_bias` included; "
                "the OpenAI API's enum is the nearest it offers, not exact). The answer is one of `choice.choices`: "
                "the label is `label_words` at the same place.")
    send = ("Send `messages` with each `{field}` replaced by its input (one pass, by plain replacement) and the "
            "`assistant_prefix` as `answer` says, adding `request` to the body. ")
    if method == "generation":
        after = " after the last 'Final answer'" if spec.cot else ""
        return (send + f"The label is the one label word the answer contains{after} as a whole word, ignoring case; "
                "an answer with none or several is invalid, and the verdict counted it wrong. The token limit and "
                "greedy decoding are part of what the test confirmed; apply no offsets.")
    offsets = {"label_logprobs": "The run applied no offsets: the label is the largest score.",
               "batch_calibration": "Then apply the offsets: from each score subtract the log-sum-exp of all the "
                                    "labels' scores (normalise), subtract `calibration.bias` (one value per label "
                                    "word, in order), and take the largest.",
               "contextual_calibration": "Then calibrate: score each of `calibration.content_free_prompts` once "
                                         "the same way; the bias is the mean of their label probabilities, each "
                                         "normalised over the labels; divide each input's normalised label "
                                         "probabilities by it and take the largest."}[method]
    return (send + "Each label word's score is the log-prob of its first token in the answer's first-token "
            "`top_logprobs`; where a label's first token is not listed, or two labels share one, no exact score "
            "exists: refuse the input, as the run refused it. " + offsets + " A run scored over /v1/completions "
            "read multi-token labels whole; `prompttune export --to python` writes a module that reads them as the "
            "run did, over either endpoint.")


def constrained_decoding(spec: PromptSpec, config: RunConfig, continuations: tuple[str, ...]) -> dict[str, Any]:
    """How the run decoded under `choice`, for a server to repeat: the choices (the label continuations after the
    prompt, exactly as the run decoded them), a GBNF grammar of them, the `logit_bias` the shipped offsets ship as
    (`contract.choice_bias` on each label's first token of the run's tokenizer; `{}` without offsets) and a token
    limit the longest label fits in however the server spells it (`choice_token_cap`)."""
    tokenizer = run_tokenizer(config)
    pieces = [tokenizer(c, add_special_tokens=False).input_ids for c in continuations] if tokenizer else None
    bias = contract.choice_bias(spec)
    if not bias:
        logit_bias: dict[str, float] | None = {}
    elif pieces is None or len({ids[0] for ids in pieces}) < len(pieces):
        logit_bias = None  # the run refused these offsets under choice: no candidate carried them
    else:
        logit_bias = {str(ids[0]): b for ids, b in zip(pieces, bias)}
    return {"choices": list(continuations), "grammar": constraint_fields("grammar", continuations)["grammar"],
            "logit_bias": logit_bias, "max_tokens": choice_token_cap(continuations)}


def choice_block(spec: PromptSpec, config: RunConfig, prompt: Prompt) -> dict[str, Any]:
    """For constrained decoding: what `constrained_decoding` gives, and the request each server takes with it —
    vLLM's `structured_outputs` choice, llama.cpp's `grammar`, and the OpenAI API's JSON-schema enum, which writes
    the label inside JSON quotes: the nearest that API offers, not what the run decoded."""
    decoded = constrained_decoding(spec, config, prompt.label_continuations)
    common = {"temperature": 0.0, "max_tokens": decoded["max_tokens"]} | (
        {"logit_bias": decoded["logit_bias"]} if decoded["logit_bias"] else {})
    enum = {"type": "json_schema", "json_schema": {"name": "label", "strict": True,
                                                    "schema": {"type": "string", "enum": list(spec.label_words)}}}
    note = ("no offsets: the label is what constrained decoding picks" if decoded["logit_bias"] == {} else
            "token id -> the logit shift the run decoded with (minus the label's offset, centred)"
            if decoded["logit_bias"] else "the labels share a first token, so no logit_bias shifts them apart")
    return decoded | {"label_words": list(spec.label_words), "logit_bias_note": note,
                      "requests": {"vllm": common | constraint_fields("structured_outputs", decoded["choices"]),
                                   "llama.cpp": common | {"grammar": decoded["grammar"]},
                                   "openai": common | {"response_format": enum, "max_tokens": MAX_NEW_TOKENS}}}


def run_tokenizer(config: RunConfig) -> Any:
    """The tokenizer the run's backend rendered chat prompts and found labels' first tokens with (None
    where it had none: a server of another model, reached without --tokenizer)."""
    from prompttune.backends.openai_tokenizers import embedded_tokenizer_if_served, load_tokenizer
    from prompttune.backends.transformers_setup import embedded_model_path

    if config.tokenizer:
        return load_tokenizer(config.tokenizer)
    if config.model.startswith("embedded:"):
        return embedded_tokenizer_if_served(str(embedded_model_path()))
    if config.backend == "openai":
        return embedded_tokenizer_if_served(config.model)
    return load_tokenizer(config.model)
