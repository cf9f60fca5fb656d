"""YAML loading with YAML 1.2 booleans: `yes`, `no`, `on`, `off` stay strings.

Label names like `yes`/`no` are common in classification data; YAML 1.1 would turn them into
booleans and break the match with the data file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from prompttune.core.errors import UserError


class _Yaml12Loader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """A key given twice is an error: PyYAML would keep the last one and drop the first silently."""
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file; unreadable or malformed files become a one-line UserError."""
    try:
        return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_Yaml12Loader)
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot read YAML: {' '.join(str(exc).split())}") from exc
