"""Chat tab: talk with the companion group. UI wiring only; the engine is `mascot.group.chat.GroupChat`.

Per-session state (dialogue, the session's copy of the persona pack, seeds) lives in `gr.State`;
the model is loaded once per process and shared through the `Engine`.
"""

from __future__ import annotations

import html
import logging
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gradio as gr

from app.chat_limits import ChatLimits, stop_flag
from app.chat_render import render
from app.public_input import clean_history, load_public_pack, registered_packs
from app.settings import Settings
from mascot.errors import MascotError
from mascot.group.chat import CrisisEvent, DirectiveEvent, TokenEvent, TurnEvent, validate_message
from mascot.group.dialogue import Dialogue, Directive
from mascot.group.director import DIRECTOR_MODES
from mascot.group.engine import Engine
from mascot.group.personas import PersonaPack, list_packs, pack_from_dict
from mascot.group.transcripts import to_json, to_markdown
from mascot.settings import REPLY_MODES

log = logging.getLogger(__name__)

MODE_HELP = {
    "trained": "trained director adapter (prompted if none is shipped)",
    "prompted": "base model prompted as director",
    "round-robin": "personas take turns in order",
    "random": "random speakers (MASCOT-C ablation)",
    "manual": "you pick who replies (or write @Name)",
}


@dataclass
class ChatSession:
    """Everything one browser session owns; deep-copied per session by gr.State."""

    pack: PersonaPack
    dialogue: Dialogue = field(default_factory=Dialogue)
    seed: int = 0  # seed of the current (last) group turn; regenerate reuses it
    turns_sent: int = 0
    session_id: str = field(default_factory=lambda: f"s{random.getrandbits(40):010x}")
    replies: str = "fast"  # fast | careful (best of N by the acceptability scorer)
    # the adapters' live version this conversation keeps (Engine.put_live); None until its first message
    live_version: int | None = None


def stop_key(session: ChatSession, request: gr.Request | None = None) -> str:
    """Which stream a Stop click ends (gr.State copies share an id, so prefer the browser's session hash)."""
    return getattr(request, "session_hash", None) or session.session_id


# ------------------------------------------------------------------ handlers
class ChatHandlers:
    """Event handlers, kept free of layout so tests can call them directly."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.registered = registered_packs(settings)
        self.limits = ChatLimits(settings.chat_per_client, settings.chat_max_waiting)  # model calls per client
        # Stop flags of the streams running now (threading.Event cannot live in gr.State, which is deep-copied);
        # a flag is removed when its stream ends.
        self._stop_flags: dict[str, threading.Event] = {}

    def new_session(self, pack_name: str | None = None) -> ChatSession:
        default = next(iter(self.registered), self.settings.pack)
        pack = load_public_pack(pack_name or default, self.registered).copy()
        self.engine.attach_adapters(pack)
        return ChatSession(pack=pack, replies=self.settings.replies)

    def _group(self, session: ChatSession, mode: str, max_speakers: int, use_adapters: bool):
        if session.live_version is None:  # the conversation's first message: it keeps the run live now
            session.live_version = self.engine.live.current.version
        return self.engine.group(session.pack.active, mode, replies=session.replies, version=session.live_version,
                                 max_speakers=int(max_speakers),
                                 use_adapters=use_adapters, max_message_chars=self.settings.max_message_chars,
                                 concern_opener=session.pack.concern_opener, stems=self.settings.stems)

    def set_replies(self, replies: str, session: ChatSession) -> tuple[ChatSession, str]:
        """Switch this session between fast replies and careful ones (best of N by the acceptability scorer)."""
        if replies not in REPLY_MODES:
            raise gr.Error(f"Unknown replies setting {replies!r}: use one of {', '.join(REPLY_MODES)}.")
        return replace(session, replies=replies), self.status(replace(session, replies=replies))

    def submit(self, text: str, session: ChatSession) -> tuple[Any, list[dict[str, Any]], ChatSession, str | None, str]:
        """Validate the message; on success show it at once and keep it pending for `respond`.

        A rejected message stays in the box (nothing is lost or sent) and the notice says why."""
        try:
            clean = validate_message(text, self.settings.max_message_chars)
            if not session.pack.active:
                raise MascotError("No persona is switched on: turn at least one on in the Group panel.")
        except MascotError as exc:
            gr.Warning(str(exc), title="Message not sent")
            return gr.update(), render(session), session, None, f"⚠️ **Message not sent.** {html.escape(str(exc))}"
        session.turns_sent += 1
        session.seed = session.turns_sent * 1000 + 7
        preview = render(session) + [{"role": "user", "content": html.escape(clean)}]
        return "", preview, session, clean, ""

    def restore_unsent(self, pending_text: str | None, session: ChatSession) -> tuple[Any, list[dict[str, Any]]]:
        """After a failed `respond` (busy, server full): a message that never reached the dialogue goes back into
        the box and leaves the chat, so nobody retypes it."""
        sent = [t.text for t in session.dialogue.turns if t.is_user][-1:] == [pending_text]
        return (gr.update(), gr.update()) if not pending_text or sent else (pending_text, render(session))

    def respond(self, pending_text: str | None, session: ChatSession, mode: str, max_speakers: int,
                manual_pick: list[str] | None, use_adapters: bool,
                request: gr.Request | None = None) -> Iterator[tuple[list[dict[str, Any]], ChatSession]]:
        """Stream the group's replies to the pending message (nothing when it was rejected)."""
        if not pending_text:
            return
        yield from self._stream(pending_text, session, mode, max_speakers, manual_pick, use_adapters, request)

    def _stream(self, pending_text: str | None, session: ChatSession, mode: str, max_speakers: int,
                manual_pick: list[str] | None, use_adapters: bool,
                request: gr.Request | None) -> Iterator[tuple[list[dict[str, Any]], ChatSession]]:
        """Run the group (pending_text None = regenerate the last group turn), yielding renders."""
        with stop_flag(self._stop_flags, stop_key(session, request)) as flag, self.limits.hold(request):
            yield from self._run_group(pending_text, session, mode, max_speakers, manual_pick, use_adapters, flag)

    def _run_group(self, pending_text: str | None, session: ChatSession, mode: str, max_speakers: int,
                   manual_pick: list[str] | None, use_adapters: bool,
                   flag: threading.Event) -> Iterator[tuple[list[dict[str, Any]], ChatSession]]:
        try:
            group = self._group(session, mode, max_speakers, use_adapters)
        except MascotError as exc:
            raise gr.Error(str(exc)) from exc
        forced = [n for n in (manual_pick or []) if n in {p.name for p in group.roster}] if mode == "manual" else []
        directive: tuple[Directive, str] | None = None
        try:
            for e in group.respond(session.dialogue, pending_text, seed=session.seed, forced=forced, stop=flag,
                                   session_id=session.session_id):
                if isinstance(e, DirectiveEvent):
                    d = e.decision.directive
                    directive = (d, e.decision.source) if d is not None else None
                    if d is not None:
                        yield render(session, pending_directive=directive, pending=(d.speaker, "")), session
                elif isinstance(e, TokenEvent):
                    yield render(session, pending_directive=directive, pending=(e.speaker, e.text)), session
                elif isinstance(e, (TurnEvent, CrisisEvent)):
                    directive = None
                    yield render(session), session
        except MascotError as exc:
            raise gr.Error(str(exc)) from exc
        yield render(session), session

    def regenerate(self, session: ChatSession, mode: str, max_speakers: int, manual_pick: list[str] | None,
                   use_adapters: bool, new_draw: bool = False,
                   request: gr.Request | None = None) -> Iterator[tuple[list[dict[str, Any]], ChatSession]]:
        if session.dialogue.last_user_index() < 0:
            raise gr.Error("Nothing to regenerate yet: send a message first.")
        if new_draw:
            session.seed = random.randrange(1, 2**31)
        yield from self._stream(None, session, mode, max_speakers, manual_pick, use_adapters, request)

    def stop(self, session: ChatSession, request: gr.Request | None = None) -> None:
        flag = self._stop_flags.get(stop_key(session, request))
        if flag is not None:  # nothing to stop when no stream is running
            flag.set()

    def clear(self, session: ChatSession) -> tuple[list[dict[str, Any]], ChatSession]:
        session.dialogue = Dialogue()
        session.live_version = None  # the next conversation takes the run live when it starts
        return [], session

    def export(self, session: ChatSession, fmt: str, mode: str) -> str:
        """Write the transcript to a temporary file and return its path for download."""
        if not session.dialogue.turns:
            raise gr.Error("The conversation is empty: nothing to export.")
        out_dir = Path(tempfile.mkdtemp(prefix="mascot-export-"))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if fmt == "json":
            path = out_dir / f"mascot-chat-{stamp}.json"
            path.write_text(to_json(session.dialogue, session.pack, mode=mode), encoding="utf-8")
        else:
            path = out_dir / f"mascot-chat-{stamp}.md"
            path.write_text(to_markdown(session.dialogue, session.pack), encoding="utf-8")
        return str(path)

    # -- group panel
    def change_pack(self, pack_name: str, session: ChatSession) -> tuple[Any, ...]:
        try:
            session = self.new_session(pack_name)
        except MascotError as exc:
            raise gr.Error(str(exc)) from exc
        return (session, [], *self._panel_updates(session))

    def _panel_updates(self, session: ChatSession) -> tuple[Any, ...]:
        names = [p.name for p in session.pack.personas]
        active = [p.name for p in session.pack.active]
        return (
            gr.update(choices=names, value=active),
            gr.update(choices=active, value=[]),
            gr.update(choices=names, value=names[0] if names else None),
            gr.update(samples=[[s] for s in session.pack.starters]),
            self.status(session),
        )

    def toggle_personas(self, chosen: list[str], session: ChatSession) -> tuple[ChatSession, Any, str]:
        for p in session.pack.personas:
            p.enabled = p.name in (chosen or [])
        if not session.pack.active:
            gr.Warning("Every persona is off: switch at least one on to chat.")
        return session, gr.update(choices=[p.name for p in session.pack.active], value=[]), self.status(session)

    def persona_fields(self, name: str, session: ChatSession) -> tuple[str, ...]:
        p = next((x for x in session.pack.personas if x.name == name), None)
        if p is None:
            return ("", "", "", "", "", "", "")
        return (p.name, p.role, p.goal, "\n".join(p.behaviours), "\n".join(p.avoid), p.style, "\n".join(p.examples))

    def save_persona(self, original: str, name: str, role: str, goal: str, behaviours: str, avoid: str, style: str,
                     examples: str, as_new: bool, session: ChatSession) -> tuple[Any, ...]:
        """Edit a persona (or add a new one) for this session only, validated like a pack file."""
        lines = lambda s: [x.strip(" -•\t") for x in (s or "").splitlines() if x.strip()]  # noqa: E731
        personas = [p.to_dict() for p in session.pack.personas]
        edited = {"name": (name or "").strip(), "role": (role or "").strip(), "goal": (goal or "").strip(),
                  "behaviours": lines(behaviours), "avoid": lines(avoid), "style": (style or "").strip(),
                  "examples": lines(examples)}
        if as_new:
            edited.update(color="#475569", avatar="✨")
            personas.append(edited)
        else:
            idx = next((i for i, p in enumerate(personas) if p["name"] == original), None)
            if idx is None:
                raise gr.Error(f"Pick a persona to edit first (no persona named {original!r}).")
            personas[idx].update(edited)
        try:
            new_pack = pack_from_dict({"name": session.pack.name, "title": session.pack.title, "setting": session.pack.setting,
                                       "description": session.pack.description, "starters": session.pack.starters,
                                       "personas": personas}, source="the persona editor")
        except MascotError as exc:
            raise gr.Error(str(exc), title="Persona not saved") from exc
        # Only this session's copy changes: no adapter is loaded into (and no warning added to) the shared engine.
        session.pack = new_pack
        gr.Info(f"{edited['name']} {'added' if as_new else 'updated'} for this session.")
        return (session, *self._panel_updates(session))

    def api_chat(self, message: str, history: list[dict] | None = None, pack: str = "emotional-support",
                 mode: str = "trained", max_speakers: int = 3, seed: int = 0, request: gr.Request | None = None) -> list[dict]:
        """Stateless API: send `message` after `history` (turn dicts as returned here); returns the whole
        dialogue as a list of turns `{speaker, text, directive, meta}`. `pack` is a bundled pack's name. Replies
        follow the server's settings (`MASCOT_REPLIES`, `MASCOT_STEMS`), as on a new chat page."""
        with self.limits.hold(request):  # one call per client at a time (app/chat_limits.py)
            try:
                p = load_public_pack(pack, self.registered)
                self.engine.attach_adapters(p)
                dialogue = Dialogue(turns=clean_history(history, self.settings.max_history_turns,
                                                        self.settings.max_message_chars))
                # the server's reply mode and stems, as a new chat page gets them: one group for page and API users
                group = self.engine.group(p.active, mode, replies=self.settings.replies, max_speakers=int(max_speakers),
                                          max_message_chars=self.settings.max_message_chars,
                                          concern_opener=p.concern_opener, stems=self.settings.stems)
                group.run(dialogue, message, seed=int(seed))
            except (MascotError, KeyError, TypeError, ValueError) as exc:
                raise gr.Error(str(exc)) from exc
        return [t.to_dict() for t in dialogue.turns]

    def status(self, session: ChatSession) -> str:
        info = self.engine.backend.info()
        lines = [f"**Model:** {html.escape(info.model)} · {info.kind} · {info.device} {info.dtype}"]
        live = self.engine.live.get(session.live_version)
        loaded = self.engine.backend.adapters
        trained = [p.name for p in session.pack.personas if live.speaker_adapter(p) in loaded]
        lines.append("**Trained speakers:** " + (", ".join(trained) if trained else "none (prompted base model)"))
        lines.append("**Director adapter:** " + ("loaded" if live.director_adapter in loaded else "none"))
        lines.append(f"**Live run:** {html.escape(live.label)}")
        selector, note = self.engine.selector() if session.replies == "careful" else (None, "")
        lines.append(f"⚠️ {html.escape(note)} Showing the first draw." if note else
                     f"**Replies:** {session.replies}" + (f", best of {self.engine.careful_best_of}" if selector else ""))
        fell_back = self.engine.fallbacks.get(session.pack.name, [])
        if fell_back:  # names only: the paths and reasons are in the server log
            lines.append(f"⚠️ {html.escape(', '.join(fell_back))}: trained adapter not loaded, "
                         "running on the prompted base model (details in the server log).")
        return "  \n".join(lines)


# ------------------------------------------------------------------ layout
def render_chat_tab(engine: Engine, settings: Settings) -> ChatHandlers:
    """Build the chat tab inside the current Blocks context and wire its events."""
    h = ChatHandlers(engine, settings)
    first = h.new_session()
    state = gr.State(first)
    pending = gr.State(None)
    mode_choices = [(f"{m} — {MODE_HELP[m]}", m) for m in DIRECTOR_MODES]
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            chatbot = gr.Chatbot(label="Companion group", height=560, group_consecutive_messages=False,
                                 elem_id="chatbot", buttons=["copy"], feedback_options=None,
                                 placeholder="Say what's on your mind — the group will answer together.")
            with gr.Row():
                msg = gr.Textbox(placeholder="Type a message (Enter to send, @Name to address a persona)",
                                 show_label=False, scale=6, max_lines=6, elem_id="msg", autofocus=True)
                send = gr.Button("Send", variant="primary", scale=1, elem_id="send")
                stop = gr.Button("Stop", variant="stop", scale=1, elem_id="stop")
            with gr.Row():
                regen = gr.Button("↻ Regenerate", size="sm", elem_id="regenerate")
                redraw = gr.Button("🎲 New draw", size="sm", elem_id="new-draw")
                clear = gr.Button("🗑 Clear", size="sm", elem_id="clear")
                export_json = gr.Button("⬇ JSON", size="sm", elem_id="export-json")
                export_md = gr.Button("⬇ Markdown", size="sm", elem_id="export-md")
            notice = gr.Markdown("", elem_id="notice")
            export_file = gr.File(label="Transcript", visible=False, interactive=False, height=60)
            starters = gr.Dataset(components=[msg], samples=[[s] for s in first.pack.starters], label="Scenario starters",
                                  elem_id="starters")
        with gr.Column(scale=1, min_width=280):
            gr.Markdown("### Group")
            pack_dd = gr.Dropdown([*list_packs(), *h.registered], value=first.pack.name, label="Persona pack", elem_id="pack")
            personas_cb = gr.CheckboxGroup([p.name for p in first.pack.personas], value=[p.name for p in first.pack.active],
                                           label="Personas on", elem_id="personas")
            mode = gr.Radio(mode_choices, value=settings.mode if settings.mode in DIRECTOR_MODES else "trained",
                            label="Director", elem_id="mode")
            max_speakers = gr.Slider(1, 4, value=settings.max_speakers, step=1, label="Most replies per message")
            manual_pick = gr.CheckboxGroup([p.name for p in first.pack.active], label="Who replies next (manual mode)")
            use_adapters = gr.Checkbox(value=True, label="Use trained speaker adapters")
            replies = gr.Radio([("fast — the first draw", "fast"), (f"careful — best of {settings.careful_best_of} by "
                                "the acceptability scorer", "careful")], value=first.replies, label="Replies", elem_id="replies")
            with gr.Accordion("Edit or add a persona (this session)", open=False):
                edit_pick = gr.Dropdown([p.name for p in first.pack.personas], value=first.pack.personas[0].name, label="Persona")
                v = h.persona_fields(first.pack.personas[0].name, first)
                e_name = gr.Textbox(v[0], label="Name")
                e_role = gr.Textbox(v[1], label="Role")
                e_goal = gr.Textbox(v[2], label="Goal", lines=2)
                e_beh = gr.Textbox(v[3], label="Behaviours (one per line)", lines=3)
                e_avoid = gr.Textbox(v[4], label="Must not (one per line)", lines=2)
                e_style = gr.Textbox(v[5], label="Style")
                e_ex = gr.Textbox(v[6], label="Example lines (one per line)", lines=2)
                with gr.Row():
                    e_save = gr.Button("Save changes", size="sm")
                    e_add = gr.Button("Add as new persona", size="sm")
            status = gr.Markdown(lambda: h.status(first), elem_id="status")  # read at each page load

    settings_inputs = [mode, max_speakers, manual_pick, use_adapters]
    submit_args = dict(fn=h.submit, inputs=[msg, state], outputs=[msg, chatbot, state, pending, notice], queue=False)
    respond_args = dict(fn=h.respond, inputs=[pending, state, *settings_inputs], outputs=[chatbot, state])
    restore_args = dict(fn=h.restore_unsent, inputs=[pending, state], outputs=[msg, chatbot], queue=False)
    msg.submit(**submit_args).then(**respond_args).failure(**restore_args)
    send.click(**submit_args).then(**respond_args).failure(**restore_args)
    stop.click(h.stop, [state], None, queue=False)

    def regenerate(s: ChatSession, m: str, k: int, pick: list[str], ad: bool, request: gr.Request):
        yield from h.regenerate(s, m, k, pick, ad, False, request)

    def new_draw(s: ChatSession, m: str, k: int, pick: list[str], ad: bool, request: gr.Request):
        yield from h.regenerate(s, m, k, pick, ad, True, request)

    regen.click(regenerate, [state, *settings_inputs], [chatbot, state])
    redraw.click(new_draw, [state, *settings_inputs], [chatbot, state])
    clear.click(h.clear, [state], [chatbot, state], queue=False)
    export_json.click(lambda s, m: gr.update(value=h.export(s, "json", m), visible=True), [state, mode], [export_file])
    export_md.click(lambda s, m: gr.update(value=h.export(s, "md", m), visible=True), [state, mode], [export_file])
    starters.click(lambda x: x[0], [starters], [msg], queue=False)
    panel = [personas_cb, manual_pick, edit_pick, starters, status]
    pack_dd.change(h.change_pack, [pack_dd, state], [state, chatbot, *panel])
    personas_cb.input(h.toggle_personas, [personas_cb, state], [state, manual_pick, status])
    replies.input(h.set_replies, [replies, state], [state, status])
    edit_fields = [e_name, e_role, e_goal, e_beh, e_avoid, e_style, e_ex]
    edit_pick.change(h.persona_fields, [edit_pick, state], edit_fields)
    e_save.click(lambda *a: h.save_persona(*a[:-1], False, a[-1]), [edit_pick, *edit_fields, state], [state, *panel])
    e_add.click(lambda *a: h.save_persona(*a[:-1], True, a[-1]), [edit_pick, *edit_fields, state], [state, *panel])
    gr.api(h.api_chat, api_name="chat")
    return h
