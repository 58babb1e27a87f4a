"""The one checked reader of JSON files the user names (``read_json_file``, ailens/_io.py),
and every loader and command that reads such a file through it: a bad file is one error of
the caller's own class naming the file, what is wrong and the fix."""

import json

import pytest
from synthetic import write_run
from test_cli import assert_one_line_error, cli

from ailens._io import fmt_s, read_json, read_json_file
from ailens.predict.job import JobError, load_job


class Refused(ValueError):
    """A caller's own error class: the reader raises it, not a class of its own."""


@pytest.fixture
def files(tmp_path):
    """One file per way a named JSON file goes wrong, and one good one."""
    (tmp_path / "a-directory.json").mkdir()
    for name, data in {
        "good.json": b'{"a": 1}',
        "broken.json": b'{"a": ',
        "binary.json": b"\xff\xfe\x00garbage",
        "deep.json": b"[" * 100_000,
        "list.json": b"[1, 2]",
        "string.json": b'"text"',
        "null.json": b"null",
        "number.json": b"3.5",
        "bool.json": b"true",
    }.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def test_a_good_file_is_its_object(files):
    assert read_json_file(files / "good.json", what="thing", error=Refused) == {"a": 1}


@pytest.mark.parametrize(
    "name, wrong",
    [
        ("missing.json", "cannot read thing (No such file or directory)"),
        ("a-directory.json", "cannot read thing (Is a directory)"),
        ("broken.json", "not a thing: not JSON (Expecting value: line 1 column 7"),
        ("binary.json", "not a thing: not JSON ("),
        ("deep.json", "not a thing: not JSON (maximum recursion depth"),
        ("list.json", "not a thing: a JSON array where a JSON object is expected"),
        ("string.json", "not a thing: a JSON string where a JSON object is expected"),
        ("null.json", "not a thing: a JSON null where a JSON object is expected"),
        ("number.json", "not a thing: a JSON number where a JSON object is expected"),
        ("bool.json", "not a thing: a JSON boolean where a JSON object is expected"),
    ],
)
def test_a_bad_file_is_the_callers_error_naming_file_problem_and_fix(files, name, wrong):
    path = files / name
    with pytest.raises(Refused) as e:
        read_json_file(path, what="thing", error=Refused, fix="write one with `make-thing`")
    assert str(e.value).startswith(f"{path}: {wrong}"), str(e.value)
    assert str(e.value).endswith("; write one with `make-thing`")
    assert read_json(path) is None  # the optional side-file reader stays quiet on the same files


def test_without_a_fix_the_message_ends_with_the_problem(files):
    with pytest.raises(
        Refused,
        match=r"list\.json: not a thing: a JSON array where a JSON "
        r"object is expected$",
    ):
        read_json_file(files / "list.json", what="thing", error=Refused)


# --------------------------------------------------------------------------- the callers


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("io") / "run", ranks=2, steps=20, seed=5).path


def test_load_job(files):
    with pytest.raises(
        JobError,
        match=r"a-directory\.json: cannot read job description "
        r"\(Is a directory\); see docs/whatif\.md",
    ):
        load_job(files / "a-directory.json")


def test_whatif_of_a_job_file_that_is_not_json(files):
    p = files / "binary.json"
    assert_one_line_error(
        cli("whatif", p),
        f"{p}: not a run directory",
        "not JSON",
        "give a run directory, a signature.json or a job description",
    )


def test_whatif_cluster_platform_file(files):
    job = files / "job.json"
    job.write_text(json.dumps({"parameters": 1000, "step_s": 0.1}))
    p = files / "list.json"
    assert_one_line_error(
        cli("whatif", job, "--cluster", p),
        f"{p}: not a platform",
        "JSON object",
        "write it with ailens calibrate",
    )


@pytest.mark.parametrize(
    "flag, name, wants",
    [
        ("--calibration", "list.json", ["not a calibration", "JSON object", "ailens calibrate"]),
        ("--model", "a-directory.json", ["cannot read model", "write one with `ailens fit`"]),
        ("--platform", "broken.json",
         ["not a platform descriptor: not JSON", "ailens probe -o {p}"]),
    ],
)  # fmt: skip
def test_whatif_file_flags(run_dir, files, flag, name, wants):
    """``ailens whatif RUN_DIR FLAG FILE`` with a bad FILE: one line naming the file, what is
    wrong and the fix."""
    p = files / name
    first, *rest = (w.format(p=p) for w in wants)
    assert_one_line_error(cli("whatif", run_dir, flag, p), f"{p}: {first}", *rest)


def test_history_add_of_a_record_file(files):
    p = files / "null.json"
    assert_one_line_error(
        cli("history", "add", p, "--history", files / "h.sqlite"),
        f"{p}: not a signature record",
        "`ailens history add RUN_DIR --rebuild`",
    )


def test_compact_durations_keep_their_units_below_zero():
    assert fmt_s(-45.0135, "compact") == "-45.01s"
    assert fmt_s(-0.25, "compact") == "-250.00ms"
    assert fmt_s(-3700, "compact") == "-1h01m"
    assert fmt_s(45.0135, "compact") == "45.01s"
