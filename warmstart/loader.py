"""Load an environment file into a validated EnvironmentConfig, or fail with every problem listed.

Every way a file can be wrong ends here as Problems (field path, what is wrong with the value echoed, the rule
in words, a fix that works or none): unreadable files, YAML syntax (file and line), keys written twice
(`config_file.py`), the model's own rules (pydantic, put in words by `config_messages.py`) and the rules across
fields (`checks/`). `plan` and the CDK app both load through `load_config`, so they refuse the same inputs with the
same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from warmstart.catalog import Catalog, default_catalog
from warmstart.checks.environment import check_environment
from warmstart.config.environment import EnvironmentConfig
from warmstart.config_file import ANCHOR_PREFIX, EXAMPLE, ConfigError, Literals, read_yaml_literals
from warmstart.config_messages import kind_of, problems_of
from warmstart.problem import Problem


def load_config(path: str | Path, catalog: Catalog | None = None) -> EnvironmentConfig:
    path = Path(path)
    document, literals = read_yaml_literals(path)
    return parse_config(document, source=str(path), catalog=catalog, literals=literals)


def read_yaml(path: Path) -> Any:
    """The file's YAML document; any way the file cannot be read is a ConfigError naming the file."""
    return read_yaml_literals(path)[0]


def parse_config(
    raw: Any, *, source: str = "<config>", catalog: Catalog | None = None, literals: Literals | None = None
) -> EnvironmentConfig:
    if raw is None:
        raise ConfigError(source, [Problem("<root>", "the file is empty", f"start from {EXAMPLE}")])
    if not isinstance(raw, dict):
        raise ConfigError(
            source,
            [
                Problem(
                    "<root>",
                    f"expected a mapping of settings, found a {kind_of(raw)}",
                    f"write settings as 'key: value' lines, as {EXAMPLE} does",
                )
            ],
        )
    # Top-level `x-` keys hold YAML anchors for the settings to merge in (`<<: *name`), as Compose files do; they
    # are not settings.
    settings = {
        key: value for key, value in raw.items() if not (isinstance(key, str) and key.startswith(ANCHOR_PREFIX))
    }
    try:
        config = EnvironmentConfig.model_validate(settings)
    except ValidationError as error:
        raise ConfigError(source, problems_of(error, settings, literals or {})) from None
    problems = check_environment(config, catalog or default_catalog())
    if problems:
        raise ConfigError(source, problems)
    return config
