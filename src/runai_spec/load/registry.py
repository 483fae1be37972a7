"""PresetRegistry: a folder's presets, accepted only when the signed ledger vouches for them."""

import datetime as dt
import difflib
import hashlib
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import InputError, PresetError
from ..facts.kubeflow import DNS1123, NAME_MAX
from ..records import Record
from ..resources import shipped_dir
from .ledger import LEDGER_FILE, Approval, Ledger, approval_expiry, write_ledger
from .presets import Preset, preset_problem
from .signing import SignedApproval, Statement, sign_approval, verify_approval
from .site import SITE_FILE, Site
from .sshsig import ALLOWED_SIGNERS_FILE, SignatureError
from .yaml import load_mapping_lines, load_mapping_text, read_text

_FileModel = TypeVar("_FileModel", bound=BaseModel)  # what an approved file holds: Site, Preset


class ApprovedPreset(Record):
    """A preset that passed every ledger check, with its approval record. (Its `lines` are
    compared too: they come from the same file as the preset.)"""

    name: str
    preset: Preset
    sha256: str
    approval: Approval
    lines: dict[str, int]  # field -> line


class ApprovedSite(Record):
    """The site file that passed every ledger check, with its approval record."""

    site: Site
    approval: Approval

    @property
    def sha256(self) -> str:
        return self.approval.sha256


class VerifyResult(Record):  # not a dataclass: start-up cost (sshsig.py)
    """What `presets verify` found: one line per file, problems first."""

    ok: tuple[str, ...]
    problems: tuple[str, ...]


def default_presets_dir() -> Path:
    """The presets/ shipped with runai-spec (tests replace this function)."""
    return shipped_dir("presets")


def pinned_signers() -> Path:
    """The allowed_signers this installation pins: the shipped presets/'s. Synced presets
    (`presets sync`) verify against it, never against a file that came with them."""
    return default_presets_dir() / ALLOWED_SIGNERS_FILE


def synced_presets_dir() -> Path:
    """Where `presets sync` keeps the site's current presets: a cache, verified on every read."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "runai-spec" / "presets"


SYNC_RECORD = ".synced.json"  # what `presets sync` fetched, from where, when (shown, never trusted)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pydantic_error(exc: ValidationError, source: str) -> PresetError:
    """Every problem of the file, one `error:` line each, and the engineers' hint."""
    errors = [
        PresetError(e["msg"], file=source, field=".".join(str(p) for p in e["loc"]) or None)
        for e in exc.errors()
    ]
    return PresetError(
        errors[0].message,
        file=source,
        field=errors[0].field,
        hint="presets are engineer-owned; ask an SCC AI Engineer",
        also=[e.lines()[0] for e in errors[1:]],
    )


class PresetRegistry:
    """Presets of one folder, accepted only when the approvals ledger vouches for them."""

    def __init__(
        self, root: Path | None = None, *, today: dt.date | None = None, signers: Path | None = None
    ) -> None:
        synced = synced_presets_dir()
        # no folder named: the synced presets where `presets sync` left a complete set,
        # verified against the installation's allowed_signers; else the shipped ones
        self.synced = root is None and (synced / SYNC_RECORD).is_file()
        self.root = root or (synced if self.synced else default_presets_dir())
        self.signers = signers or (pinned_signers() if self.synced else None)
        self.today = today or dt.date.today()
        self._ledger: Ledger | None = None
        self._site: ApprovedSite | None = None
        self._presets: dict[str, ApprovedPreset] = {}

    # -- ledger ---------------------------------------------------------------
    @property
    def ledger_path(self) -> Path:
        return self.root / LEDGER_FILE

    def ledger(self) -> Ledger:
        if self._ledger is None:
            source = str(self.ledger_path)
            if self.ledger_path.is_symlink():
                raise PresetError("the approvals ledger is a symlink", file=source)
            raw = load_mapping_text(read_text(self.ledger_path), source)
            try:
                self._ledger = Ledger.model_validate(raw)
            except ValidationError as exc:
                raise _pydantic_error(exc, source) from None
        return self._ledger

    def names(self) -> list[str]:
        """Preset names stored in the folder (site and ledger excluded), sorted."""
        return sorted(p.name[:-5] for p in self.root.glob("*.yaml") if p.name not in (SITE_FILE, LEDGER_FILE))

    @property
    def allowed_signers_path(self) -> Path:
        """The engineers' keys that vouch for this folder: its own allowed_signers (a presets
        repository's checkout), or the pinned one given (synced presets)."""
        return self.signers or self.root / ALLOWED_SIGNERS_FILE

    def _approved_bytes(self, filename: str, what: str) -> tuple[bytes, Approval]:
        path = self.root / filename
        source = str(path)
        hint_approve = approve_hint(what)
        if path.is_symlink():
            raise PresetError(
                "is a symlink; presets must be plain files",
                file=source,
                hint="replace the link with the reviewed file",
            )
        if not path.is_file():
            raise PresetError("no such file", file=source)
        data = path.read_bytes()
        entry = self.ledger().approvals.get(filename)
        if entry is None:
            raise PresetError(
                "not recorded in the approvals ledger", file=source, field="approvals", hint=hint_approve
            )
        if _sha256(data) != entry.sha256:
            raise PresetError(
                "edited since it was approved (sha256 differs from the ledger)",
                file=source,
                field="sha256",
                hint=hint_approve,
            )
        self._verify_signature(filename, entry, source, hint_approve)
        if dt.date.fromisoformat(entry.approved_at) > self.today:
            # signed at a date still to come: no key window (valid-after) and no review
            # vouches for it yet (the signer chose the date)
            raise PresetError(
                f"approval dated {entry.approved_at}, after today ({self.today.isoformat()})",
                file=source,
                field="approved_at",
                hint=hint_approve,
            )
        if entry.expires is not None and dt.date.fromisoformat(entry.expires) < self.today:
            raise PresetError(
                f"approval expired on {entry.expires}", file=source, field="expires", hint=hint_approve
            )
        return data, entry

    def _approved_model(
        self, filename: str, what: str, model: type[_FileModel]
    ) -> tuple[_FileModel, dict[str, int], Approval]:
        """FILENAME as approved (_approved_bytes), validated as MODEL: the model, the line of
        each of its fields and the ledger entry."""
        data, entry = self._approved_bytes(filename, what)
        source = str(self.root / filename)
        raw, lines = load_mapping_lines(data.decode("utf-8"), source)
        try:
            return model.model_validate(raw), lines, entry
        except ValidationError as exc:
            raise _pydantic_error(exc, source) from None

    def _verify_signature(self, filename: str, entry: Approval, source: str, hint: str) -> None:
        """Refuse the approval of FILENAME unless an engineer listed in allowed_signers signed
        exactly this entry (as an edited file is refused: one error, exit 2)."""
        if entry.signature is None:
            raise SignatureError(
                f"the approval in {LEDGER_FILE} is not signed; approvals are "
                "signed with an AI Engineer's SSH key",
                file=source,
                field="signature",
                hint=hint,
            )
        try:  # in-process (signing.verify_approval): no ssh-keygen needed to load a preset
            statement = Statement(filename, entry.sha256, entry.approved_by, entry.approved_at, entry.expires)
            verify_approval(
                SignedApproval(statement, entry.signature), self.allowed_signers_path, source=source
            )
        except SignatureError as exc:
            located = exc.located(source)
            if located.hint is None:
                located.hint = hint
            raise located from None

    # -- site and presets -----------------------------------------------------
    def approved_site(self) -> ApprovedSite:
        """The site file as the ledger vouches for it, with its approval record, or a
        PresetError saying exactly why not."""
        if self._site is None:
            site, lines, entry = self._approved_model(SITE_FILE, "site", Site)
            site._lines = lines
            self._site = ApprovedSite(site, entry)
        return self._site

    def site(self) -> Site:
        """The approved site file (approved_site, without its approval)."""
        return self.approved_site().site

    def get(self, name: str) -> ApprovedPreset:
        """The approved preset NAME, or a PresetError saying exactly why not."""
        if name in self._presets:
            return self._presets[name]
        if not _is_label(name) or name in ("site", "approvals"):
            raise PresetError(
                f"{name!r} is not a preset name (a plain lowercase label)",
                field="preset",
                hint="run `runai-spec presets list`",
            )
        filename = f"{name}.yaml"
        if not (self.root / filename).exists() and not (self.root / filename).is_symlink():
            close = difflib.get_close_matches(name, self.names(), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "run `runai-spec presets list`"
            raise PresetError(f"unknown preset {name!r}", field="preset", hint=hint)
        preset, lines, entry = self._approved_model(filename, name, Preset)
        source = str(self.root / filename)
        problem = preset_problem(preset) or _priority_problem(preset, self.site())
        if problem:
            about_priority = problem.endswith(PRIORITY_TAIL)
            raise PresetError(
                problem,
                file=source,
                line=lines.get("priority") if about_priority else None,
                field="priority" if about_priority else None,
                hint=PRIORITY_HINT if about_priority else None,
            )
        approved = ApprovedPreset(name, preset, entry.sha256, entry, lines)
        self._presets[name] = approved
        return approved

    def verify(self) -> VerifyResult:
        """Check every file in the folder against the ledger and its signatures (for CI),
        in-process: no ssh-keygen needed."""
        ok: list[str] = []
        problems: list[str] = []
        try:
            ledger = self.ledger()
        except InputError as exc:
            return VerifyResult((), (str(exc).splitlines()[0],))
        signers = self.allowed_signers_path
        if signers.is_symlink() or not signers.is_file():
            return VerifyResult(
                (),
                (
                    f"error: {signers}: allowed_signers: no such plain file; "
                    "no approval can verify without the engineers' keys",
                ),
            )
        files = sorted(
            p.name
            for p in self.root.iterdir()
            if p.name not in (LEDGER_FILE, ALLOWED_SIGNERS_FILE) and not p.name.startswith(".")
        )
        for filename in files:
            if not filename.endswith(".yaml"):
                problems.append(f"error: {self.root / filename}: not a preset file (*.yaml)")
                continue
            try:
                if filename == SITE_FILE:
                    self.site()
                else:
                    self.get(filename[:-5])
                ok.append(filename)
            except InputError as exc:
                line = exc.lines()[0]
                if line not in problems:  # a site file that fails, failing every preset: once
                    problems.append(line)
        for filename in sorted(set(ledger.approvals) - set(files)):
            problems.append(
                f"error: {self.ledger_path}: approvals.{filename}: "
                "ledger entry for a file that does not exist"
            )
        return VerifyResult(tuple(ok), tuple(problems))

    def approve(self, name: str, key: Path, *, expires: str | None = None) -> Approval:
        """Sign the current bytes of NAME (or `site`) with the engineer's SSH KEY and record
        the signed approval in the ledger; the approver is the principal allowed_signers
        lists for KEY."""
        filename = SITE_FILE if name == "site" else f"{name}.yaml"
        path = self.root / filename
        if name != "site" and (not _is_label(name)):
            raise PresetError(f"{name!r} is not a preset name", field="preset")
        if path.is_symlink() or not path.is_file():
            raise PresetError("no such plain file", file=str(path))
        text = read_text(path)
        raw = load_mapping_text(text, str(path))
        try:
            if name == "site":
                Site.model_validate(raw)
            else:
                preset = Preset.model_validate(raw)
                problem = preset_problem(preset) or _priority_problem(preset, self.site())
                if problem:
                    about_priority = problem.endswith(PRIORITY_TAIL)
                    raise PresetError(
                        problem,
                        file=str(path),
                        field="priority" if about_priority else None,
                        hint=PRIORITY_HINT if about_priority else None,
                    )
        except ValidationError as exc:
            raise _pydantic_error(exc, str(path)) from None
        current = self.ledger().approvals if self.ledger_path.exists() else {}
        expires = approval_expiry(name, expires, current.get(filename), self.today)
        signed = sign_approval(
            filename,
            _sha256(path.read_bytes()),
            key,
            self.allowed_signers_path,
            approved_at=self.today.isoformat(),
            expires=expires,
        )
        statement = signed.statement
        entry = Approval(
            sha256=statement.sha256,
            approved_by=statement.approver,
            approved_at=statement.approved_at,
            expires=statement.expires,
            signature=signed.signature,
        )
        approvals = dict(current)
        approvals[filename] = entry
        write_ledger(self.ledger_path, approvals)
        self._ledger = None
        self._presets.pop(name, None)
        if name == "site":
            self._site = None
        return entry


def approve_hint(what: str) -> str:
    """How a file gets (re-)approved: reviewed, then signed by an engineer's key."""
    return (
        f"an SCC AI Engineer reviews it and runs `runai-spec presets approve {what} "
        "--key ~/.ssh/id_ed25519` (a key listed in presets/allowed_signers)"
    )


def _is_label(name: str) -> bool:
    return bool(DNS1123.match(name)) and len(name) <= NAME_MAX


PRIORITY_TAIL = ": the scheduler would silently run the job as low, preemptible"
PRIORITY_HINT = "use one of the site's priorities (site.yaml `priorities`), e.g. low or medium"


def _priority_problem(preset: Preset, site: Site) -> str | None:
    if preset.priority not in site.priorities:
        return (
            f"{preset.priority!r} is not a class the cluster serves "
            f"({', '.join(site.priorities)}){PRIORITY_TAIL}"
        )
    return None


def site_summary(approved: ApprovedSite) -> dict[str, Any]:
    """A plain mapping of the site file and its approval, for `presets show site`."""
    return {
        "name": "site",
        "sha256": approved.sha256,
        "approval": approved.approval.model_dump(exclude_none=True, exclude={"signature"}),
        **approved.site.model_dump(exclude_none=True),
    }


def preset_summary(approved: ApprovedPreset) -> dict[str, Any]:
    """A plain mapping of the preset and its approval, for `presets show`."""
    return {
        "name": approved.name,
        "sha256": approved.sha256,
        "approval": approved.approval.model_dump(exclude_none=True, exclude={"signature"}),
        **approved.preset.model_dump(exclude_none=True),
    }
