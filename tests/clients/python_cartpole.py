#!/usr/bin/env python3
"""CTest: the Python client (clients/python) trains its NumPy CartPole through
`troupe train` with env.id = "remote" to a 100-episode mean return above 200
within a bounded number of environment steps, over CURVE (keys made with
`troupe remote keygen`, the client's public key on the allow-list); with CLIENT_BINARY, that
program (clients/c/examples/cartpole.c or clients/cpp/examples/cartpole.cpp) is the client instead, run as
`CLIENT_BINARY ENDPOINT 16 MAX_ENV_STEPS 200`, and must exit 0.

usage: python_cartpole.py TROUPE_BINARY SOURCE_DIR [CLIENT_BINARY]

troupe binds a free loopback port (tcp://127.0.0.1:*) and prints it; the
client connects there. Every wait is bounded and fails saying what it waited
for; every process started here is ended (SIGTERM, then SIGKILL) before exit.
Exit 77 (skipped) when pyzmq or NumPy is missing.
"""

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

TROUPE, SOURCE = sys.argv[1], sys.argv[2]
CLIENT = sys.argv[3] if len(sys.argv) > 3 else None
CLIENT_LIMIT_S = 300      # the C client's whole run

if CLIENT is None:
    try:
        import numpy  # noqa: F401
        import zmq  # noqa: F401
    except ImportError as e:
        print(f"SKIP: the Python client needs pyzmq and NumPy ({e}); scripts/setup "
              "installs python3-zmq and python3-numpy", flush=True)
        sys.exit(77)
    sys.path.insert(0, os.path.join(SOURCE, "clients", "python"))
    sys.path.insert(0, os.path.join(SOURCE, "clients", "python", "examples"))
    import troupe_remote  # noqa: E402
    from cartpole import CartPole  # noqa: E402

ENVS = 16
MAX_ENV_STEPS = 400_000   # the bound within which the mean must pass 200
TARGET = 200.0
START_LIMIT_S = 120       # troupe binding and building its cast
END_LIMIT_S = 120         # troupe's final checkpoint after SIGTERM


def main():
    folder = tempfile.mkdtemp(prefix="troupe-remote-")
    output = queue.Queue()
    proc = None
    try:
        config = os.path.join(folder, "remote.toml")
        shutil.copy(os.path.join(SOURCE, "config", "remote_cartpole.toml"), config)
        curve = []
        if CLIENT is None:
            # CURVE: a key pair for troupe and one for the client, on the allow-list.
            for name in ("server", "client"):
                made = subprocess.run([TROUPE, "remote", "keygen",
                                       os.path.join(folder, name + ".key")],
                                      capture_output=True, text=True, timeout=60)
                if made.returncode != 0:
                    return fail(f"troupe remote keygen failed: {made.stderr}", [])
            shutil.copy(os.path.join(folder, "client.key.pub"),
                        os.path.join(folder, "allowed"))
            curve = ["--set", f"remote.curve_secret_key_file=\"{folder}/server.key\"",
                     "--set", f"remote.curve_allowed_clients_file=\"{folder}/allowed\""]
        proc = subprocess.Popen(
            [TROUPE, "train", config, "--set", "remote.bind=\"tcp://127.0.0.1:*\"",
             "--set", f"run.output_dir={folder}", "--set", "run.seed=3",
             "--set", "algo.total_env_steps=2000000", "--set", "remote.min_envs=16"]
            + curve,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []

        def read():
            for line in proc.stdout:
                output.put(line)
            output.put(None)

        threading.Thread(target=read, daemon=True).start()
        endpoint = None
        deadline = time.monotonic() + START_LIMIT_S
        while endpoint is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return fail(f"troupe did not say where it serves within {START_LIMIT_S} s", lines)
            try:
                line = output.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                return fail(f"troupe ended (status {proc.wait(10)}) before serving", lines)
            lines.append(line)
            m = re.search(r"serving remote environments on (\S+)", line)
            if m:
                endpoint = m.group(1)
                if CLIENT is None and "with CURVE" not in line:
                    return fail("troupe did not say it serves with CURVE", lines)
        print(f"troupe serves on {endpoint}", flush=True)

        if CLIENT is not None:
            try:
                done = subprocess.run([CLIENT, endpoint, str(ENVS), str(MAX_ENV_STEPS),
                                       str(TARGET)], capture_output=True, text=True,
                                      timeout=CLIENT_LIMIT_S)
            except subprocess.TimeoutExpired:
                return fail(f"{CLIENT} did not end within {CLIENT_LIMIT_S} s", lines)
            print(done.stdout + done.stderr, flush=True)
            if done.returncode != 0:
                return fail(f"expected {CLIENT} to reach a 100-episode mean above {TARGET} "
                            f"within {MAX_ENV_STEPS} env steps (exit 0), got exit "
                            f"{done.returncode}", lines)
            return 0

        def stop(result):
            return result.episodes >= 100 and result.mean_return() > TARGET

        from cartpole import curve_keys_of
        keys = curve_keys_of(os.path.join(folder, "server.key.pub"),
                             os.path.join(folder, "client.key"))
        result = troupe_remote.serve([CartPole() for _ in range(ENVS)], endpoint,
                                     client="ctest-cartpole", seed=11,
                                     max_env_steps=MAX_ENV_STEPS, stop=stop,
                                     hello_timeout_ms=60000, curve_keys=keys)
        mean = result.mean_return()
        print(f"client: {result.env_steps} env steps, {result.episodes} episodes, "
              f"100-episode mean {mean:.1f}, policy version {result.policy_version} "
              f"({result.reason})", flush=True)
        if not (result.episodes >= 100 and mean > TARGET):
            return fail(f"expected a 100-episode mean above {TARGET} within {MAX_ENV_STEPS} "
                        f"env steps, got {mean:.1f} after {result.env_steps}", lines)
        if result.policy_version == 0:
            return fail("the client never acted with a trained policy (version 0)", lines)
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


def fail(why, lines):
    print("FAILED: " + why, flush=True)
    print("troupe's output:\n" + "".join(lines[-50:]), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
