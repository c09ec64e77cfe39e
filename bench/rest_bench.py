#!/usr/bin/env python3
"""The REST transport benchmark (issue #24): `state-store --api-url` against a local
`airflow api-server`, beside curl making the same requests with the same token, in the same run.

It makes a SQLite metastore with `airflow db migrate`, one dag run with one task instance and
1,000 keys (through Airflow's own `MetastoreBackend`), starts Airflow's API server on it with the
interop tier's code (tests/interop/api_server.py: SimpleAuthManager, one worker), gets a token
once, then measures, interleaved in a shuffled order each round (median and p90 of
--rest-repeat rounds, default 25, each a new process):

    get     `state-store get KEY <scope> -o json`   vs  `curl` of GET …/state-store/KEY
    list    `state-store list <scope> --limit 0`    vs  the sum of 10 `curl` page requests
            (limit=100, offset 0 … 900), each its own process
    (and, for reference, the same get and list through the database: `--conn sqlite:///…`)

then the peak RSS of those `state-store` commands (`/usr/bin/time -f %M`, highest of 5 runs
each) and the size of the binary, beside --baseline-bin's (bench/run.sh --baseline REV builds
a revision without the change). Prints a markdown table with the targets of issue #24: get and
list at most 1.2 times curl, peak RSS under 20 MB, the binary at most 2 MB larger. Exits
non-zero when a run fails (not when a target is missed: the table says so).

Run it with the Python of a virtualenv that has apache-airflow 3.3.2 (bench/run.sh --only rest
does, with AIRFLOW_VENV): the seeding imports Airflow, and the server is that venv's
`airflow`. Not run by CI.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "interop"))

DAG_ID, RUN_ID, TASK_ID = "bench_rest", "manual__2026-12-01T00:00:00+00:00", "load"
KEYS = 1000
PAGE = 100  # [api] maximum_page_limit: the API never returns more
TARGET_RATIO = 1.2
TARGET_RSS_MB = 20
TARGET_GROWTH_MB = 2


def log(message):
    print(f"rest-bench: {message}", file=sys.stderr, flush=True)


def run_timed(cmd, env=None):
    """Wall time of one process, in ms; fails the bench on a non-zero exit."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, stdin=subprocess.DEVNULL)
    took = (time.perf_counter() - started) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"rest-bench: {cmd[0]} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
    return took


def peak_rss_kb(cmd, env=None, runs=5):
    highest = 0
    for _ in range(runs):
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise SystemExit(f"rest-bench: {cmd[0]} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
        highest = max(highest, int(proc.stderr.decode().strip().splitlines()[-1]))
    return highest


def p90(samples):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def seed(home):
    """`airflow db migrate` on a new SQLite file, then the dag run, its task instance and the
    keys, written as Airflow writes them."""
    airflow_cli = Path(sys.executable).with_name("airflow")
    started = time.monotonic()
    proc = subprocess.run([str(airflow_cli), "db", "migrate"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"rest-bench: airflow db migrate failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    log(f"airflow db migrate: {time.monotonic() - started:.1f}s")
    import support  # Airflow reads its database URL at import: after the environment is set

    airflow = support.Airflow()
    task = airflow.add_dag_run(dag_id=DAG_ID, run_id=RUN_ID, tasks=(TASK_ID,))
    scope = airflow.task_scope(task)
    with airflow.session() as s:
        for i in range(KEYS):
            value = json.dumps({"offset": i * 4096, "file": f"s3://bucket/part-{i:05}.parquet", "ratio": i / 7})
            airflow.backend.set(scope, f"key_{i:04}", value, expires_at=None, session=s)
    airflow.dispose()
    return task


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "state-store"))
    parser.add_argument("--rest-repeat", type=int, default=25, help="rounds of each measurement (default 25, at least 20)")
    parser.add_argument("--baseline-bin", metavar="PATH", help="a build without the change, for the size")
    parser.add_argument("--baseline-label", metavar="TEXT", default="baseline")
    parser.add_argument("--json", help="also write every figure to NAME-rest.json")
    args, _ = parser.parse_known_args()  # the clean benchmark's options are not ours
    if args.rest_repeat < 20:
        parser.error("--rest-repeat must be at least 20")
    binary = str(Path(args.bin).resolve())
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"rest-bench: no binary at {binary} (cargo build --release)")
    for tool in ("curl", "/usr/bin/time"):
        if not shutil.which(tool):
            raise SystemExit(f"rest-bench: {tool} is needed")

    home = Path(tempfile.mkdtemp(prefix="state-store-rest-bench-"))
    db = home / "airflow.db"
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
    )
    for name in ("AIRFLOW_CONFIG", "AIRFLOW_CLI_TOKEN", "STATE_STORE_API_URL", "STATE_STORE_API_TOKEN_CMD"):
        os.environ.pop(name, None)
    server = None
    try:
        task = seed(home)
        from api_server import ApiServer

        server = ApiServer.start(home)
        log(f"airflow api-server {server.version.get('version')} on {server.url}: ready in {server.ready_s:.1f}s")
        token = server.token("admin")  # once, for curl and for us alike
        results = measure(binary, server.url, token, db, task, args.rest_repeat)
        results["rss_kb"] = {
            "get": peak_rss_kb(results["commands"]["ours_get"], results["env"]),
            "list": peak_rss_kb(results["commands"]["ours_list"], results["env"]),
        }
        results["size"] = {"ours": os.path.getsize(binary)}
        if args.baseline_bin:
            results["size"]["baseline"] = os.path.getsize(args.baseline_bin)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(home, ignore_errors=True)
    report(results, args)
    if args.json:
        path = Path(__file__).with_name(f"{args.json}-rest.json")
        token = results.pop("env")["AIRFLOW_CLI_TOKEN"]
        path.write_text(json.dumps(results, indent=2).replace(token, "<token>"))
        log(f"wrote {path}")


def measure(binary, url, token, db, task, repeat):
    base = f"{url}/api/v2/dags/{quote(DAG_ID, safe='')}/dagRuns/{quote(RUN_ID, safe='')}/taskInstances/{TASK_ID}/state-store"
    scope = ["--dag-id", DAG_ID, "--run-id", RUN_ID, "--task-id", TASK_ID]
    env = {**os.environ, "AIRFLOW_CLI_TOKEN": token}
    curl_to = ["curl", "--silent", "--show-error", "--fail", "-H", f"Authorization: Bearer {token}", "-o"]
    curl = [*curl_to, "/dev/null"]
    commands = {
        "ours_get": [binary, "--api-url", url, "get", "key_0500", *scope, "-o", "json"],
        "curl_get": [*curl, f"{base}/key_0500?map_index=-1"],
        "ours_list": [binary, "--api-url", url, "list", *scope, "--limit", "0", "-o", "json"],
        "db_get": [binary, "--conn", f"sqlite:///{db}", "get", "key_0500", *scope, "-o", "json"],
        "db_list": [binary, "--conn", f"sqlite:///{db}", "list", *scope, "--limit", "0", "-o", "json"],
    }
    pages = [[*curl, f"{base}?map_index=-1&limit={PAGE}&offset={offset}"] for offset in range(0, KEYS, PAGE)]
    # The same data both ways: our list has every key, curl's pages hold them all.
    listed = subprocess.run(commands["ours_list"], capture_output=True, env=env, stdin=subprocess.DEVNULL)
    if listed.returncode != 0 or len(json.loads(listed.stdout)) != KEYS:
        raise SystemExit(f"rest-bench: state-store list did not list the {KEYS} keys: exit {listed.returncode}, "
                         f"{listed.stderr.decode(errors='replace')[-500:]}")
    keys = set()
    for page in pages:
        body = subprocess.run([*curl_to, "-", page[-1]], capture_output=True, check=True).stdout
        keys.update(entry["key"] for entry in json.loads(body)["task_state_store"])
    if len(keys) != KEYS:
        raise SystemExit(f"rest-bench: curl's {len(pages)} pages hold {len(keys)} keys, not {KEYS}")

    samples = {name: [] for name in ("ours_get", "curl_get", "ours_list", "curl_list", "db_get", "db_list")}
    jobs = {
        "ours_get": lambda: run_timed(commands["ours_get"], env),
        "curl_get": lambda: run_timed(commands["curl_get"]),
        "ours_list": lambda: run_timed(commands["ours_list"], env),
        "curl_list": lambda: sum(run_timed(page) for page in pages),
        "db_get": lambda: run_timed(commands["db_get"], env),
        "db_list": lambda: run_timed(commands["db_list"], env),
    }
    for job in jobs.values():  # warm the page cache and the server's first-request paths
        job()
    rng = random.Random(24)
    for round_no in range(repeat):
        order = list(jobs)
        rng.shuffle(order)
        for name in order:
            samples[name].append(jobs[name]())
        if (round_no + 1) % 5 == 0:
            log(f"round {round_no + 1}/{repeat}")
    return {"samples_ms": samples, "commands": commands, "env": env}


def report(results, args):
    s = results["samples_ms"]
    med = {name: statistics.median(v) for name, v in s.items()}

    def verdict(ok):
        return "yes" if ok else "**no**"

    rows = [
        "| measurement | state-store over REST | curl, same requests, same token | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for op, what in (("get", "`get` of one key"), ("list", f"`list --limit 0` of {KEYS:,} keys (curl: {KEYS // PAGE} pages)")):
        ours, theirs = med[f"ours_{op}"], med[f"curl_{op}"]
        ratio = ours / theirs
        rows.append(
            f"| {what} | {ours:.1f} ms (p90 {p90(s[f'ours_{op}']):.1f}) | {theirs:.1f} ms (p90 {p90(s[f'curl_{op}']):.1f}) "
            f"| {ratio:.2f} | ≤ {TARGET_RATIO} | {verdict(ratio <= TARGET_RATIO)} |"
        )
    rss = results["rss_kb"]
    top = max(rss.values()) / 1024
    rows.append(
        f"| peak RSS of state-store (`get` / `list --limit 0`) | {rss['get'] / 1024:.1f} / {rss['list'] / 1024:.1f} MB | – | – "
        f"| < {TARGET_RSS_MB} MB | {verdict(top < TARGET_RSS_MB)} |"
    )
    size = results["size"]
    if "baseline" in size:
        growth = (size["ours"] - size["baseline"]) / 1e6
        rows.append(
            f"| binary size (target/release/state-store) | {size['ours'] / 1e6:.2f} MB | {args.baseline_label}: "
            f"{size['baseline'] / 1e6:.2f} MB | +{growth:.2f} MB | ≤ +{TARGET_GROWTH_MB} MB | {verdict(growth <= TARGET_GROWTH_MB)} |"
        )
    else:
        rows.append(f"| binary size (target/release/state-store) | {size['ours'] / 1e6:.2f} MB | no baseline (--baseline REV) | – | ≤ +{TARGET_GROWTH_MB} MB | – |")
    print(f"\n### REST transport: {len(s['ours_get'])} rounds, interleaved (median, p90)\n")
    print("\n".join(rows))
    print(
        f"\nFor reference, through the database (`--conn sqlite:///…`, same data): `get` {med['db_get']:.1f} ms, "
        f"`list --limit 0` {med['db_list']:.1f} ms."
    )


if __name__ == "__main__":
    main()
