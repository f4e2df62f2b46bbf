"""Which llama-server options a job may pass, on the provisioned build's own ``--help``.

Every option of the build is classified (an allowed group, or why it is refused); every
alias canonicalises to one name, the same as the build's help says; a refused option is
refused under every spelling; what examples, tests and benchmarks use still passes.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from farm.errors import ConfigError
from farm.matrix.load import load_matrix
from farm.matrix.option_names import ALIASES, NEGATIONS, option_of
from farm.matrix.options import (
    ALLOWED,
    GROUP_REASONS,
    REFUSED,
    Reason,
    canonical,
    check_allowances,
    check_flag,
    refusal,
)
from farm.matrix.spec import Arm, BuildRef
from workers.job.checks import check_arm
from workers.job.runtime.probe import BinaryProbe, Option, probe_binary
from workers.job.runtime.sandbox import Sandbox
from workers.setup.provision import Provisioned

ROOT = Path(__file__).resolve().parents[2]
HARMLESS = frozenset(name for name, why in REFUSED.items() if why.reason is Reason.NOT_BENCHMARK)


@pytest.fixture(scope="module")
def probe(provisioned: Provisioned) -> BinaryProbe:
    return probe_binary(provisioned.server, Sandbox())


def options(probe: BinaryProbe) -> list[Option]:
    return list({id(option): option for option in probe.options.values()}.values())


def test_every_option_of_the_build_is_allowed_in_a_group_or_refused_with_a_reason(
        probe: BinaryProbe) -> None:
    unclassified = [option.names for option in options(probe)
                    if option.canonical not in ALLOWED and option.canonical not in REFUSED]
    assert not unclassified, f"classify these in farm/matrix/options.py: {unclassified}"
    assert len(options(probe)) > 250
    assert not set(ALLOWED) & set(REFUSED)
    assert {entry.group for entry in ALLOWED.values()} == set(GROUP_REASONS)
    # Nothing in the tables that the build does not have (a typo would hide a real option).
    known = {option.canonical for option in options(probe)}
    assert set(ALLOWED) | set(REFUSED) <= known


def test_every_alias_is_canonicalised_as_the_builds_help_says(probe: BinaryProbe) -> None:
    for name, option in probe.options.items():
        spelling = option.canonical_of(name)
        assert canonical(name, "test") == spelling, name
        assert option_of(spelling) == option.canonical, name
    assert set(NEGATIONS.values()) <= {option.canonical for option in options(probe)}
    assert canonical("-ngl", "t") == "n-gpu-layers" and canonical("--gpu-layers", "t") == \
        "n-gpu-layers"
    assert canonical("-mm", "t") == "mmproj" and canonical("-nkvo", "t") == "no-kv-offload"
    assert ALIASES["md"] == "spec-draft-model"


@pytest.mark.parametrize("reason", list(Reason), ids=lambda reason: reason.name)
def test_a_refused_option_is_refused_under_every_spelling(probe: BinaryProbe,
                                                          reason: Reason) -> None:
    refused = [option for option in options(probe)
               if option.canonical in REFUSED and REFUSED[option.canonical].reason is reason]
    assert refused, reason
    for option in refused:
        for name in option.names:
            with pytest.raises(ConfigError, match=reason.value):
                check_flag(f"-{name}" if len(name) <= 3 else f"--{name}", "1", "flags")
            arm = Arm(role="variant", name="v", build=BuildRef(name="cpu", path=probe.path),
                      flags=((name, True),))
            allowed = HARMLESS if reason is Reason.NOT_BENCHMARK else frozenset()
            if reason is Reason.NOT_BENCHMARK:
                assert refusal(option.canonical_of(name), allowed) is None
            else:
                with pytest.raises(ConfigError, match=reason.value):
                    check_arm(probe, arm, allowed)


def test_every_alias_of_an_allowed_option_passes_the_node_check(probe: BinaryProbe) -> None:
    for option in options(probe):
        if option.canonical not in ALLOWED or option.removed or option.hint is not None:
            continue
        for name in option.names:  # switches: true passes any spelling
            arm = Arm(role="variant", name="v", build=BuildRef(name="cpu", path=probe.path),
                      flags=((name, True),))
            checked, _ = check_arm(probe, arm)
            assert checked.flags == ((option.canonical_of(name), True),)
    for alias in ("ngl", "gpu-layers", "n-gpu-layers"):
        arm = Arm(role="variant", name="v", build=BuildRef(name="cpu", path=probe.path),
                  flags=((alias, "99"),))
        assert check_arm(probe, arm)[0].flags == (("n-gpu-layers", "99"),)


def test_an_operator_can_allow_a_harmless_option_and_never_a_dangerous_one() -> None:
    assert check_allowances(["embedding", "--reverse-prompt", "my-fork-knob"], "c") == {
        "embedding", "reverse-prompt", "my-fork-knob"}
    assert check_flag("my-fork-knob", "3", "f", {"my-fork-knob"}) == ("my-fork-knob", "3")
    with pytest.raises(ConfigError, match="not on the farm's list"):
        check_flag("my-fork-knob", "3", "f")
    with pytest.raises(ConfigError, match=r"did you mean --spec-draft-n-max\?"):
        check_flag("spec-draft-nmax", "3", "f")
    for name in ("tools", "mcp-servers-json", "-mu", "hf-repo", "log-file", "path",
                 "log-prompts-dir", "host", "-mm-not-an-option-but-close"):
        if option_of(canonical(name, "t")) in REFUSED:
            with pytest.raises(ConfigError, match="cannot be allowed"):
                check_allowances([name], "allow-options")


def test_an_allowed_fork_option_that_takes_a_file_is_refused_on_the_node(
        probe: BinaryProbe) -> None:
    fork = Option(names=("fork-cache",), hint="FNAME", canonical="fork-cache")
    forked = BinaryProbe(path=probe.path, version=probe.version, build_number=None, commit=None,
                         options={**probe.options, "fork-cache": fork})
    arm = Arm(role="variant", name="v", build=BuildRef(name="fork", path=probe.path),
              flags=(("fork-cache", "x.bin"),))
    with pytest.raises(ConfigError, match="takes FNAME: a file"):
        check_arm(forked, arm, {"fork-cache"})


def _flag_names(node: Any) -> list[str]:
    """The keys of every `flags` mapping in a matrix (or a Python literal of one)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "flags" and isinstance(value, dict):
                found += list(value)
            found += _flag_names(value)
    elif isinstance(node, list):
        for item in node:
            found += _flag_names(item)
    return found


def _python_flag_names(path: Path) -> list[str]:
    """The string keys of dict literals given as `"flags": {...}` in a Python file."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "flags" \
                        and isinstance(value, ast.Dict):
                    names += [k.value for k in value.keys
                              if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return names


def test_every_flag_the_examples_and_benchmarks_use_still_passes(probe: BinaryProbe) -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    names = [name for path in examples for name in _flag_names(yaml.safe_load(path.read_text()))]
    names += [name for path in sorted((ROOT / "tests" / "bench").glob("*.py"))
              for name in _python_flag_names(path)]
    assert {"ctx-size", "spec-type", "spec-draft-n-max", "n-gpu-layers"} <= set(names)
    for name in names:
        assert refusal(canonical(name, name)) is None, name
    for path in examples:
        for job in load_matrix(path)[1]:
            for arm in (job.baseline, job.variant):
                if arm.build.name != "turboquant":  # a fork's cache types: not built here
                    check_arm(probe, arm.model_copy(update={
                        "build": BuildRef(name="cpu", path=probe.path)}))
