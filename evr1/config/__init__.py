"""The run configuration: one pydantic model per section, YAML files, and `a.b.c=value` overrides.

One module per group of sections, named for the package it configures (`data`, `model`, `train`,
`eval`), the whole run composed in `root`, reading and overrides apart in `load`. Every public name
is re-exported here, so `from evr1.config import load_config, Config` is the import users write.
"""

from evr1.config.base import ConfigError, Section, refuse_hub_id
from evr1.config.data import CacheConfig, DataConfig, SynthConfig
from evr1.config.eval import EvalConfig, JudgeConfig
from evr1.config.load import apply_overrides, config_from_dict, flat_params, load_config, parse_override
from evr1.config.model import ModelConfig, TinyModelConfig
from evr1.config.preflight import preflight
from evr1.config.root import Config, OrchestrationConfig, RunConfig, TrackingConfig
from evr1.config.train import AlgorithmConfig, RewardConfig, RolloutConfig, TrainerConfig

__all__ = [
    "AlgorithmConfig", "CacheConfig", "Config", "ConfigError", "DataConfig", "EvalConfig", "JudgeConfig",
    "ModelConfig", "OrchestrationConfig", "RewardConfig", "RolloutConfig", "RunConfig", "Section", "SynthConfig",
    "TinyModelConfig", "TrackingConfig", "TrainerConfig", "apply_overrides", "config_from_dict", "flat_params",
    "load_config", "parse_override", "preflight", "refuse_hub_id",
]
