"""The demo's messaging chapter: the webhook gets every metric despite its outage; direct UDP loses some."""
import re

from rich.console import Console

from headwater.demo import messaging


def test_messaging_chapter(start_broker):
    broker = start_broker("--num-partitions", "3", *messaging.broker_flags())
    console = Console(record=True, width=160)
    messaging.run(broker.bootstrap, console)  # raises CheckFailed unless all arrived at the webhook
    text = console.export_text()
    direct = next(line for line in text.splitlines() if "direct UDP to a consumer" in line)
    sent, arrived, lost = (int(cell.strip()) for cell in direct.split("│")[2:5])
    assert sent == messaging.METRICS and lost >= len(messaging.OUTAGE) and arrived + lost == sent
    delivered = re.search(r"(\d+) in (\d+) POSTs of up to", text)
    assert delivered and int(delivered[1]) == 600
    assert int(delivered[2]) < 600  # batched: an acknowledged POST carries several records
