"""A sixth client's wait on the public `/chat` while five others flood it, with the per-client limit on and off.

Starts the real server (app.server.build_server under uvicorn on loopback, in a process of its own, so the clients'
work does not share its interpreter) once per setting, calls `/chat` with gradio_client as API users do, and names
each client by `X-Forwarded-For` (the server trusts 127.0.0.1 as its proxy, as behind nginx), so one machine can play
several clients. Five flood threads call `/chat` back to back
(retrying shortly when refused); the sixth client makes `--calls` calls one after the other and its waits are timed,
first alone, then during the flood.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/chat_flood.py [--backend auto] [--calls 5] [--flooders 5]
        [--flooder-addresses 1] [--limits on,off] [--json benchmarks/results/chat_flood.json]
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/chat_flood.py --backend fake --fake-seconds 1.0   # seconds, no model

`--backend` is the app's (auto loads the embedded model, as `python app.py` does); `fake` replies after
`--fake-seconds` from a single-lane fake model. Each call is `/chat`'s default (trained director, up to 3 speakers);
a refused call is sent again after `--retry-after` seconds. `--flooder-addresses 1` is one client flooding over five
connections (what the limit stops); 5 gives each flooder its own address (each gets its fair turn).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
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


def serve(args: argparse.Namespace) -> None:
    """The server process (`--serve`): build_server over the chosen backend, uvicorn trusting 127.0.0.1 as proxy."""
    import uvicorn

    settings = Settings(data_dir=args.data_dir, backend=args.backend, mode=args.mode, port=args.port, warmup=False,
                        trusted_proxies="127.0.0.1", chat_per_client=1 if args.limit == "on" else 0)
    if args.backend == "fake":
        engine = fake_engine(args.fake_seconds)
    else:
        engine = Engine.load(engine_config(settings))
    uvicorn.run(build_server(settings, engine), host="127.0.0.1", port=args.port, log_level="warning",
                proxy_headers=True, forwarded_allow_ips="127.0.0.1")


class Server:
    """This script with `--serve` in a child process, on a free loopback port (stopped by its own pid)."""

    def __init__(self, args: argparse.Namespace, limit: str) -> None:
        self.port = free_port()
        command = [sys.executable, __file__, "--serve", "--limit", limit, "--port", str(self.port),
                   "--backend", args.backend, "--fake-seconds", str(args.fake_seconds), "--mode", args.mode,
                   "--data-dir", str(Path(args.data_dir) / limit)]
        self.process = subprocess.Popen(command)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 600  # the embedded model may take minutes to load on a busy machine
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with status {self.process.returncode}; see its output above")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the server did not listen on port {self.port} within 600 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def client(url: str, address: str) -> Any:
    from gradio_client import Client

    return Client(url, headers={"X-Forwarded-For": address}, verbose=False)


def timed_call(c: Any, args: dict[str, Any], retry: float | None) -> tuple[float, int]:
    """(seconds until a reply, refusals met on the way); a refused call is sent again after `retry` seconds."""
    import httpx
    from gradio_client.exceptions import AppError

    start, refused = time.perf_counter(), 0
    while True:
        try:
            c.predict(**args)
            return time.perf_counter() - start, refused
        except (AppError, httpx.HTTPStatusError) as exc:
            busy = (exc.response.status_code == 429 if isinstance(exc, httpx.HTTPStatusError)
                    else BUSY_MESSAGE in str(exc) or FULL_MESSAGE in str(exc))
            if retry is None or not busy:
                raise
            refused += 1
            time.sleep(retry)


def summary(waits: list[float]) -> dict[str, float]:
    return {"mean_s": round(statistics.mean(waits), 3), "median_s": round(statistics.median(waits), 3),
            "max_s": round(max(waits), 3), "n": len(waits)}


def run_setting(args: argparse.Namespace, limit_on: bool) -> dict[str, Any]:
    server = Server(args, "on" if limit_on else "off")
    call = dict(message=MESSAGE, history=[], pack=args.pack, mode=args.mode, max_speakers=args.max_speakers, seed=0,
                api_name="/chat")
    try:
        sixth = client(server.url, SIXTH)
        timed_call(sixth, call, retry=args.retry_after)  # warm: one-off costs of the first call
        alone = [timed_call(sixth, call, retry=args.retry_after)[0] for _ in range(args.calls)]
        stop, counts, lock = threading.Event(), {"ok": 0, "refused": 0}, threading.Lock()

        def flood(i: int) -> None:
            c = client(server.url, f"198.51.100.{1 + i % args.flooder_addresses}")
            while not stop.is_set():
                _, refused = timed_call(c, call, retry=args.retry_after)
                with lock:
                    counts["ok"] += 1
                    counts["refused"] += refused

        threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(args.flooders)]
        for t in threads:
            t.start()
        time.sleep(args.warm_flood)
        flooded, sixth_refused = [], 0
        for _ in range(args.calls):
            wait, refused = timed_call(sixth, call, retry=args.retry_after)
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
    p.add_argument("--mode", default="trained", help="director mode of each /chat call (/chat's default)")
    p.add_argument("--pack", default="emotional-support")
    p.add_argument("--max-speakers", type=int, default=3, help="replies per /chat call (/chat's default)")
    p.add_argument("--retry-after", type=float, default=1.0, help="seconds before a refused call is sent again")
    p.add_argument("--calls", type=int, default=5, help="calls the sixth client times, alone and during the flood")
    p.add_argument("--flooders", type=int, default=5)
    p.add_argument("--flooder-addresses", type=int, default=1, help="1 = one client over all flood connections")
    p.add_argument("--warm-flood", type=float, default=2.0, help="seconds of flood before the sixth client starts")
    p.add_argument("--limits", default="off,on", help="settings to measure: off (as before), on (per-client limit)")
    p.add_argument("--data-dir", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "mascot-chat-flood"))
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the server process
    p.add_argument("--limit", choices=("on", "off"), default="on", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args)
        return
    results = []
    for name in args.limits.split(","):
        result = run_setting(args, limit_on=name.strip() == "on")
        results.append(result)
        print(f"limit {result['limit']:>3}: sixth client alone {result['alone']['mean_s']:.2f} s, during the flood "
              f"{result['during_flood']['mean_s']:.2f} s mean / {result['during_flood']['max_s']:.2f} s max "
              f"(flood served {result['flood_calls_served']}, refused {result['flood_calls_refused']})", flush=True)
    report = {"backend": args.backend if args.backend != "fake" else f"fake ({args.fake_seconds} s per reply)",
              "mode": args.mode, "max_speakers": args.max_speakers, "flooders": args.flooders,
              "retry_after_s": args.retry_after,
              "flooder_addresses": args.flooder_addresses, "calls": args.calls, "results": results,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()}}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
