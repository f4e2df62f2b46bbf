"""Flag checks against the whole ``--help`` of the real build, before any server starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from farm.errors import ConfigError, NoMtpHeads, UnsupportedByBuild
from farm.matrix.flags import FlagValue
from farm.matrix.options import REFUSED, Reason, refusal
from farm.matrix.spec import Arm, BuildRef, JobSpec, ModelRef, Prompt
from workers.job.checks import check_arm, preflight
from workers.job.runtime.probe import BinaryProbe, Option, probe_binary
from workers.job.runtime.sandbox import Sandbox
from workers.paths import NodePaths
from workers.setup.builds import built_here
from workers.setup.provision import Provisioned

# The metavars the real build prints for numbers (--ctx-size N, --spec-draft-p-min P).
NUMERIC = ("N", "P", "SEED")
NUMERIC_DEFAULT = re.compile(r"\(default: (-?[\d.]+)[,)]")


@pytest.fixture(scope="module")
def probe(provisioned: Provisioned) -> BinaryProbe:
    return probe_binary(provisioned.server, Sandbox())


def options(probe: BinaryProbe) -> list[Option]:
    return list({id(option): option for option in probe.options.values()}.values())


# Every harmless option, as an operator could allow them: the value checks reach them all.
HARMLESS = frozenset(name for name, why in REFUSED.items() if why.reason is Reason.NOT_BENCHMARK)


def check(probe: BinaryProbe, name: str, value: FlagValue) -> None:
    arm = Arm(role="variant", name="v", build=BuildRef(name="cpu", path=probe.path),
              flags=((name, value),))
    check_arm(probe, arm, HARMLESS)


def test_hints_that_show_a_value_pattern_are_not_taken_for_choices(probe: BinaryProbe) -> None:
    patterns = [o for o in options(probe) if o.hint and re.search(r"[A-Z<>]|\.\.", o.hint)]
    assert {"spec-synth-rates", "tensor-split", "device"} <= {n for o in patterns for n in o.names}
    for option in patterns:
        if "allowed values" not in option.help:
            assert option.choices == (), option.names
    for option in options(probe):
        assert all(re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", c) for c in option.choices), option
    assert probe.choices("flash-attn") == ("on", "off", "auto")
    assert {"ngram-simple", "draft-mtp"} <= set(probe.choices("spec-type"))
    assert "q8_0" in probe.choices("cache-type-k")


def test_every_numeric_flag_takes_its_default_and_refuses_a_word(probe: BinaryProbe) -> None:
    numeric = [o for o in options(probe) if o.hint in NUMERIC and not o.removed
               and refusal(o.canonical, HARMLESS) is None]
    assert len(numeric) > 50
    for option in numeric:
        name = option.canonical
        default = NUMERIC_DEFAULT.search(" ".join(option.help.split()))
        if default:
            check(probe, name, default.group(1))
        with pytest.raises(ConfigError, match=f"--{name} {option.hint} takes a number"):
            check(probe, name, "big")


@pytest.mark.parametrize(("name", "value"), [
    ("ctx-size", "4096"), ("temp", "0.8"), ("seed", "-1"), ("spec-draft-p-min", ".5"),
    ("rope-freq-base", "1e6"), ("n-gpu-layers", "auto"), ("n-gpu-layers", "all"),
    ("spec-synth-rates", "0.9,0.6"), ("tensor-split", "3,1"), ("device", "none"),
])
def test_valid_values_pass(probe: BinaryProbe, name: str, value: str) -> None:
    check(probe, name, value)


def test_a_word_for_a_numeric_flag_names_what_it_takes(probe: BinaryProbe) -> None:
    with pytest.raises(ConfigError) as caught:
        check(probe, "n-gpu-layers", "most")
    assert str(caught.value) == "--n-gpu-layers N takes a number or 'auto', 'all', not 'most'"


def test_a_type_the_build_lacks_is_unsupported_by_build(probe: BinaryProbe) -> None:
    with pytest.raises(UnsupportedByBuild, match="does not accept 'eagle9'") as caught:
        check(probe, "spec-type", "eagle9")
    assert caught.value.failure_class == "unsupported_by_build"


def test_draft_mtp_on_a_model_without_mtp_heads_is_refused_before_any_server_starts(
        provisioned: Provisioned, qwen35_random: Path, node_paths: NodePaths) -> None:
    build = BuildRef(name="cpu", path=str(provisioned.server))
    spec = JobSpec(
        campaign="c", gpu_class="cpu", model=ModelRef(name="qwen35", path=str(qwen35_random)),
        baseline=Arm(role="baseline", name="baseline", build=build, flags=()),
        variant=Arm(role="variant", name="mtp", build=build,
                    flags=(("spec-type", "draft-mtp"),)),
        varying={}, prompt_mode="completion", prompts=(Prompt(id="p", text="t", category="c"),),
        n_predict=8, sampling={}, repetitions=1, pairs=1, max_pairs=1, target_ci=0.03)
    with pytest.raises(NoMtpHeads, match="needs MTP heads") as caught:
        preflight(spec, built_here(node_paths, None), node_paths)
    assert caught.value.role == "variant" and caught.value.failure_class == "no_mtp_heads"
