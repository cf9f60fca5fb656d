"""Search spaces: declared prompt dimensions, sampled, enumerated and rendered."""

from prompttune.core.types import Prompt
from prompttune.search_spaces.assemble import SpaceError, build_space
from prompttune.search_spaces.constraints import Constraint, Forbid, Rule, When
from prompttune.search_spaces.default_spaces import default_space
from prompttune.search_spaces.groups import SpaceSize
from prompttune.search_spaces.prompt import PromptSpec, render
from prompttune.search_spaces.schema import SpaceFile
from prompttune.search_spaces.space import Candidate, Dimension, SearchSpace
from prompttune.search_spaces.synonyms import SynonymSource, WordNetSource, register_synonym_source

__all__ = ["Candidate", "Constraint", "Dimension", "Forbid", "Prompt", "PromptSpec", "Rule", "SearchSpace",
           "SpaceError", "SpaceFile", "SpaceSize", "SynonymSource", "When", "WordNetSource",
           "build_space", "default_space", "register_synonym_source", "render"]
