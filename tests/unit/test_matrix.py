"""Matrix validation and expansion: every bad input is one clear ConfigError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from farm.errors import ConfigError
from farm.matrix.flags import arm_draft_length, draft_length
from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from tests.helpers import matrix_dict, write_matrix


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Any]:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    server = tmp_path / "llama-server"
    server.write_text("")
    return {"model": model, "build": {"name": "test", "path": str(server)}, "dir": tmp_path}


# The flags these tests were written with (and their pinned job keys made from): two
# threads, as the matrix a newcomer writes; tests.helpers' default is one (tests/beside.py).
FLAGS = {"ctx-size": 1024, "threads": 2}


def _matrix(files: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return matrix_dict(files["model"], build=files["build"], **{"flags": FLAGS, **overrides})


def load(files: dict[str, Any], **overrides: Any) -> list[Any]:
    matrix = _matrix(files, **overrides)
    return load_matrix(write_matrix(files["dir"], matrix))[1]


def error_of(files: dict[str, Any], text: str | None = None, **overrides: Any) -> str:
    path = files["dir"] / "matrix.yaml"
    if text is None:
        write_matrix(files["dir"], _matrix(files, **overrides))
    else:
        path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    message = str(caught.value)
    assert str(path) in message
    return message


def test_valid_matrix_expands_to_one_job_per_variant(files: dict[str, Any]) -> None:
    jobs = load(files, variants=[{"name": "a", "flags": {"spec-type": "ngram-simple"}},
                                 {"name": "b", "flags": {"spec-type": "ngram-mod"}}])
    assert [job.variant.name for job in jobs] == ["a", "b"]
    assert jobs[0].baseline.argv == ["--ctx-size", "1024", "--threads", "2"]
    assert jobs[0].variant.argv == ["--ctx-size", "1024", "--threads", "2",
                                    "--spec-type", "ngram-simple"]
    assert jobs[0].varying == {"spec-type": "ngram-simple"}


def test_expansion_and_job_keys_are_deterministic(files: dict[str, Any]) -> None:
    first = [job.job_key for job in load(files)]
    second = [job.job_key for job in load(files)]
    assert first == second and len(first[0]) == 64


def test_job_key_changes_with_what_makes_the_experiment(files: dict[str, Any]) -> None:
    base = load(files)[0].job_key
    assert load(files, **{"n-predict": 33})[0].job_key != base
    assert load(files, campaign="other")[0].job_key != base
    assert load(files, flags={"ctx-size": 2048, "threads": 2})[0].job_key != base


def test_short_flag_names_normalise_to_long_ones(files: dict[str, Any]) -> None:
    job = load(files, flags={"-c": 512, "ctk": "q8_0", "-fa": "on"})[0]
    assert job.baseline.argv == ["--ctx-size", "512", "--cache-type-k", "q8_0",
                                 "--flash-attn", "on"]


def test_list_values_sweep_and_null_removes_a_baseline_flag(files: dict[str, Any]) -> None:
    jobs = load(files, flags={"ctx-size": [512, 1024], "threads": 2},
                variants=[{"name": "n", "flags": {"spec-draft-n-max": [2, 3],
                                                  "spec-type": "ngram-simple",
                                                  "threads": None}}])
    assert len(jobs) == 4
    assert {job.variant.name for job in jobs} == {"n[spec-draft-n-max=2]",
                                                  "n[spec-draft-n-max=3]"}
    assert all("--threads" not in job.variant.argv for job in jobs)
    assert jobs[0].varying["threads"] is None
    assert {job.varying["ctx-size"] for job in jobs} == {"512", "1024"}


def test_true_is_a_bare_switch_and_false_is_left_out(files: dict[str, Any]) -> None:
    job = load(files, variants=[{"name": "v", "flags": {"no-warmup": True, "spec-type":
                                                        "ngram-simple", "no-repack": False}}])[0]
    assert job.variant.argv[-3:] == ["--no-warmup", "--spec-type", "ngram-simple"]


def test_args_string_is_split_without_a_shell(files: dict[str, Any]) -> None:
    args = "--spec-type ngram-simple --spec-ngram-simple-size-n 4 --no-warmup"
    job = load(files, variants=[{"name": "v", "args": args}])[0]
    assert job.variant.argv[-5:] == ["--spec-type", "ngram-simple",
                                     "--spec-ngram-simple-size-n", "4", "--no-warmup"]


def test_unknown_key_names_the_key_and_the_near_one(files: dict[str, Any]) -> None:
    message = error_of(files, variants=[{"name": "v", "flag": {"spec-type": "ngram-simple"}}])
    assert "variants[0].flag: unknown key; did you mean `flags`?" in message


def test_unknown_top_level_key_suggests_the_near_one_not_all_22(
        files: dict[str, Any]) -> None:
    message = error_of(files, None, **{"n-predcit": 64})
    assert message.endswith("n-predcit: unknown key; did you mean `n-predict`?")
    assert "repetitions" not in message
    far = error_of(files, None, **{"zzz": 1})
    assert far.endswith("zzz: unknown key; the keys allowed here are in `farm schema` and "
                        "docs/matrix.md")


def test_wrong_type_and_missing_field_are_named(files: dict[str, Any]) -> None:
    assert "repetitions" in error_of(files, repetitions="many")
    matrix = _matrix(files)
    del matrix["campaign"]
    write_matrix(files["dir"], matrix)
    with pytest.raises(ConfigError, match="campaign: required key is missing"):
        load_matrix(files["dir"] / "matrix.yaml")


def test_expansion_is_pure_models_and_builds_stay_as_written(files: dict[str, Any]) -> None:
    [job] = load(files, models=[{"name": "m", "path": "nowhere.gguf"}])
    assert (job.model.path, job.build.path) == ("nowhere.gguf", str(files["build"]["path"]))


def test_empty_variants_are_refused(files: dict[str, Any]) -> None:
    assert "variants" in error_of(files, variants=[])


def test_variant_that_changes_nothing_is_refused(files: dict[str, Any]) -> None:
    message = error_of(files, variants=[{"name": "same", "flags": {"threads": 2}}])
    assert "changes no flag" in message


def test_yaml_syntax_error_names_the_line(files: dict[str, Any]) -> None:
    message = error_of(files, text="campaign: x\nmodels: [\n  - name: a\nvariants: :\n")
    assert "YAML syntax error" in message and "matrix.yaml:" in message


MATRIX_TEXT = """\
campaign: c
n-predict: 32
models: [{name: m, path: model.gguf}]
prompts: [hi]
variants:
  - name: v
    flags: {spec-type: ngram-simple}
"""


@pytest.mark.parametrize(("old", "new", "key", "lines"), [
    ("prompts: [hi]\n", "prompts: [hi]\nn-predict: 64\n", "n-predict", (2, 5)),
    ("{spec-type: ngram-simple}", "\n      spec-type: ngram-simple\n      spec-type: ngram-mod",
     "spec-type", (8, 9)),
    ("[hi]", "[{id: a, text: x, id: b}]", "id", (4, 4)),
])
def test_duplicate_key_at_any_depth_names_the_key_and_both_lines(
        files: dict[str, Any], old: str, new: str, key: str, lines: tuple[int, int]) -> None:
    message = error_of(files, text=MATRIX_TEXT.replace(old, new))
    assert f"key {key!r} is given twice, on lines {lines[0]} and {lines[1]}" in message


def test_keys_of_a_yaml_merge_may_be_overridden(files: dict[str, Any]) -> None:
    text = MATRIX_TEXT.replace("variants:", "base: &base {threads: 2, spec-type: ngram-simple}"
                               "\nvariants:").replace("{spec-type: ngram-simple}",
                                                      "{<<: *base, spec-type: ngram-mod}")
    # Read past the merge: the schema, not the YAML loader, refuses the anchor's key.
    assert "base: unknown key" in error_of(files, text=text)


def test_empty_file_says_what_a_matrix_needs(files: dict[str, Any]) -> None:
    assert "the file is empty" in error_of(files, text="\n# nothing\n")


def test_shell_metacharacters_in_a_value_are_refused(files: dict[str, Any]) -> None:
    variants = [{"name": "v", "flags": {"cache-type-k": "q8_0; rm -rf ~"}}]
    message = error_of(files, variants=variants)
    assert "variants[0].flags.cache-type-k" in message and "';'" in message


@pytest.mark.parametrize("flag", ["port", "--host", "-m", "np", "metrics", "-lv", "--verbosity",
                                  "-v", "log-disable"])
def test_farm_owned_flags_are_refused(files: dict[str, Any], flag: str) -> None:
    assert "belongs to the farm" in error_of(files, flags={flag: "1"})


def test_duplicate_prompt_ids_are_refused(files: dict[str, Any]) -> None:
    message = error_of(files, prompts=[{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
    assert "used twice" in message


def test_prompt_file_adds_prompts(files: dict[str, Any]) -> None:
    (files["dir"] / "prompts.yaml").write_text("- plain text prompt\n- id: q\n  text: question\n")
    jobs = load(files, **{"prompt-file": "prompts.yaml"})
    assert [p.id for p in jobs[0].prompts] == ["copy", "p2", "q"]


def test_yaml_off_for_a_value_flag_is_kept_for_the_build_check(files: dict[str, Any]) -> None:
    job = load(files, variants=[{"name": "v", "flags": {"flash-attn": False}}])[0]
    assert ("flash-attn", False) in job.variant.flags
    assert "--flash-attn" not in job.variant.argv


def test_prompt_suite_categories_join_the_prompts(files: dict[str, Any]) -> None:
    jobs = load(files, prompts=[], **{"prompt-suite": ["math", "code"]})
    categories = {prompt.category for prompt in jobs[0].prompts}
    assert categories == {"math", "code"} and len(jobs[0].prompts) >= 10
    suite: dict[str, Any] = {"prompt-suite": ["poetry"]}
    assert "unknown prompt category: poetry" in error_of(files, None, **suite)


def test_a_two_stage_design_without_room_for_its_second_stage_is_refused(
        files: dict[str, Any]) -> None:
    two_stage = {"stop-rule": "two-stage"}
    short = error_of(files, None, pairs=4, **{"max-pairs": 6}, **two_stage)
    assert "max-pairs (6)" in short and "set it to 4" in short and "8 or more" in short
    assert "3 or more" in error_of(files, None, pairs=2, **{"max-pairs": 8}, **two_stage)
    # So is a precision design with an assurance (two-stage); without one it looks from 4.
    assert "8 or more" in error_of(files, None, pairs=4, **{"max-pairs": 6,
                                                            "target-assurance": 0.9})
    [looking] = load(files, pairs=2, **{"max-pairs": 6})
    assert looking.design.sequential and looking.design.least_pairs == 4
    assert load(files, pairs=4, **{"max-pairs": 8}, **two_stage)[0].design.two_stage
    assert load(files, pairs=2, **{"max-pairs": 2})[0].pairs == 2  # fixed


def test_a_stop_rule_names_its_design_and_its_errors_name_the_fix(
        files: dict[str, Any]) -> None:
    design = {"pairs": 4, "max-pairs": 12}
    [decision] = load(files, **design, **{"stop-rule": "decision"})
    assert decision.design.sequential and (decision.pairs, decision.max_pairs) == (4, 12)
    [precision] = load(files, **design)
    assert precision.design.sequential and precision.design.rule == "precision"
    assert decision.job_key != precision.job_key
    # A two-stage job (a stored one's design) is the same experiment as a precision one.
    [two_stage] = load(files, **design, **{"stop-rule": "two-stage"})
    assert two_stage.design.two_stage and two_stage.job_key == precision.job_key
    # A fixed rule runs `pairs` (max-pairs left out), the job of a matrix that set
    # max-pairs to pairs.
    matrix = _matrix(files, pairs=5, **{"stop-rule": "fixed"})
    del matrix["max-pairs"]
    [fixed] = load_matrix(write_matrix(files["dir"], matrix))[1]
    assert (fixed.max_pairs, fixed.design.rule) == (5, "fixed")
    assert fixed.job_key == load(files, pairs=5, **{"max-pairs": 5})[0].job_key
    assert "remove max-pairs (12) or set it to 5" in error_of(
        files, None, pairs=5, **{"stop-rule": "fixed", "max-pairs": 12})
    assert "which must be 4 or more" in error_of(files, None, pairs=3, **{
        "stop-rule": "decision", "max-pairs": 12})
    assert "stop-rule" in error_of(files, None, **{"stop-rule": "fastest"})


def test_an_assured_design_is_another_design_of_the_same_experiment(
        files: dict[str, Any]) -> None:
    [plain] = load(files)
    [assured] = load(files, **{"target-assurance": 0.9})
    assert plain.target_assurance is None and assured.target_assurance == 0.9
    assert assured.job_key != plain.job_key  # another design: another job
    assert assured.comparable_key == plain.comparable_key  # the same experiment
    message = error_of(files, None, **{"target-assurance": 0.3})
    assert "target-assurance" in message and "0.5" in message


def test_a_control_arm_runs_the_baseline_again_and_nothing_else(files: dict[str, Any]) -> None:
    [job] = load(files, variants=[{"name": "aa", "control": True}])
    assert job.control and job.variant.argv == job.baseline.argv
    [plain] = load(files)
    assert not plain.control and plain.job_key != job.job_key
    assert "set `control: true`" in error_of(files, variants=[{"name": "same"}])
    message = error_of(files, variants=[{"name": "aa", "control": True,
                                         "flags": {"spec-type": "ngram-simple"}}])
    assert "variants[0] (aa): a control arm runs the baseline again" in message


def test_synthetic_acceptance_arms_are_recognised_and_skip_agreement(
        files: dict[str, Any]) -> None:
    synthetic, drafter = load(files, variants=[
        {"name": "synth", "flags": {"spec-type": "ngram-simple",
                                    "spec-synth-rates": "0.9,0.6,0.3"}},
        {"name": "ngram", "flags": {"spec-type": "ngram-simple"}}])
    assert synthetic.synthetic and "synthetic acceptance" in str(synthetic.outputs_differ)
    assert not drafter.synthetic and drafter.outputs_differ is None
    [sampled] = load(files, sampling={"temperature": 0.7, "seed": 1})
    assert "temperature > 0" in str(sampled.outputs_differ)


def test_engine_curve_expands_to_synthetic_arms_per_draft_length(files: dict[str, Any]) -> None:
    jobs = load(files, variants=[], **{"engine-curve": {
        "spec-type": "draft-mtp", "draft-n-max": [1, 3], "synth-len": [1, 2, 2.5, 4]}})
    names = [job.variant.name for job in jobs]
    # n-max 1 reaches lengths up to 2; n-max 3 up to 4.
    assert names == ["engine-curve-n1[spec-synth-len=1]", "engine-curve-n1[spec-synth-len=2]",
                     "engine-curve-n3[spec-synth-len=1]", "engine-curve-n3[spec-synth-len=2]",
                     "engine-curve-n3[spec-synth-len=2.5]",
                     "engine-curve-n3[spec-synth-len=4]"]
    assert all(job.kind == "synthetic" for job in jobs)
    assert jobs[-1].varying == {"spec-type": "draft-mtp", "spec-draft-n-max": "3",
                                "spec-synth-len": "4"}


def test_engine_curve_sits_beside_variants_and_takes_flags(files: dict[str, Any]) -> None:
    jobs = load(files, **{"engine-curve": {
        "spec-type": "ngram-simple", "draft-n-max": [2], "synth-len": [1.5],
        "flags": {"spec-ngram-simple-size-n": 2}}})
    assert [job.kind for job in jobs] == ["variant", "synthetic"]
    assert ("spec-ngram-simple-size-n", "2") in jobs[1].variant.flags


def test_an_arms_draft_length_is_its_flag_else_the_flags_default() -> None:
    assert arm_draft_length({"spec-type": "draft-mtp", "spec-draft-n-max": "5"}) == 5
    # Set nowhere: llama.cpp's defaults, 3 for the draft types, 48 for ngram-simple, which
    # does not read --spec-draft-n-max.
    assert arm_draft_length({"spec-type": "draft-mtp"}) == 3
    assert arm_draft_length({"spec-type": "ngram-simple", "spec-draft-n-max": "4"}) == 48
    assert arm_draft_length({"spec-type": "ngram-simple", "spec-ngram-simple-size-m": 8}) == 8
    # No speculation, several types at once, a default not known here: none.
    for flags in ({}, {"spec-type": "none"}, {"spec-type": "draft-mtp,ngram-simple"},
                  {"spec-type": "ngram-mod"}):
        assert arm_draft_length(flags) is None, flags


def test_an_n_gram_curve_sets_the_draft_length_its_type_reads(files: dict[str, Any]) -> None:
    # ngram-simple drafts up to --spec-ngram-simple-size-m (48 by default): it never reads
    # --spec-draft-n-max. Its drafts are at least its lookup n-gram long (12 by default).
    short: dict[str, Any] = {"engine-curve": {
        "spec-type": "ngram-simple", "draft-n-max": [4, 16], "synth-len": [2]}}
    message = error_of(files, variants=[], **short)
    assert "draft-n-max 4 would never draft" in message and "spec-ngram-simple-size-n" in message
    [job] = load(files, variants=[], **{"engine-curve": {
        "spec-type": "ngram-simple", "draft-n-max": [4], "synth-len": [2],
        "flags": {"spec-ngram-simple-size-n": 4}}})
    assert job.varying == {"spec-type": "ngram-simple", "spec-ngram-simple-size-n": "4",
                           "spec-ngram-simple-size-m": "4", "spec-synth-len": "2"}
    assert draft_length(job.varying) == "4"
    assert draft_length({"spec-type": "draft-mtp", "spec-draft-n-max": "3"}) == "3"
    assert draft_length({"spec-type": "ngram-mod", "spec-draft-n-max": "3"}) is None


def test_engine_curve_out_of_reach_or_missing_is_refused(files: dict[str, Any]) -> None:
    out_of_reach: dict[str, Any] = {"engine-curve": {
        "spec-type": "draft-mtp", "draft-n-max": [1], "synth-len": [2.5, 3]}}
    message = error_of(files, variants=[], **out_of_reach)
    assert "engine-curve" in message and "draft-n-max + 1" in message
    assert "engine-curve" in error_of(files, variants=[])
    below_one: dict[str, Any] = {"engine-curve": {
        "spec-type": "draft-mtp", "draft-n-max": [2], "synth-len": [0.5]}}
    assert "synth-len" in error_of(files, variants=[], **below_one)


def test_fixed_stop_is_the_default_and_keeps_the_jobs_keys(files: dict[str, Any]) -> None:
    [job] = load(files)
    # The keys this matrix's job had before `stop` existed.
    assert job.stop == "fixed"
    assert job.job_key == "faf642e9e473cdcbba92b91258eff831266e9aef6c966c344ca7a20c38f53227"
    assert job.comparable_key == (
        "e42aabf888da0f7143c37893d7adf08a4b5d6ee0544a821432c58a7e8089b964")
    [fixed] = load(files, stop="fixed")
    assert (fixed.job_key, fixed.comparable_key) == (job.job_key, job.comparable_key)
    stored = job.model_dump(mode="json")
    del stored["stop"]  # a job stored before the key existed
    assert JobSpec.model_validate(stored).job_key == job.job_key


def test_natural_stop_is_another_experiment(files: dict[str, Any]) -> None:
    [fixed] = load(files)
    [natural] = load(files, stop="natural")
    assert natural.stop == "natural"
    assert natural.job_key != fixed.job_key and natural.comparable_key != fixed.comparable_key
    assert "stop: Input should be 'fixed' or 'natural'" in error_of(files, stop="eos")


def test_concurrency_sweeps_one_job_per_value_and_one_stream_keeps_the_keys(
        files: dict[str, Any]) -> None:
    [single] = load(files)
    [one] = load(files, concurrency=1)
    assert one.concurrency == 1 and one.job_key == single.job_key
    jobs = load(files, concurrency=[1, 2, 4])
    assert [job.concurrency for job in jobs] == [1, 2, 4]
    assert [job.varying["concurrency"] for job in jobs] == ["1", "2", "4"]
    # One stream is the experiment it always was, swept or not.
    assert len({job.job_key for job in jobs}) == 3 and jobs[0].job_key == single.job_key
    [four] = load(files, concurrency=4)
    assert four.concurrency == 4 and "concurrency" not in four.varying
    assert four.comparable_key != single.comparable_key
    assert "concurrency" in error_of(files, concurrency=0)
    assert "concurrency" in error_of(files, concurrency=[])


def test_parallel_stays_the_farms_and_points_at_concurrency(files: dict[str, Any]) -> None:
    message = error_of(files, flags={"parallel": 4})
    assert "--parallel belongs to the farm" in message and "`concurrency:`" in message


def test_concurrency_alone_is_no_variant(files: dict[str, Any]) -> None:
    message = error_of(files, concurrency=[1, 4], variants=[{"name": "same", "flags": {}}])
    assert "changes no flag of the baseline" in message


def test_prompt_length_tiers_put_a_document_excerpt_before_each_prompt(
        files: dict[str, Any]) -> None:
    short, thousand, four = load(files, **{"prompt-length": [0, 1000, 4000]})
    assert [job.prompt_length for job in (short, thousand, four)] == [0, 1000, 4000]
    assert [job.varying["prompt-length"] for job in (short, thousand, four)] == [
        "0", "1000", "4000"]
    base = short.prompts[0].text
    for job, length in ((thousand, 1000), (four, 4000)):
        prompt = job.prompts[0]
        assert prompt.id == short.prompts[0].id and prompt.text.endswith(base)
        # About `length` tokens at 4 characters each, cut at a line's start.
        assert length * 4 <= len(prompt.text) <= length * 4 + len(base) + 40
        assert "GNU" in prompt.text
    # Deterministic: the same matrix gives the same prompts, hence the same keys.
    assert [job.job_key for job in load(files, **{"prompt-length": [0, 1000, 4000]})] == [
        short.job_key, thousand.job_key, four.job_key]


def test_prompts_of_one_tier_read_different_excerpts(files: dict[str, Any]) -> None:
    [job] = load(files, prompts=["one", "two", "three"], **{"prompt-length": 2000})
    excerpts = [prompt.text.rsplit("\n\n", 1)[0] for prompt in job.prompts]
    assert len(set(excerpts)) == 3


def test_a_tier_longer_than_the_document_is_refused(files: dict[str, Any]) -> None:
    too_long: dict[str, Any] = {"prompt-length": 100_000}
    message = error_of(files, **too_long)
    assert "prompt-length" in message and "bundled document" in message
    assert "give at most" in message
