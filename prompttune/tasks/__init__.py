"""Tasks: what is classified, its labels, and three disjoint splits."""

from pathlib import Path

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.tasks.builtin import BUILTIN, load_builtin
from prompttune.tasks.custom import load_custom
from prompttune.tasks.pools import Pool
from prompttune.tasks.task import SplitSizes, Task
from prompttune.tasks.user_prompt import UserPrompt


def load_task(name_or_path: str, data_dir: str | Path | None = None,
              sizes: SplitSizes | None = None, seed: int = 0, pool: Pool = "all") -> Task:
    """A built-in name (agnews, sst2, trec) or the path of a task YAML file. Without `sizes`, the
    default sizes (a task file's data too small for them: half, a quarter and a quarter of it); `pool`
    (built-in tasks only) draws from the tuning or the reporting part of the data (`prompttune.tasks.pools`)."""
    if name_or_path in BUILTIN:
        return load_builtin(name_or_path, data_dir, sizes or SplitSizes(), seed, pool)
    if pool != "all":
        raise UserError(f"pool {pool!r} partitions the built-in tasks ({', '.join(BUILTIN)}); a task file "
                        f"{name_or_path} has no tuning and reporting parts")
    if name_or_path.endswith((".yaml", ".yml")):
        if not Path(name_or_path).is_file():
            raise UserError(f"task file {name_or_path} not found")
        return load_custom(name_or_path, sizes, seed)
    raise UserError(f"unknown task {name_or_path!r}: use one of {', '.join(BUILTIN)} or a task YAML file")



def load_run_task(config: RunConfig) -> Task:
    """The task with the run's split sizes and split seed: the same splits for every reader."""
    return load_task(config.task, config.data_dir,
                     SplitSizes(config.train_size, config.dev_size, config.test_size), config.split_seed, config.pool)


__all__ = ["Example", "SplitSizes", "Task", "UserPrompt", "load_run_task", "load_task"]
