"""The config of one `train` call, from the contract: its fields, their bounds and their defaults are
those of `train`'s `config` in protocol.schema.json (src/trainers/protocol.ts's LearnerConfigSchema).

RLConfig is a frozen dataclass built from the schema's properties (a field without a default there,
like `dr_grpo_constant` or `logit_chunk`, defaults to None). parse_config validates a request's config
against the schema, then applies the rules between fields the schema cannot say (check_config): dr_grpo
needs its constant, dual_clip is 0 or above 1 and not used with cispo, is_min is below is_cap.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

from .protocol import RequestError, defaults, request_schema, validate_part

CONFIG_SCHEMA = request_schema("train", "config")

DR_GRPO_CONSTANT_REQUIRED = ("config.dr_grpo_constant: required for dr_grpo (a fixed budget of policy tokens, "
                             "set by the trainer)")


def _to_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


RLConfig = dataclasses.make_dataclass(
    "RLConfig",
    [(name, Any, dataclasses.field(default=value)) for name, value in defaults(CONFIG_SCHEMA).items()],
    frozen=True,
    namespace={"to_json": _to_json,
               "__doc__": "One train call's config: the fields of protocol.schema.json's train.config, with its "
                          "defaults (PROTOCOL.md's config table)."},
)
RLConfig.__module__ = __name__


def check_config(cfg: Any) -> None:
    """The rules between fields, which the schema does not express."""
    if cfg.loss == "dr_grpo" and cfg.dr_grpo_constant is None:
        raise RequestError(DR_GRPO_CONSTANT_REQUIRED)
    if cfg.dual_clip != 0 and not cfg.dual_clip > 1:
        raise RequestError(f"config.dual_clip: must be 0 (off) or > 1 (verl's clip_ratio_c, typically 3), "
                           f"got {cfg.dual_clip}")
    if cfg.dual_clip != 0 and cfg.loss == "cispo":
        raise RequestError("config.dual_clip: not used by loss cispo (its ratio is capped above only and "
                           "detached); set 0")
    if not cfg.is_min < cfg.is_cap:
        raise RequestError(f"config.is_min: must be below config.is_cap, got is_min {cfg.is_min} and is_cap "
                           f"{cfg.is_cap}")


def parse_config(obj: Optional[Dict[str, Any]], name: str = "config") -> Any:
    """RLConfig from a request's config (absent or null fields: the schema's defaults); RequestError names
    the field of a value the schema or check_config refuses."""
    given = validate_part("train", ("config",), {} if obj is None else obj, name)
    cfg = RLConfig(**given)
    check_config(cfg)
    return cfg


# Checkpoints written before the config followed the contract name AdamW's settings eps and betas.
_OLD_NAMES = {"eps": "adam_eps"}


def config_from_checkpoint(saved: Dict[str, Any]) -> Any:
    """RLConfig from a checkpoint's `last_config` (old names accepted): only the optimizer's settings are
    read from it, so the rules between fields are not applied."""
    d = {_OLD_NAMES.get(k, k): v for k, v in saved.items() if v is not None}
    betas = d.pop("betas", None)
    if betas is not None:
        d.setdefault("adam_beta1", betas[0])
        d.setdefault("adam_beta2", betas[1])
    known = {f.name for f in dataclasses.fields(RLConfig)}
    try:
        given = validate_part("train", ("config",), {k: v for k, v in d.items() if k in known}, "config")
    except RequestError as e:
        raise RequestError(f"dir: the checkpoint's scheduler config is not valid: {e}") from None
    return RLConfig(**given)
