"""`init [DIR]`: a new profile from a few plain questions (or flags), checked before it is written."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, fields
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, TypeVar, get_args

import yaml

from ..check.identity import IMAGE
from ..check.launcher import LAUNCHERS
from ..errors import InputError
from ..facts.kubeflow import DNS1035, DNS1123, NAME_MAX, SMOKE_SUFFIX
from ..facts.torchrun import EXECUTABLE_ENTRY, SHELLS, entry_point_kind, without_launcher
from ..files import replace_file
from ..load.presets import Preset
from ..load.profile import CheckpointFormat, Precision
from ..load.registry import ApprovedPreset, PresetRegistry
from ..load.site import Site
from ..pipeline.workload import Workload, prepare_workload
from ..plan.launcher import PROFILE_LAUNCHERS

PROFILE_FILE = "profile.yaml"
DIGEST_HOWTO = (
    "find the digest with `docker buildx imagetools inspect IMAGE` or "
    "`crane digest IMAGE`, then write IMAGE@sha256:<64 hex>"
)
METRICS_WRITERS = ("rank0", "per-rank", "all-ranks")
T = TypeVar("T")


class Prompt(Protocol):
    """A terminal: ask a question (with a default shown in brackets), say a line."""

    def ask(self, question: str, default: str | None) -> str: ...

    def say(self, line: str) -> None: ...


@dataclass
class Answers:
    """What the flags said; None: ask (on a terminal) or refuse (without one)."""

    project: str | None = None
    preset: str | None = None
    name: str | None = None
    image: str | None = None
    command: str | None = None  # as typed: `train.py --config c.yaml`
    launcher: str | None = None  # torchrun (default) or accelerate; asked where the preset offers both
    working_dir: str | None = None
    strategy: str | None = None
    local_batch: str | None = None
    grad_accum: str | None = None
    parameters: str | None = None  # 7000000000, 7e9, 7B; "" or "unknown": not declared
    precision: str | None = None
    sequence_length: str | None = None  # tokens per sample; "" or "none": not declared
    data: str | None = None  # `SOURCE:/path` or `pvc:CLAIM:/path`, comma-separated; "": none
    checkpoint_pvc: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_format: str | None = None
    resume: str | None = None
    metrics_writer: str | None = None
    metrics_tracker: str | None = None  # tensorboard, wandb, mlflow, ...; "" or "none": none


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


FLAGS = tuple(flag(f.name) for f in fields(Answers))


class _Asker:
    """One value: from its flag (bad: exit 2), else asked until the answer is good."""

    def __init__(self, answers: Answers, prompt: Prompt | None) -> None:
        self.answers, self.prompt = answers, prompt

    def say(self, line: str) -> None:
        if self.prompt is not None:
            self.prompt.say(line)

    def get(self, field: str, question: str, parse: Callable[[str], T], default: str | None = None) -> T:
        given = getattr(self.answers, field)
        if given is not None:
            try:
                return parse(given)
            except ValueError as exc:
                raise InputError(str(exc), field=flag(field), hint=getattr(exc, "hint", None)) from None
        if self.prompt is None:
            if default is not None:
                return parse(default)
            raise InputError(
                "no value, and no terminal to ask on",
                field=flag(field),
                hint=f"pass {flag(field)}, or run `runai-spec init` in a terminal",
            )
        while True:
            try:
                answer = self.prompt.ask(question, default).strip()
            except EOFError:
                raise InputError("no answer (end of input)", field=flag(field)) from None
            if not answer and default is not None:
                answer = default
            try:
                return parse(answer)
            except ValueError as exc:
                self.prompt.say(f"  {exc}")


def _label(pattern: re.Pattern[str], what: str, most: int = NAME_MAX) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if len(text) > most or not pattern.match(text):
            raise ValueError(
                f"{text!r} is not a valid {what}: lower-case letters, digits and "
                f"'-', at most {most} characters"
            )
        return text

    return parse


def name_room_for(preset: Preset) -> int:
    """The longest workload name whose pods on PRESET, the smoke test's too
    (`<name>-smoke-worker-<N>`), stay DNS labels: what the name-length rule allows."""
    pods = preset.elastic.max if preset.elastic is not None else preset.nodes
    return NAME_MAX - len(f"{SMOKE_SUFFIX}-worker-{max(0, pods - 1)}")


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"{text!r}: choose one of {', '.join(options)}")
        return text

    return parse


class BadAnswer(ValueError):
    """An answer refused, with how to write it (shown as the `hint:` of a bad flag)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


MAX_COUNT_DIGITS = 9  # a local batch or accumulation of a billion or more is a slip


def _shown(text: str) -> str:
    """text as a message quotes it: a very long answer cut, with its length."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"


def _positive(text: str) -> int:
    digits = text.lstrip("0")  # counted before int(): thousands of digits are no number
    if not (text.isascii() and text.isdigit()) or not digits:
        raise BadAnswer(f"{_shown(text)} is not a whole number of at least 1", "write digits only, e.g. 8")
    if len(digits) > MAX_COUNT_DIGITS:
        raise BadAnswer(
            f"{_shown(text)} is too large (more than {MAX_COUNT_DIGITS} digits)",
            "samples per GPU and accumulation steps are small numbers, e.g. 8",
        )
    return int(text)


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kKmMbBtT]?)$")
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
MAX_PARAMETERS = 10**15  # 1000T: far beyond any model trained today
_PARAMETERS_HINT = "write the model size as 7B, 1.3B, 7e9 or 7000000000 (at most 1000T)"


def _parameters(text: str) -> int | None:
    """7000000000, 7e9, 7B or 1.3B; blank or `unknown`: not declared. Read as a decimal
    (4.1B is 4100000000 exactly); infinity, NaN and more than MAX_PARAMETERS refused."""
    if text.lower() in ("", "unknown", "none", "-"):
        return None
    match = _SIZE.match(text)
    try:
        value = Decimal(match.group(1)) * _SCALE[match.group(2).lower()] if match else Decimal(text.strip())
    except (ArithmeticError, ValueError):
        raise BadAnswer(f"{_shown(text)} is not a number of parameters", _PARAMETERS_HINT) from None
    if not value.is_finite():
        raise BadAnswer(f"{_shown(text)} is not a finite number of parameters", _PARAMETERS_HINT)
    if value > MAX_PARAMETERS:
        raise BadAnswer(
            f"{_shown(text)} is more parameters than any model has (at most 1000T, 1e15)", _PARAMETERS_HINT
        )
    if value < 1 or value != value.to_integral_value():
        raise BadAnswer(f"{_shown(text)} is not a whole number of parameters", _PARAMETERS_HINT)
    return int(value)


def _optional_count(text: str) -> int | None:
    """A positive whole number, or blank / `none` for not declared."""
    return None if text.lower() in ("", "none", "-") else _positive(text)


def _optional_text(text: str) -> str | None:
    return None if text.lower() in ("", "none", "-") else text


def _data_parser(sources: list[str]) -> Callable[[str], list[dict[str, Any]]]:
    """`datasets-shared:/data, pvc:my-claim:/more` -> the profile's data list; blank: none."""
    howto = (
        "write SOURCE:/path for an approved data source ("
        + (", ".join(sources) or "none")
        + ") or pvc:CLAIM:/path for a claim, several comma-separated"
    )

    def parse(text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            *names, path = item.split(":")
            if (
                not path.startswith("/")
                or len(names) not in (1, 2)
                or (len(names) == 2 and names[0] != "pvc")
            ):
                raise BadAnswer(f"{_shown(item)} is not SOURCE:/path or pvc:CLAIM:/path", howto)
            name = _label(DNS1123, "data source or claim name")(names[-1])
            if len(names) == 1 and name not in sources:
                raise BadAnswer(f"{name!r} is not an approved data source", howto)
            out.append({"pvc" if len(names) == 2 else "source": name, "path": path})
        return out

    return parse


def _absolute(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"{text!r} is not an absolute path (it starts with /)")
    return text


def _text(text: str) -> str:
    if not text:
        raise ValueError("say it in a few words")
    return text


def preset_line(approved: ApprovedPreset) -> str:
    """What a preset gives, in plain words: GPUs, pods, memory, network."""
    p = approved.preset
    pods = f"{p.elastic.min} to {p.elastic.max} pods" if p.elastic else f"{p.nodes} pod{'s' * (p.nodes > 1)}"
    network = (
        "InfiniBand (" + ", ".join(f"{n} x {k}" for k, n in p.network.resources.items()) + " per pod)"
        if p.network.resources
        else "pod network"
    )
    return (
        f"{p.nodes * p.gpus_per_pod} x {p.gpu.model} ({p.gpu.memory_gb:g} GB each): "
        f"{pods} x {p.gpus_per_pod} GPU, {p.memory} memory and {p.cpu} CPUs per pod, "
        f"{network}; {p.description}"
    )


def _granted(registry: PresetRegistry, project: str) -> list[ApprovedPreset]:
    site = registry.site()
    out = []
    for name in registry.names():
        if not site.granted(project, name):
            continue
        try:
            out.append(registry.get(name))
        except InputError:  # refused (unapproved, edited, expired): never offered
            continue
    return out


def _preset_parser(granted: list[ApprovedPreset], project: str) -> Callable[[str], ApprovedPreset]:
    def parse(text: str) -> ApprovedPreset:
        for i, approved in enumerate(granted, start=1):
            if text in (str(i), approved.name):
                return approved
        raise ValueError(
            f"{text!r} is not a preset project {project} may use: answer its "
            f"number or name ({', '.join(a.name for a in granted)})"
        )

    return parse


def _image_parser(registries: list[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        match = IMAGE.match(text)
        if "@sha256:" not in text:
            raise ValueError(f"{text!r} has no digest: a tag can be moved to another image. " + DIGEST_HOWTO)
        if match is None:
            raise ValueError(f"{text!r} is not registry/repo[:tag]@sha256:<64 hex>")
        if match.group("registry") not in registries:
            raise ValueError(
                f"registry {match.group('registry')} is not allowed here: use " + ", ".join(registries)
            )
        return text

    return parse


def _command(say: Callable[[str], None]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise ValueError(f"cannot split {text!r}: {exc}") from None
        if words and words[0].rsplit("/", 1)[-1] in LAUNCHERS and entry_point_kind(words) != EXECUTABLE_ENTRY:
            words = without_launcher(words)
            say(f"  runai-spec adds the launcher for the preset; the entry point is {words}")
        if not words:
            raise ValueError("give the script and its arguments, e.g. train.py --config c.yaml")
        kind = entry_point_kind(words)
        if kind is None:
            raise ValueError(
                f"{words[0]!r}: a Python script ends in .py; a wrapper script in "
                ".sh (./run.sh), or write bash run.sh"
            )
        if kind == EXECUTABLE_ENTRY and words[0] not in SHELLS and "/" not in words[0]:
            raise ValueError(
                f"write ./{words[0]}: an executable without a '/' is looked up "
                "on PATH, not in the working directory"
            )
        return words

    return parse


def _ask_preset(a: _Asker, registry: PresetRegistry) -> tuple[str, ApprovedPreset]:
    """The project, then one of the presets it is granted (listed, numbered)."""
    project = a.get("project", "Run:ai project (your team's, e.g. nlp-lab)", _label(DNS1123, "project name"))
    granted = _granted(registry, project)
    if not granted:
        raise InputError(
            f"project {project} may use no approved preset",
            field="--project",
            hint="ask the SCC AI Engineers for a grant",
        )
    a.say(f"Presets project {project} may use:")
    for i, approved in enumerate(granted, start=1):
        a.say(f"  {i}) {approved.name}: {preset_line(approved)}")
    approved = a.get(
        "preset",
        "Layout (number or name)",
        _preset_parser(granted, project),
        default=None if len(granted) > 1 else granted[0].name,
    )
    return project, approved


def _ask_launcher(a: _Asker, site: Site, approved: ApprovedPreset) -> str:
    """The launcher, asked where the preset offers more than torchrun: several GPUs, not elastic
    (accelerate has no MIN:MAX nodes), and allowed by the site and the preset (the launcher rule
    checks the answer like any profile's)."""
    preset = approved.preset
    offered = [
        n for n in PROFILE_LAUNCHERS if n in site.launchers and n in (preset.launchers or site.launchers)
    ]
    if preset.layout == "single-gpu" or preset.elastic is not None or len(offered) < 2:
        if a.answers.launcher is not None:  # the flag, where nothing is offered: torchrun only
            return a.get("launcher", "", _choice(PROFILE_LAUNCHERS[:1]))
        return PROFILE_LAUNCHERS[0]
    return a.get(
        "launcher",
        f"Launcher ({', '.join(offered)}; accelerate: for a Hugging Face Accelerate script)",
        _choice(tuple(offered)),
        default=PROFILE_LAUNCHERS[0],
    )


def _ask_model(a: _Asker) -> dict[str, Any] | None:
    """The model's size, precision and sequence length; None when the size is unknown (then
    neither of the others is asked)."""
    parameters = a.get(
        "parameters", "Model size in parameters (e.g. 7B, 7e9; blank: unknown)", _parameters, default=""
    )
    if parameters is None:
        return None
    precisions = tuple(get_args(Precision))
    precision = a.get(
        "precision", f"Training precision ({', '.join(precisions)})", _choice(precisions), default="bf16"
    )
    sequence = a.get(
        "sequence_length", "Sequence length in tokens per sample (blank: none)", _optional_count, default=""
    )
    model: dict[str, Any] = {"parameters": parameters, "precision": precision}
    if sequence is not None:
        model["sequence_length"] = sequence
    return model


def _ask_batch(a: _Asker, world: int) -> dict[str, int]:
    """The local batch and accumulation; the global batch follows (and is said)."""
    local = a.get("local_batch", "Samples per GPU per step (local batch)", _positive)
    accum = a.get("grad_accum", "Gradient accumulation steps", _positive, default="1")
    global_batch = local * world * accum
    a.say(f"  global batch = {local} local x {world} processes x {accum} accumulation = {global_batch}")
    return {"local": local, "grad_accum": accum, "global": global_batch}


def _ask_checkpoint(a: _Asker, site: Site, project: str, strategy: str) -> dict[str, Any]:
    """Where checkpoints go, in which format, and how the script resumes from them."""
    pvc = a.get(
        "checkpoint_pvc",
        f"Checkpoint PVC (in namespace {site.namespace_pattern.format(project=project)})",
        _label(DNS1123, "claim name"),
        default=f"{project}-checkpoints",
    )
    ckpt_dir = a.get("checkpoint_dir", "Checkpoint folder (mount path)", _absolute, default="/checkpoints")
    formats = tuple(get_args(CheckpointFormat))
    fmt = a.get(
        "checkpoint_format",
        f"Checkpoint format ({', '.join(formats)})",
        _choice(formats),
        default="dcp" if strategy == "fsdp" else "torch",
    )
    resume = a.get(
        "resume",
        "How does the script resume after a restart?",
        _text,
        default=f"latest checkpoint in {ckpt_dir}",
    )
    return {"dir": ckpt_dir, "pvc": pvc, "format": fmt, "resume": resume}


def _ask_metrics(a: _Asker) -> dict[str, str]:
    """Who writes metrics, and to which tracker (if any)."""
    writer = a.get(
        "metrics_writer",
        f"Who writes metrics ({', '.join(METRICS_WRITERS)})",
        _choice(METRICS_WRITERS),
        default="rank0",
    )
    tracker = a.get(
        "metrics_tracker",
        "Metrics tracker (e.g. tensorboard, wandb, mlflow; blank: none)",
        _optional_text,
        default="",
    )
    return {"writer": writer, **({"tracker": tracker} if tracker else {})}


def build_profile(answers: Answers, registry: PresetRegistry, prompt: Prompt | None) -> dict[str, Any]:
    """The profile, field by field, in the order a researcher thinks of them."""
    a = _Asker(answers, prompt)
    site = registry.site()
    project, approved = _ask_preset(a, registry)
    preset = approved.preset
    name = a.get(
        "name",
        f"Workload name (pods are <name>-master-0, ...; at most {name_room_for(preset)} characters)",
        _label(DNS1035, "workload name (a letter first)", name_room_for(preset)),
    )
    image = a.get(
        "image", "Image, pinned by digest (registry/repo:tag@sha256:...)", _image_parser(site.registries)
    )
    command = a.get(
        "command", "Entry point: the script and its arguments (no python/torchrun)", _command(a.say)
    )
    working_dir = a.get("working_dir", "Working directory in the image", _absolute, default="/workspace")
    launcher = _ask_launcher(a, site, approved)
    strategies = tuple(preset.strategies)
    strategy = a.get(
        "strategy",
        f"Parallelism ({', '.join(strategies)})",
        _choice(strategies),
        default="ddp" if "ddp" in strategies else strategies[0],
    )
    model = _ask_model(a)
    batch = _ask_batch(a, preset.nodes * preset.gpus_per_pod)
    checkpoint = _ask_checkpoint(a, site, project, strategy)
    sources = list(site.data_sources)
    data = a.get(
        "data",
        "Data to mount: SOURCE:/path (approved: "
        f"{', '.join(sources) or 'none'}) or pvc:CLAIM:/path, comma-separated "
        "(blank: none)",
        _data_parser(sources),
        default="",
    )
    doc: dict[str, Any] = {
        "name": name,
        "project": project,
        "preset": approved.name,
        "image": image,
        **({"launcher": launcher} if launcher != PROFILE_LAUNCHERS[0] else {}),
        "command": command,
        "working_dir": working_dir,
        "strategy": strategy,
        "batch": batch,
    }
    if model is not None:
        doc["model"] = model
    doc["checkpoint"] = checkpoint
    if data:
        doc["data"] = data
    doc["metrics"] = _ask_metrics(a)
    return doc


def profile_text(doc: dict[str, Any]) -> str:
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=4096, allow_unicode=True)
    return (
        "# Written by `runai-spec init`. Next: `runai-spec validate`, then `runai-spec plan` "
        "for the AI engineer.\n" + body
    )


def init_profile(
    folder: Path,
    answers: Answers,
    *,
    prompt: Prompt | None = None,
    force: bool = False,
    registry: PresetRegistry | None = None,
) -> tuple[Path, Workload, str]:
    """Ask, build, check with every rule, and return (path, workload, text); the caller writes
    the text only when the workload has no error findings. Refuses to overwrite a profile."""
    target = folder / PROFILE_FILE
    if target.exists() and not force:
        raise InputError(
            f"{target} already exists",
            field="DIR",
            hint="choose another folder, or pass --force to replace it",
        )
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is not a folder", field="DIR")
    registry = registry or PresetRegistry()
    text = profile_text(build_profile(answers, registry, prompt))
    workload = prepare_workload(target, registry, text=text)
    return target, workload, text


def write_profile(target: Path, text: str) -> None:
    """Atomically, so an interrupted init leaves no half profile; a folder that cannot be
    made or written is bad input."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, text)  # never through a link placed at a guessable name
    except OSError as exc:
        raise InputError(
            f"cannot write: {exc.strerror or exc}", file=str(target), hint="choose a folder you can write to"
        ) from None
