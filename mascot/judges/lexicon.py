"""Small word lists and anchor sentences used by the offline judge's text features.

Hand-written for this project (no external lexicon is downloaded); they only need to separate
"names or expresses a feeling" from "does not", not to classify emotions finely.
"""

from __future__ import annotations

import re

# Words that name or express a feeling (base forms and common inflections).
AFFECT_WORDS = frozenset("""
afraid alone angry anger annoyed annoying anxious anxiety apprehensive ashamed awful blessed brave broken
calm calmer cared caring cheer cheerful comfort comforted comforting confident confused content courage
crushed cry crying delighted depressed despair devastated disappointed disappointing disappointment
disgusted distressed down dread drained embarrassed embarrassing empty excited exciting exhausted fear
feared fearful feel feeling feelings felt frightened frustrated frustrating frustration fun furious glad
grateful gratitude grief grieving guilt guilty happy happiness hard heartbroken heartbreaking heartwarming
heavy helpless hope hopeful hopeless hurt hurting hurts insecure inspired inspiring irritated jealous
jealousy joy joyful lonely loneliness lost love loved lovely loving mad miserable miss missed missing
moved moving nervous nostalgic numb overjoyed overwhelmed overwhelming pain painful panic peaceful
pleased proud pride rattled regret relief relieved resentful sad sadness safe scared scary shaken
shame shock shocked sorrow sorry stressed stressful stress stung surprised tender terrified terrifying
thankful thrilled touched touching tough trust unfair upset upsetting warm warmth weary wonderful worried
worry worrying wow yay
""".split())

INTENSIFIERS = frozenset("so really truly deeply incredibly absolutely completely totally such very".split())

YOU_WORDS = frozenset("you your you're youre yours yourself you've you'd you'll".split())

STOPWORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers
herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself just let's
me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves out over
own same shan't she she'd she'll she's should shouldn't so some such than that that's the their theirs
them themselves then there there's these they they'd they'll they're they've this those through to too
under until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
where's which while who who's whom why why's will with won't would wouldn't you you'd you'll you're
you've your yours yourself yourselves also really like get got one even much well yeah oh okay ok
""".split())

# Phrases that dismiss or minimise the user's feelings (lower Empathetic support quality).
DISMISSIVE = (
    r"\bjust get over\b", r"\bget over it\b", r"\bcalm down\b", r"\bstop worrying\b", r"\bdon't be (?:sad|upset|silly)\b",
    r"\bnot (?:a|such a) big deal\b", r"\bcould be worse\b", r"\bat least\b", r"\bstop (?:complaining|whining)\b",
    r"\beveryone goes through\b", r"\byou're overreacting\b", r"\bit's nothing\b",
)

# Mood match: a user who reports a loss, a failure or distress must not be met with celebration. Hard user
# cues (words of loss, harm and distress) and reply phrases of celebration or delight; the offline judge
# penalises a celebrating reply to a distressed message (`mood_mismatch`). Found in use: a trained Anchor
# answered "My dog died yesterday" with "How wonderful news is that!".
DISTRESS_CUES = frozenset("""
afraid alone angry anxious anxiety ashamed awful broke broken crying cried cry dead death depressed despair
devastated died dies dying disappointed divorce dumped exhausted failed failing fail fear fired funeral grief
grieving guilty heartbroken helpless hopeless hurt hurting hurts injured laid lonely lose losing lost miserable
miss missing nervous numb overwhelmed pain panic passed rejected sad scared sick stressed struggling terrified
tired upset worried worse worst
""".split())
CELEBRATION = (
    r"\bwonderful\b", r"\bamazing\b", r"\bawesome\b", r"\bfantastic\b", r"\bcongrat(?:ulation)?s\b", r"\bgreat news\b",
    r"\bhow exciting\b", r"\bso (?:happy|excited|thrilled) for you\b", r"\bglad to hear\b", r"\bwhat a (?:great|lovely|fun)\b",
    r"\byay\b", r"\bhooray\b", r"\bcheers\b", r"\bdelightful\b", r"\bexciting news\b",
)

# Anchor sentences for the embedding side of the emotion and empathy signals.
EMOTION_ANCHORS = (
    "I feel so happy and excited for you!",
    "That must hurt so much, I'm really sad to hear it.",
    "Wow, I'm genuinely moved by this.",
    "That sounds frightening and overwhelming.",
    "I'm so proud of you, this is wonderful news!",
    "Ugh, that is so frustrating and unfair.",
)
EMPATHY_ANCHORS = (
    "That sounds really hard, and it makes sense that you feel this way.",
    "I hear you, and I'm here for you.",
    "It's completely understandable to feel like this after what happened.",
    "You're not alone in this; your feelings are valid.",
    "How are you feeling about all of this right now?",
    "You should be proud of yourself for how you handled it.",
)

_WORD = re.compile(r"[a-z][a-z']*")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (apostrophes kept, so "you're" stays one word)."""
    return _WORD.findall(text.lower().replace("’", "'"))


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOPWORDS and len(w) > 2]

# A pseudo-persona for "generic assistant" behaviour (the paper's persona collapse): the offline
# judge's Consistency asks the reply to be closer to its own persona than to this profile too.
GENERIC_ASSISTANT = (
    "I'm sorry to hear that. I hope things get better for you soon.",
    "That's great! I'm happy for you. Let me know if there's anything else I can help with.",
    "Thank you for sharing. How can I help you today?",
    "I understand. Is there anything else you would like to talk about?",
    "It's important to take care of yourself and reach out for support if you need it.",
    "As a helpful assistant, I'm here to help you with any questions you may have.",
)
