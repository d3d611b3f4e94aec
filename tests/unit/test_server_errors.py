"""A handler bug closes the connection with its traceback logged once per site, not once per
request (issue 10 finding 8: one hostile client must not flood the log), and the broker goes
on serving."""
import asyncio
import dataclasses
import logging
import struct

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.apis import ENDPOINTS
from headwater.broker.server import Server
from headwater.fuzzing.corpus import encode_request
from headwater.protocol.messages import ApiKey


async def exchange(port: int, request, version: int) -> bytes:
    """Send one request on a fresh connection; b"" if the broker closed it instead of answering."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    frame = encode_request(request, version)
    writer.write(struct.pack(">i", len(frame)) + frame)
    try:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return b""
    finally:
        writer.close()


def test_a_handler_bug_logs_one_traceback_and_the_broker_keeps_serving(tmp_path, monkeypatch, caplog):

    async def broken(broker, header, request):  # stands for any bug a request can reach
        raise KeyError("a bug")
    monkeypatch.setitem(ENDPOINTS, ApiKey.METADATA, dataclasses.replace(ENDPOINTS[ApiKey.METADATA], handle=broken))

    async def scenario():
        server = Server(Broker(BrokerConfig(data_dir=tmp_path, port=0)))
        port = await server.start()
        try:
            for _ in range(5):
                assert await exchange(port, MetadataRequest[1](topics=None), 1) == b""
            answer = await exchange(port, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
            assert struct.unpack_from(">i", answer)[0] == 1  # the correlation id: answered
        finally:
            await server.stop()
    with caplog.at_level(logging.INFO, logger="headwater.broker"):
        asyncio.run(scenario())
    errors = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(errors) == 5
    assert [r.exc_info is not None for r in errors] == [True, False, False, False, False]
    assert all("KeyError" in r.getMessage() for r in errors[1:])
