#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_mux (tests/fuzz/corpus/fuzz_mux): real sockferry/2 exchanges
as HTTP/2 frames (RFC 9113; header blocks as HPACK literals, RFC 7541 6.2.2), the peer's side
of each, with fuzz_mux's first byte in front (bit 0 server, bit 1 preface added by the target).

  tests/fuzz/mux_seeds.py [DIR]

A server (the host relay) is sent what a container's relay sends; a client what a host relay
answers to the three streams fuzz_mux opens (ids 1, 3, 5). Deterministic: running it again
gives the same files."""
import os
import struct
import sys

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM, CANCEL = 0, 1, 7, 8
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def hpack(fields):
    """A header block of literals without indexing, new names, no Huffman coding."""
    out = b""
    for name, value in fields:
        out += b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
    return out


def settings(**kv):
    ids = {"max_concurrent_streams": 3, "initial_window_size": 4, "max_frame_size": 5, "enable_push": 2,
           "max_header_list_size": 6, "header_table_size": 1}
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", ids[k], v) for k, v in kv.items()))


# What both relays announce (relay/link/mux.c), and the acknowledgement of the other's.
OUR_SETTINGS = settings(max_concurrent_streams=16, initial_window_size=262144, max_frame_size=65536,
                        enable_push=0, max_header_list_size=1024)
SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def ping(data=b"\0" * 8, ack=False):
    return frame(PING, ACK if ack else 0, 0, data)


def window_update(sid, n):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", n))


def rst(sid, code):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def goaway(last, code, text=b""):
    return frame(GOAWAY, 0, 0, struct.pack(">II", last, code) + text)


def open_stream(sid, service=None, probe=False, default=False, end=False):
    fields = []
    if service is not None:
        fields.append((b"sf-service", service))
    if default:
        fields.append((b"sf-default", b"1"))
    if probe:
        fields.append((b"sf-probe", b"1"))
    return frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), sid, hpack(fields))


def answer(sid, status, reason=None, end=False):
    fields = [(b"sf-status", b"%d" % status)]
    if reason is not None:
        fields.append((b"sf-reason", reason))
    return frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), sid, hpack(fields))


def data(sid, payload, end=False):
    return frame(DATA, END_STREAM if end else 0, sid, payload)


SERVER, PREFACED = 1, 2
SEEDS = {
    # to a host relay: one stream's life, as a container's relay opens it
    "server-echo": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(1, b"echo") + data(1, b"hello")
                    + data(1, b" world", end=True) + window_update(0, 65536) + ping()),
    "server-preface": (SERVER, PREFACE + OUR_SETTINGS + open_stream(1, b"echo", default=True) + data(1, b"x", end=True)),
    "server-none-named": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(1) + data(1, b"ping\n")
                          + rst(1, CANCEL)),
    "server-probe": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(1, b"svc", probe=True, end=True)),
    "server-unknown": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(3, b"nosuch") + data(3, b"a")),
    # more streams than max-streams (8 in fuzz_mux), each with bytes nobody reads
    "server-flood": (SERVER | PREFACED | 0x08, OUR_SETTINGS + SETTINGS_ACK + b"".join(
        open_stream(sid, b"s") + data(sid, b"f" * 100) for sid in range(1, 40, 2))),
    # a stream sent more than its window (4096 in fuzz_mux) once the settings were acknowledged
    "server-overflow": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(5, b"x")
                        + data(5, b"o" * 3000) + data(5, b"o" * 3000)),
    "server-goaway": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(1, b"e") + goaway(1, NO_ERROR)
                      + data(1, b"after", end=True)),
    "server-continuation": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK
                            + frame(HEADERS, 0, 1, hpack([(b"sf-service", b"ec")]))
                            + frame(CONTINUATION, END_HEADERS, 1, hpack([(b"sf-probe", b"1")]))),
    "server-padded": (SERVER | PREFACED, OUR_SETTINGS + SETTINGS_ACK + open_stream(1, b"echo")
                      + frame(DATA, PADDED | END_STREAM, 1, b"\x03abc\0\0\0")),
    "server-priority-push": (SERVER | PREFACED, OUR_SETTINGS + frame(PRIORITY, 0, 1, b"\0\0\0\0\x10")
                             + frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\x02")),
    # to a container's relay: the answers to its streams 1 (echo), 3 (none named), 5 (a probe)
    "client-answers": (0, OUR_SETTINGS + SETTINGS_ACK + answer(1, 0) + data(1, b"hello") + answer(3, 0)
                       + data(3, b"x" * 5000) + answer(5, 0, end=True) + data(1, b"", end=True) + ping(ack=True)),
    "client-refused": (0, OUR_SETTINGS + SETTINGS_ACK + answer(1, 5, b"unknown service echo: offers a, b", end=True)
                       + rst(1, NO_ERROR) + answer(3, 6, b"service x serves max-conns = 1 connections already",
                                                   end=True) + rst(3, NO_ERROR)
                       + answer(5, 2, b"upstream unavailable: connect unix:/run/x.sock: No such file", end=True)),
    "client-reset": (0, OUR_SETTINGS + SETTINGS_ACK + rst(1, REFUSED_STREAM) + rst(3, CANCEL)
                     + goaway(1, NO_ERROR, b"draining") + answer(5, 0)),
    "client-windows": (0, settings(initial_window_size=10, max_frame_size=16384) + SETTINGS_ACK + window_update(1, 100)
                       + window_update(0, 1 << 20) + answer(1, 0) + data(1, b"y" * 4096, end=True)
                       + settings(initial_window_size=0) + window_update(3, 0x7fffffff)),
    "client-bad-status": (0, OUR_SETTINGS + SETTINGS_ACK + answer(1, 999) + frame(HEADERS, END_HEADERS, 3, hpack([]))
                          + data(5, b"before the answer")),
    "client-ping": (0, OUR_SETTINGS + ping(b"12345678") + ping(b"\x01" * 8, ack=True) + SETTINGS_ACK),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "fuzz_mux")
    os.makedirs(out, exist_ok=True)
    for name, (flags, body) in sorted(SEEDS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes([flags]) + body)


if __name__ == "__main__":
    main()
