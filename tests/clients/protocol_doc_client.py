#!/usr/bin/env python3
"""CTest: the minimal Python client of docs/protocol.md ("A minimal client in
Python"), taken from the page as it stands, (1) gives up within its bounded
wait, with a message, when nothing answers at its endpoint, and (2) steps once
against `troupe train config/remote_cartpole.toml` and exits 0; then (3) a
session still open when troupe gets SIGTERM is told so with CLOSE (kind 7).

usage: protocol_doc_client.py TROUPE_BINARY SOURCE_DIR

Every wait is bounded and fails saying what it waited for; troupe is ended
(SIGTERM, then SIGKILL) before exit. Exit 77 (skipped) when pyzmq or NumPy is
missing.
"""

import json
import os
import queue
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

TROUPE, SOURCE = sys.argv[1], sys.argv[2]
START_LIMIT_S = 120   # troupe binding and building its cast
CLIENT_LIMIT_S = 60   # the doc's client: its waits are 10 s each
END_LIMIT_S = 120     # troupe's final checkpoint after SIGTERM
HDR = struct.Struct("<4sBBBBQIIQ")

try:
    import numpy  # noqa: F401
    import zmq
except ImportError as e:
    print(f"SKIP: the doc's client needs pyzmq and NumPy ({e}); scripts/setup installs "
          "python3-zmq and python3-numpy", flush=True)
    sys.exit(77)


def doc_client():
    """The first ```python block after the heading "A minimal client in Python"."""
    with open(os.path.join(SOURCE, "docs", "protocol.md"), encoding="utf-8") as f:
        text = f.read()
    at = text.find("## A minimal client in Python")
    if at < 0:
        sys.exit("docs/protocol.md has no section 'A minimal client in Python'")
    m = re.search(r"```python\n(.*?)```", text[at:], re.S)
    if not m:
        sys.exit("docs/protocol.md: no ```python block in 'A minimal client in Python'")
    return m.group(1)


def run_client(path, endpoint):
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, path, endpoint], capture_output=True,
                              text=True, timeout=CLIENT_LIMIT_S)
    except subprocess.TimeoutExpired:
        sys.exit(f"the doc's client did not end within {CLIENT_LIMIT_S} s against "
                 f"{endpoint}: a wait is unbounded")
    print(f"the doc's client against {endpoint}: exit {done.returncode} after "
          f"{time.monotonic() - started:.1f} s\n{done.stdout}{done.stderr}", flush=True)
    return done


def main():
    folder = tempfile.mkdtemp(prefix="troupe-doc-client-")
    proc = None
    try:
        client = os.path.join(folder, "client.py")
        with open(client, "w", encoding="utf-8") as f:
            f.write(doc_client())

        # (1) Nothing answers: an ipc endpoint nobody binds.
        done = run_client(client, f"ipc://{folder}/nobody.sock")
        if done.returncode == 0 or "no reply from troupe" not in done.stderr:
            print("expected the doc's client to fail with 'no reply from troupe ...' when "
                  "nothing answers", flush=True)
            return 1

        # (2) troupe answers.
        proc = subprocess.Popen(
            [TROUPE, "train", os.path.join(SOURCE, "config", "remote_cartpole.toml"),
             "--set", "remote.bind=\"tcp://127.0.0.1:*\"", "--set", f"run.output_dir={folder}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = queue.Queue()

        def read():
            for line in proc.stdout:
                output.put(line)
            output.put(None)

        threading.Thread(target=read, daemon=True).start()
        lines = []
        endpoint = None
        deadline = time.monotonic() + START_LIMIT_S
        while endpoint is None:
            try:
                line = output.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None or (line == "" and time.monotonic() >= deadline):
                print("".join(lines), flush=True)
                print(f"troupe did not say where it serves within {START_LIMIT_S} s",
                      flush=True)
                return 1
            lines.append(line)
            m = re.search(r"serving remote environments on (\S+)", line)
            if m:
                endpoint = m.group(1)
        done = run_client(client, endpoint)
        if done.returncode != 0 or not re.search(r"^action [01]$", done.stdout, re.M):
            print("expected the doc's client to print 'action 0' or 'action 1' and exit 0",
                  flush=True)
            return 1

        # (3) A session open when troupe gets SIGTERM receives CLOSE.
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        hello = {"client": "sigterm", "num_envs": 1,
                 "observation_space": {"type": "box", "shape": [4]},
                 "action_space": {"type": "discrete", "n": 2}}
        sock.send_multipart([HDR.pack(b"TRPE", 1, 1, 1, 0, 1, 1, 0, 0),
                             json.dumps(hello).encode()])
        if not sock.poll(10000):
            print("no WELCOME within 10 s", flush=True)
            return 1
        kind, session = HDR.unpack(sock.recv_multipart()[0])[3], 0
        if kind != 2:
            print(f"expected WELCOME (2), got kind {kind}", flush=True)
            return 1
        proc.send_signal(signal.SIGTERM)
        if not sock.poll(END_LIMIT_S * 1000):
            print(f"no message within {END_LIMIT_S} s of troupe's SIGTERM; expected CLOSE",
                  flush=True)
            return 1
        head = sock.recv_multipart()[0]
        kind, session = HDR.unpack(head)[3], HDR.unpack(head)[8]
        sock.close()
        if kind != 7 or session == 0:
            print(f"expected CLOSE (7) of the session after SIGTERM, got kind {kind} of "
                  f"session {session}", flush=True)
            return 1
        print("after SIGTERM the open session got CLOSE", flush=True)
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(END_LIMIT_S)
            except subprocess.TimeoutExpired:
                print(f"troupe did not end within {END_LIMIT_S} s of SIGTERM: killed",
                      flush=True)
                proc.kill()
                proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
