"""A share-group worker in its own process, so a test can SIGKILL it while it holds records.

It polls until it has acquired records, writes "offset delivery_count" for each to --out
(flushed), and then holds them without acknowledging until it is killed.

    python -m tests.support.share_worker --bootstrap H:P --group G --topic T --out F
"""
from __future__ import annotations

import argparse
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--group", "--topic", "--out"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                              "share.acknowledgement.mode": "explicit", "max.poll.records": 5})
    consumer.subscribe([args.topic])
    while True:
        messages = [m for m in consumer.poll(0.5) if not m.error()]
        if messages:
            with open(args.out, "w") as out:
                out.writelines(f"{m.offset()} {m.delivery_count()}\n" for m in messages)
            while True:            # hold the records: never acknowledge, never poll again
                time.sleep(1)


if __name__ == "__main__":
    main()
