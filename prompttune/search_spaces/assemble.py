"""SpaceFile + task → SearchSpace: dimensions, rules, composers and the baseline.

Errors name the key path in the file (`SpaceError.where`) so the loader can report
"file: key.path: what was expected" in one line.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from prompttune.core.errors import UserError
from prompttune.search_spaces.constraints import Constraint, Forbid, Rule, When, show_value
from prompttune.search_spaces.demos import DEMO_SELECTIONS, FewShot
from prompttune.search_spaces.grammars import GrammarContext, field_title
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.schema import SpaceFile
from prompttune.search_spaces.space import Composer, Dimension, SearchSpace
from prompttune.search_spaces.synonyms import synonym_source
from prompttune.tasks.task import Task


class SpaceError(UserError):
    """A space definition problem at key path `where`."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


class _Parts:
    """Collects dimensions, rules, composers and baseline values while a space is assembled."""

    def __init__(self) -> None:
        self.dims: list[Dimension] = []
        self.rules: list[Constraint] = []
        self.composers: list[Composer] = []
        self.defaults: dict[str, Any] = {}

    def add(self, where: str, *args: Any, **kwargs: Any) -> Dimension:
        try:
            dim = Dimension(*args, **kwargs)
        except UserError as exc:
            raise SpaceError(where, str(exc)) from None
        self.dims.append(dim)
        return dim


def _base(config: SpaceFile, task: Task) -> PromptSpec:
    settings = config.base.model_dump()
    passages = set(config.grammars.wrapper.passages) if config.grammars.wrapper else set()
    templates = settings.pop("input_templates")
    if unknown := sorted(set(templates) - set(task.input_fields)):
        raise SpaceError("base.input_templates", f"{unknown} are not input fields of task {task.name!r} "
                         f"(fields: {', '.join(task.input_fields)})")
    inputs = tuple((f, templates.get(f, f"{field_title(f)}: {{}}"))
                   for f in task.input_fields if f not in passages)
    return PromptSpec(**settings, input_templates=inputs,
                      label_words=tuple(words[0] for words in task.verbalizers))


def _slot_pinned(name: str, word: str) -> Rule:
    """Instructions without the marker would repeat one prompt for every word: keep the first."""
    marker = "{" + name + "}"
    return Rule(f"{marker} stays {word!r} in instructions without it",
                lambda v: marker in v["instruction"] or v[name] == word, ("instruction", name))


def _instructions_and_slots(config: SpaceFile, parts: _Parts) -> None:
    texts = config.instructions or [config.base.instruction]
    if config.instructions:
        parts.add("instructions", "instruction", tuple(config.instructions), "instruction", "instruction")
    for name, slot in config.slots.items():
        marker = "{" + name + "}"
        using = [t for t in texts if marker in t]
        if not using:
            raise SpaceError(f"slots.{name}", f"no instruction contains {marker}")
        word = slot.word or name.replace("_", " ")
        values = [word, *slot.values]
        if slot.synonyms:
            try:
                source = synonym_source(slot.synonyms.source)
                values += source.synonyms(word, using[0], slot.synonyms.limit, slot.synonyms.pos)
            except UserError as exc:
                raise SpaceError(f"slots.{name}.synonyms", str(exc)) from None
        parts.add(f"slots.{name}", name, tuple(dict.fromkeys(values)), f"slot:{name}", "slot", "word")
        if len(using) < len(texts):
            parts.rules.append(_slot_pinned(name, word))


def _label_words(config: SpaceFile, task: Task, parts: _Parts) -> None:
    if config.label_words is None:
        return
    if config.grammars.wrapper and config.grammars.wrapper.answer == "index":
        raise SpaceError("label_words", "the wrapper's `answer: index` already sets the label words")
    options = (dict(zip(task.labels, task.verbalizers)) if config.label_words == "task"
               else config.label_words)
    if set(options) != set(task.labels):
        raise SpaceError("label_words", f"expected exactly the task's labels {task.labels}, "
                         f"got {list(options)}")
    names = []
    for i, label in enumerate(task.labels):
        dim = parts.add(f"label_words.{label}", f"label.{label}", tuple(options[label]), f"label:{i}",
                        "label_words", f"label {label}")
        names.append(dim.name)

    def distinct(values: Mapping[str, Any]) -> bool:
        words = [values[n].lower() for n in names]
        return len(set(words)) == len(words)

    parts.rules.append(Rule("label words distinct across classes", distinct, tuple(names)))


def _choices(config: SpaceFile, parts: _Parts) -> None:
    for name, choice in config.choices.items():
        parts.add(f"choices.{name}", name, tuple(choice.values), choice.target or name, "choice")


def _grammars(config: SpaceFile, task: Task, parts: _Parts) -> None:
    context = GrammarContext(task, tuple(config.few_shot.k) if config.few_shot else (0,))
    for name in ("wrapper", "format", "template"):
        grammar = getattr(config.grammars, name)
        if grammar is None:
            continue
        try:
            part = grammar.part(context)
        except ValueError as exc:
            raise SpaceError(f"grammars.{name}", str(exc)) from None
        parts.dims += part.dimensions
        parts.rules += part.constraints
        parts.defaults.update(part.defaults)
        if part.composer:
            parts.composers.append(part.composer)


def _few_shot(config: SpaceFile, parts: _Parts) -> None:
    few = config.few_shot
    if few is None:
        return
    if unknown := [s for s in few.selection if s not in DEMO_SELECTIONS]:
        raise SpaceError("few_shot.selection", f"unknown {unknown}; known: {', '.join(DEMO_SELECTIONS)}")
    for key, values, title in (("k", few.k, "k"), ("selection", few.selection, "demo selection"),
                               ("order", few.order, "demo order")):
        parts.add(f"few_shot.{key}", f"few_shot.{key}", tuple(values), f"part:few_shot.{key}",
                  "few_shot", title)
    irrelevant = {f"few_shot.{key}": (values[0],) for key, values in
                  (("selection", few.selection), ("order", few.order)) if len(values) > 1}
    if 0 in few.k and irrelevant:
        parts.rules.append(When({"few_shot.k": (0,)}, irrelevant))
    parts.composers.append(FewShot(few.draw_seed))


def _toggles(config: SpaceFile, parts: _Parts) -> None:
    toggles = config.toggles
    for name in ("cot", "chat"):
        if getattr(toggles, name):
            parts.add(f"toggles.{name}", name, (False, True), name, "toggle")
    if toggles.system is not None:
        texts = [toggles.system] if isinstance(toggles.system, str) else toggles.system
        parts.add("toggles.system", "system", (None, *texts), "system", "toggle", "system prompt")


def _condition(where: str, raw: Mapping[str, Any], dims: Mapping[str, Dimension]) -> dict[str, tuple]:
    condition = {}
    for name, value in raw.items():
        if name not in dims:
            raise SpaceError(f"{where}.{name}", f"unknown dimension; known: {', '.join(dims)}")
        allowed = tuple(value) if isinstance(value, list) else (value,)
        for v in allowed:
            try:
                dims[name].index(v)
            except KeyError:
                raise SpaceError(f"{where}.{name}", f"{show_value(v)} is not one of its values "
                                 f"({', '.join(map(show_value, dims[name].values))})") from None
        condition[name] = allowed
    return condition


def _user_rules(config: SpaceFile, parts: _Parts) -> None:
    dims = {d.name: d for d in parts.dims}
    for i, rule in enumerate(config.constraints):
        where = f"constraints.{i}"
        if rule.forbid is not None:
            parts.rules.append(Forbid(_condition(f"{where}.forbid", rule.forbid, dims)))
        else:
            parts.rules.append(When(_condition(f"{where}.when", rule.when or {}, dims),
                                    _condition(f"{where}.then", rule.then or {}, dims)))


def _default(config: SpaceFile, parts: _Parts) -> dict[str, int]:
    dims = {d.name: d for d in parts.dims}
    wanted = {**parts.defaults, **config.default}
    assignment = {}
    for name, value in wanted.items():
        condition = _condition("default", {name: value}, dims)
        assignment[name] = dims[name].index(condition[name][0])
    return assignment


def build_space(config: SpaceFile | Mapping[str, Any], task: Task,
                rules: Sequence[Constraint | Callable[[Mapping[str, Any]], bool]] = ()) -> SearchSpace:
    """The Python entry point: a SpaceFile (or its dict) for `task`, plus optional Python rules.

    The result is not bound to demos yet: call `.bind(task.splits["train"])` when it has few-shot.
    """
    config = config if isinstance(config, SpaceFile) else SpaceFile.model_validate(config)
    if config.task and config.task != task.name:
        raise SpaceError("task", f"the space was written for task {config.task!r}, not {task.name!r}")
    parts = _Parts()
    base = _base(config, task)
    _instructions_and_slots(config, parts)
    _label_words(config, task, parts)
    _choices(config, parts)
    _grammars(config, task, parts)
    _few_shot(config, parts)
    _toggles(config, parts)
    _user_rules(config, parts)
    space = SearchSpace(config.name, base, parts.dims, [*parts.rules, *rules], _default(config, parts),
                        parts.composers)
    if broken := [r.describe() for r in space.constraints if not r(space.values_of(space.default))]:
        raise SpaceError("default", f"the baseline breaks {'; '.join(broken)} (set `default:` to "
                         f"a valid assignment)")
    return space
