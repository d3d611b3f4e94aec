"""The HTTP listener's socket, served by asyncio as uvicorn serves it (create_server with sock=):
every accepted connection has Nagle's algorithm off, else a response's body waits for the
client's delayed ACK of its headers."""
import asyncio
import socket

from headwater.http.listener import listening_socket


async def _accepted_nodelay() -> int:
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(serve, sock=listening_socket("127.0.0.1", 0))
    async with server:
        _, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        nodelay = await asyncio.wait_for(accepted, 10)
        writer.close()
    return nodelay


def test_accepted_http_connections_send_without_waiting_for_acks():
    assert asyncio.run(_accepted_nodelay()) != 0
