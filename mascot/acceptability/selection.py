"""Best-of-N selection: of N finished draws for a persona turn, show the one a person would most likely accept.

Order of preference: a draw the speaker itself would keep (enough words, no copy of an earlier turn), then one
no fault detector flags and the scorer rates at or above its threshold, then the highest acceptability plus
`fit_weight` times persona fit. When every draw is flagged the least bad is shown and the turn's metadata says
so (`all_flagged`).
"""

from __future__ import annotations

import logging

from mascot.acceptability.scorer import AcceptabilityScorer
from mascot.group.cleaning import MIN_REPLY_WORDS, count_words, earlier_turns, repeats_turn
from mascot.group.dialogue import Dialogue
from mascot.group.personas import Persona
from mascot.group.speaker import Choice

log = logging.getLogger(__name__)

DEFAULT_FIT_WEIGHT = 0.25


class Selector:
    """Chooses among draws with the acceptability scorer (see the module docstring)."""

    def __init__(self, scorer: AcceptabilityScorer, fit_weight: float = DEFAULT_FIT_WEIGHT,
                 threshold: float | None = None) -> None:
        self.scorer = scorer
        self.fit_weight = fit_weight
        self.threshold = float(scorer.card.get("threshold", 0.5)) if threshold is None else threshold
        # when a list, every choice is appended to it with all its draws (`accept sample --all-draws` labels them)
        self.record: list[dict] | None = None

    def choose(self, dialogue: Dialogue, persona: Persona, texts: list[str]) -> Choice:
        earlier = earlier_turns(dialogue)
        scores = self.scorer.score(dialogue, persona.name, texts)
        usable = [count_words(t) >= MIN_REPLY_WORDS and not repeats_turn(t, earlier) for t in texts]
        flagged = [bool(s.faults) or s.acceptability < self.threshold or not ok for s, ok in zip(scores, usable)]
        best = max(range(len(texts)),
                   key=lambda i: (usable[i], not flagged[i], scores[i].combined(self.fit_weight), -i))
        if self.record is not None:
            self.record.append({"context": [(t.speaker, t.text) for t in dialogue.turns], "persona": persona.name,
                                "draws": list(texts), "chosen": best,
                                "acceptability": [round(x.acceptability, 4) for x in scores],
                                "flagged": flagged})
        return Choice(best, {
            "best_of": len(texts), "chosen": best, "all_flagged": all(flagged),
            "acceptability": [round(s.acceptability, 3) for s in scores],
            "persona_fit": [round(s.persona_fit, 3) for s in scores],
            "faults": scores[best].faults,
        })


def load_selector(folder: str | None = None, fit_weight: float = DEFAULT_FIT_WEIGHT) -> tuple[Selector | None, str]:
    """The selector over the shipped (or given) scorer, or (None, why) when the scorer cannot load: the chat then
    shows the first draw (best-of-1) and says so in its status area."""
    try:
        return Selector(AcceptabilityScorer.load(folder), fit_weight), ""
    except Exception as exc:  # any failure to load means no selection, never a crashed chat
        log.warning("acceptability scorer unavailable, showing single draws: %s", exc)
        return None, f"Careful replies are off: the acceptability scorer did not load ({exc})."
