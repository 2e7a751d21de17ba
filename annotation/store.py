"""StudyStore: the one object the UI, CLI and tests use to read and write pairwise studies.

Every write is one transaction (SQLite: BEGIN IMMEDIATE, so concurrent writers queue rather than
fail); submit is idempotent per assignment token, so a double-clicked vote is recorded once.
Open with `StudyStore("sqlite:///data/annotation.db")`; the schema is migrated on open.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TypeVar

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from annotation import assignment as assign
from annotation.blind import blind_task
from annotation.db import WriteGate, open_database, writer
from annotation.errors import HoldExpired, InvalidInput, StudyClosed, StudyNotFound
from annotation.identity import (
    MAX_ANNOTATOR_CHARS,
    annotator_key,
    check_link_key,
    check_session_key,
    clean_annotator,
)
from annotation.models import Annotator, Assignment, Judgment, Study, System, utcnow
from annotation.monitoring import study_overview
from annotation.schemas import (
    Finished,
    Overview,
    Progress,
    Ratings,
    StudyConfig,
    SubmitResult,
    Task,
)
from annotation.voting import HOLD_EXPIRED_MESSAGE, Vote, check_choice, check_comment, record_vote

T = TypeVar("T")
__all__ = ["MAX_ANNOTATOR_CHARS", "StudyStore"]
Clock = Callable[[], datetime]


def _config(study: Study) -> StudyConfig:
    return StudyConfig(
        id=study.id,
        name=study.name,
        instructions=study.instructions,
        annotators_per_item=study.annotators_per_item,
        attention_rate=study.attention_rate,
        min_seconds=study.min_seconds,
        hold_minutes=study.hold_minutes,
        items_per_annotator=study.items_per_annotator,
        completion_code=study.completion_code,
        is_open=study.is_open,
    )


def _person(session: Session, study_id: str, key: str) -> Annotator | None:
    """The annotator of `study_id` whose id has identity `key` (see `annotation.identity`)."""
    return session.scalars(
        select(Annotator).where(Annotator.study_id == study_id, Annotator.match_key == key)
    ).first()


# PostgreSQL's SQLSTATEs for a transaction the server aborted to let others proceed: retrying it is safe
_RETRY_SQLSTATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure


def _transient(exc: OperationalError) -> bool:
    """Whether a failed write transaction may simply run again."""
    return "locked" in str(exc).lower() or getattr(exc.orig, "sqlstate", None) in _RETRY_SQLSTATES


class StudyStore:
    """Pairwise-study storage on any SQLAlchemy URL; safe to share across threads."""

    def __init__(
        self, url: str | None = None, *, engine: Engine | None = None, clock: Clock = utcnow
    ) -> None:
        if engine is None:
            if not url:
                raise InvalidInput("StudyStore needs a database URL, e.g. sqlite:///data/annotation.db.")
            engine = open_database(url)
        self.engine = engine
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write_maker = sessionmaker(writer(engine), expire_on_commit=False)
        self._gate = WriteGate(engine)
        self._clock = clock

    def now(self) -> datetime:
        """The store's clock (naive UTC): the time written on rows created now."""
        return self._clock()

    def close(self) -> None:
        """Release pooled connections (tests and short CLI runs)."""
        self.engine.dispose()

    # ---- transactions -------------------------------------------------------------------------
    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A read-only session in one consistent snapshot (used by importing/exporting too)."""
        with self._read() as session, session.begin():
            yield session

    def write(self, fn: Callable[[Session], T], attempts: int = 5) -> T:
        """Run `fn(session)` in one write transaction and return its result; all or nothing.

        Retried only when the transaction failed for a transient reason: the database stayed locked past the busy
        timeout (SQLite under load), or the server aborted it as a deadlock or serialization victim (PostgreSQL).
        """
        for attempt in range(attempts):
            try:
                with self._gate.hold(), self._write_maker() as session, session.begin():
                    return fn(session)
            except OperationalError as exc:
                if not _transient(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    @staticmethod
    def study_row(session: Session, study_id: str, *, lock: bool = False) -> Study:
        """The study row inside `session` (locked FOR UPDATE on servers that support it)."""
        stmt = select(Study).where(Study.id == study_id)
        study = session.scalars(stmt.with_for_update() if lock else stmt).first()
        if study is None:
            known = ", ".join(session.scalars(select(Study.id).order_by(Study.id))) or "none yet"
            raise StudyNotFound(
                f"No study {study_id!r} in this database (known: {known}). Check the study id in "
                "the link, or create it with `python -m annotation create-study`."
            )
        return study

    # ---- studies ------------------------------------------------------------------------------
    def create_study(self, *, config: StudyConfig) -> StudyConfig:
        """Create a study; its id must be new."""

        def run(session: Session) -> StudyConfig:
            if session.get(Study, config.id) is not None:
                raise InvalidInput(
                    f"Study {config.id!r} already exists. Pick another id, or import more pairs into it."
                )
            study = Study(
                id=config.id,
                name=config.name or config.id,
                instructions=config.instructions,
                annotators_per_item=config.annotators_per_item,
                attention_rate=config.attention_rate,
                min_seconds=config.min_seconds,
                hold_minutes=config.hold_minutes,
                items_per_annotator=config.items_per_annotator,
                completion_code=config.completion_code,
                order_secret=secrets.token_hex(16),
                link_key=secrets.token_urlsafe(12),
                is_open=config.is_open,
                created_at=self._clock(),
            )
            session.add(study)
            session.flush()
            return _config(study)

        return self.write(run)

    def set_open(self, *, study_id: str, is_open: bool) -> StudyConfig:
        """Open or close a study; a closed study hands out no new items (held ones can still be sent)."""

        def run(session: Session) -> StudyConfig:
            study = self.study_row(session, study_id, lock=True)
            study.is_open = is_open
            return _config(study)

        return self.write(run)

    def get_study(self, *, study_id: str) -> StudyConfig:
        """Settings of one study."""
        with self.reading() as session:
            return _config(self.study_row(session, study_id))

    def list_studies(self) -> list[StudyConfig]:
        """All studies, oldest first."""
        with self.reading() as session:
            return [_config(s) for s in session.scalars(select(Study).order_by(Study.created_at, Study.id))]

    def link_key(self, *, study_id: str) -> str:
        """The study's link key, the `key=` part of the annotator link (researcher side only)."""
        with self.reading() as session:
            return self.study_row(session, study_id).link_key

    def new_link_key(self, *, study_id: str) -> str:
        """Replace the study's link key (a leaked link then admits no new ids; bound ids continue); returns it."""

        def run(session: Session) -> str:
            study = self.study_row(session, study_id, lock=True)
            study.link_key = secrets.token_urlsafe(12)
            return study.link_key

        return self.write(run)

    def systems(self, *, study_id: str) -> list[str]:
        """Names of the systems compared in a study (researcher side only)."""
        with self.reading() as session:
            return list(
                session.scalars(select(System.name).where(System.study_id == study_id).order_by(System.name))
            )

    # ---- annotator flow -----------------------------------------------------------------------
    def next_task(
        self, *, study_id: str, annotator: str, session_key: str | None = None, link_key: str | None = None
    ) -> Task | Finished:
        """The annotator's current task (same one after a reload), a new one, or `Finished`.

        `session_key` identifies the browser (the annotator page always gives one): the first key used with an
        annotator id is bound to it, and a different key is refused with AnnotatorInUse, so a second browser
        cannot act under the same id. `link_key` is the `key=` of the link the page was opened with (the page
        always gives one, "" when absent): a new or released id is admitted only with the study's key, else
        LinkKeyInvalid. None for either skips its check (the CLI and the Python API are trusted).
        """
        key = annotator_key(annotator)
        return self.write(lambda session: self._serve(session, study_id, annotator, self._clock(), key=key,
                                                      session_key=session_key, link_key=link_key))

    def release_annotator(self, *, study_id: str, annotator: str) -> bool:
        """Forget the browser bound to an annotator id (they lost it); False if the study has no such id.

        The next browser that opens the study's full link under this id takes it over and resumes its held task."""
        key = annotator_key(annotator)

        def run(session: Session) -> bool:
            person = _person(session, self.study_row(session, study_id).id, key)
            if person is None:
                return False
            person.session_key = None
            return True

        return self.write(run)

    def _serve(
        self, session: Session, study_id: str, external: str, now: datetime, annotator_id: int | None = None, *,
        key: str = "", session_key: str | None = None, link_key: str | None = None,
    ) -> Task | Finished:
        """Serve inside a write transaction; `annotator_id` skips the lookup by id (then `external` is unused)."""
        study = self.study_row(session, study_id, lock=True)
        person = session.get(Annotator, annotator_id) if annotator_id is not None else _person(session, study.id, key)
        check_link_key(study, person, link_key)
        if person is None:
            if not study.is_open:
                raise StudyClosed("This study is closed and takes no new annotators. Thank you for your interest.")
            person = Annotator(study_id=study.id, external_id=clean_annotator(external), match_key=key,
                               created_at=now)
            session.add(person)
            session.flush()
        check_session_key(person, session_key)
        current, progress = assign.acquire(session, study=study, annotator=person, now=now)
        if current is None:
            # The code is earned by work: at least one finished task (which the quota implies).
            return Finished(progress=progress, completion_code=study.completion_code if progress.done > 0 else None,
                            reason=assign.why_finished(session, study=study, annotator_id=person.id, done=progress.done))
        return blind_task(session, study=study, assignment=current, progress=progress)

    def submit(
        self,
        *,
        token: str,
        choice: str,
        left: Ratings = Ratings(),
        right: Ratings = Ratings(),
        comment: str = "",
        seconds: float | None = None,
    ) -> SubmitResult:
        """Record a vote given as shown (A = left); idempotent: a repeat returns the first result.

        Args:
            token: the assignment token of the task being answered.
            choice: "A", "B", "tie" or "both_bad", as the annotator saw the sides.
            left, right: optional 1-5 ratings of the left and right responses.
            comment: free text.
            seconds: time taken; by default measured on the server from when the task was served.

        Raises:
            HoldExpired: the hold lapsed and the item went to someone else; nothing was recorded.
        """
        vote = Vote(token, check_choice(choice), left, right, check_comment(comment), seconds)
        try:
            result = self.write(lambda session: record_vote(session, vote, now=self._clock())[0])
        except IntegrityError:
            return self._race_winner(token)
        if result is None:
            raise HoldExpired(HOLD_EXPIRED_MESSAGE)
        return result

    def submit_and_next(
        self,
        *,
        token: str,
        choice: str,
        left: Ratings = Ratings(),
        right: Ratings = Ratings(),
        comment: str = "",
        seconds: float | None = None,
    ) -> tuple[SubmitResult | None, Task | Finished]:
        """Record a vote and serve the annotator's next task in one transaction (the page's cycle).

        Same arguments as `submit`. The result is None when the hold had expired (nothing recorded);
        the next task is served either way.
        """
        vote = Vote(token, check_choice(choice), left, right, check_comment(comment), seconds)

        def run(session: Session) -> tuple[SubmitResult | None, Task | Finished]:
            now = self._clock()
            # the study row first, as every serving transaction takes it: the same lock order, no deadlock on PostgreSQL
            study_id = session.scalar(select(Assignment.study_id).where(Assignment.token == vote.token))
            if study_id is not None:
                self.study_row(session, study_id, lock=True)
            result, current = record_vote(session, vote, now=now)
            return result, self._serve(session, current.study_id, "", now, annotator_id=current.annotator_id)

        try:
            return self.write(run)
        except IntegrityError:
            result = self._race_winner(token)
            with self.reading() as session:
                study_id, external = session.execute(
                    select(Assignment.study_id, Annotator.external_id)
                    .join(Annotator, Annotator.id == Assignment.annotator_id)
                    .where(Assignment.token == token)
                ).one()
            return result, self.next_task(study_id=study_id, annotator=external)

    def _race_winner(self, token: str) -> SubmitResult:
        """After a unique-constraint clash (a concurrent identical submit on PostgreSQL): its result."""
        with self.reading() as session:
            row = session.scalars(
                select(Judgment)
                .join(Assignment, Assignment.id == Judgment.assignment_id)
                .where(Assignment.token == token)
            ).first()
        if row is None:
            raise StudyNotFound(f"Task {token!r} could not be recorded; reload the page and vote again.")
        return SubmitResult(row.id, True, row.too_fast, row.attention_passed)

    def progress(self, *, study_id: str, annotator: str) -> Progress:
        """`done / total` for one annotator (0 / estimate if they have not started)."""
        key = annotator_key(annotator)
        with self.reading() as session:
            study = self.study_row(session, study_id)
            person_id = session.scalar(
                select(Annotator.id).where(Annotator.study_id == study.id, Annotator.match_key == key)
            )
            return assign.progress(session, study=study, annotator_id=person_id or -1, now=self._clock())

    # ---- monitoring ---------------------------------------------------------------------------
    def overview(self, *, study_id: str) -> Overview:
        """Counts a researcher watches while a study runs (see `annotation.monitoring`)."""
        with self.reading() as session:
            return study_overview(session, study=self.study_row(session, study_id), now=self._clock())
