"""The annotator page: a standalone Blocks for blind A/B votes, mounted at /annotate.

Open as `/annotate/?study=ID&key=LINK_KEY&annotator=ID` (the link the Studies tab or `python -m annotation link`
shows; Prolific's PROLIFIC_PID and STUDY_ID work too). A new annotator id needs the study's link key; without the
annotator part the page asks for the id. The browser only ever receives masked dialogue text and progress; the
assignment token lives in server-side `gr.State`, and the store maps "Response A/B" back to systems. Wiring only:
all logic is in `annotation/`.

Identity: before its first request the page stores a random browser id in localStorage (BROWSER_JS), so even a
first load that timed out resumes on reload; the store binds an annotator id to the first browser that uses it and
tells any other browser to ask the study owner to release the id (the Studies tab's Release button). Keys issued
by earlier versions (kept through `gr.BrowserState`) still resume. Events only work after the page's own load
event has opened a page session on the server (a bare API call has none).
Keys: 1 = A better, 2 = B better, 3 = tie, 4 = both bad.
"""

from __future__ import annotations

import html
import re
import secrets
from typing import Any
from urllib.parse import quote

import gradio as gr

from annotation.errors import AnnotationError, AnnotatorInUse, InvalidInput, StudyNotFound
from annotation.identity import MAX_ANNOTATOR_CHARS, annotator_key
from annotation.models import CRITERIA
from annotation.schemas import Finished, Ratings, Task, Turn
from annotation.store import StudyStore
from annotation.voting import HOLD_EXPIRED_MESSAGE, MAX_COMMENT_CHARS
from app.annotate_text import (
    ASK_ID_MESSAGE,
    BROWSER_ENTRY,
    BROWSER_JS,
    INVALID_STUDY_MESSAGE,
    NO_PAGE_MESSAGE,
    NO_STUDY_MESSAGE,
    NO_WORK,
    PAGE_JS,
)
from app.settings import Settings

USER_SPEAKERS = {"user", "seeker", "human", "client", "you", "patient"}
CRITERION_LABELS = {
    "helpfulness": "Helpfulness",
    "emotional_appropriateness": "Emotional appropriateness",
    "perceived_safety": "Perceived safety",
}
VOTES = (
    ("A", "A is better  [1]", "vote-a"),
    ("B", "B is better  [2]", "vote-b"),
    ("tie", "Tie  [3]", "vote-tie"),
    ("both_bad", "Both are bad  [4]", "vote-bad"),
)
BROWSER_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")
RATING_CHOICES = ["1", "2", "3", "4", "5"]
KEYS_STORAGE = "annotate-session-keys"  # localStorage entry holding this browser's annotator keys
MAX_KEYS = 20  # keys kept per browser (one per study and annotator id used in it)
MARKUP_CHARACTERS = re.compile(r"([\\`*_\[\]<>&~$|])")  # what starts a tag, entity, link, code span or markup
RATING_KEYS = tuple(f"{k}_{s}" for k in CRITERIA for s in "ab")  # s: shown side, a = Response A (left)
# Handlers take `c`, a mapping from these names to the page's components, and return updates keyed by
# them; tests pass {name: name} to read the updates by name.
COMPONENT_NAMES = (
    "state",
    "page",
    "keys",
    "status",
    "login",
    "study_in",
    "annotator_in",
    "task",
    "progress",
    "instructions",
    "context",
    "chat_a",
    "chat_b",
    *RATING_KEYS,
    "comment",
    "finish",
    "finish_md",
)


def chat_messages(turns: tuple[Turn, ...]) -> list[dict[str, str]]:
    """Dialogue turns -> Chatbot messages; seeker turns on the user side, others with a bold name."""
    out = []
    for turn in turns:
        if turn.speaker.strip().lower() in USER_SPEAKERS:
            out.append({"role": "user", "content": turn.text})
        else:
            name = f"**{turn.speaker}:** " if turn.speaker else ""
            out.append({"role": "assistant", "content": f"{name}{turn.text}"})
    return out


def progress_html(done: int, total: int) -> str:
    """The `12 / 50` progress bar: an outlined track filled to the share done (empty at 0, never a grey block)."""
    share = 100 * min(max(done, 0), total) / total if total > 0 else 0
    return (
        f'<div class="annot-progress"><div class="annot-bar" role="progressbar" aria-valuemin="0" '
        f'aria-valuenow="{done}" aria-valuemax="{total}"><div style="width:{share:.1f}%"></div></div>'
        f"<div><b>{done} / {total}</b> completed</div></div>"
    )


def _view(
    result: Task | Finished, session: dict[str, Any], c: dict[str, Any], notice: str = ""
) -> dict[Any, Any]:
    """Component updates for a task or the finish screen (c: the page's components by name)."""
    blank = {c[key]: None for key in RATING_KEYS}
    if isinstance(result, Finished):
        code = result.completion_code
        lines = [f"## Thank you, you are done!\n\nYou completed **{result.progress.done}** comparison(s)."]
        if result.progress.done == 0:
            lines = [NO_WORK.get(result.reason, NO_WORK["full"])]
        elif code:
            lines.append(f"Your completion code is: **`{html.escape(code)}`**")
            lines.append(
                f"[Return to Prolific](https://app.prolific.com/submissions/complete?cc={quote(code)})"
            )
        return {
            c["state"]: {**session, "token": None},
            c["login"]: gr.update(visible=False),
            c["task"]: gr.update(visible=False),
            c["finish"]: gr.update(visible=True),
            c["finish_md"]: "\n\n".join(lines),
            c["status"]: notice,
            **blank,
        }
    return {
        c["state"]: {**session, "token": result.token},
        c["login"]: gr.update(visible=False),
        c["task"]: gr.update(visible=True),
        c["finish"]: gr.update(visible=False),
        c["progress"]: progress_html(result.progress.done, result.progress.total),
        c["instructions"]: result.instructions,
        c["context"]: f"**Situation:** {result.context}" if result.context else "",
        c["chat_a"]: chat_messages(result.left),
        c["chat_b"]: chat_messages(result.right),
        c["comment"]: "",
        c["status"]: notice,
        **blank,
    }


def plain(text: object) -> str:
    """`text` as literal Markdown inside a line: the characters that start markup backslash-escaped, so
    whatever a link or an error message carries shows as typed, never as a tag, link or markup."""
    return MARKUP_CHARACTERS.sub(r"\\\1", str(text))


def _login(c: dict[str, Any], message: str, session: dict[str, Any] | None = None) -> dict[Any, Any]:
    """The login form with `message`; it keeps what the link gave (study, annotator, link key) in the state."""
    session = {"study": "", "annotator": "", "link": "", **(session or {}), "token": None}
    return {
        c["state"]: session,
        c["login"]: gr.update(visible=True),
        c["task"]: gr.update(visible=False),
        c["finish"]: gr.update(visible=False),
        c["study_in"]: str(session.get("study") or "")[:64],
        c["annotator_in"]: str(session.get("annotator") or "")[:MAX_ANNOTATOR_CHARS],
        c["status"]: message,
    }


def _key_name(study: str, annotator: str) -> str:
    return f"{study}\x1f{annotator}"


def _stored_keys(keys: object) -> dict[str, str]:
    """This browser's annotator keys from localStorage (a bounded mapping of strings; anything else is dropped)."""
    if not isinstance(keys, dict) or len(keys) > 4 * MAX_KEYS:
        return {}
    return {k: v for k, v in keys.items() if isinstance(k, str) and isinstance(v, str) and k != BROWSER_ENTRY}


def start(
    store: StudyStore,
    c: dict[str, Any],
    study: str | None,
    annotator: str | None,
    keys: dict[str, str] | None = None,
    *,
    browser: str | None = None,
    link: str | None = "",
) -> dict[Any, Any]:
    """Begin or resume a session for (study, annotator); the login form again, with a plain reason, otherwise.

    The browser's key for the id is the one it stored earlier (`keys`, from localStorage), else its browser id
    (`browser`, the page state), else a fresh one; the store binds a new id to it and refuses it when another
    browser holds the id. `link` is the `key=` of the study link: a new id is admitted only with it."""
    session = {"study": study.strip() if isinstance(study, str) else "",
               "annotator": annotator.strip() if isinstance(annotator, str) else "",
               "link": link if isinstance(link, str) else "", "token": None}
    if not session["study"]:
        return _login(c, NO_STUDY_MESSAGE, session)
    if not session["annotator"]:
        return _login(c, ASK_ID_MESSAGE, session)
    try:
        identity = annotator_key(session["annotator"])
    except InvalidInput as exc:
        return _login(c, f"⚠️ {plain(exc)}", session)
    stored = _stored_keys(keys)
    name = _key_name(session["study"], identity)
    legacy = _key_name(session["study"], session["annotator"])  # how earlier versions named the key
    key = stored.get(name) or stored.get(legacy) or browser or secrets.token_urlsafe(24)
    try:
        result = store.next_task(study_id=session["study"], annotator=session["annotator"], session_key=key,
                                 link_key=session["link"])
    except StudyNotFound:  # an unknown study, or a new id without the study's link key
        return _login(c, f"⚠️ {INVALID_STUDY_MESSAGE}", {"annotator": session["annotator"]})
    except AnnotatorInUse as exc:
        return _login(c, f"⛔ {plain(exc)}", session)
    except AnnotationError as exc:
        return _login(c, f"⚠️ {plain(exc)}", session)
    kept = dict(list({k: v for k, v in stored.items() if k not in (name, legacy)}.items())[-(MAX_KEYS - 1):])
    return {**_view(result, session, c), c["keys"]: {**kept, name: key}}


def browser_id(keys: object) -> str | None:
    """The browser id BROWSER_JS sent inside the keys mapping, if it has the expected shape."""
    value = keys.get(BROWSER_ENTRY) if isinstance(keys, dict) else None
    return value if isinstance(value, str) and BROWSER_ID.fullmatch(value) else None


def on_load(
    store: StudyStore, c: dict[str, Any], request: gr.Request, keys: dict[str, str] | None = None
) -> dict[Any, Any]:
    """Open the page session (its state holds the browser id, or a fresh key without one); read
    ?study=&key=&annotator= (also Prolific's STUDY_ID / PROLIFIC_PID) and start if study and annotator are given."""
    q = dict(request.query_params) if request is not None else {}
    page = browser_id(keys) or secrets.token_urlsafe(18)
    return {c["page"]: page, **start(store, c, q.get("study") or q.get("STUDY_ID"),
                                     q.get("annotator") or q.get("PROLIFIC_PID"), keys, browser=page,
                                     link=q.get("key") or "")}


def vote(
    store: StudyStore,
    c: dict[str, Any],
    choice: str,
    session: dict[str, Any] | None,
    ratings: list[str | None],
    comment: str | None,
) -> dict[Any, Any]:
    """Record the vote for the current task (idempotent), then show the next task or the finish screen.

    `ratings` are the six radio values in `CRITERIA` x (A, B) order, as shown (A = left).
    """
    if not isinstance(session, dict) or not session.get("token"):
        return _login(c, "Your session ended; enter your study and annotator ID to continue.",
                      session if isinstance(session, dict) else None)
    by_key = dict(zip(RATING_KEYS, ratings))
    try:
        side = {
            s: Ratings(**{k: _rating(by_key[f"{k}_{s}"]) for k in CRITERIA})
            for s in "ab"
        }
        # One transaction records the vote and serves the next task (a repeat click records nothing).
        result, nxt = store.submit_and_next(
            token=session["token"], choice=choice, left=side["a"], right=side["b"], comment=comment or ""
        )
    except AnnotationError as exc:
        if isinstance(exc, InvalidInput) and "comment" in str(exc):
            return {c["status"]: f"⚠️ {plain(exc)}"}  # keep the task and the typed comment on screen
        return _login(c, f"⚠️ {plain(exc)}", session)
    notice = "✓ Saved." if result is not None else f"⚠️ {HOLD_EXPIRED_MESSAGE}"
    return _view(nxt, session, c, notice)


def _rating(value: Any) -> int | None:
    if value in (None, ""):
        return None
    if value not in RATING_CHOICES:
        raise InvalidInput(f"A rating must be one of {', '.join(RATING_CHOICES)}; reload the page.")
    return int(value)


def build_annotate_page(settings: Settings, *, store: StudyStore | None = None) -> gr.Blocks:
    """Build the annotator Blocks (mount it with `gr.mount_gradio_app(app, page, path="/annotate")`).

    Args:
        settings: app settings; `annotation_db_url` selects the database.
        store: an already open store to share (tests); by default one is opened from the settings.
    """
    store = store or StudyStore(settings.annotation_db_url)
    c: dict[str, Any] = {}
    with gr.Blocks(title="Compare responses") as page:
        c["state"] = gr.State(None)
        c["page"] = gr.State(None)  # set by the page's load event only: no page session, no events
        c["keys"] = gr.BrowserState({}, storage_key=KEYS_STORAGE, secret=KEYS_STORAGE)
        c["status"] = gr.Markdown("")
        with gr.Column(visible=False) as c["login"]:
            c["study_in"] = gr.Textbox(label="Study", max_length=64)
            c["annotator_in"] = gr.Textbox(label="Your annotator ID", placeholder="e.g. your Prolific ID",
                                           max_length=MAX_ANNOTATOR_CHARS)
            start_btn = gr.Button("Start", variant="primary")
        with gr.Column(visible=False) as c["task"]:
            gr.Markdown("# Which response is better?")  # the task's heading (the finish screen has its own)
            c["progress"] = gr.HTML("")
            c["instructions"] = gr.Markdown("")
            c["context"] = gr.Markdown("", elem_classes=["annot-context"])
            with gr.Row(equal_height=True):
                opts = dict(
                    height=None,
                    min_height=160,
                    max_height=520,
                    feedback_options=None,
                    buttons=[],
                    group_consecutive_messages=False,
                    elem_classes=["annot-chat"],  # PAGE_JS hides the toolbar: no clear (trash) icon
                )
                c["chat_a"] = gr.Chatbot(label="Response A", **opts)
                c["chat_b"] = gr.Chatbot(label="Response B", **opts)
            with gr.Accordion("Ratings (optional, 1 = poor, 5 = excellent)", open=True):
                for k in CRITERIA:
                    with gr.Row():
                        for s, side in (("a", "A"), ("b", "B")):
                            c[f"{k}_{s}"] = gr.Radio(
                                RATING_CHOICES, label=f"{CRITERION_LABELS[k]}: Response {side}"
                            )
            c["comment"] = gr.Textbox(label="Comment (optional)", lines=2, max_length=MAX_COMMENT_CHARS)
            with gr.Row():
                buttons = [
                    (
                        choice,
                        gr.Button(label, elem_id=eid, variant="primary" if choice in "AB" else "secondary"),
                    )
                    for choice, label, eid in VOTES
                ]
            gr.Markdown("Keyboard: **1** = A better, **2** = B better, **3** = tie, **4** = both bad.")
        with gr.Column(visible=False) as c["finish"]:
            c["finish_md"] = gr.Markdown("")
        outputs = list(c.values())
        assert set(c) == set(COMPONENT_NAMES), f"components out of sync: {set(c) ^ set(COMPONENT_NAMES)}"
        inputs = [c["page"], c["state"], *[c[key] for key in RATING_KEYS], c["comment"]]

        def load(keys: dict[str, str] | None, request: gr.Request) -> dict[Any, Any]:
            return on_load(store, c, request, keys)

        def begin(page_id: str | None, session: dict[str, Any] | None, study: str | None, annotator: str | None,
                  keys: dict[str, str] | None) -> dict[Any, Any]:
            if not page_id:
                return {c["status"]: NO_PAGE_MESSAGE}
            # The link key came with the page's link (kept in the state by `load`), for that study only.
            same = isinstance(session, dict) and isinstance(study, str) and session.get("study") == study.strip()
            return start(store, c, study, annotator, keys, browser=page_id, link=session.get("link") if same else "")

        # "private": hidden from the API page and not callable by client libraries (no scripted votes);
        # raw queue calls still need the page session that only `load` opens (see NO_PAGE_MESSAGE).
        private: dict[str, Any] = {"api_visibility": "private"}
        page.load(load, inputs=[c["keys"]], outputs=outputs, js=BROWSER_JS, **private)
        page.load(None, js=PAGE_JS)
        login_inputs = [c["page"], c["state"], c["study_in"], c["annotator_in"], c["keys"]]
        start_btn.click(begin, login_inputs, outputs, **private)
        c["annotator_in"].submit(begin, login_inputs, outputs, **private)
        for choice, button in buttons:
            button.click(_voter(store, c, choice), inputs, outputs, trigger_mode="once", **private)
    return page


def _voter(store: StudyStore, c: dict[str, Any], choice: str) -> Any:
    """One click handler per vote button (all share `vote`; FastChat's four clones avoided)."""

    def handler(
        page_id: str | None,
        session: dict[str, Any] | None,
        ha: str | None,
        hb: str | None,
        ea: str | None,
        eb: str | None,
        sa: str | None,
        sb: str | None,
        comment: str | None,
    ) -> dict[Any, Any]:
        if not page_id:
            return {c["status"]: NO_PAGE_MESSAGE}
        return vote(store, c, choice, session, [ha, hb, ea, eb, sa, sb], comment)

    return handler
