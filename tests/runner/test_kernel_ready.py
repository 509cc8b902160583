"""A run's kernel is ready once it has answered ``kernel_info`` and IOPub has carried a message: the driver's
client (``ready_client_class``) does not then wait for 0.2 s of silence on IOPub as jupyter_client's does (a
kernel started between two steps of the proof left both cores idle that long). The first cell's output must
still arrive whole, and nothing of ``kernel_info`` may show in it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from queue import Empty

import nbformat
import pytest

from autograder.runner.child import (
    IOPUB_WAIT,
    RECONNECT_MS,
    SHELL_LOOK_S,
    make_client,
    ready_client_class,
    ready_kernel_manager_class,
    sliced_shell_channel_class,
)


class FakeChannel:
    def __init__(self, messages: list):
        self.messages, self.asked = list(messages), []

    async def get_msg(self, timeout=None):
        self.asked.append(timeout)
        if not self.messages:
            raise Empty
        return self.messages.pop(0)


def fake_client(shell: list, iopub: list):
    class Fake(ready_client_class()):  # its wait, with channels that hold what a kernel would send
        shell_channel = property(lambda self: self._shell)
        iopub_channel = property(lambda self: self._iopub)

    client = Fake()
    client._shell, client._iopub = FakeChannel(shell), FakeChannel(iopub)
    client.kernel_info = lambda: None
    client._handle_kernel_info_reply = lambda msg: setattr(client, "info", msg)

    async def alive():
        return True

    client._async_is_alive = alive
    return client


def test_ready_once_the_reply_and_one_iopub_message_came_without_waiting_for_silence():
    reply = {"msg_type": "kernel_info_reply", "content": {}}
    client = fake_client([reply], [{"msg_type": "status"}, {"msg_type": "status"}])
    asyncio.run(client.wait_for_ready(timeout=5))
    assert client.info is reply
    assert client.iopub_channel.asked == [
        IOPUB_WAIT
    ]  # one message read to see IOPub connected; no drain after it


def test_without_a_message_on_iopub_it_asks_again_as_jupyter_client_does():
    reply = {"msg_type": "kernel_info_reply", "content": {}}
    client = fake_client([reply, reply], [])
    client.iopub_channel.messages = []
    asked = []

    async def get_msg(timeout=None):  # IOPub connects only after the first kernel_info
        asked.append(timeout)
        if len(asked) in (1, 3):  # (the third: what a drain after readiness would ask)
            raise Empty
        return {"msg_type": "status"}

    client.iopub_channel.get_msg = get_msg
    asyncio.run(client.wait_for_ready(timeout=5))
    assert asked == [IOPUB_WAIT, IOPUB_WAIT] and client.info is reply


def test_its_sockets_try_again_to_connect_every_few_milliseconds_not_every_100():
    """The client connects before the kernel has bound its sockets; zmq's own 100 ms between tries cost every
    run's start 100 to 180 ms."""
    import zmq

    assert RECONNECT_MS <= 10 and IOPUB_WAIT < 0.2
    client = ready_kernel_manager_class()(kernel_name="python3").client()
    client.ip, client.transport = "127.0.0.1", "tcp"
    client.iopub_port = client.shell_port = 1  # (nothing listens: the sockets only try)
    sockets = [client.connect_iopub(), client.connect_shell()]
    try:
        assert [s.getsockopt(zmq.RECONNECT_IVL) for s in sockets] == [RECONNECT_MS, RECONNECT_MS]
    finally:
        for s in sockets:
            s.close(linger=0)
        client.context.destroy(linger=0)


def test_both_drivers_use_it():
    from jupyter_client.asynchronous import AsyncKernelClient

    assert issubclass(ready_client_class(), AsyncKernelClient)
    assert make_client(10).kernel_manager_class is ready_kernel_manager_class()
    assert isinstance(ready_kernel_manager_class()(kernel_name="python3").client(), ready_client_class())


def test_the_lecture_runner_uses_it_too(monkeypatch):
    import nbclient

    from autograder.intake.notebooks import execute_notebook

    made = []

    class Caught(Exception):
        pass

    class Recording(nbclient.NotebookClient):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("kernel_manager_class"))
            raise Caught

    monkeypatch.setattr(nbclient, "NotebookClient", Recording)
    with pytest.raises(Caught):
        execute_notebook(Path(__file__).parents[2] / "lectures" / "01_setup.ipynb")
    assert made == [ready_kernel_manager_class()]
    client = ready_kernel_manager_class()(kernel_name="python3").client()
    assert client.shell_channel_class is sliced_shell_channel_class()


class HiddenReply:
    """A shell socket whose message is there but unseen, as after a send took zmq's edge: a poll sees it only when
    its timeout runs out (what pyzmq's poll then looks at once more), and each poll's timeout is noted."""

    def __init__(self, ready_from_poll: int | None):
        self.ready_from_poll, self.polls = ready_from_poll, []

    async def poll(self, timeout_ms=None):
        self.polls.append(timeout_ms)
        await asyncio.sleep((timeout_ms or 0) / 1000)
        return int(self.ready_from_poll is not None and len(self.polls) >= self.ready_from_poll)


def sliced_channel(socket):
    channel = sliced_shell_channel_class().__new__(sliced_shell_channel_class())
    channel.socket = socket

    async def receive():
        return {"msg_type": "execute_reply"}

    channel._recv = receive
    return channel


def test_a_reply_a_send_hid_is_seen_within_a_slice_not_at_the_end_of_the_wait():
    socket = HiddenReply(ready_from_poll=1)
    # nbclient waits for a cell's reply with the cell's whole timeout (360 s for lecture 6): asked once, such a
    # socket would answer then; in slices, the first slice's end finds it
    assert asyncio.run(sliced_channel(socket).get_msg(timeout=360))["msg_type"] == "execute_reply"
    assert socket.polls == [SHELL_LOOK_S * 1000]
    socket = HiddenReply(ready_from_poll=3)  # (a wait without a timeout is sliced as well)
    assert asyncio.run(sliced_channel(socket).get_msg())["msg_type"] == "execute_reply"
    assert socket.polls == [SHELL_LOOK_S * 1000] * 3


def test_a_sliced_wait_with_nothing_to_read_still_ends_at_its_timeout():
    socket = HiddenReply(ready_from_poll=None)
    with pytest.raises(Empty):
        asyncio.run(sliced_channel(socket).get_msg(timeout=2.5 * SHELL_LOOK_S))
    assert len(socket.polls) >= 3 and all(ms <= SHELL_LOOK_S * 1000 for ms in socket.polls), socket.polls
    assert sum(socket.polls) <= 2.5 * SHELL_LOOK_S * 1000  # it asked for no more than its timeout, in all
    with pytest.raises(Empty):  # and a timeout of 0 looks once, at once
        asyncio.run(sliced_channel(socket := HiddenReply(None)).get_msg(timeout=0))
    assert socket.polls == [0]


@pytest.mark.slow
def test_a_real_kernels_first_cell_has_its_whole_output_and_nothing_of_kernel_info():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('first'); 6 * 7")])
    client = make_client(60)
    client.nb = nb
    with client.setup_kernel():
        assert isinstance(client.kc, ready_client_class())
        client.execute_cell(nb.cells[0], 0)
    outputs = nb.cells[0].outputs
    assert [(o.output_type, o.get("text") or o.get("data", {}).get("text/plain")) for o in outputs] == [
        ("stream", "first\n"),
        ("execute_result", "42"),
    ]
