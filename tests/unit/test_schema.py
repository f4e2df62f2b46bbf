"""`farm schema` as an editor uses it, and the matrices the farm writes for a user: every
example and every `farm init` starter is valid, and a bad key is refused by the schema and
by the loader at the same place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from farm.errors import ConfigError
from farm.matrix.load import load_matrix
from farm.matrix.yaml_file import read_yaml
from tests.helpers import run_cli

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    result = run_cli("schema")
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_describes_the_keys_an_editor_completes(
        validator: jsonschema.Draft202012Validator) -> None:
    schema = validator.schema
    assert isinstance(schema, dict)
    assert schema["title"] == "specfarm matrix" and schema["additionalProperties"] is False
    assert {"campaign", "models", "n-predict", "engine-curve", "variants"} <= set(
        schema["properties"])
    assert schema["properties"]["n-predict"]["description"] == "Tokens generated per run."


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_is_valid_by_the_schema(
        example: Path, validator: jsonschema.Draft202012Validator) -> None:
    assert list(validator.iter_errors(read_yaml(example))) == []


@pytest.mark.parametrize("engine_curve", [False, True], ids=["starter", "engine-curve"])
def test_farm_init_writes_a_matrix_the_schema_and_the_loader_accept(
        engine_curve: bool, tmp_path: Path, validator: jsonschema.Draft202012Validator) -> None:
    path = tmp_path / "m.yaml"
    result = run_cli("init", str(path), *(["--engine-curve"] if engine_curve else []))
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"wrote {path}; check it with `farm run --dry-run {path}`, run it "
                             f"with `farm run {path}`\n")
    assert list(validator.iter_errors(read_yaml(path))) == []
    matrix, jobs = load_matrix(path)
    assert "#" in path.read_text()  # commented, for a newcomer
    if engine_curve:
        assert matrix.engine_curve is not None
        assert jobs[0].variant.name == "drafter"
        assert len(jobs) == 1 + 3 + 4  # the drafter; n-max 2 and 3 reach 3 and 4 lengths
    else:
        assert [job.variant.name for job in jobs] == [
            "ngram", "ngram-short[spec-ngram-simple-size-n=3]",
            "ngram-short[spec-ngram-simple-size-n=4]"]
    again = run_cli("init", str(path))
    assert again.exit_code == 2
    assert again.stderr == f"error: {path} exists: give another file name, or --force to " \
                           "overwrite it\n"


@pytest.mark.parametrize(("change", "where", "near"), [
    ({"n-predcit": 64}, ["n-predcit"], "`n-predict`"),
    ({"variants": [{"name": "v", "flag": {"spec-type": "ngram-simple"}}]},
     ["variants", 0, "flag"], "`flags`"),
    ({"sampling": {"temprature": 0.7}}, ["sampling", "temprature"], "`temperature`"),
])
def test_a_bad_key_is_refused_by_the_schema_and_the_loader_at_the_same_place(
        change: dict[str, Any], where: list[Any], near: str, tmp_path: Path,
        validator: jsonschema.Draft202012Validator) -> None:
    data = {**yaml.safe_load(EXAMPLES[0].read_text()), **change}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    [error] = [e for e in validator.iter_errors(data) if e.validator == "additionalProperties"]
    assert [*error.absolute_path, where[-1]] == where
    assert f"'{where[-1]}' was unexpected" in error.message
    with pytest.raises(ConfigError) as refused:
        load_matrix(path)
    key = ".".join(str(part) for part in where).replace(".0.", "[0].")
    assert str(refused.value) == f"{path}: {key}: unknown key; did you mean {near}?"
