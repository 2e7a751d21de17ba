"""The LLM judge: any OpenAI-compatible chat endpoint (GPT-4o, or a model behind `vllm serve`).

One rubric prompt per reply at temperature 0; transient failures (connection errors, 429, 5xx)
are retried with exponential back-off; every verdict the judge actually answered, valid or not,
is cached in SQLite keyed by a hash of model + prompt, so a restarted run resumes where it stopped.
Configuration comes from arguments; the CLIs fill them from `mascot.settings.Settings`
(MASCOT_JUDGE_BASE_URL, else $OPENAI_BASE_URL, else http://127.0.0.1:8000/v1; MASCOT_JUDGE_MODEL, default
gpt-4o; MASCOT_JUDGE_API_KEY, else $OPENAI_API_KEY; MASCOT_JUDGE_CACHE, default <cache dir>/judge_cache.sqlite).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx

from mascot.errors import ConfigError
from mascot.files.model_files import default_cache_dir
from mascot.judges.base import Judge, JudgeItem, Verdict
from mascot.judges.rubric import PROMPT_VERSION, parse_verdict, rubric_messages

log = logging.getLogger(__name__)

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class VerdictCache:
    """SQLite store of judge answers keyed by a hash of (model, prompt); owns its schema."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.db = sqlite3.connect(str(self.path), check_same_thread=False)
        with self.db:
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, model TEXT, verdict TEXT, created REAL)"
            )

    @staticmethod
    def key(model: str, messages: list[dict[str, str]]) -> str:
        blob = json.dumps({"model": model, "prompt": messages, "version": PROMPT_VERSION}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def get(self, key: str, cls: type[Verdict] = Verdict) -> Verdict | None:
        with self._lock:
            row = self.db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
        return cls.from_dict(json.loads(row[0])) if row else None

    def put(self, key: str, model: str, verdict: Verdict) -> None:
        with self._lock, self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO verdicts (key, model, verdict, created) VALUES (?, ?, ?, ?)",
                (key, model, json.dumps(verdict.to_dict(), ensure_ascii=False), time.time()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self.db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def close(self) -> None:
        self.db.close()


class LLMJudge(Judge):
    """Rubric judge over an OpenAI-compatible `/chat/completions` endpoint."""

    name = "llm"
    verdict_cls: type[Verdict] = Verdict

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        cache_path: str | Path | None = None,
        max_workers: int = 4,
        max_retries: int = 4,
        backoff: float = 1.0,
        timeout: float = 60.0,
        max_tokens: int = 200,
        json_mode: bool = False,
    ) -> None:
        self.base_url = (base_url or "http://127.0.0.1:8000/v1").rstrip("/")
        self.model = model or "gpt-4o"
        api_key = api_key or "EMPTY"
        if max_workers < 1 or max_retries < 0:
            raise ConfigError(f"max_workers must be >= 1 and max_retries >= 0 (got {max_workers}, {max_retries}).")
        self.max_workers, self.max_retries, self.backoff = max_workers, max_retries, backoff
        self.max_tokens, self.json_mode = max_tokens, json_mode
        self.cache = VerdictCache(cache_path or default_cache_dir() / "judge_cache.sqlite")
        self.client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {api_key}"})
        self.stats: Counter[str] = Counter()

    def describe(self) -> str:
        return f"llm ({self.model} at {self.base_url})"

    def messages_for(self, item: object) -> list[dict[str, str]]:
        """The judge chat for one item (subclasses judge other things with the same machinery)."""
        return rubric_messages(item)  # type: ignore[arg-type]

    def parse(self, content: str) -> Verdict:
        return parse_verdict(content)

    def score_batch(self, items: list[JudgeItem]) -> list[Verdict]:
        return self.score_prompts([self.messages_for(it) for it in items])

    def score_prompts(self, chats: list[list[dict[str, str]]]) -> list[Verdict]:
        """Verdicts for ready-made judge chats: cache first, identical prompts asked once, in parallel."""
        items = chats
        keys = [VerdictCache.key(self.model, c) for c in chats]
        out: list[Verdict | None] = [None] * len(items)
        todo: dict[str, list[int]] = {}  # identical prompts are asked once
        for i, k in enumerate(keys):
            hit = self.cache.get(k, self.verdict_cls)
            if hit is not None:
                hit.meta["cached"] = True
                out[i] = hit
                self.stats["cache_hits"] += 1
            else:
                todo.setdefault(k, []).append(i)
        if todo:
            with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
                futures = {pool.submit(self._ask, chats[idx[0]]): k for k, idx in todo.items()}
                for fut in as_completed(futures):
                    k = futures[fut]
                    verdict, answered = fut.result()
                    if answered:  # the judge replied: cache valid and malformed answers alike
                        self.cache.put(k, self.model, verdict)
                    for i in todo[k]:
                        out[i] = verdict
        return [v if v is not None else self.verdict_cls.invalid("not scored") for v in out]

    def _ask(self, messages: list[dict[str, str]]) -> tuple[Verdict, bool]:
        """One judge call with retries; returns (verdict, whether the judge actually answered)."""
        payload: dict[str, object] = {"model": self.model, "messages": messages, "temperature": 0, "max_tokens": self.max_tokens}
        if self.json_mode:
            payload["response_format"] = {"type": "json_object"}
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.stats["retries"] += 1
                time.sleep(min(30.0, self.backoff * 2 ** (attempt - 1)))
            try:
                self.stats["requests"] += 1
                r = self.client.post(f"{self.base_url}/chat/completions", json=payload)
            except httpx.HTTPError as exc:  # connection refused, timeout, ...
                last = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code in RETRY_STATUS:
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                continue
            if r.status_code >= 400:
                self.stats["invalid"] += 1
                return self.verdict_cls.invalid(f"judge endpoint refused the request: HTTP {r.status_code}: {r.text[:300]}"), False
            try:
                content = r.json()["choices"][0]["message"]["content"] or ""
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                self.stats["invalid"] += 1
                return self.verdict_cls.invalid(f"not an OpenAI chat completion response ({exc!r})", r.text[:500]), False
            verdict = self.parse(content)
            self.stats["valid" if verdict.valid else "invalid"] += 1
            return verdict, True
        self.stats["invalid"] += 1
        log.warning("judge call failed after %d attempts: %s", self.max_retries + 1, last)
        return self.verdict_cls.invalid(f"gave up after {self.max_retries + 1} attempts: {last}"), False

    def close(self) -> None:
        self.client.close()
        self.cache.close()
