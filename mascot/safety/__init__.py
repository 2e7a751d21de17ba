"""Crisis safety for the companion group: a layered, measured detector on user messages, a graded response,
and an output check on persona replies. How it works and what it measures: docs/safety.md.

At run time (no torch until a classifier is first used):
- `detector`: `CrisisDetector` (tiers *crisis* / *concern* / *none*, `CrisisResult`) over its layers:
  `patterns` (high-precision phrasings in 20 languages, and the words of harm), `language` (does a message read as
  English?), `classifier` (the fine-tuned MiniLM encoder, averaged with `lexical`'s character n-grams), the
  context of the last three user turns, and the optional `llm_judge`;
- `guard`: the output check on persona replies (`ReplyGuard` screens a streamed reply sentence by sentence);
- `responses`: the fixed texts (`CRISIS_REPLY`, `HELP_NOTE`, `REPLY_REPLACEMENT`, the concern directive);
- `events`: the `SafetyLog` a detector records its decisions in (tier, score, layer; never the text);
- `text`: what every check reads (clipped, @mentions removed).

Building and measuring it (`python -m mascot safety train|thresholds|eval`, `cli`):
- `training.data`: the labelled lines' loaders; `training.fitting`: the encoder fit; `training.thresholds`: the
  cross-validated thresholds; `training.pipeline`: `safety train`; `evaluation`: `safety eval` and its report.
"""

from mascot.safety.detector import CrisisDetector, CrisisResult, check_crisis, default_detector
from mascot.safety.events import SafetyLog
from mascot.safety.guard import ReplyGuard, ReplyVerdict
from mascot.safety.llm_judge import make_gray_zone_judge
from mascot.safety.responses import (
                                     CRISIS_REPLY,
                                     CRISIS_SPEAKER,
                                     HELP_NOTE,
                                     REPLY_REPLACEMENT,
                                     concern_directive,
                                     with_help_note,
)

__all__ = ["CRISIS_REPLY", "CRISIS_SPEAKER", "HELP_NOTE", "REPLY_REPLACEMENT", "CrisisDetector", "CrisisResult",
           "ReplyGuard", "ReplyVerdict", "SafetyLog", "check_crisis", "concern_directive", "default_detector",
           "make_gray_zone_judge", "with_help_note"]
