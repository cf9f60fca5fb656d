"""The user's own prompt, the baseline of a run: a template (`prompt:`) or chat messages (`messages:`), from a
task file or `--prompt FILE`.

Only the text is read and checked for shape here; `prompttune.search_spaces.user_prompt` turns it into a
PromptSpec (search spaces sit above tasks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from prompttune.core.errors import UserError, validation_message
from prompttune.core.yamlio import load_yaml

STRUCTURED_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class UserPrompt:
    """The user's template (`{field}` per input field, optional `{labels}`), the system message of a chat
    prompt, where it came from (named in every error and in the report), and its frozen parts: texts no
    candidate may change (a compliance rule, a required output format)."""

    template: str
    source: str
    chat: bool = False
    system: str | None = None
    frozen: tuple[str, ...] = ()


class PromptMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user"]
    content: str


class PromptSource(BaseModel):
    """`prompt:` or `messages:`, as a task file and a `--prompt` YAML/JSON file write them."""

    model_config = ConfigDict(extra="forbid")
    prompt: str | None = Field(None, description="your prompt: a template with {field} per input field and "
                                                 "optional {labels}; the baseline of every run")
    messages: list[PromptMessage] | None = Field(None, description="your chat prompt: an optional system message, "
                                                                   "then one user message (a template)")
    frozen: list[str] = Field(default_factory=list, description="exact texts of the prompt that every candidate "
                                                                "keeps verbatim")

    @field_validator("messages")
    @classmethod
    def _system_then_user(cls, value: list[PromptMessage] | None) -> list[PromptMessage] | None:
        roles = [m.role for m in value or ()]
        if value is not None and roles not in (["user"], ["system", "user"]):
            raise ValueError(f"expected an optional system message and then one user message, got roles "
                             f"{', '.join(roles) or 'none'}")
        return value

    @field_validator("frozen")
    @classmethod
    def _frozen_texts(cls, value: list[str]) -> list[str]:
        if any(not text.strip() for text in value):
            raise ValueError("a frozen text is empty; list exact texts of your prompt")
        return value

    @model_validator(mode="after")
    def _not_both(self) -> "PromptSource":
        if self.prompt is not None and self.messages is not None:
            raise ValueError("give either prompt or messages, not both")
        if self.frozen and self.prompt is None and self.messages is None:
            raise ValueError("frozen lists texts of your prompt: give prompt or messages too")
        return self

    def user_prompt(self, source: str) -> UserPrompt | None:
        """The prompt given, if any; `source` names the file it came from."""
        frozen = tuple(dict.fromkeys(self.frozen))
        if self.prompt is not None:
            return UserPrompt(self.prompt, f"`prompt:` of {source}", frozen=frozen)
        if self.messages is None:
            return None
        system = next((m.content for m in self.messages if m.role == "system"), None)
        return UserPrompt(self.messages[-1].content, f"`messages:` of {source}", chat=True, system=system,
                          frozen=frozen)


def read_prompt_file(path: str) -> UserPrompt:
    """`--prompt FILE`: a YAML/JSON file with `prompt:` or `messages:` (by its suffix), else a text file that is
    the template itself."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"--prompt {path}: file not found")
    source = f"--prompt {path}"
    if file.suffix not in STRUCTURED_SUFFIXES:
        try:
            template = file.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UserError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start}); save the file as UTF-8") from None
        if not template.strip():
            raise UserError(f"{source}: the file is empty")
        return UserPrompt(template, source)
    try:
        raw = json.loads(file.read_text(encoding="utf-8")) if file.suffix == ".json" else load_yaml(file)
        given = PromptSource.model_validate(raw).user_prompt(source)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}: cannot read JSON: {exc}") from None
    except ValidationError as exc:
        raise UserError(f"{source}: {validation_message(exc)}") from None
    if given is None:
        raise UserError(f"{source}: give `prompt:` (a template) or `messages:` (chat messages)")
    return given
