"""A command's exit: main() lets go of every librdkafka client before it returns, however the
command ended, since it then freezes the objects of a process about to exit and no collection
would destroy one (its threads calling back into a finalizing interpreter: SIGSEGV at exit)."""
import gc
import subprocess
import sys
import weakref

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

import headwater.cli.push
import headwater.cli.reachability
import headwater.cli.topics
from headwater.cli.common import CommandError
from headwater.cli.long_running import Terminated
from headwater.cli.main import main


class _Client(Producer):
    """A librdkafka client a weak reference can watch."""


@pytest.mark.parametrize("raised, status", [
    (CommandError("refused"), 1),
    (KafkaException(KafkaError(KafkaError._AUTHENTICATION)), 1),
    (KeyboardInterrupt(), 130),
    (Terminated(), 143),
])
def test_a_failed_command_leaves_no_client_for_a_collection(monkeypatch, raised, status):
    """As `topics list` with a wrong password: the client is a local of a frame that only the
    chained exception's traceback holds (AdminClient.list_topics' own), and the exception outlives
    main() (here the test's parameters hold it)."""
    watched = []

    def ask(client) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def command(args):
        client = _Client({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
        watched.append(weakref.ref(client))
        try:
            ask(client)
        except KafkaException:
            raise raised

    monkeypatch.setattr(headwater.cli.topics, "list_topics", command)
    monkeypatch.setattr(headwater.cli.reachability, "require_broker", lambda *_: None)
    gc.collect()
    gc.disable()  # so that no collection happens to free the client meanwhile
    try:
        assert main(["topics", "list"]) == status
        assert watched[0]() is None
    finally:
        gc.enable()


def test_a_command_exits_with_the_objects_frozen_and_the_exit_handlers_run():
    """`python -m headwater`: the final collections skip the frozen objects; atexit still runs."""
    code = ("import atexit, gc, runpy, sys; "
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0)); "
            "sys.argv = ['headwater', 'topics', 'list', '--bootstrap-server', '127.0.0.1:9']; "
            "runpy.run_module('headwater', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("headwater: error: cannot reach a broker"), done.stderr
    assert done.stdout == "frozen True\n"


@pytest.mark.parametrize("argv, frozen", [
    (["topics", "list"], True),
    (["push", "t", "http://127.0.0.1:9/"], False),  # long-running: its clients are left to the collections
])
def test_only_a_one_shot_command_freezes_the_objects_of_a_process_that_is_exiting(monkeypatch, argv, frozen):
    monkeypatch.setattr(headwater.cli.topics, "list_topics", lambda args: 0)
    monkeypatch.setattr(headwater.cli.push, "run", lambda args: 0)
    monkeypatch.setattr(headwater.cli.reachability, "require_broker", lambda *_: None)
    try:
        assert main(argv) == 0 and gc.get_freeze_count() == 0
        assert main(argv, exiting=True) == 0 and (gc.get_freeze_count() > 0) == frozen
    finally:
        gc.unfreeze()
