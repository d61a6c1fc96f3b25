#!/usr/bin/env python3
"""A run across network namespaces (tests/CMakeLists.txt runs this).

    netns.py TROUPE veth|netem

A coordinator in one namespace and two workers in two others, each worker
joined to the coordinator's namespace by its own veth pair (10.X.1.0/24 and
10.X.2.0/24, no route anywhere else: nothing leaves the namespaces). With
`netem`, every veth end delays by 20 ms and drops 1% of packets (tc netem).
The workers reach each other through the coordinator's namespace (forwarding
on, a route in each), as the default all-reduce data plane's full mesh needs;
each binds its data port to its own address. The run trains CartPole PPO
async with observation normalization until the 100-episode mean return
passes 200; after a SIGTERM every process exits 0 and
the keeper's sample count equals the sum of the samples each worker's
outbox saw acknowledged: the statistics stay exact over a real link.

Exits 77 (CTest: skipped, with the reason printed) when namespaces cannot be
made (not root, no `ip netns`) or, with `netem`, when the kernel has no netem
qdisc. Every wait is bounded; every process and namespace made is removed.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def sh(*args, check=True):
    r = subprocess.run(args, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def poll(cond, limit_s, what):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)  # polling interval
    raise AssertionError(f"not within {limit_s} s: {what}")


def last_metrics(path):
    try:
        rows = open(path).read().splitlines()
    except OSError:
        return {}
    if len(rows) < 2:
        return {}
    header, cells = rows[0].split(","), rows[-1].split(",")
    if len(cells) != len(header):
        return {}
    out = {}
    for k, v in zip(header, cells):
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def number(pattern, text):
    m = re.search(pattern, text)
    return int(m.group(1)) if m else -1


def main():
    troupe, mode = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("skipped: network namespaces need root and iproute2's ip")
        return SKIP
    tag = f"tr{os.getpid() % 100000}"
    ns = {"c": f"{tag}c", "a": f"{tag}a", "b": f"{tag}b"}
    made, procs = [], []
    tmp = tempfile.mkdtemp(prefix="troupe-netns-")
    net = 10 + os.getpid() % 200  # second octet: 10.N.x.y, private to the namespaces
    try:
        for name in ns.values():
            r = sh("ip", "netns", "add", name, check=False)
            if r.returncode != 0:
                print(f"skipped: cannot make a network namespace: {r.stderr.strip()}")
                return SKIP
            made.append(name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        for i, w in ((1, "a"), (2, "b")):
            c_end, w_end = f"{tag}c{i}", f"{tag}w{i}"
            sh("ip", "link", "add", c_end, "type", "veth", "peer", "name", w_end)
            sh("ip", "link", "set", c_end, "netns", ns["c"])
            sh("ip", "link", "set", w_end, "netns", ns[w])
            sh("ip", "-n", ns["c"], "addr", "add", f"10.{net}.{i}.1/24", "dev", c_end)
            sh("ip", "-n", ns[w], "addr", "add", f"10.{net}.{i}.2/24", "dev", w_end)
            sh("ip", "-n", ns["c"], "link", "set", c_end, "up")
            sh("ip", "-n", ns[w], "link", "set", w_end, "up")
            if mode == "netem":
                for space, dev in ((ns["c"], c_end), (ns[w], w_end)):
                    r = sh("ip", "netns", "exec", space, "tc", "qdisc", "add", "dev", dev,
                           "root", "netem", "delay", "20ms", "loss", "1%", check=False)
                    if r.returncode != 0:
                        print("skipped: tc netem is not available in this kernel "
                              f"(sch_netem): {r.stderr.strip()}")
                        return SKIP
        # The workers reach each other through the coordinator's namespace
        # (the data plane's group is a full mesh of the hosts' data ports).
        sh("ip", "netns", "exec", ns["c"], "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("ip", "-n", ns["a"], "route", "add", f"10.{net}.2.0/24", "via", f"10.{net}.1.1")
        sh("ip", "-n", ns["b"], "route", "add", f"10.{net}.1.0/24", "via", f"10.{net}.2.1")
        # Nothing leaves the namespaces: no default route, no other interface.
        for w in ("a", "b"):
            routes = sh("ip", "-n", ns[w], "route").stdout
            assert "default" not in routes, routes

        runs = os.path.join(tmp, "runs")
        cfg = os.path.join(tmp, "netns.toml")
        with open(cfg, "w") as f:
            f.write(f"""[run]
name = "netns"
seed = {os.getpid() % 1000}
device = "cpu"
output_dir = "{runs}"
log_every_updates = 1
checkpoint_every_updates = 0

[env]
id = "CartPole-v1"
num_envs = 4

[algo]
name = "ppo"
mode = "async"
num_learners = 0
runners_per_learner = 1
total_env_steps = 4000000
num_steps = 128
learning_rate = 2.5e-4
max_staleness = 8

[algo.ppo]
num_minibatches = 4
update_epochs = 4

[model]
obs_norm = true

[cluster]
heartbeat_ms = 200
timeout_ms = 3000
""")
        env = dict(os.environ, TROUPE_CLUSTER_TOKEN=f"netns-{os.getpid()}")

        def start(space, args, log):
            p = subprocess.Popen(["ip", "netns", "exec", space, troupe] + args, env=env,
                                 stdout=open(log + ".out", "w"), stderr=open(log + ".err", "w"))
            procs.append(p)
            return p

        coord = start(ns["c"], ["train", cfg, "--listen", "0.0.0.0:0"], os.path.join(tmp, "coord"))
        run = None

        def found_run():
            nonlocal run
            if coord.poll() is not None:
                return True
            if os.path.isdir(runs):
                for d in os.listdir(runs):
                    if os.path.exists(os.path.join(runs, d, "cluster.json")):
                        run = os.path.join(runs, d)
            return run is not None

        poll(found_run, 120, "the coordinator's cluster.json")
        assert run, "the coordinator ended: " + open(os.path.join(tmp, "coord.err")).read()
        info = json.load(open(os.path.join(run, "cluster.json")))
        workers = {}
        for i, (w, name) in enumerate((("a", "w1"), ("b", "w2")), start=1):
            workers[name] = start(ns[w], ["worker", "--connect", f"10.{net}.{i}.1:{info['port']}",
                                          "--run", info["run"], "--name", name,
                                          "--heartbeat-ms", "200", "--timeout-ms", "3000"],
                                  os.path.join(tmp, name))
        metrics = os.path.join(run, "metrics.csv")
        limit = 600 if mode == "netem" else 240
        poll(lambda: coord.poll() is not None or any(p.poll() is not None for p in workers.values())
             or last_metrics(metrics).get("return_mean_100", 0) > 200,
             limit, "a 100-episode mean return above 200")
        for name, p in [("coordinator", coord)] + list(workers.items()):
            assert p.poll() is None, f"{name} ended early"
        m = last_metrics(metrics)
        assert m.get("hosts") == 2, m
        assert m.get("hosts_lost") == 0, m
        coord.send_signal(signal.SIGTERM)
        poll(lambda: all(p.poll() is not None for p in procs), 120, "every process to exit")
        statuses = [p.returncode for p in procs]
        assert statuses == [0, 0, 0], statuses
        log = open(os.path.join(tmp, "coord.err")).read()
        total = number(r"cluster: the statistics keeper merged ([0-9]+) samples", log)
        merged = {n: number(rf"by worker incarnation: [^\n]*{n}/[0-9a-f]+ ([0-9]+)", log)
                  for n in workers}
        acked = {n: number(rf"worker {n}: the statistics keeper acknowledged [0-9]+ "
                           r"delta\(s\) \(([0-9]+) samples\) from this host\n",
                           open(os.path.join(tmp, n + ".out")).read()) for n in workers}
        print(f"keeper merged {total} samples; by worker {merged}; acknowledged {acked}; "
              f"return_mean_100 {m.get('return_mean_100')} after {m.get('env_steps')} env steps")
        assert total > 0 and all(v > 0 for v in merged.values()), (total, merged)
        assert total == sum(merged.values()), (total, merged)
        assert merged == acked, (merged, acked)
        # The default data plane: each worker's data port on its own address
        # (the one its connection to the coordinator leaves from), and the
        # group of both formed over the routed link.
        assert "the data plane's group forms again: 2 host(s), epoch 2" in log, log[-3000:]
        for i, n in enumerate(workers, start=1):
            out = open(os.path.join(tmp, n + ".out")).read()
            assert f"feed door for environment-only hosts listens on 10.{net}.{i}.2:" in out, out
        print("passed")
        return 0
    except (AssertionError, RuntimeError) as e:
        print(f"FAILED: {e}")
        for f in sorted(os.listdir(tmp)):
            if f.endswith((".err", ".out")):
                text = open(os.path.join(tmp, f)).read()
                print(f"--- {f} (last 2000 characters)\n{text[-2000:]}")
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for name in made:
            sh("ip", "netns", "del", name, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
