"""What the annotator page says and the scripts it runs in the browser (the page itself: `app/annotate_page.py`).

Every message is a plain sentence that tells a participant what to do next; none names a system or echoes the link.
"""

from __future__ import annotations

# Installed once per page by demo.load(js=...): keyboard shortcuts and a little layout CSS.
PAGE_JS = """
() => {
  if (window.__annotateKeys) return;
  window.__annotateKeys = true;
  const ids = {"1": "vote-a", "2": "vote-b", "3": "vote-tie", "4": "vote-bad"};
  document.addEventListener("keydown", (e) => {
    const tag = (e.target && e.target.tagName) || "";
    if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || e.ctrlKey || e.metaKey || e.altKey) return;
    const id = ids[e.key];
    if (!id) return;
    const el = document.getElementById(id);
    const button = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
    if (button && !button.disabled) { e.preventDefault(); button.click(); }
  });
  const style = document.createElement("style");
  style.textContent = [
    ".annot-bar{width:100%;height:12px;border:1px solid var(--border-color-primary);border-radius:6px;",
    "background:transparent;overflow:hidden} .annot-bar>div{height:100%;background:var(--color-accent)}",
    ".annot-context{font-size:1.05em}",
    ".annot-chat .icon-button-wrapper{display:none!important}",  // no clear (trash) icon on the responses
  ].join("");
  document.head.appendChild(style);
}
"""
BROWSER_STORAGE = "annotate-browser-id"  # localStorage entry: this browser's id, made before its first request
BROWSER_ENTRY = "browser"  # how the load event's JS hands that id to the server, inside the keys mapping
# Runs in the browser before the load event's request: keep (or make and keep) the browser id, send it along.
BROWSER_JS = """
(keys) => {
  let id = null;
  try {
    id = localStorage.getItem("annotate-browser-id");
    if (!id || !/^[A-Za-z0-9_-]{16,128}$/.test(id)) {
      const bytes = crypto.getRandomValues(new Uint8Array(18));
      id = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
      localStorage.setItem("annotate-browser-id", id);
    }
  } catch (e) { id = null; }  // no storage (a locked-down browser): this page session gets a key of its own
  const sent = Object.assign({}, keys && typeof keys === "object" ? keys : {});
  if (id) sent["browser"] = id;
  return [sent];
}
"""
NO_PAGE_MESSAGE = "⚠️ Open the study link in a web browser to take part (this request had no page session)."
# One answer for every unknown study id or missing link key: it names no study and echoes nothing from the link.
INVALID_STUDY_MESSAGE = "This study link is not valid. Check the link you were given, or ask the study owner."
NO_STUDY_MESSAGE = (
    "To take part, open the study link you were given. To continue a study you started in this browser, enter "
    "the study and your annotator ID."
)
ASK_ID_MESSAGE = "Enter your annotator ID (e.g. your Prolific ID) to start."
RETURN_HINT = "If you came from Prolific or another recruiting site, return the study there (there is no code to enter)."
# The finish screen when an annotator got no task without doing one (`Finished.reason`), never "you are done".
NO_WORK = {
    "full": "## This study is full\n\nEvery comparison already has all the answers it needs, so there is no task left "
            f"for you. Thank you for your interest; you can close this page.\n\n{RETURN_HINT}",
    "busy": "## This study is full for now\n\nThe comparisons still open are being answered by other participants. "
            "Some may come free in a few minutes: reload this page then to check.",
    "closed": f"## This study is closed\n\nIt takes no more answers. Thank you for your interest.\n\n{RETURN_HINT}",
}
