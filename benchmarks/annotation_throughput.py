"""Annotation store benchmark: judgments/s with N concurrent writers on SQLite and PostgreSQL, beside raw
single-row inserts on the same database, and `stats` on 100k judgments.

Each writer is one annotator doing what the page does per click: `submit_and_next` (record the vote
and assign the next item in one write transaction). Threads share one store (one server process); processes each open
their own (several server workers on one database file).

Run: python benchmarks/annotation_throughput.py --writers 1 4 16 --databases sqlite postgresql --json runs/annotation_bench.json
PostgreSQL is a throwaway cluster on a local socket (tests/postgres_cluster.py; `make postgres` installs it).
Targets: >= 200 judgments/s with 16 writers; stats on 100,000 judgments < 2 s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import secrets
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert  # noqa: E402

from annotation.frames import load_judgments  # noqa: E402
from annotation.identity import annotator_key  # noqa: E402
from annotation.importing import import_pairs  # noqa: E402
from annotation.models import Annotator, Assignment, Item, Judgment, System, utcnow  # noqa: E402
from annotation.schemas import StudyConfig, Task  # noqa: E402
from annotation.stats import study_stats  # noqa: E402
from annotation.store import StudyStore  # noqa: E402

BASELINES = ("Few-Shot CoT", "Zero-Shot CoT", "MultiAgentESC")


def _pairs_file(path: Path, n_items: int) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for n in range(n_items):
            fh.write(
                json.dumps(
                    {
                        "id": f"i{n}",
                        "context": f"Scenario {n}: the seeker lost their job.",
                        "a": {
                            "system": "MASCOT",
                            "dialogue": [
                                {"speaker": "User", "text": "I feel lost."},
                                {"speaker": "Listener", "text": "That sounds hard. " * 20},
                            ],
                        },
                        "b": {
                            "system": BASELINES[n % 3],
                            "dialogue": [
                                {"speaker": "User", "text": "I feel lost."},
                                {"speaker": "Assistant", "text": "Sorry. " * 30},
                            ],
                        },
                    }
                )
                + "\n"
            )
    return path


def _work(store: StudyStore, annotator: str, deadline: float, counts: list[int]) -> None:
    done = 0
    choices = ("A", "B", "tie", "both_bad")
    task = store.next_task(study_id="bench", annotator=annotator)
    while isinstance(task, Task) and time.perf_counter() < deadline:
        # What the page does per click: record the vote and serve the next task, one transaction.
        _, task = store.submit_and_next(token=task.token, choice=random.choice(choices), comment="ok")
        done += 1
    counts.append(done)


def _process(url: str, annotator: str, start: float, seconds: float, queue: mp.Queue) -> None:
    store = StudyStore(url)
    time.sleep(max(0.0, start - time.time()))
    counts: list[int] = []
    t0 = time.perf_counter()
    _work(store, annotator, t0 + seconds, counts)
    queue.put((counts[0], time.perf_counter() - t0))


def throughput(url: str, folder: Path, writers: int, mode: str, seconds: float, n_items: int) -> dict[str, float]:
    """Judgments per second for `writers` concurrent annotators (k=2, so items never run out early)."""
    store = StudyStore(url)
    store.create_study(config=StudyConfig(id="bench", annotators_per_item=2))
    import_pairs(store, study_id="bench", path=_pairs_file(folder / "pairs.jsonl", n_items))
    cpu = None
    if mode == "threads":
        counts: list[int] = []
        c0 = time.process_time()
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=_work, args=(store, f"w{n}", t0 + seconds, counts))
            for n in range(writers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        total = sum(counts)
        cpu = (time.process_time() - c0) / max(total, 1) * 1000  # this process did all the work
    else:
        ctx = mp.get_context("fork")
        queue: mp.Queue = ctx.Queue()
        start = time.time() + 1.0
        procs = [
            ctx.Process(target=_process, args=(url, f"w{n}", start, seconds, queue)) for n in range(writers)
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        total, wall = sum(r[0] for r in results), max(r[1] for r in results)
    stored = len(load_judgments(store, study_id="bench"))
    assert stored == total, f"lost judgments: {total} submitted, {stored} stored"
    store.close()
    return {
        "writers": writers,
        "mode": mode,
        "judgments": total,
        "seconds": round(wall, 2),
        "judgments_per_s": round(total / wall, 1),
        "cpu_ms_per_judgment": None if cpu is None else round(cpu, 2),
    }


def seed_judgments(store: StudyStore, n: int) -> None:
    """Insert `n` judgments directly (2 per item, 3 baselines), bypassing the assignment path for speed."""
    rng = random.Random(0)
    now = utcnow()
    store.create_study(config=StudyConfig(id="big", annotators_per_item=2))
    with store.engine.begin() as conn:
        conn.execute(
            insert(System),
            [{"id": i + 1, "study_id": "big", "name": s} for i, s in enumerate(("MASCOT",) + BASELINES)],
        )
        conn.execute(
            insert(Annotator),
            [{"id": a + 1, "study_id": "big", "external_id": f"u{a}", "match_key": annotator_key(f"u{a}"),
              "created_at": now} for a in range(40)],
        )
        turns = json.dumps([{"speaker": "User", "text": "hi"}, {"speaker": "Listener", "text": "hello"}])
        conn.execute(
            insert(Item),
            [
                {
                    "id": i + 1,
                    "study_id": "big",
                    "external_id": f"i{i}",
                    "context": "c",
                    "system_a_id": 1,
                    "system_b_id": 2 + i % 3,
                    "dialogue_a": turns,
                    "dialogue_b": turns,
                    "is_attention": False,
                    "leak_terms": "",
                    "meta": "{}",
                }
                for i in range(n // 2)
            ],
        )
        assignments, judgments = [], []
        for j in range(n):
            item, annotator = j // 2 + 1, (j % 2) + 2 * ((j // 2) % 20) + 1
            choice = rng.choices(("a", "b", "tie", "both_bad"), (0.62, 0.3, 0.05, 0.03))[0]
            a_left = rng.random() < 0.5
            assignments.append(
                {
                    "id": j + 1,
                    "token": secrets.token_hex(16),
                    "study_id": "big",
                    "item_id": item,
                    "annotator_id": annotator,
                    "a_on_left": a_left,
                    "status": "done",
                    "served_at": now,
                    "expires_at": now + timedelta(minutes=30),
                }
            )
            r = [rng.randint(1, 5) for _ in range(6)]
            judgments.append(
                {
                    "assignment_id": j + 1,
                    "study_id": "big",
                    "item_id": item,
                    "annotator_id": annotator,
                    "choice": choice,
                    "winner_system_id": {"a": 1, "b": 2 + (item - 1) % 3}.get(choice),
                    "left_system_id": 1 if a_left else 2 + (item - 1) % 3,
                    "helpfulness_a": r[0],
                    "helpfulness_b": r[1],
                    "emotional_appropriateness_a": r[2],
                    "emotional_appropriateness_b": r[3],
                    "perceived_safety_a": r[4],
                    "perceived_safety_b": r[5],
                    "comment": "",
                    "seconds": rng.uniform(5, 90),
                    "too_fast": False,
                    "attention_passed": None,
                    "source": "import",
                    "created_at": now,
                }
            )
        conn.execute(insert(Assignment), assignments)
        conn.execute(insert(Judgment), judgments)


def raw_inserts(url: str, seconds: float) -> dict[str, float]:
    """Rows per second of plain one-row INSERT transactions on the same database: the floor the store's writes sit on."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE raw_bench (id INTEGER PRIMARY KEY, body TEXT)"))
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO raw_bench (id, body) VALUES (:i, :b)"), {"i": n, "b": "x" * 200})
        n += 1
    wall = time.perf_counter() - t0
    engine.dispose()
    return {"rows": n, "seconds": round(wall, 2), "rows_per_s": round(n / wall, 1)}


def stats_time(url: str, n: int) -> dict[str, float]:
    """Seconds for what `python -m annotation stats` does on n judgments: load from the database + statistics."""
    store = StudyStore(url)
    seed_judgments(store, n)
    t0 = time.perf_counter()
    frame = load_judgments(store, study_id="big", for_stats=True)
    t1 = time.perf_counter()
    stats = study_stats(frame)  # default 200 bootstrap rounds, as the CLI runs it
    t2 = time.perf_counter()
    assert len(frame) == n and len(stats.comparisons) == 3
    store.close()
    return {
        "judgments": n,
        "load_s": round(t1 - t0, 3),
        "compute_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
    }


def measure(db: str, folder: Path, args: argparse.Namespace) -> dict:
    """Throughput, raw inserts and `stats` on one database: SQLite files in `folder`, or a throwaway PostgreSQL cluster."""
    cluster = None
    if db == "postgresql":
        from tests.postgres_cluster import PostgresCluster

        cluster = PostgresCluster().start()

    def url(name: str) -> str:
        return cluster.url(name.replace("-", "_")) if cluster else f"sqlite:///{folder / (name + '.db')}"

    try:
        rows = [throughput(url(f"tp-{m}-{w}"), folder, w, m, args.seconds, args.items)
                for m in args.modes for w in args.writers]
        return {"throughput": rows, "raw_inserts": raw_inserts(url("raw"), args.seconds),
                "stats": stats_time(url("stats"), args.stats_judgments)}
    finally:
        if cluster:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--modes", nargs="+", choices=("threads", "processes"), default=["threads", "processes"]
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    parser.add_argument("--items", type=int, default=1000, help="pairs in the throughput study (k=2; paper: 200)")
    parser.add_argument("--stats-judgments", type=int, default=100_000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--databases", nargs="+", choices=("sqlite", "postgresql"), default=["sqlite"])
    args = parser.parse_args()
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="annotation-bench-") as tmp:
        folder = Path(tmp)
        for db in args.databases:
            out[db] = measure(db, folder, args)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load:.2f} at the end (other work skews these numbers)"
    )
    print(
        f"{'database':<11} {'mode':<10} {'writers':>7} {'judgments':>9} {'seconds':>8} {'judgments/s':>12} {'CPU ms/judgment':>16}"
    )
    for db, res in out.items():
        for r in res["throughput"]:
            cpu = "-" if r["cpu_ms_per_judgment"] is None else r["cpu_ms_per_judgment"]
            print(
                f"{db:<11} {r['mode']:<10} {r['writers']:>7} {r['judgments']:>9} {r['seconds']:>8} "
                f"{r['judgments_per_s']:>12} {cpu:>16}"
            )
        raw, stats = res["raw_inserts"], res["stats"]
        print(f"{db:<11} raw one-row INSERT transactions: {raw['rows_per_s']} rows/s; stats on {stats['judgments']:,} "
              f"judgments: load {stats['load_s']} s + compute {stats['compute_s']} s = {stats['total_s']} s (target < 2 s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"databases": out, "load_average": load}, indent=2))
        print(f"wrote {args.json}")

if __name__ == "__main__":
    main()
