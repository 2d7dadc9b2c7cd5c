"""Configuration: the canonical v0.3 models, the loader (YAML/JSON), the flat-layout
converter (legacy/), cross-reference validation, plugin configurations and the JSON Schema."""

from app.config.document import RouterConfig
from app.config.errors import ConfigError, ConfigIssue
from app.config.loader import LoadedConfig, canonical_json, config_hash, load_config, parse_config, to_yaml
from app.config.plugins import parse_plugin

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "LoadedConfig",
    "RouterConfig",
    "canonical_json",
    "config_hash",
    "load_config",
    "parse_config",
    "parse_plugin",
    "to_yaml",
]
