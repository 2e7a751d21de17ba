"""Reflection stems: the user's first clause in the second person, and stems that fall back when it cannot be made."""

from __future__ import annotations

import pytest

from mascot.group.personas import Persona
from mascot.group.reflection import fill, reflect


@pytest.mark.parametrize("message, expected", [
    ("My landlord just kept my whole deposit. I have photos.", "your landlord just kept your whole deposit"),
    ("We had to put our dog down on Saturday. Fourteen years.", "you had to put your dog down on Saturday"),
    ("I'm 45 and I have my first swimming lesson on Thursday.", "you're 45 and you have your first swimming lesson on Thursday"),
    ("Walking home last night I was sure someone was following me.", "walking home last night you were sure someone was following you"),
    ("so my local supermarket just scrapped all the tills. you have to pay by app", "your local supermarket just scrapped all the tills"),
    ("fell asleep on the train home and woke up on a stranger", "you fell asleep on the train home and woke up on a stranger"),
    ("My neighbour decided 2am is the time I am most awake", "your neighbour decided 2am is the time you are most awake"),
    ("They're keeping my little girl in hospital overnight", "they're keeping your little girl in hospital overnight"),
    ("My thesis defense is tomorrow and honestly? I'm ready.", "your thesis defense is tomorrow"),
])
def test_reflect_turns_the_first_clause_to_the_second_person(message, expected):
    assert reflect(message) == expected


@pytest.mark.parametrize("message", [
    "",
    "Hi.",                                            # too short
    "The weather has been grey for weeks now.",       # nothing in the first person: it may be about someone else
    "Can you help me plan my week?",                  # the user addresses the group: who is "you"?
    "Whatever happens, the decision that the committee in charge of the allotments takes this week about the rent will decide whether my plot survives",
])
def test_reflect_declines_what_it_cannot_turn_safely(message):
    assert reflect(message) is None


def test_fill_and_the_persona_stem_fall_back_to_a_stem_without_the_placeholder():
    assert fill("That sounds", "anything") == "That sounds"
    assert fill("So {situation}. That", "We lost the match.") == "So you lost the match. That"
    assert fill("So {situation}. That", "Hi.") is None
    p = Persona(name="A", role="Listener", goal="listen", stems=["So {situation}. That", "That sounds"])
    assert p.stem(0, "My cat ran away last night.") == "So your cat ran away last night. That"
    assert p.stem(0, "Hi.") == "That sounds"          # seed 0 wants the reflection; it cannot be made
    assert p.stem(1, "My cat ran away last night.") == "That sounds"
    assert Persona(name="B", role="x", goal="y", stems=["So {situation}."]).stem(0, "Hi.") == ""
