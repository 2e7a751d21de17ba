"""The app's settings: the engine's `mascot.settings.Settings` plus the server's own fields, read
from environment variables and overridden by `app.py` flags.

Every field has an environment variable `MASCOT_<FIELD>`; defaults run the app offline on the
embedded SmolLM2-135M-Instruct model.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from mascot.errors import ConfigError
from mascot.settings import Settings as EngineSettings


@dataclass
class Settings(EngineSettings):
    """Typed settings for the whole app; built once in `app.py` and passed to every tab."""

    host: str = "127.0.0.1"
    port: int = 7860
    backend: str = "auto"  # auto (llamacpp on CPU, transformers on GPU) | llamacpp | transformers | vllm | openai | fake
    model: str = "embedded"  # "embedded" (SmolLM2-135M-Instruct) or a local path / hub-style name
    dtype: str = "auto"  # auto | bfloat16 | float32
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    pack: str = "emotional-support"
    mode: str = "trained"  # trained | prompted | round-robin | random | manual
    max_speakers: int = 3
    checkpoints_dir: str = "checkpoints"
    runs_dir: str = "runs"  # training output may also go here (the Train tab refuses folders elsewhere)
    max_message_chars: int = 4000
    max_history_turns: int = 200  # most turns the public /chat API accepts as history
    max_upload_mb: int = 20  # largest file any app accepts (Gradio's max_file_size)
    auth: str = ""  # optional "user:password" login on the public chat app at / (annotators' /annotate stays open)
    annotate_only: bool = False  # serve only the annotator page (/ redirects to /annotate/)
    admin_user: str = "admin"  # user name that goes with MASCOT_ADMIN_PASSWORD
    admin_password: str = ""  # MASCOT_ADMIN_PASSWORD: enables the researcher app at /admin
    admin_users_file: str = ""  # or a file of `user:scrypt$...` lines (python -m app.admin_auth add-user)
    warmup: bool = True  # pay the first chat turn's one-off costs in the background at start-up
    trusted_proxies: str = ""  # comma-separated proxy IPs or networks whose X-Forwarded-For is believed; "" = none
    chat_per_client: int = 1  # model calls (/chat and the page's replies) one client address may run at once; 0 = no limit
    chat_max_waiting: int = 8  # model calls running or waiting in all; more are refused with "busy, try again"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.proxy_list()  # a malformed MASCOT_TRUSTED_PROXIES stops the start with its reason
        if self.chat_per_client < 0 or self.chat_max_waiting < 1:
            raise ConfigError("MASCOT_CHAT_PER_CLIENT must be 0 (no limit) or more, and MASCOT_CHAT_MAX_WAITING at "
                              f"least 1 (got {self.chat_per_client} and {self.chat_max_waiting}).")

    def proxy_list(self) -> list[str]:
        """`trusted_proxies` as normalised IP addresses and networks; raises ConfigError on anything else."""
        proxies = []
        for proxy in (p.strip() for p in self.trusted_proxies.split(",") if p.strip()):
            try:
                parsed = ipaddress.ip_network(proxy, strict=False) if "/" in proxy else ipaddress.ip_address(proxy)
            except ValueError:
                raise ConfigError(
                    f"MASCOT_TRUSTED_PROXIES: {proxy!r} is not an IP address or network; list your reverse "
                    "proxy's address, e.g. 127.0.0.1 or 10.0.0.0/8 (a name or '*' would trust any client)."
                ) from None
            proxies.append(str(parsed))
        return proxies

    def auth_pair(self) -> tuple[str, str] | None:
        """`auth` as (user, password); raises ValueError with the expected form when malformed."""
        if not self.auth:
            return None
        user, sep, password = self.auth.partition(":")
        if not sep or not user or not password:
            raise ValueError("MASCOT_AUTH must look like USER:PASSWORD (both non-empty).")
        return user, password
