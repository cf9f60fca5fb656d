"""Named variant arms: one optimizer compared with itself under other options, each run under its own arm name."""

from __future__ import annotations

from typing import Any, Mapping

VARIANT_OF = "optimizer"
"""The options key that makes an arm a named variant: `options["reflect-nocal"] = {"optimizer": "reflect",
"calibration": "off"}` runs reflect under its own name (`compare --optimizers reflect-nocal=reflect:calibration=off`),
so one optimizer can be compared with itself under other options."""


def optimizer_of(arm: str, options: Mapping[str, Mapping[str, Any]]) -> str:
    """The optimizer an arm runs: the one its variant names, else the arm's own name."""
    return str(options.get(arm, {}).get(VARIANT_OF, arm))


def arm_options(arm: str, options: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The optimizer options an arm runs with (a variant's own name for its optimizer left out)."""
    return {key: value for key, value in options.get(arm, {}).items() if key != VARIANT_OF}
