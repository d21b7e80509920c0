"""What planning must know of open_clip's pretrained tags, without importing open_clip.

Planning (the Snakefile at parse time, `vlbench pin`) must know which tags need a pinned hub
commit, and which were trained with the other activation than the architecture they are named
with (QuickGELU weights under a plain-GELU name score silently lower; refused before any job
runs). Asking open_clip's registry imports open_clip, torch, torchvision and transformers
(seconds and about a gigabyte per parse, on every cluster job). The answer is a small static
table instead, `open_clip_tags.json` (`hub_repos`: name -> tag -> hub repository or null;
`quick_gelu_differs`: name -> tag -> whether the weights were trained with QuickGELU, listed
only where the architecture builds the other one), written from the installed open_clip by

    python -m vlbench.embedding.models.open_clip_tags

and checked against that registry by a test, so an open_clip upgrade that changes it fails the
suite until the table is written again. A (name, tag) pair the table does not list is one
open_clip does not have either: it is refused at plan time, naming the tags the name has.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

from vlbench.errors import VlbenchError

QUICKGELU_SUFFIX = "-quickgelu"

TABLE = Path(__file__).with_name("open_clip_tags.json")


def hub_repo_of(cfg: dict) -> str | None:
    """The hub repository a tag's weights come from (None: a URL download, nothing to pin)."""
    if "mlfoundations" in cfg.get("url", "") or not cfg.get("hf_hub"):
        return None
    return os.path.split(cfg["hf_hub"])[0] or None


def registry_table() -> dict[str, dict[str, dict[str, Any]]]:
    """The table (module docstring), from the installed open_clip's registry."""
    import open_clip
    from open_clip.pretrained import get_pretrained_cfg, list_pretrained

    hub_repos: dict[str, dict[str, Any]] = {}
    differs: dict[str, dict[str, Any]] = {}
    for name, tag in list_pretrained():
        cfg = get_pretrained_cfg(name, tag)
        hub_repos.setdefault(name, {})[tag] = hub_repo_of(cfg)
        builds = bool((open_clip.get_model_config(name) or {}).get("quick_gelu", False))
        trained = bool(cfg.get("quick_gelu", False))
        if trained != builds:
            differs.setdefault(name, {})[tag] = trained
    return {"hub_repos": hub_repos, "quick_gelu_differs": differs}


@functools.cache
def _static_table() -> dict[str, dict[str, dict[str, Any]]]:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def clean_tag(tag: str) -> str:
    """A tag as open_clip looks it up (`open_clip.pretrained._clean_tag`)."""
    return tag.lower().replace("-", "_")


def tag_hub_repo(name: str, tag: str) -> str | None:
    """The hub repository behind open_clip's (name, tag), or None when it downloads by URL.

    Raises VlbenchError when open_clip has no such tag for the name, naming those it has.
    """
    known = _static_table()["hub_repos"].get(name)
    if not known:
        raise VlbenchError(
            f"open_clip has no pretrained weights for {name!r} (pretrained {tag!r}): give a "
            "local checkpoint file as 'pretrained', or a name open_clip lists weights for"
        )
    if clean_tag(tag) not in known:
        raise VlbenchError(
            f"open_clip has no pretrained tag {tag!r} for {name!r}; its tags: "
            f"{', '.join(sorted(known))}"
        )
    return known[clean_tag(tag)]


def activation_refusal(
    name: str, weights: str, trained_quick_gelu: bool, quickgelu_name_exists: bool
) -> VlbenchError:
    """The refusal of weights trained with the other activation than architecture `name`
    builds, naming the name to use (one wording, at plan time and in the job)."""
    if trained_quick_gelu:
        fixed = name + QUICKGELU_SUFFIX
        use = f"'{fixed}'" if quickgelu_name_exists else f"a {QUICKGELU_SUFFIX} variant of {name}"
        return VlbenchError(
            f"model {name} with {weights}: these weights were trained with QuickGELU but "
            f"'{name}' builds plain GELU, which silently lowers scores; use name {use}"
        )
    return VlbenchError(
        f"model {name} with {weights}: these weights were trained with plain GELU but '{name}' "
        f"builds QuickGELU; use name '{name.removesuffix(QUICKGELU_SUFFIX)}'"
    )


def check_activation(name: str, tag: str) -> None:
    """Refuse a tag whose weights were trained with the activation `name` does not build
    (QuickGELU weights under a plain-GELU name, or the reverse), naming the name to use."""
    table = _static_table()
    trained = table["quick_gelu_differs"].get(name, {}).get(clean_tag(tag))
    if trained is not None:
        exists = name + QUICKGELU_SUFFIX in table["hub_repos"]
        raise activation_refusal(name, f"pretrained '{tag}'", trained, exists)


def write_table(path: Path = TABLE) -> None:
    """Write the table from the installed open_clip (run after upgrading open_clip)."""
    path.write_text(json.dumps(registry_table(), indent=1, sort_keys=True) + "\n", "utf-8")


if __name__ == "__main__":
    write_table(Path(sys.argv[1]) if len(sys.argv) > 1 else TABLE)
