import pytest

from mascot.safety import check_crisis

POSITIVE = [
    "I want to kill myself",
    "i've been thinking about suicide a lot",
    "I don't want to be alive anymore",
    "Everyone would be better off without me.",
    "I just want to end it all tonight",
    "Sometimes I wish I could go to sleep and never wake up",
    "there's no reason to live anymore",
    "I can't go on like this, I'm planning to take my own life",
    "I've been cutting myself again",
    "I won't be here tomorrow, goodbye forever",
    "I'm not okay. I want to die.",
]
NEGATIVE = [
    "This traffic is killing me",
    "I'm dying to see the new movie!",
    "I would never hurt myself, I'm just sad",
    "I'm not suicidal, just exhausted after work",
    "We should end it with a toast at the party",
    "I killed it at my presentation today",
    "I died laughing at that video",
    "My exam results were terrible and I feel like an idiot",
    "I want to kill the bug in my code",
    "That cake is to die for",
]


@pytest.mark.parametrize("text", POSITIVE)
def test_crisis_detected(text):
    assert check_crisis(text).is_crisis, text


@pytest.mark.parametrize("text", NEGATIVE)
def test_no_false_alarm(text):
    assert not check_crisis(text).is_crisis, text
