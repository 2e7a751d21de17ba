"""`python -m mascot chat`: talk with the group from a terminal.

With `--message` it answers one message and exits (`--json` prints one JSON object per turn:
{"speaker", "directive", "text"}); without it, an interactive chat (`/quit` to leave, `/clear`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from mascot.group.chat import CrisisEvent, DirectiveEvent, GroupChat, TokenEvent, TurnEvent
from mascot.group.dialogue import Dialogue
from mascot.group.director import DIRECTOR_MODES
from mascot.group.engine import Engine, EngineConfig, live_detector
from mascot.group.personas import load_pack
from mascot.group.prompts import SPEAKER_STYLES
from mascot.group.speaker import check_best_of


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--message", "-m", help="one user message; omit for an interactive chat")
    p.add_argument("--pack", default="emotional-support", help="persona pack name or YAML path")
    p.add_argument("--personas", help="comma-separated persona names to switch on (default: the pack's defaults)")
    p.add_argument("--mode", default="trained", help=f"director mode: {', '.join(DIRECTOR_MODES)}")
    p.add_argument("--max-speakers", type=int, default=3, help="most personas that reply to one message")
    p.add_argument("--style", default="persona", help=f"speaker prompt style: {', '.join(SPEAKER_STYLES)}")
    p.add_argument("--backend", default="auto", help="auto (llamacpp on CPU, transformers on GPU) | llamacpp | transformers | vllm | openai | fake")
    p.add_argument("--model", default="embedded", help="'embedded', a local model folder, or a cached hub name")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible server (openai backend)")
    p.add_argument("--checkpoints-dir", default="checkpoints")
    p.add_argument("--run", default=None, help="checkpoint run to load adapters from (default: tiny-cpu / newest)")
    p.add_argument("--no-adapters", action="store_true", help="ask the backend for no adapter: every persona on the "
                   "prompted base model, and the trained director mode replaced by the prompted one")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replies", choices=("fast", "careful"), default=None,
                   help="fast: the first draw; careful: the best of N draws by the acceptability scorer "
                        "(default: MASCOT_REPLIES, else careful)")
    p.add_argument("--best-of", type=int, default=None,
                   help="draws per turn for careful replies, 1 to 8 (default: MASCOT_CAREFUL_BEST_OF, else 3)")
    p.add_argument("--stems", action=argparse.BooleanOptionalAction, default=None,
                   help="start replies from the persona's opening words (default: MASCOT_STEMS, else on)")
    p.add_argument("--json", action="store_true", help="print one JSON object per turn")


def build_group(args: argparse.Namespace) -> GroupChat:
    pack = load_pack(args.pack)
    if args.personas:
        wanted = [n.strip() for n in args.personas.split(",") if n.strip()]
        chosen = {pack.get(n).name for n in wanted}
        for p in pack.personas:
            p.enabled = p.name in chosen
    settings = args.settings
    config = EngineConfig.from_settings(settings, backend=args.backend, model=args.model, base_url=args.base_url,
                                        checkpoints_dir=args.checkpoints_dir, run=args.run)
    best_of = settings.careful_best_of if args.best_of is None else check_best_of(args.best_of)
    engine = Engine.load(config, safety=live_detector(settings), llm_safety_judge=settings.safety_llm_judge,
                         careful_best_of=best_of)
    mode = args.mode
    if args.no_adapters and mode == "trained":  # the trained director is an adapter too
        print("warning: --no-adapters: the director runs prompted (the trained director needs its adapter)",
              file=sys.stderr)
        mode = "prompted"
    # --no-adapters: nothing is asked of the backend (an OpenAI-compatible server may have no adapter to load)
    attached = [] if args.no_adapters else engine.attach_adapters(pack)
    for w in attached:
        print(f"warning: {w}", file=sys.stderr)
    replies = args.replies or settings.replies
    if replies == "careful" and engine.selector()[0] is None:
        print(f"warning: {engine.selector()[1]}", file=sys.stderr)
    return engine.group(pack.active, mode, replies=replies, max_speakers=args.max_speakers, speaker_style=args.style,
                        use_adapters=not args.no_adapters, concern_opener=pack.concern_opener,
                        stems=settings.stems if args.stems is None else args.stems)


def run_message(group: GroupChat, dialogue: Dialogue, text: str, seed: int, as_json: bool, out: TextIO) -> None:
    """Answer one message, printing turns as JSON lines or streaming them as text."""
    directive = None
    printed = 0
    for e in group.respond(dialogue, text, seed=seed):
        if isinstance(e, DirectiveEvent):
            directive = e.decision.directive
            if not as_json and directive is not None:
                out.write(f"\n[{directive.speaker} · {directive.action} · {directive.tone}]\n{directive.speaker}: ")
                printed = 0
        elif isinstance(e, TokenEvent) and not as_json:
            out.write(e.text[printed:])
            printed = len(e.text)
            out.flush()
        elif isinstance(e, (TurnEvent, CrisisEvent)):
            t = e.turn
            if as_json:
                d = t.directive.__dict__ if t.directive else None
                out.write(json.dumps({"speaker": t.speaker, "directive": d, "text": t.text}, ensure_ascii=False) + "\n")
            elif isinstance(e, CrisisEvent):
                out.write(f"\n{t.speaker}: {t.text}\n")
            else:
                out.write(t.text[printed:] + "\n")
    out.flush()


def main(args: argparse.Namespace) -> int:
    group = build_group(args)
    dialogue = Dialogue()
    if args.message is not None:
        run_message(group, dialogue, args.message, args.seed, args.json, sys.stdout)
        return 0
    print(f"Chatting with {', '.join(p.name for p in group.roster)}. /clear resets, /quit leaves.")
    turn = 0
    while True:
        try:
            text = input("\nyou> ")
        except EOFError:
            return 0
        if text.strip() in ("/quit", "/exit"):
            return 0
        if text.strip() == "/clear":
            dialogue = Dialogue()
            continue
        if not text.strip():
            print("(empty message: nothing sent)")
            continue
        turn += 1
        try:
            run_message(group, dialogue, text, args.seed + turn, args.json, sys.stdout)
        except Exception as exc:  # keep the session alive on a bad message
            from mascot.errors import MascotError

            if not isinstance(exc, MascotError):
                raise
            print(f"error: {exc}")
