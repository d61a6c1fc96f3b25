#!/usr/bin/env python3
"""CTest: scripts/bench-cluster, run tiny (N=1, 1 learner, 200,000 env
steps, sampled every 20 ms, pinned with PIN=1), prints its figures and writes
JSON with every key, whose figures agree with each other and with the kernel's
view of the pinning; bad arguments are refused with exit 2 naming the
argument, and a run that cannot start exits 1 saying which run.

usage: bench_cluster.py TROUPE_BINARY SOURCE_DIR

Every run is bounded (subprocess time-outs). Exit 77 (skipped) without taskset.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

TROUPE, SOURCE = sys.argv[1], sys.argv[2]
SCRIPT = os.path.join(SOURCE, "scripts", "bench-cluster")
CONFIG = os.path.join(SOURCE, "config", "cartpole_impala.toml")
LIMIT_S = 300  # one tiny benchmark: two short runs and their start-up
failures = []

if shutil.which("taskset") is None:
    print("SKIP: bench-cluster pins with taskset (util-linux), which is not installed",
          flush=True)
    sys.exit(77)


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def run(args, **env):
    e = dict(os.environ, TROUPE=TROUPE, **env)
    return subprocess.run([SCRIPT] + args, env=e, capture_output=True, text=True,
                          timeout=LIMIT_S)


def close(a, b, what, rel=1e-9):
    check(math.isclose(a, b, rel_tol=rel, abs_tol=1e-9), f"{what}: {a} against {b}")


tmp = tempfile.mkdtemp(prefix="bench-cluster-test-")
try:
    # -- a tiny run, pinned -------------------------------------------------------
    path = os.path.join(tmp, "out.json")
    r = run([CONFIG, "1", "--json", path], STEPS="200000", LEARNERS="1", PIN="1",
            SAMPLE_S="0.02")
    print(r.stdout, r.stderr, sep="\n", flush=True)
    check(r.returncode == 0, f"exit status {r.returncode}, expected 0")
    for line in ["machine: ", "pinning: on (PIN=1)", "N=1: one process ",
                 "cores (taskset -c): one process ", "loopback per env step: ",
                 "CPU-us per env step", "    one process: ", "    coordinator: ", "    w1: ",
                 "per update (the run's ", "coordinator's share: "]:
        check(line in r.stdout, f"no line with {line!r} in the output")
    doc = json.load(open(path))
    for key in ["machine", "date", "config", "learners_per_process", "steps_per_n", "pin",
                "sample_s", "clk_tck", "runs"]:
        check(key in doc, f"no key {key!r} in the JSON")
    check(len(doc["runs"]) == 1 and doc["runs"][0]["n"] == 1, "one run, N=1, in the JSON")
    run1 = doc["runs"][0]
    one, many = run1["one_process"], run1["across_processes"]
    check(run1["pinned"] is True, "the run is said to be pinned")
    for k in ["env_steps", "wall_time_s", "steps_per_s", "lo_tx_bytes_per_step",
              "lo_tx_packets_per_step"]:
        check(k in one and k in many, f"no key {k!r} in one_process and across_processes")
    for k in ["ratio", "processes", "worker_mean_cpu_us_per_step", "coordinator_share_pct",
              "updates", "lo_tx_bytes_per_update", "lo_tx_packets_per_update",
              "coordinator_cpu_us_per_update"]:
        check(k in many, f"no key {k!r} in across_processes")
    check(many["env_steps"] >= 200000 and one["env_steps"] >= 200000,
          "both runs ran the step budget")
    close(many["ratio"], many["steps_per_s"] / one["steps_per_s"], "the ratio")
    check(many["updates"] > 0, "the run across processes made updates")
    close(many["coordinator_cpu_us_per_update"] * many["updates"],
          many["processes"][0]["cpu_s"] * 1e6, "the coordinator's CPU per update")
    close(many["lo_tx_bytes_per_update"] * many["updates"],
          many["lo_tx_bytes_per_step"] * many["env_steps"], "loopback bytes per update",
          rel=1e-6)
    check(many["lo_tx_bytes_per_step"] > 0 and many["lo_tx_packets_per_step"] > 0,
          "the run across processes sent bytes and packets on loopback")
    procs = [one["process"]] + many["processes"]
    check([p["name"] for p in procs] == ["one process", "coordinator", "w1"],
          "the processes are the one process, the coordinator and w1")
    for p, steps in zip(procs, [one["env_steps"], many["env_steps"], many["env_steps"]]):
        name = p["name"]
        # The kernel's own list of allowed cores is what the script asked taskset for.
        check(p["cores"] is not None and p["cpus_allowed"] == p["cores"],
              f"{name}: cores {p['cores']}, the kernel says {p['cpus_allowed']}")
        check(p["exit_status"] == 0, f"{name}: exit status {p['exit_status']}")
        check(p["cpu_s"] > 0, f"{name}: CPU time {p['cpu_s']} > 0")
        close(p["cpu_us_per_step"], p["cpu_s"] * 1e6 / steps, f"{name}: CPU-us per step")
        # Each thread's ticks were sampled before it ended: at most the rusage
        # total, give or take one tick per thread of rounding.
        slack = len(p["threads"]) / doc["clk_tck"]
        check(p["sampled_cpu_s"] <= p["cpu_s"] + slack,
              f"{name}: sampled {p['sampled_cpu_s']} s <= rusage {p['cpu_s']} s")
        check(math.isclose(sum(t["cpu_s"] for t in p["threads"]), p["sampled_cpu_s"],
                           abs_tol=1e-9), f"{name}: the threads sum to the sampled total")
        groups = p["thread_groups"]
        check(sum(g["threads"] for g in groups.values()) == len(p["threads"]),
              f"{name}: every thread is in one group")
        total = sum(g["cpu_us_per_step"] for g in groups.values())
        close(total + p["after_last_sample_us_per_step"], p["cpu_us_per_step"],
              f"{name}: the groups and the rest make the process", rel=1e-6)
        check(any(k.startswith("caf.") for k in groups), f"{name}: CAF's named threads seen")
        check(any(k.endswith("(main thread)") for k in groups), f"{name}: the main thread seen")
        for k, g in groups.items():
            check(g["busiest_thread_cpu_us_per_step"] <= g["cpu_us_per_step"] + 1e-9,
                  f"{name}: group {k}'s busiest thread within the group")
    workers = many["processes"][1:]
    mean = sum(w["cpu_us_per_step"] for w in workers) / len(workers)
    close(many["worker_mean_cpu_us_per_step"], mean, "the workers' mean")
    close(many["coordinator_share_pct"],
          100 * many["processes"][0]["cpu_s"] / sum(w["cpu_s"] for w in workers) * len(workers),
          "the coordinator's share", rel=1e-6)

    # -- an environment-only host beside the worker (all-reduce plane) -------------
    path = os.path.join(tmp, "env.json")
    # A million steps (a few seconds): the environment-only host joins once the
    # worker's feed door is open, well before the run ends.
    r = run([CONFIG, "1", "--json", path], STEPS="1000000", LEARNERS="1", PIN="0",
            ENV_HOSTS="1", ENV_RUNNERS="1")
    print(r.stdout, r.stderr, sep="\n", flush=True)
    check(r.returncode == 0, f"ENV_HOSTS=1: exit status {r.returncode}, expected 0")
    check("+ 1 environment-only host(s) of 1 runner(s)" in r.stdout,
          "ENV_HOSTS=1: the N line names the environment-only host")
    check("    e1 (env only): " in r.stdout, "ENV_HOSTS=1: a line for e1's CPU")
    doc = json.load(open(path))
    check(doc["env_hosts"] == 1 and doc["env_runners"] == 1, "ENV_HOSTS=1: in the JSON")
    many = doc["runs"][0]["across_processes"]
    check([p["name"] for p in many["processes"]] == ["coordinator", "w1", "e1 (env only)"],
          "ENV_HOSTS=1: the processes are the coordinator, w1 and e1")
    close(many["worker_mean_cpu_us_per_step"], many["processes"][1]["cpu_us_per_step"],
          "ENV_HOSTS=1: the workers' mean is w1's alone")
    check(many["env_steps"] >= 1000000, "ENV_HOSTS=1: the run ran the step budget")
    # e1 exits 0 only when it joined and its run ended (one that could not join exits 1).
    check(many["processes"][2]["exit_status"] == 0,
          f"ENV_HOSTS=1: e1 exit status {many['processes'][2]['exit_status']}")

    # -- bad input ------------------------------------------------------------------
    cases = [([], {}, 2, "usage: scripts/bench-cluster CONFIG"),
             ([CONFIG, "0"], {}, 2, "each N must be an integer >= 1, got 0"),
             ([CONFIG, "1", "--json"], {}, 2, "--json needs a FILE"),
             ([CONFIG, "1"], {"PIN": "yes"}, 2, "PIN='yes': must be 0 or 1"),
             ([CONFIG, "1"], {"STEPS": "-5"}, 2, "STEPS='-5': must be an integer >= 1"),
             ([CONFIG, "1"], {"SAMPLE_S": "0"}, 2, "SAMPLE_S='0'"),
             ([CONFIG, "1"], {"PLANE": "server"}, 2,
              "PLANE='server': the parameter-server data plane was removed"),
             ([CONFIG, "1"], {"ENV_HOSTS": "1", "PLANE": "allreduce", "LEARNERS": "2"}, 2,
              "ENV_HOSTS x ENV_RUNNERS = 1 runners do not divide among the one-process "
              "run's 2 learners"),
             ([os.path.join(tmp, "missing.toml"), "1"], {"STEPS": "1000"}, 1,
              "the one-process run (N=1) failed")]
    for args, env, status, text in cases:
        b = run(args, **env)
        check(b.returncode == status and text in b.stderr,
              f"{args} {env}: exit {b.returncode} (expected {status}), stderr {b.stderr!r} "
              f"(expected {text!r})")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
