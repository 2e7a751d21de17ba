"""The systems compared in the evaluation, all generating through the shared engine.

Each system answers every scenario with one round of the pack's active personas, in pack order
(the paper's case-study style): each persona sees the user's message and the replies already
given this round. Systems differ only in the speaker prompt style and the adapters used:

- mascot: the trained speaker adapters from `checkpoints/<run>/speakers/<persona>/` ("persona" prompt)
- sft: SFT adapters from `checkpoints/<run>/sft/<persona>/`, when they exist
- prompted: the live chat's persona prompt on the base model, no adapters
- zero-shot, zero-shot-cot, few-shot, few-shot-cot: prompted baselines on the same base model
- zero-shot-no-persona: one plain assistant answers once; its reply is judged in each persona's slot
- self-consistency: 5 CoT samples per persona turn, the medoid (or the judge's favourite) is kept
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mascot.backends.base import Backend, GenerationParams
from mascot.data.scenario import Scenario
from mascot.errors import ConfigError, unknown_name
from mascot.files.checkpoints import is_adapter
from mascot.group.chat import OFFLINE, GroupChat
from mascot.group.dialogue import Dialogue, Directive, Turn
from mascot.group.engine import Engine, EngineConfig
from mascot.group.personas import Persona, PersonaPack
from mascot.group.speaker import Selector, Speaker, check_best_of
from mascot.judges.base import Judge, JudgeItem


@dataclass
class Round:
    """One scenario answered by one system: the persona turns, each with the context it saw."""

    scenario: Scenario
    turns: list[Turn]
    # For every reply to judge: (persona judged, context before the reply, reply text).
    judged: list[tuple[Persona, Dialogue, str]] = field(default_factory=list)
    roster: list[Persona] = field(default_factory=list)
    crisis: bool = False


@dataclass
class RunContext:
    """What a system needs besides the backend: where checkpoints live, the judge, the seed."""

    checkpoints_dir: str = "checkpoints"
    run: str | None = None
    seed: int = 0
    max_new_tokens: int | None = None
    sc_samples: int = 5
    sc_select: str = "majority"  # majority (embedding medoid) | judge
    judge: Judge | None = None
    setting: str = "emotional-support"
    temperature: float | None = None  # None keeps the live chat speaker's
    selector: Selector | None = None  # for systems with `+bestN` (mascot.acceptability.selection)


def speaker_params(backend: Backend, style: str, ctx: RunContext) -> GenerationParams:
    """The live chat speaker's sampling settings; CoT styles get room to think and no blank-line
    stop (a blank line between the Thought and the Reply must not end the generation)."""
    p = Speaker(backend).params
    if style in ("cot", "few-shot-cot"):
        p = p.with_(max_new_tokens=max(p.max_new_tokens * 2, 128), stop=("\nUser:",))
    if ctx.max_new_tokens:
        p = p.with_(max_new_tokens=ctx.max_new_tokens)
    if ctx.temperature is not None:
        p = p.with_(temperature=ctx.temperature)
    return p


class AdapterSpeaker(Speaker):
    """A Speaker whose per-persona adapter names carry a prefix (`sft-anchor`), so SFT adapters can
    live on the backend next to the trained `speaker-anchor` ones."""

    def __init__(self, backend: Backend, params: GenerationParams, style: str, prefix: str) -> None:
        super().__init__(backend, params, style=style, use_adapters=True)
        self.prefix = prefix

    def adapter_for(self, persona: Persona) -> str | None:
        name = f"{self.prefix}{persona.key}"
        return name if name in self.backend.adapters else None


class System:
    """A prompted system: one round of all personas through GroupChat.respond_batch."""

    style = "persona"
    label = ""

    def __init__(self, name: str) -> None:
        self.name = name
        self.notes: list[str] = []
        self.best_of = 1  # `+bestN`: N draws per turn, the acceptability scorer's choice shown
        self.stems = False  # `+stems`: replies start from the persona's opening words

    def prepare(self, backend: Backend, pack: PersonaPack, ctx: RunContext) -> str | None:
        """Load what the system needs; return a reason to skip it, or None when it can run."""
        return None

    def speaker(self, backend: Backend, ctx: RunContext) -> Speaker:
        return self.configure(Speaker(backend, speaker_params(backend, self.style, ctx), style=self.style,
                                      use_adapters=False), ctx)

    def configure(self, speaker: Speaker, ctx: RunContext) -> Speaker:
        """Apply the name's modifiers (`+bestN`, `+stems`) to a speaker."""
        speaker.stems = self.stems
        if self.best_of > 1:
            if ctx.selector is None:
                raise ConfigError(f"{self.name} selects among draws but no acceptability scorer is loaded.")
            speaker.best_of, speaker.selector = check_best_of(self.best_of), ctx.selector
        return speaker

    def generate(self, backend: Backend, pack: PersonaPack, scenarios: list[Scenario], ctx: RunContext) -> list[Round]:
        roster = pack.active
        chat = GroupChat(backend, roster, mode="round-robin", max_speakers=len(roster), speaker_style=self.style,
                         policy=OFFLINE, concern_opener=pack.concern_opener)
        chat.speaker = self.speaker(backend, ctx)
        dialogues = [s.to_dialogue() for s in scenarios]
        seeds = [ctx.seed * 100_003 + hash_id(s.id) for s in scenarios]
        added = chat.respond_batch(dialogues, [None] * len(scenarios), seeds)
        return [make_round(s, d, turns, roster) for s, d, turns in zip(scenarios, dialogues, added)]


def hash_id(text: str) -> int:
    """A stable small integer from a scenario id (Python's hash() is salted per process)."""
    return sum((i + 1) * ord(c) for i, c in enumerate(text)) % 100_000


def make_round(scenario: Scenario, dialogue: Dialogue, turns: list[Turn], roster: list[Persona]) -> Round:
    """Pair every persona turn with the context before it (scenario prefix + earlier turns)."""
    start = len(dialogue.turns) - len(turns)
    by_name = {p.name: p for p in roster}
    judged = []
    for k, t in enumerate(turns):
        if t.speaker in by_name:
            ctx = Dialogue([Turn(x.speaker, x.text) for x in dialogue.turns[: start + k]], dialogue.situation, dialogue.emotion)
            judged.append((by_name[t.speaker], ctx, t.text))
    crisis = any(t.meta.get("crisis") for t in turns)
    return Round(scenario, turns, judged, roster, crisis)


class PromptedSystem(System):
    def __init__(self, name: str, style: str, label: str) -> None:
        super().__init__(name)
        self.style, self.label = style, label


class AdapterSystem(System):
    """Speakers through per-persona LoRA adapters: the trained MASCOT speakers or SFT ones."""

    def __init__(self, name: str, label: str, kind: str) -> None:
        super().__init__(name)
        self.label, self.kind = label, kind
        self.prefix = "speaker-" if kind == "speakers" else "sft-"

    def prepare(self, backend: Backend, pack: PersonaPack, ctx: RunContext) -> str | None:
        from mascot.files.checkpoints import DEFAULT_RUN, find_run

        engine = Engine(EngineConfig(checkpoints_dir=ctx.checkpoints_dir, run=ctx.run), backend,
                        run_dir=find_run(ctx.checkpoints_dir, ctx.run))
        run_dir = engine.speakers_run_dir(pack)[0]  # the pack's own run when the chosen one has none for it
        where = f"{ctx.checkpoints_dir}/{run_dir.name if run_dir else ctx.run or '<newest run>'}"
        if self.kind == "speakers":
            self.notes += engine.attach_adapters(pack)
        else:
            for p in pack.active:
                path = (run_dir or Path(ctx.checkpoints_dir) / (ctx.run or DEFAULT_RUN)) / "sft" / p.key
                if is_adapter(path) and f"sft-{p.key}" not in backend.adapters:
                    backend.add_adapter(f"sft-{p.key}", str(path))
        have = [p.name for p in pack.active if f"{self.prefix}{p.key}" in backend.adapters]
        if not have:
            sub = "speakers/<persona>" if self.kind == "speakers" else "sft/<persona>"
            how = "python -m mascot train stage1 --recipe tiny-cpu" if self.kind == "speakers" else "an SFT run"
            return f"no {self.kind} adapters found under {where}/{sub}/ (train them with `{how}`, or pass --run/--checkpoints-dir)"
        missing = [p.name for p in pack.active if p.name not in have]
        if missing:
            self.notes.append(f"no adapter for {', '.join(missing)}: those personas run prompted on the base model")
        return None

    def speaker(self, backend: Backend, ctx: RunContext) -> Speaker:
        return self.configure(AdapterSpeaker(backend, speaker_params(backend, "persona", ctx), "persona", self.prefix), ctx)


class NoPersonaSystem(System):
    """Zero-Shot w/o personas: one assistant replies once; the reply stands in every persona's slot."""

    style, label = "no-persona", "Zero-Shot (w/o personas)"

    def generate(self, backend: Backend, pack: PersonaPack, scenarios: list[Scenario], ctx: RunContext) -> list[Round]:
        roster = pack.active
        sp = self.speaker(backend, ctx)
        dialogues = [s.to_dialogue() for s in scenarios]
        replies = sp.reply_batch([(roster[0], roster, d, None) for d in dialogues], seed=ctx.seed)
        rounds = []
        for s, d, r in zip(scenarios, dialogues, replies):
            turn = Turn("Assistant", r or "…")
            rounds.append(Round(s, [turn], [(p, d, turn.text) for p in roster], roster))
        return rounds


class SelfConsistencySystem(System):
    """Self-Consistency: per persona turn, sample k CoT replies and keep the most typical one (the
    embedding medoid) or, with sc_select=judge, the one the judge scores highest."""

    style, label = "cot", "Self-Consistency"

    def generate(self, backend: Backend, pack: PersonaPack, scenarios: list[Scenario], ctx: RunContext) -> list[Round]:
        roster, k = pack.active, ctx.sc_samples
        sp = self.speaker(backend, ctx)
        dialogues = [s.to_dialogue() for s in scenarios]
        n_prefix = [len(d.turns) for d in dialogues]
        for step, p in enumerate(roster):
            directive = Directive(p.name, p.default_action, p.default_tone)
            items = [(p, roster, d, directive) for d in dialogues for _ in range(k)]
            cands = sp.reply_batch(items, seed=ctx.seed * 101 + step)
            for i, d in enumerate(dialogues):
                group = [c or "…" for c in cands[i * k : (i + 1) * k]]
                d.add(Turn(p.name, self.pick(group, p, roster, d, ctx), directive, {"candidates": group}))
        return [make_round(s, d, d.turns[n:], roster) for s, d, n in zip(scenarios, dialogues, n_prefix)]

    def pick(self, cands: list[str], p: Persona, roster: list[Persona], d: Dialogue, ctx: RunContext) -> str:
        if ctx.sc_select == "judge" and ctx.judge is not None:
            verdicts = ctx.judge.score_batch([JudgeItem(p, roster, d, c, ctx.setting) for c in cands])
            scores = [v.aggregate if v.valid else -1.0 for v in verdicts]
            return cands[int(np.argmax(scores))]
        if ctx.sc_select != "majority":
            raise unknown_name("self-consistency selection", ctx.sc_select, ["majority", "judge"])
        from mascot.judges.embedding import shared_embedder

        vecs = shared_embedder().encode(cands)
        return cands[int(np.argmax((vecs @ vecs.T).sum(axis=1)))]


# name -> factory. Labels follow the paper's table rows.
SYSTEMS = {
    "mascot": lambda: AdapterSystem("mascot", "MASCOT", "speakers"),
    "zero-shot-no-persona": lambda: NoPersonaSystem("zero-shot-no-persona"),
    "prompted": lambda: PromptedSystem("prompted", "persona", "Prompted personas"),
    "zero-shot": lambda: PromptedSystem("zero-shot", "zero-shot", "Zero-Shot"),
    "zero-shot-cot": lambda: PromptedSystem("zero-shot-cot", "cot", "Zero-Shot CoT"),
    "few-shot": lambda: PromptedSystem("few-shot", "few-shot", "Few-Shot"),
    "few-shot-cot": lambda: PromptedSystem("few-shot-cot", "few-shot-cot", "Few-Shot+CoT"),
    "self-consistency": lambda: SelfConsistencySystem("self-consistency"),
    "sft": lambda: AdapterSystem("sft", "SFT", "sft"),
}


MODIFIERS = ("+bestN (N draws per turn, the acceptability scorer's choice)", "+stems (persona opening words)")


def make_system(name: str) -> System:
    """A system by name, with optional modifiers: `mascot+best4+stems` is the trained speakers with stems and
    best-of-4 selection."""
    base, *mods = name.split("+")
    if base not in SYSTEMS:
        raise unknown_name("system", base, list(SYSTEMS))
    system = SYSTEMS[base]()
    system.name = name
    for mod in mods:
        if mod == "stems":
            system.stems = True
        elif mod.startswith("best") and mod[4:].isdigit():
            system.best_of = check_best_of(int(mod[4:]))
        else:
            raise ConfigError(f"Unknown modifier +{mod} in system {name!r}. Valid modifiers: {', '.join(MODIFIERS)}.")
    if mods:
        system.label += " + " + " + ".join(mods)
    return system


def valid_system(name: str) -> bool:
    try:
        make_system(name)
        return True
    except ConfigError:
        return False
