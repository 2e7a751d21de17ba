"""Persona packs: YAML files describing the characters of a companion group.

A pack (e.g. `emotional-support`, `meeting`) lists personas with their role, goal, behaviours,
things they must not do, style, example lines, colour/avatar and an optional LoRA adapter path.
Packs ship in `mascot/packs/`; any other YAML path works too.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mascot.errors import PersonaError
from mascot.group.reflection import fill

PACKS_DIR = Path(__file__).resolve().parent.parent / "packs"

_REQUIRED = ("name", "role", "goal")
_LIST_FIELDS = ("behaviours", "avoid", "examples", "actions", "tones", "stems")


@dataclass
class Persona:
    """One character of the group; the speaker prompt and the judge are built from these fields."""

    name: str
    role: str
    goal: str
    behaviours: list[str] = field(default_factory=list)
    avoid: list[str] = field(default_factory=list)
    style: str = ""
    examples: list[str] = field(default_factory=list)
    color: str = "#6b7280"
    avatar: str = "🙂"
    adapter: str | None = None
    enabled: bool = True
    default_action: str = ""
    default_tone: str = ""
    aliases: list[str] = field(default_factory=list)
    # the director's menu for this persona: it picks one action and one tone by scoring them (default first)
    actions: list[str] = field(default_factory=list)
    tones: list[str] = field(default_factory=list)
    # opening words the speaker may prefill for a reply (one per draw, by seed), when stems are switched on
    stems: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """Filesystem/adapter-safe identifier (lower-case name)."""
        return "".join(c if c.isalnum() else "-" for c in self.name.lower()).strip("-")

    def describe(self) -> str:
        """A compact one-paragraph description used by the director, judges and reward model."""
        parts = [f"{self.name} ({self.role}): {self.goal}"]
        if self.behaviours:
            parts.append("Does: " + "; ".join(self.behaviours) + ".")
        if self.avoid:
            parts.append("Never: " + "; ".join(self.avoid) + ".")
        if self.style:
            parts.append("Style: " + self.style)
        return " ".join(parts)

    def action_options(self) -> list[str]:
        """The actions the director may give this persona: the default, then the pack's menu (no repeats)."""
        return _unique([self.default_action, *self.actions])

    def tone_options(self) -> list[str]:
        return _unique([self.default_tone, *self.tones])

    def stem(self, seed: int | None, message: str = "") -> str:
        """The opening words of a draw with this seed ("" without stems): each seed picks one, reproducibly. A
        stem with `{situation}` reflects the user's `message` (`reflection.fill`); when it cannot, the next
        stem that can be filled is used."""
        n = len(self.stems)
        for k in range(n):
            filled = fill(self.stems[((seed or 0) + k) % n], message)
            if filled is not None:
                return filled
        return ""

    def matches(self, token: str) -> bool:
        """True if `token` names this persona (name, alias or role, case-insensitive)."""
        t = token.strip().strip("@*:\"'`.,").lower()
        names = {self.name.lower(), self.role.lower(), *(a.lower() for a in self.aliases)}
        return t in names or (t.startswith("the ") and t[4:] in names) or f"the {t}" in names

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _unique(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        item = item.strip()
        if item and item not in out:
            out.append(item)
    return out


@dataclass
class PersonaPack:
    """A named set of personas plus the scenario starters shown in the chat."""

    name: str
    title: str
    setting: str
    description: str
    personas: list[Persona]
    starters: list[str] = field(default_factory=list)
    source: str = ""
    concern_opener: str = ""  # the persona who first asks about safety after a worrying message
    # the checkpoints run whose speakers/ hold this pack's adapters ("": the run the chat was started with)
    speakers_run: str = ""

    @property
    def active(self) -> list[Persona]:
        """Personas switched on for this session, in pack order."""
        return [p for p in self.personas if p.enabled]

    def get(self, name: str) -> Persona:
        """Look a persona up by name, alias or role; raises PersonaError listing the roster."""
        for p in self.personas:
            if p.matches(name):
                return p
        raise PersonaError(
            f"No persona named {name!r} in pack {self.name!r}. "
            f"Personas: {', '.join(p.name for p in self.personas)}."
        )

    def concern_persona(self, roster: list[Persona] | None = None) -> Persona:
        """Who opens a concern turn in `roster` (default: the active personas): the pack's `concern_opener`
        when it is switched on, else the first persona."""
        return concern_persona(roster if roster is not None else self.active, self.concern_opener)

    def copy(self) -> PersonaPack:
        """A deep copy, so a session can edit personas without touching the shared pack."""
        return copy.deepcopy(self)


def concern_persona(roster: list[Persona], opener: str = "") -> Persona:
    """The persona of `roster` named (or aliased) `opener`, else the first one."""
    if not roster:
        raise PersonaError("No persona is switched on: turn at least one persona on to chat.")
    return next((p for p in roster if opener and p.matches(opener)), roster[0])


def list_packs() -> list[str]:
    """Names of the packs bundled in `mascot/packs/`."""
    return sorted(p.stem for p in PACKS_DIR.glob("*.yaml"))


def _persona_from_dict(raw: Any, source: str, index: int) -> Persona:
    where = f"{source}: personas[{index}]"
    if not isinstance(raw, dict):
        raise PersonaError(f"{where} must be a mapping with fields name, role, goal; got {type(raw).__name__}.")
    for key in _REQUIRED:
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            raise PersonaError(
                f"{where}: field '{key}' is missing or empty. Every persona needs "
                f"{', '.join(_REQUIRED)} as non-empty strings."
            )
    for key in _LIST_FIELDS + ("aliases",):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PersonaError(f"{where}: field '{key}' must be a list of strings.")
    known = set(Persona.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise PersonaError(f"{where}: unknown field(s) {', '.join(unknown)}. Valid fields: {', '.join(sorted(known))}.")
    if "enabled" in raw and not isinstance(raw["enabled"], bool):
        raise PersonaError(f"{where}: field 'enabled' must be true or false.")
    return Persona(**raw)


def pack_from_dict(data: Any, source: str = "<dict>") -> PersonaPack:
    """Validate a parsed YAML document and build a PersonaPack, naming the file and field on error."""
    if not isinstance(data, dict):
        raise PersonaError(f"{source}: the top level must be a mapping with 'name' and 'personas'.")
    personas_raw = data.get("personas")
    if not isinstance(personas_raw, list) or not personas_raw:
        raise PersonaError(f"{source}: field 'personas' must be a non-empty list.")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PersonaError(f"{source}: field 'name' is missing or empty.")
    personas = [_persona_from_dict(p, source, i) for i, p in enumerate(personas_raw)]
    seen: set[str] = set()
    for p in personas:
        if p.name.lower() in seen:
            raise PersonaError(f"{source}: persona name {p.name!r} appears twice; names must be unique.")
        seen.add(p.name.lower())
    starters = data.get("starters", [])
    if not isinstance(starters, list) or not all(isinstance(s, str) for s in starters):
        raise PersonaError(f"{source}: field 'starters' must be a list of strings.")
    opener = data.get("concern_opener", "")
    if not isinstance(opener, str) or (opener and not any(p.matches(opener) for p in personas)):
        raise PersonaError(f"{source}: field 'concern_opener' must name one of the personas "
                           f"({', '.join(p.name for p in personas)}); got {opener!r}.")
    speakers_run = data.get("speakers_run", "")
    if not isinstance(speakers_run, str):
        raise PersonaError(f"{source}: field 'speakers_run' must be the name of a run under the checkpoints folder.")
    return PersonaPack(
        name=name,
        title=str(data.get("title", name)),
        setting=str(data.get("setting", name)),
        description=str(data.get("description", "")),
        personas=personas,
        starters=starters,
        source=source,
        concern_opener=opener,
        speakers_run=speakers_run.strip(),
    )


def load_pack(name_or_path: str | Path) -> PersonaPack:
    """Load a bundled pack by name or any pack YAML by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PACKS_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise PersonaError(
                f"Unknown persona pack {str(name_or_path)!r}. Bundled packs: {', '.join(list_packs())}; "
                "or pass the path of a pack YAML file."
            )
    if not path.exists():
        raise PersonaError(f"Persona pack file {path} does not exist.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PersonaError(f"{path}: not valid YAML ({exc}).") from exc
    return pack_from_dict(data, str(path))
