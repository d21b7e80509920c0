"""Run a Snakemake rule script file in a warm worker's child (`client.hand_over_script`)."""

from __future__ import annotations

import os
import runpy
from typing import Any

from vlbench.warm.client import WARM_SCRIPT_ENV


def run_script(payload: dict[str, Any]) -> None:
    """Execute the script file as `__main__`, as `python FILE` would."""
    os.environ[WARM_SCRIPT_ENV] = payload["script"]
    runpy.run_path(payload["script"], run_name="__main__")
