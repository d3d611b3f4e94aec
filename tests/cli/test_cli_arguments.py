"""The argument types every command shares (cli/common.py): the same value gets the same answer
and the same one-line message in every command that takes it."""
import subprocess
import sys

import pytest

from headwater.cli.main import build_parser


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        build_parser(list(argv)).parse_args(argv)   # parsed only: a value let through would run the command
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, message", [
    (["broker", "--data-dir", "d", "--num-partitions", "0"], "argument --num-partitions: must be at least 1, got 0"),
    (["broker", "--data-dir", "d", "--failed-authentication-delay-ms", "-1"],
     "argument --failed-authentication-delay-ms: must be at least 0, got -1"),
    (["broker", "--data-dir", "d", "--cleaner-io-max-bytes-per-second", "inf"],
     "argument --cleaner-io-max-bytes-per-second: expected a finite number, got 'inf'"),
    (["topics", "create", "t", "--partitions", "0"], "argument --partitions: must be at least 1, got 0"),
    (["topics", "create", "t", "--partitions", "two"], "argument --partitions: expected an integer, got 'two'"),
    (["push", "t", "http://h/", "--max-in-flight", "0"], "argument --max-in-flight: must be at least 1, got 0"),
    (["push", "t", "http://h/", "--timeout", "0"], "argument --timeout: must be more than 0, got 0"),
    (["push", "t", "http://h/", "--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
    (["push", "t", "http://h/", "--batch-wait", "-1"], "argument --batch-wait: must be more than 0, got -1"),
    (["push", "t", "http://h/", "--timeout", "nan"], "argument --timeout: expected a finite number, got 'nan'"),
    (["topics", "create", "t", "--config", "novalue"], "argument --config: expected NAME=VALUE, got 'novalue'"),
    (["topics", "create", "t", "--config", "=5"], "argument --config: expected NAME=VALUE, got '=5'"),
    (["push", "t", "http://h/", "-X", "fetch.min.bytes"],
     "argument -X/--consumer-config: expected NAME=VALUE, got 'fetch.min.bytes'"),
    (["pipelines", "run", "windows", "--set", "x"], "argument --set: expected NAME=VALUE, got 'x'"),
    (["groups", "alter", "g", "--config", "share.delivery.count.limit"],
     "argument --config: expected NAME=VALUE, got 'share.delivery.count.limit'"),
    (["broker", "--data-dir", "d", "--log-config", "retention.ms"],
     "argument --log-config: expected NAME=VALUE, got 'retention.ms'"),
])
def test_bad_values_get_one_line_naming_the_argument(capsys, argv, message):
    assert usage_error(capsys, *argv).endswith(f": error: {message}")


def test_a_good_name_value_is_stripped_on_both_sides():
    args = build_parser(["topics"]).parse_args(["topics", "create", "t", "--config", " retention.ms = 5 "])
    assert args.config == [("retention.ms", "5")]


@pytest.mark.parametrize("argv, choices", [(["topics"], "{create,list,describe,alter,delete}"),
                                           (["groups"], "{list,describe,reset-offsets,delete,alter,redrive}")])
def test_a_missing_subcommand_is_named_by_its_choices(capsys, argv, choices):
    """Not by the name argparse keeps its value under (e.g. 'topics_action')."""
    assert usage_error(capsys, *argv).endswith(f"the following arguments are required: {choices}")


@pytest.mark.parametrize("command", [["broker"], ["users", "list", "--offline"], ["acls", "list", "--offline"]])
def test_a_data_dir_that_is_a_file_is_refused(capsys, tmp_path, command):
    file = tmp_path / "a-file"
    file.write_text("")
    assert usage_error(capsys, *command, "--data-dir", str(file)).endswith(
        f"argument --data-dir: {file} is a file, not a directory")


def test_commands_that_never_read_a_data_directory_do_not_import_the_storage_layer():
    """The log package (numpy, the record validator, the cleaner) is ~0.17 s of a command's start;
    the broker and the --offline edits (acls, users) read a data directory and need it."""
    imported = subprocess.run([sys.executable, "-c", "import sys; from headwater.cli.main import build_parser; "
                               "[build_parser([c]) for c in ('topics', 'schemas', 'transactions', 'events', 'push', 'cdc', 'pipelines', 'certs', 'groups', 'quotas')]; "
                               "print(sorted(m for m in sys.modules if m.startswith('headwater.log')))"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"
