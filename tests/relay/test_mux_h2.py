"""sockferry/2's frames against an independent HTTP/2 implementation (Python's h2, Debian's
python3-h2): our client mux talks to an h2 server, and an h2 client to our server mux, over a
pipe pair (tests/relay/mux_peer.c). Both directions must understand each other's SETTINGS,
HEADERS (sf-service, sf-status), DATA, flow control and END_STREAM, as doc/PROTOCOL.md says.

TAP. argv[1]: the mux-peer program."""
import contextlib
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sftap  # noqa: E402
from sfharness import Skip  # noqa: E402

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings
except ImportError:  # pragma: no cover - packaging/install-deps.sh installs python3-h2
    h2 = None

PEER = sys.argv[1]
# What our mux announces (relay/link/mux.c) with mux-peer's configuration.
WANT_SETTINGS = {
    "max_concurrent_streams": 100,
    "initial_window_size": 262144,
    "max_frame_size": 65536,
    "enable_push": 0,
    "max_header_list_size": 1024,
}


def config(client_side):
    # HTTP's messaging rules off, as on our side: no pseudo-header fields.
    return h2.config.H2Configuration(client_side=client_side, header_encoding=None,
                                     validate_inbound_headers=False, validate_outbound_headers=False,
                                     normalize_inbound_headers=False, normalize_outbound_headers=False)


def exchange(proc, conn, on_event, rounds=200):
    """Feeds the peer's bytes to conn and conn's to the peer until on_event says done. The peer
    may have finished and exited once it sent its end, before it read what h2 still has to say
    (a SETTINGS acknowledgement, window updates): that finds a closed pipe, and what the peer
    wrote is still there to read. A peer that ended before its end shows as EOF (False)."""
    peer_open = True

    def send():
        nonlocal peer_open
        out = conn.data_to_send()
        if out and peer_open:
            try:
                proc.stdin.write(out)
                proc.stdin.flush()
            except BrokenPipeError:
                peer_open = False

    send()
    for _ in range(rounds):
        data = os.read(proc.stdout.fileno(), 65536)
        if not data:
            return False
        for ev in conn.receive_data(data):
            if on_event(ev):
                send()
                return True
        send()
    return False


def close_quietly(f):
    try:
        f.close()
    except BrokenPipeError:  # what exchange() could not write to a peer that had finished
        pass


def test_our_client_to_h2_server():
    proc = subprocess.Popen([PEER, "client", "agent", "hello"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    conn = h2.connection.H2Connection(config=config(False))
    conn.initiate_connection()
    seen = {"settings": {}, "headers": None, "data": b"", "ended": False, "window": 0}

    def on_event(ev):
        if isinstance(ev, h2.events.RemoteSettingsChanged):
            for k, v in ev.changed_settings.items():
                seen["settings"][h2.settings.SettingCodes(k).name.lower()] = v.new_value
        elif isinstance(ev, h2.events.WindowUpdated) and ev.stream_id == 0:
            seen["window"] += ev.delta
        elif isinstance(ev, h2.events.RequestReceived):
            seen["headers"] = ev.headers
        elif isinstance(ev, h2.events.DataReceived):
            seen["data"] += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            seen["ended"] = True
            conn.send_headers(ev.stream_id, [(b"sf-status", b"0")])
            conn.send_data(ev.stream_id, b"world", end_stream=True)
            return True
        return False

    done = exchange(proc, conn, on_event)
    close_quietly(proc.stdin)
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=10)
    assert done and seen["ended"], "h2 server: our client's stream arrived and ended: " + err
    assert seen["headers"] == [(b"sf-service", b"agent")], \
        "h2 server: the stream opens with sf-service: agent: " + repr(seen["headers"])
    assert seen["data"] == b"hello", "h2 server: the client's bytes arrived as DATA: " + repr(seen["data"])
    assert all(seen["settings"].get(k) == v for k, v in WANT_SETTINGS.items()), \
        "h2 server: our SETTINGS are the ones doc/PROTOCOL.md lists: " + repr(seen["settings"])
    assert seen["window"] == 1048576 - 65535, \
        "h2 server: our link window is raised with one WINDOW_UPDATE: " + repr(seen["window"])
    assert rc == 0 and "status=0" in err and "data=world" in err, "our client read h2's answer and its end: " + err


def test_h2_client_to_our_server():
    proc = subprocess.Popen([PEER, "server", "world"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    conn = h2.connection.H2Connection(config=config(True))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(b"sf-service", b"docker")])
    conn.send_data(sid, b"ping", end_stream=True)
    seen = {"headers": None, "data": b"", "ended": False}

    def on_event(ev):
        if isinstance(ev, h2.events.ResponseReceived):
            seen["headers"] = ev.headers
        elif isinstance(ev, h2.events.DataReceived):
            seen["data"] += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            seen["ended"] = True
            return True
        return False

    done = exchange(proc, conn, on_event)
    close_quietly(proc.stdin)
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=10)
    assert rc == 0 and "service=docker" in err and "data=ping" in err, \
        "our server took h2's stream: sf-service and the bytes: " + err
    assert seen["headers"] is not None and (b"sf-status", b"0") in seen["headers"], \
        "h2 client: our answer carries sf-status: 0: " + repr(seen["headers"])
    assert done and seen["data"] == b"world" and seen["ended"], \
        "h2 client: our bytes and END_STREAM arrived: " + repr(seen)


def h2_installed():
    if h2 is None:
        raise Skip("python3-h2 is not installed (packaging/install-deps.sh installs it)")
    return contextlib.nullcontext()


if __name__ == "__main__":
    sftap.main(sftap.tests_of(globals()), setup=h2_installed)
