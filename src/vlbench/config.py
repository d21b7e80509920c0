"""Validate a workflow config against the JSON schema, fill defaults, explain errors in one line."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlbench.errors import VlbenchError

if TYPE_CHECKING:  # jsonschema is imported where a config is validated, not by every job
    import jsonschema

# Keys that cannot change any number (speed and memory knobs): no rule passes them as a param,
# so changing one reruns nothing; the jobs read them from the config at run time.
# config/README.md says for every key whether changing it reruns anything, and what.
RUN_TIME_KEYS: dict[str, tuple[str, ...]] = {
    "embedding": ("threads", "num_workers", "pixel_cache"),
    "prepare": ("threads",),
    "ranking": ("block_mb",),
}

# Keys that cut the work into jobs (the DAG's shape), never a number: no rule passes them as a
# param either, but switching one renames the jobs, so Snakemake reruns those jobs once.
JOB_SHAPE_KEYS: dict[str, tuple[str, ...]] = {"embedding": ("jobs",)}

# The choices of `embedding.jobs`, each with the wildcards its embed jobs take
# (workflow/rules/embed.smk): one job per (model, benchmark), per model, or one in all.
EMBED_JOB_WILDCARDS: dict[str, tuple[str, ...]] = {
    "per_benchmark": ("model", "benchmark"),
    "per_model": ("model",),
    "single": (),
}
# `auto` (the default) resolves to one of them where the run executes (vlbench.planning.embed_cut).
EMBED_JOB_SHAPES: tuple[str, ...] = ("auto", *EMBED_JOB_WILDCARDS)


def result_keys(config: Mapping[str, Any], section: str) -> dict[str, Any]:
    """The keys of a config section that can change a number (a rule's params)."""
    neutral = (*RUN_TIME_KEYS.get(section, ()), *JOB_SHAPE_KEYS.get(section, ()))
    return {key: value for key, value in config[section].items() if key not in neutral}


def pick(mapping: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The named keys of a mapping (those present), for a rule's params."""
    return {key: mapping[key] for key in keys if key in mapping}


# The config schema ships inside the package; workflow/schemas/config.schema.yaml links to it.
SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """Read the YAML JSON-schema file (yaml imported here: jobs that only read the key tables
    above, such as every gather job through `vlbench.embedding.identity`, do not pay for it)."""
    import yaml

    with open(path, encoding="utf-8") as handle:
        # The schema is ours (no duplicate-key check needed): libyaml's loader when present.
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _section_defaults(section: str) -> dict[str, Any]:
    properties = load_schema()["properties"][section]["properties"]
    return {key: spec["default"] for key, spec in properties.items() if "default" in spec}


def schema_defaults(section: str) -> dict[str, Any]:
    """The schema's default of every key of a top-level config section (written only there)."""
    return copy.deepcopy(_section_defaults(section))


def benchmark_entry_defaults(*keys: str) -> dict[str, Any]:
    """The schema's defaults of a benchmark's nested entry, e.g. ("fewshot",) or ("probe",
    "linear")."""
    spec = load_schema()["$defs"]["benchmark"]
    for key in keys:
        spec = spec["properties"][key]
    return {key: copy.deepcopy(item["default"]) for key, item in spec["properties"].items()}


def fewshot_defaults() -> dict[str, Any]:
    """The schema's defaults of a benchmark's `fewshot` entry (shots, folds, shuffle)."""
    return benchmark_entry_defaults("fewshot")


def _fill_defaults(validator_class: type) -> type:
    """Extend a jsonschema validator so that validating also inserts `default:` values."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(
        validator: Any, properties: Mapping, instance: Any, schema: Mapping
    ) -> Iterator:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    import jsonschema

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


@functools.cache
def _validator_class() -> type:
    import jsonschema

    return _fill_defaults(jsonschema.Draft202012Validator)


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "<top level>"


def _intended_branch(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """The errors of the oneOf/anyOf branch whose required keys the instance has, if any."""
    if error.validator not in ("oneOf", "anyOf") or not isinstance(error.instance, dict):
        return []
    for index, branch in enumerate(error.validator_value):
        required = branch.get("required", [])
        if required and all(key in error.instance for key in required):
            return [e for e in error.context if e.relative_schema_path[0] == index]
    return []


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For oneOf/anyOf failures, follow the branch the user meant (by its required keys)."""
    from jsonschema.exceptions import best_match

    branch = _intended_branch(error)
    if branch:
        return _deepest(best_match(branch))
    if error.context and error.validator not in ("oneOf", "anyOf"):
        return _deepest(best_match(error.context))
    return error


def _forms(error: jsonschema.ValidationError) -> str:
    """The alternative forms of a oneOf, each named by its required keys."""
    return "; ".join(
        " + ".join(branch.get("required", [])) or "?" for branch in error.validator_value
    )


# Who wrote the value at a key path: (path, keys at fault below it) -> "mine.yaml", "--config".
Blame = Callable[[tuple[str | int, ...], list[str]], str]


def explain(error: jsonschema.ValidationError, source: str | Blame) -> str:
    """Turn a schema error into one line naming the key, what is allowed, and who wrote it."""
    error = _deepest(error)
    where = _where(error)
    extra_keys = error.validator == "additionalProperties" and isinstance(error.instance, dict)
    allowed = sorted(error.schema.get("properties", {})) if extra_keys else []
    unknown = sorted(set(error.instance) - set(allowed)) if extra_keys else []
    if callable(source):
        named_key = "propertyNames" in error.absolute_schema_path
        source = source(tuple(error.absolute_path), [error.instance] if named_key else unknown)
    if extra_keys and allowed:
        return (
            f"{source}: unknown key {', '.join(repr(k) for k in unknown)} at '{where}' "
            f"(allowed: {', '.join(allowed)})"
        )
    if error.validator == "required":
        return f"{source}: missing key at '{where}': {error.message}"
    if error.validator in ("oneOf", "anyOf"):
        return f"{source}: '{where}' must have exactly one of these forms: {_forms(error)}"
    if error.validator == "pattern" and error.schema.get("pattern", "").startswith("^[A-Za-z0-9]["):
        return (
            f"{source}: key {error.instance!r} under '{where}' may only use letters, digits, "
            "'_', '.', '-' (no '/', no '..', at most 64 characters)"
        )
    if error.validator == "not":
        return f"{source}: key {error.instance!r} under '{where}' must not contain '..'"
    return f"{source}: invalid value at '{where}': {error.message}"


def validate_config(
    config: Mapping[str, Any], source: str | Blame, schema_path: str | Path = SCHEMA_PATH
) -> dict[str, Any]:
    """Return a validated copy of `config` with every schema default filled in.

    Raises VlbenchError with a one-line message naming the offending key and its `source`
    (a name, or a function of the key path naming who wrote it: a file or `--config`).
    """
    instance = copy.deepcopy(dict(config))
    validator = _validator_class()(load_schema(schema_path))
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        raise VlbenchError(explain(errors[0], source))
    return instance


def source_kind(source: Mapping[str, Any]) -> str:
    """Which of the three source forms a validated benchmark source is: hub, path or synthetic."""
    for kind, key in (("hub", "repo"), ("path", "path"), ("synthetic", "synthetic")):
        if key in source:
            return kind
    raise VlbenchError(f"unrecognised benchmark source {dict(source)!r}")
