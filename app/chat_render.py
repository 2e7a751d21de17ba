"""How the chat tab shows a dialogue in its `gr.Chatbot`: each persona's name, avatar and role, the director's
directive as a collapsible note, the crisis reply under its own label, and an in-progress reply. Every text is
HTML-escaped here, so nothing a user or a model writes renders as markup.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from mascot.group.dialogue import Directive
from mascot.group.personas import Persona, PersonaPack
from mascot.safety.responses import CRISIS_SPEAKER

if TYPE_CHECKING:
    from app.chat_tab import ChatSession


def _persona_label(p: Persona | None, name: str) -> str:
    if name == CRISIS_SPEAKER:
        return '<span style="color:#b91c1c;font-weight:700">🛟 Safety</span>'
    if p is None:
        return f"<b>{html.escape(name)}</b>"
    return (f'<span class="persona-name" style="color:{html.escape(p.color)};font-weight:700">'
            f"{html.escape(p.avatar)} {html.escape(p.name)}</span> <small>· {html.escape(p.role)}</small>")


def _directive_message(d: Directive, source: str = "") -> dict[str, Any]:
    via = f" ({source})" if source and source not in ("prompted", "trained") else ""
    return {"role": "assistant", "content": f"**Action:** {html.escape(d.action)}  \n**Tone:** {html.escape(d.tone)}",
            "metadata": {"title": f"🎬 Director → {html.escape(d.speaker)}{via}", "status": "done"}}


def _persona_message(pack: PersonaPack, speaker: str, text: str, pending: bool = False) -> dict[str, Any]:
    p = next((x for x in pack.personas if x.name == speaker), None)
    body = html.escape(text) + (" ▍" if pending else "")
    return {"role": "assistant", "content": f"{_persona_label(p, speaker)}\n\n{body}"}


def render(session: ChatSession, pending: tuple[str, str] | None = None,
           pending_directive: tuple[Directive, str] | None = None) -> list[dict[str, Any]]:
    """Chatbot messages for the dialogue (plus an in-progress reply). All text is HTML-escaped."""
    msgs: list[dict[str, Any]] = []
    for t in session.dialogue.turns:
        if t.is_user:
            msgs.append({"role": "user", "content": html.escape(t.text)})
            continue
        if t.directive is not None:
            msgs.append(_directive_message(t.directive, str(t.meta.get("source", ""))))
        msgs.append(_persona_message(session.pack, t.speaker, t.text + (" ⏹" if t.meta.get("stopped") else "")))
    if pending_directive is not None:
        msgs.append(_directive_message(*pending_directive))
    if pending is not None:
        msgs.append(_persona_message(session.pack, pending[0], pending[1], pending=True))
    return msgs
