"""A sixth client's wait on the public `/chat` while five others flood it, with the per-client limit on and off.

Starts the real server (app.server.build_server, uvicorn on loopback) once per setting, calls `/chat` with
gradio_client as API users do, and names each client by `X-Forwarded-For` (the server trusts 127.0.0.1 as its
proxy, as behind nginx), so one machine can play several clients. Five flood threads call `/chat` back to back
(retrying at once when refused); the sixth client makes `--calls` calls one after the other and its waits are timed,
first alone, then during the flood.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/chat_flood.py [--backend auto] [--calls 5] [--flooders 5]
        [--flooder-addresses 1] [--limits on,off] [--json benchmarks/results/chat_flood.json]
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/chat_flood.py --backend fake --fake-seconds 1.0   # seconds, no model

`--backend` is the app's (auto loads the embedded model, as `python app.py` does); `fake` replies after
`--fake-seconds` from a single-lane fake model. `--flooder-addresses 1` is one client flooding over five
connections (what the limit stops); 5 gives each flooder its own address (each gets its fair turn).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mascot.settings import apply_process_defaults  # noqa: E402

apply_process_defaults()

from app.chat_limits import BUSY_MESSAGE, FULL_MESSAGE  # noqa: E402
from app.server import build_server  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.ui import engine_config  # noqa: E402
from mascot.group.engine import Engine, EngineConfig  # noqa: E402

MESSAGE = "I moved to a new city for work and I feel really lonely in the evenings."
SIXTH = "203.0.113.6"


def fake_engine(seconds: float) -> Engine:
    """The fake backend behind one lane: one reply at a time, `seconds` each (a model on a small CPU)."""
    from mascot.backends.fake import FakeBackend

    lane = threading.Lock()

    def slow(messages: Any, params: Any, adapter: Any) -> str:
        with lane:
            time.sleep(seconds)
        return "That sounds hard; evenings can feel long in a new place."

    return Engine(EngineConfig(backend="fake"), FakeBackend(responder=slow))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """build_server(settings, engine) under uvicorn in a thread, on a free loopback port."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(build_server(settings, engine), host="127.0.0.1", port=settings.port,
                                                    log_level="warning", proxy_headers=True,
                                                    forwarded_allow_ips="127.0.0.1"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 120
        while not self.server.started and time.time() < deadline:
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{settings.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def client(url: str, address: str) -> Any:
    from gradio_client import Client

    return Client(url, headers={"X-Forwarded-For": address}, verbose=False)


def timed_call(c: Any, args: dict[str, Any], retry: bool) -> tuple[float, int]:
    """(seconds until a reply, refusals met on the way); with `retry`, a refused call is sent again at once."""
    from gradio_client.exceptions import AppError

    start, refused = time.perf_counter(), 0
    while True:
        try:
            c.predict(**args)
            return time.perf_counter() - start, refused
        except AppError as exc:
            if not retry or not (BUSY_MESSAGE in str(exc) or FULL_MESSAGE in str(exc)):
                raise
            refused += 1
            time.sleep(0.05)


def summary(waits: list[float]) -> dict[str, float]:
    return {"mean_s": round(statistics.mean(waits), 3), "median_s": round(statistics.median(waits), 3),
            "max_s": round(max(waits), 3), "n": len(waits)}


def run_setting(args: argparse.Namespace, engine: Engine, limit_on: bool) -> dict[str, Any]:
    data = Path(args.data_dir) / ("on" if limit_on else "off")
    settings = Settings(data_dir=str(data), backend=args.backend, mode=args.mode, port=free_port(), warmup=False,
                        trusted_proxies="127.0.0.1", chat_per_client=1 if limit_on else 0)
    server = Server(settings, engine)
    call = dict(message=MESSAGE, history=[], pack=args.pack, mode=args.mode, max_speakers=args.max_speakers, seed=0,
                api_name="/chat")
    try:
        sixth = client(server.url, SIXTH)
        timed_call(sixth, call, retry=True)  # warm: one-off costs of the first call
        alone = [timed_call(sixth, call, retry=True)[0] for _ in range(args.calls)]
        stop, counts, lock = threading.Event(), {"ok": 0, "refused": 0}, threading.Lock()

        def flood(i: int) -> None:
            c = client(server.url, f"198.51.100.{1 + i % args.flooder_addresses}")
            while not stop.is_set():
                _, refused = timed_call(c, call, retry=True)
                with lock:
                    counts["ok"] += 1
                    counts["refused"] += refused

        threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(args.flooders)]
        for t in threads:
            t.start()
        time.sleep(args.warm_flood)
        flooded, sixth_refused = [], 0
        for _ in range(args.calls):
            wait, refused = timed_call(sixth, call, retry=True)
            flooded.append(wait)
            sixth_refused += refused
        stop.set()
        for t in threads:
            t.join(timeout=600)
        return {"limit": "on" if limit_on else "off", "alone": summary(alone), "during_flood": summary(flooded),
                "sixth_refused": sixth_refused, "flood_calls_served": counts["ok"], "flood_calls_refused": counts["refused"]}
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="auto", help="the app's backend (auto = the embedded model); fake = no model")
    p.add_argument("--fake-seconds", type=float, default=1.0, help="seconds per reply of the fake backend")
    p.add_argument("--mode", default="round-robin", help="director mode of each /chat call")
    p.add_argument("--pack", default="emotional-support")
    p.add_argument("--max-speakers", type=int, default=1, help="replies per /chat call")
    p.add_argument("--calls", type=int, default=5, help="calls the sixth client times, alone and during the flood")
    p.add_argument("--flooders", type=int, default=5)
    p.add_argument("--flooder-addresses", type=int, default=1, help="1 = one client over all flood connections")
    p.add_argument("--warm-flood", type=float, default=2.0, help="seconds of flood before the sixth client starts")
    p.add_argument("--limits", default="off,on", help="settings to measure: off (as before), on (per-client limit)")
    p.add_argument("--data-dir", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "mascot-chat-flood"))
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()
    if args.backend == "fake":
        engine = fake_engine(args.fake_seconds)
    else:
        engine = Engine.load(engine_config(Settings(backend=args.backend, mode=args.mode)))
    results = []
    for name in args.limits.split(","):
        result = run_setting(args, engine, limit_on=name.strip() == "on")
        results.append(result)
        print(f"limit {result['limit']:>3}: sixth client alone {result['alone']['mean_s']:.2f} s, during the flood "
              f"{result['during_flood']['mean_s']:.2f} s mean / {result['during_flood']['max_s']:.2f} s max "
              f"(flood served {result['flood_calls_served']}, refused {result['flood_calls_refused']})", flush=True)
    report = {"backend": args.backend if args.backend != "fake" else f"fake ({args.fake_seconds} s per reply)",
              "mode": args.mode, "max_speakers": args.max_speakers, "flooders": args.flooders,
              "flooder_addresses": args.flooder_addresses, "calls": args.calls, "results": results,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()}}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
