"""The full run configuration (saved verbatim to config.json)."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


def _path_text(value: Any) -> Any:
    """A path given from Python (a `pathlib.Path`) is kept as the text the CLI would give."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


PathText = Annotated[str, BeforeValidator(_path_text)]

Serve = Literal["logprobs", "generate", "choice"]
"""The serving contract: how production turns the model's output into a label (`scoring/contract.py`)."""
SERVES: tuple[Serve, ...] = ("logprobs", "generate", "choice")
DEFAULT_SERVE: Serve = "choice"  # by the rule fixed before measuring (docs/results/contract_default.md)
# `--scoring` before `--serve` existed, and the `scoring` key of an older config.json: the contract each meant.
SCORING_ALIASES: dict[str, Serve] = {"logit": "logprobs", "calibrated": "logprobs", "generate": "generate"}


class BackendConfig(BaseModel):
    """Which model answers, and how it is reached (shared by optimize, evaluate and compare)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["transformers", "openai", "vllm"] = "transformers"
    model: str = "embedded:smollm2-135m-instruct"
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    device: str = "cpu"
    batch_size: int = Field(32, gt=0)
    base_url: list[str] = Field(default_factory=list, description="OpenAI-compatible servers (--backend openai)")
    api_key_env: str | None = Field(None, description="env var holding the API key; the key is never saved")
    tokenizer: str | None = Field(None, description="tokenizer for chat templates (openai) / tokenization (vllm)")
    api: Literal["auto", "completions", "chat"] = Field(
        "auto", description="endpoint of an OpenAI-compatible server: /v1/completions, /v1/chat/completions, or "
                            "auto (completions when the server offers it, else chat)")
    concurrency: int = Field(8, gt=0, description="requests in flight per server")
    timeout: float = Field(60.0, gt=0, description="seconds per HTTP request")
    retries: int = Field(4, ge=0, description="retries per call on connection errors, timeouts, 429, 5xx; "
                                              "every server out for timeout x retries seconds stops the run")


class RunConfig(BackendConfig):
    """One optimization run."""

    task: PathText = "agnews"
    data_dir: PathText | None = Field(None, description="local data folder; else $PROMPTTUNE_DATA_DIR, else the hub")
    space: PathText | None = Field(None, description="search-space file; default: the task's built-in space")
    prompt: PathText | None = Field(None, description="your prompt file, the baseline (replaces the task file's "
                                                 "prompt); the space is derived around it")
    dimensions: list[str] | None = Field(None, description="search only these dimensions of the space; hold the "
                                                           "rest at the baseline (compare's same-space mode)")
    native_demos: int = Field(0, ge=0, description="add few-shot k in {0, 2, ..., K} to a space that declares no "
                                                   "demos (compare --mode native --native-demos K)")
    optimizer: str = Field("reflect", description="default: the reflective race, the best shipped test accuracy "
                                                  "over agnews, sst2 and trec (docs/results/default_choice.md)")
    optimizer_options: dict[str, Any] = Field(default_factory=dict)
    budget: int = Field(2000, gt=0, description="hard cap on search-time model calls")
    budget_tokens: int | None = Field(None, gt=0, description="optional cap on search-time tokens")
    seed: int = Field(0, description="optimizer seed (sampling, proposals)")
    split_seed: int = Field(0, description="seed of the train/dev/test draw; fixed across compared arms")
    pool: Literal["all", "tuning", "reporting"] = Field(
        "all", description="built-in tasks: draw from every example, from the tuning part only, or test on the "
                           "reporting part (prompttune.tasks.pools; the headline run)")
    serve: Serve | None = Field(None, description="the serving contract: logprobs (label log-probabilities, label "
                                                 "offsets applied), generate (the model answers, a label is read "
                                                 "from its text), choice (constrained decoding over the labels); "
                                                 "None: the task file's `serve:`, else logprobs")
    capabilities: dict[str, Any] | None = Field(None, description="what the target honours, probed as the run "
                                                                "opens (written by the run: Capabilities.record)")
    objective: str = "accuracy"
    alpha: float = Field(0.05, gt=0, lt=1, description="level of the held-out test that decides what ships")
    confirm_top: int = Field(1, gt=0, description="test the top K dev candidates on test, Holm over K")
    dev_alpha: float = Field(0.10, gt=0, lt=1,
                             description="family-wise false-accept level of one sweep of dev challenges")
    check_generation: int = Field(100, ge=0, description="after the verdict, score the shipped prompt and the baseline "
                                                         "by generation on the first N test examples, outside the "
                                                         "budget (0: off; skipped under serve generate)")
    max_prompt_tokens: int | None = Field(None, gt=0, description="reject candidates whose prompt around an empty "
                                                                  "input exceeds N tokens (demos included)")
    class_loss_margin: float = Field(0.05, ge=0, le=1, description="flag, in every report, a class whose test recall "
                                                                   "under the shipped prompt or the dev winner drops "
                                                                   "more than this below the baseline's")
    proposer_model: str | None = Field(None, description="model that writes instructions; default: the task model")
    train_size: int = Field(1000, gt=0)
    dev_size: int = Field(300, gt=0)
    test_size: int = Field(1000, gt=0)
    runs_dir: PathText = "runs"
    cache: PathText | None = Field(None, description="shared cache file; default: cache.sqlite in the run dir")

    @model_validator(mode="before")
    @classmethod
    def _scoring_alias(cls, data: Any) -> Any:
        """`scoring` (the `--scoring` alias, an older config.json) becomes the contract it meant; one field decides."""
        if not isinstance(data, dict) or "scoring" not in data:
            return data
        data = dict(data)
        scoring = data.pop("scoring")
        if scoring not in SCORING_ALIASES:
            raise ValueError(f"scoring {scoring!r} is not one of {', '.join(SCORING_ALIASES)} (use serve: "
                             f"{', '.join(SERVES)})")
        meant = SCORING_ALIASES[scoring]
        if data.get("serve") not in (None, meant):
            raise ValueError(f"scoring {scoring!r} means serve {meant!r}, but serve is {data['serve']!r}: give one")
        data["serve"] = meant
        return data

    @property
    def contract(self) -> Serve:
        """The run's serving contract: `serve`, else the default (the engine resolves the task file's first)."""
        return self.serve or DEFAULT_SERVE

    @property
    def scoring(self) -> str:
        """The prediction method the held-out verdict scores by: generation under `generate`, constrained decoding
        under `choice`, else the label log-probabilities (a prompt's own calibration applied)."""
        return {"generate": "generate", "choice": "choice"}.get(self.contract, "logit")
