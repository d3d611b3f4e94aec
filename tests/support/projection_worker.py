"""A projection process for the crash tests: `python -m tests.eventsourcing.projection_worker
STORE BATCH [KILL_AT]` catches the current-carts projection up, SIGKILLing itself while
handling its KILL_AT-th event (mid-batch) if given."""
import os
import signal
import sys

from headwater.demo.shopping_cart import CurrentCarts
from headwater.eventsourcing import open_store
from headwater.eventsourcing.projection import ProjectionRunner


class Crashing(CurrentCarts):
    def __init__(self, kill_at):
        self.kill_at = kill_at
        self.handled = 0

    def handle(self, event, view):
        self.handled += 1
        if self.handled == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        super().handle(event, view)


if __name__ == "__main__":
    location, batch = sys.argv[1], int(sys.argv[2])
    kill_at = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ProjectionRunner(open_store(location), Crashing(kill_at)).catch_up(batch)
