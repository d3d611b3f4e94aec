"""What `headwater broker` prints once it serves: the lines a supervisor (a test, a bench, a
script) waits for. Kept apart from the command so that a reader needs none of the broker's
imports to know them."""

BROKER_READY = "headwater broker listening on "   # the first line: host:port of the first listener
LISTENER_READY = "headwater listener "            # one line per --listener, after the first line
CONSOLE_READY = "headwater console on "           # the last line a broker with --http-listener prints
