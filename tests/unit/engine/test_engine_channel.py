"""The engine process's sends to a client never wait for it: a client that stops reading gets
every step's deltas later, merged into fewer messages, each row once and in order; and each
delta reads back as the engine made it."""

import pickle
import socket
import threading
from dataclasses import fields
from multiprocessing.connection import Connection

from pipeline.engine.core.engine_channel import Channel, merged
from pipeline.engine.core.engine_hub import _row
from pipeline.engine.core.engine_process import _Delta
from pipeline.request.outputs import StreamDelta

# rows of ~2 KB: a few hundred steps fill any unix socket buffer
ROW_IDS = list(range(500))


def pair() -> tuple[Channel, Connection]:
    ours, theirs = socket.socketpair()
    return Channel(Connection(ours.detach())), Connection(theirs.detach())


def read_all(conn: Connection) -> list[tuple]:
    messages = []
    while True:
        try:
            messages.append(conn.recv())
        except EOFError:
            return messages


def test_a_client_that_stops_reading_never_holds_the_sender_and_misses_nothing():
    channel, client = pair()
    num_steps = 400
    done = threading.Event()

    def engine_thread() -> None:
        for step in range(num_steps):
            rows = [(f"r{i}", [step, *ROW_IDS], False) for i in range(2)]
            channel.send(("deltas", rows, {"num_steps": step} if step % 50 == 0 else None))
        channel.send(("stats", None, {"num_steps": num_steps}))
        done.set()

    sender = threading.Thread(target=engine_thread)
    sender.start()
    # nobody reads until every step was sent: a blocking send would never get here
    assert done.wait(60), "the sends waited for the client"
    assert channel.num_backlogged > 0  # the socket filled up: the writer thread took over
    closer = threading.Thread(target=channel.close)  # waits until the backlog is written
    closer.start()
    messages = read_all(client)
    closer.join(60)
    sender.join(60)

    steps = [row[1][0] for kind, rows, _ in messages if kind == "deltas" for row in rows]
    assert steps == [s for s in range(num_steps) for _ in range(2)]  # each once, in order
    assert len(messages) < num_steps  # the steps that waited went out merged
    assert messages[-1][2] == {"num_steps": num_steps}  # the newest stats, last


def test_a_client_that_keeps_up_gets_one_message_a_send():
    channel, client = pair()
    for step in range(3):
        channel.send(("deltas", [("r", [step], False)], None))
    assert [client.recv() for _ in range(3)] == [
        ("deltas", [("r", [step], False)], None) for step in range(3)
    ]
    assert channel.num_backlogged == 0
    channel.close()


def test_merging_keeps_other_messages_in_place_and_takes_the_newest_stats():
    backlog = [
        ("deltas", [("a", [1], False)], {"n": 1}),
        ("stats", None, {"n": 2}),
        ("deltas", [("a", [2], True)], None),
        ("error", RuntimeError("x"), None),
        ("stats", None, {"n": 3}),
        ("closed", 0, {"n": 4}),
    ]
    out = merged(backlog)
    assert out[0] == ("deltas", [("a", [1], False), ("a", [2], True)], {"n": 2})
    assert out[1][0] == "error"
    assert out[2:] == [("stats", None, {"n": 3}), ("closed", 0, {"n": 4})]
    assert backlog[0][1] == [("a", [1], False)]  # the messages themselves are left as they were


def test_every_delta_reads_back_field_for_field_and_the_usual_one_crosses_short():
    usual = StreamDelta("r", [5], False)
    others = [
        StreamDelta("r", [], True, "stop", None, None, 32),
        StreamDelta("r", [5], False, None, None, [-0.5]),
        StreamDelta("r", [5], False, top_logprobs=[((5, -0.5),)]),
        StreamDelta("r", [], True, "error", "boom"),
    ]
    assert _row(usual) == ("r", [5])
    for delta in [usual, *others]:
        read = _Delta(*pickle.loads(pickle.dumps(_row(delta))))
        assert all(getattr(read, f.name) == getattr(delta, f.name) for f in fields(StreamDelta))
