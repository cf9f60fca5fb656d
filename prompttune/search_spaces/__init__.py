"""Search spaces: declared prompt dimensions, sampled, enumerated and rendered."""

from prompttune.search_spaces.builtin import default_space
from prompttune.search_spaces.prompt import Prompt, PromptSpec, render
from prompttune.search_spaces.space import Candidate, Dimension, SearchSpace

__all__ = ["Candidate", "Dimension", "Prompt", "PromptSpec", "SearchSpace", "default_space", "render"]
