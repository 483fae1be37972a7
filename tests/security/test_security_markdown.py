"""Issue 12 item 4: hostile values never change the structure of a Markdown output.

Each Markdown output (plan's ticket, `validate -f markdown`, `diff -f markdown`, the rule
catalogue) is parsed with markdown-it-py, and its token structure (types, tags, nesting; not
the text) compared with the same output for a benign value. `explain`'s annotated YAML
stays YAML whatever the profile's path."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from conftest import BASE_PROFILE, ROOT, example_job, run
from runai_spec.check.catalogue import RULES, check_all
from runai_spec.check.rules import Context
from runai_spec.errors import InputError, Location
from runai_spec.findings import Finding
from runai_spec.load.profile import parse_profile
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.diff import ObjectDiff, ProfileDiff, as_markdown
from runai_spec.outputs.explain import explain_workload
from runai_spec.outputs.report import rules_markdown, validate_markdown
from runai_spec.outputs.review import review_markdown
from runai_spec.pipeline.stream import ProfileCheck
from runai_spec.pipeline.workload import Workload
from runai_spec.plan.plan import plan_workload
from runai_spec.render import render_plan
from runai_spec.render.manifests import dump
from runai_spec.text import md_code, md_text

MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
REGISTRY = PresetRegistry(ROOT / "presets")

# What a value would use to forge a section, hide one, or leave its cell, list or block.
PIECES = [
    "## Findings",
    "\nnone\n",
    "<!--",
    "-->",
    "|",
    "```",
    "````",
    "~~~",
    "\r",
    "\n",
    "\r\n",
    "\n\n",
    "<details>",
    "</details>",
    "<b>",
    "*",
    "**",
    "_",
    "__",
    "[x](http://a)",
    "![i](x)",
    "<http://a>",
    "&lt;",
    "&#60;",
    "&amp;",
    "\\",
    "\\|",
    "    ",
    "1. ",
    "2) ",
    "- ",
    "+ ",
    "> ",
    "# ",
    "===",
    "---",
    "***",
    "<",
    ">",
    "&",
    "`",
    "``",
    "$",
    "$$",
    "~~",
    "\t",
    "  \n",
    "\\\n",
    " ",
    "[^1]",
    "[a]: http://b",
    ":x:",
    "@team",
    "| --- |",
    "<script>",
    "=",
    "-",
    "#",
]
# ... and what would open YAML or a template tag, break a line (U+2028, U+2029) or turn the
# reading order (the bidi overrides).
PIECES += [
    "\u2028",
    "\u2029",
    "\u202e",
    "\u202d",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200f",
    "{{",
    "}}",
    "{%",
    "%}",
    ": ",
    "? ",
    ",",
    "&a",
    "*a",
    "!!str",
    "%YAML",
    "'",
    '"',
    "...",
    "\u00a0",
]
CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff")
# Text a profile can carry (the loader refuses control characters but tab, CR and LF); a run
# of characters is one draw (st.text), so an example costs a few draws.
PROFILE_TEXT = st.lists(st.sampled_from(PIECES) | st.text(CHARS, min_size=1, max_size=4), max_size=12).map(
    "".join
)
# Text from anywhere (a server, a file name, a message): any character at all, NUL, ESC,
# DEL, U+0085 and the C1 controls included.
CONTROLS = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b[2J", "\x1f", "\x7f", "\x85", "\x9b", "\x9f"]
ANY_TEXT = st.lists(
    st.sampled_from([*PIECES, *CONTROLS])
    | st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=4),
    max_size=12,
).map("".join)


def test_the_pieces_include_what_the_issue_names() -> None:
    for piece in [
        "\u2028",
        "\u2029",
        "\r",
        "\u202e",
        "{{",
        "{%",
        "<!--",
        "`",
        "|",
        ": ",
        "- ",
        "? ",
        "&a",
        "*a",
        "#",
    ]:
        assert piece in PIECES, piece
    assert {"\x00", "\x01", "\x1f", "\x85"} <= set(CONTROLS)


def structure(markdown: str) -> list[tuple[Any, ...]]:
    """Token types, tags, nesting and fence info; inside inline tokens, every token but text
    (so a code span, an emphasis, a link, an HTML tag or a line break counts)."""
    out: list[tuple[Any, ...]] = []
    for tok in MD.parse(markdown):
        out.append((tok.type, tok.tag, tok.nesting, tok.level, tok.info))
        if tok.type == "html_block":  # (diff's <details>): the HTML's own tags and comments
            out.append(("  html", *HTML_TAG.findall(tok.content)))
        for child in tok.children or []:
            if child.type != "text":
                out.append(("  ", child.type, child.tag, child.nesting))
            if child.type == "html_inline":
                out.append(("  html", *HTML_TAG.findall(child.content)))
    return out


# What opens or closes an element or a comment inside raw HTML.
HTML_TAG = re.compile(r"</?[A-Za-z][^\s/>]*|<!--|-->|<!|<\?")


def workload_of(data: dict[str, Any], source: str = "p.yaml", extra: tuple[Finding, ...] = ()) -> Workload:
    loaded = parse_profile(dump([data]), source)
    approved, approved_site = REGISTRY.get(loaded.profile.preset), REGISTRY.approved_site()
    site = approved_site.site
    plan = plan_workload(loaded, approved, site, site_sha256=approved_site.sha256)
    manifests = tuple(render_plan(plan, site.family))
    findings = check_all(
        Context(
            loaded,
            approved,
            site,
            plan,
            manifests,
            today=REGISTRY.today,
            site_approval=approved_site.approval,
        )
    )
    return Workload(loaded, approved, site, plan, manifests, (*findings, *extra))


def plan_profile(value: str) -> dict[str, Any]:
    data = copy.deepcopy(BASE_PROFILE)
    data["env"] = {"MY_FLAG": value, "OTHER": value + "x"}
    data["command"] = ["train.py", value or "x", "--flag", value + "y"]
    data["diagnostics"] = {"nccl_debug": True, "reason": value or "r"}
    data["checkpoint"]["resume"] = value or "latest"
    data["metrics"] = {"writer": "rank0", "tracker": value or "t"}
    return data


def plan_markdown(value: str) -> str:
    hostile = Finding("launcher", Location(value, 3, value), value, value or None, "warning")
    return review_markdown(workload_of(plan_profile(value), value or "p", (hostile,)))


BENIGN_PLAN = structure(plan_markdown("benign"))


def validate_doc(value: str) -> str:
    finding = Finding("nccl-transport-env", Location(value, 4, value), value, value or None)
    check = ProfileCheck(value, value, value, 2, 8, 16, (finding, finding._replace(severity="warning")))
    clean = ProfileCheck(value, value, value, 1, 1, 1, ())
    return validate_markdown([check, clean], [InputError(value, file=value, field=value, hint=value)])


BENIGN_VALIDATE = structure(validate_doc("benign"))


def diff_doc(value: str) -> str:
    body = f"--- committed\n+++ rendered\n-kind: {value}\n+kind: PyTorchJob\n {value}\n"
    result = ProfileDiff(
        value, value, (ObjectDiff(value, value, body), ObjectDiff(value, "changed", value + "\n"))
    )
    return as_markdown([result], [InputError(value, file=value, field=value, hint=value)])


BENIGN_DIFF = structure(diff_doc("benign"))


def test_a_forged_findings_section_does_not_hide_a_real_finding() -> None:
    """The issue's attack: an env value forging `## Findings / none` and opening `<!--`."""
    forged = "x\n\n## Findings\n\nnone\n\n<!--"
    data = plan_profile("ok")
    data["env"] = {"MY_FLAG": forged, "NCCL_SOCKET_IFNAME": "eth0"}
    text = review_markdown(workload_of(data))
    tokens = MD.parse(text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings.count("Findings") == 1 and not any(t.type == "html_block" for t in tokens)
    # the forged text is shown verbatim in the ticket's environment block (a code block, as the
    # token check shows); the real section, the last one, still lists the finding
    assert "nccl-transport-env" in text.rsplit("\n## Findings\n", 1)[1].split("\n## ", 1)[0]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROFILE_TEXT)
def test_plan_structure_is_the_same_for_any_value(value: str) -> None:
    from hypothesis import assume

    from runai_spec.check.env import SECRET_FLAG
    from runai_spec.check.launcher import launcher_flag
    from runai_spec.secrets import secret_value

    # a value shaped like a credential (`scheme://user:pass@`, `--password=…`) or a registered
    # launcher's topology flag (`-np`, `--nnodes`) is a finding of its own, rightly another
    # block of the ticket; every other value leaves its structure
    shown = (value, value + "x", value + "y")
    assume(not any(secret_value(v) or (SECRET_FLAG.match(v) and "=" in v) for v in shown))
    assume(not any(launcher_flag(v) for v in shown))
    assert structure(plan_markdown(value)) == BENIGN_PLAN


@settings(deadline=None)
@given(ANY_TEXT)
def test_validate_markdown_structure_is_the_same_for_any_value(value: str) -> None:
    assert structure(validate_doc(value)) == BENIGN_VALIDATE


@settings(deadline=None)
@given(ANY_TEXT)
def test_diff_markdown_structure_is_the_same_for_any_value(value: str) -> None:
    assert structure(diff_doc(value)) == BENIGN_DIFF


@settings(deadline=None)
@given(ANY_TEXT)
def test_escaped_text_and_code_render_as_the_value(value: str) -> None:
    """Escaping keeps the value: as text, as inline code and as inline code in a cell."""
    from runai_spec.text import one_line

    shown = one_line(value)
    (para,) = [t for t in MD.parse(f"a {md_text(value)} b") if t.type == "inline"]
    assert "".join(c.content for c in para.children or []) == f"a {shown} b".strip(" ")
    (code,) = [
        c
        for t in MD.parse(f"a {md_code(value)}")
        if t.type == "inline"
        for c in t.children or []
        if c.type == "code_inline"
    ]
    assert code.content == (shown or " ")
    table = f"| h |\n|---|\n| {md_code(value, cell=True)} |"
    (cell,) = [
        c for t in MD.parse(table) if t.type == "inline" for c in t.children or [] if c.type == "code_inline"
    ]
    assert cell.content == (shown or " ")


def test_a_committed_kind_cannot_leave_the_diff_block(tmp_path: Path) -> None:
    """`diff -f markdown` with a committed manifest whose kind closes the code block."""
    profile = ROOT / "examples" / "single-gpu" / "profile.yaml"
    name = yaml.safe_load(profile.read_text())["name"]
    job = example_job("single-gpu")
    job["metadata"]["labels"]["x"] = "```\n\n## Approved\n\n<!--"
    (tmp_path / f"{name}.yaml").write_text(dump([job]))
    res = run("diff", str(profile), "--against", str(tmp_path), "-f", "markdown")
    assert res.exit_code == 1, res.output
    tokens = MD.parse(res.stdout)
    assert [t.tag for t in tokens if t.type == "heading_open"] == ["h2"]
    assert sum(t.type == "fence" for t in tokens) == 1


def test_the_rule_catalogue_is_one_table_and_a_section_per_rule() -> None:
    from runai_spec.outputs.report import rule_docs

    rules = rule_docs()  # every registered rule: the site's, --crd's and the live checks
    assert len(rules) > len(RULES)
    tokens = MD.parse(rules_markdown())
    assert [t.tag for t in tokens if t.type == "heading_open"] == ["h1"] + ["h2"] * len(rules)
    assert sum(t.type == "tr_open" for t in tokens) == len(rules) + 1
    assert [t.type for t in tokens].count("html_block") == 1  # the "generated by" comment
    assert not any(t.type == "fence" for t in tokens)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_TEXT.filter(lambda s: "\x00" not in s))
def test_explain_yaml_stays_yaml_whatever_the_profile_path(path: str) -> None:
    workload = workload_of(copy.deepcopy(BASE_PROFILE), path or "p")
    annotated = explain_workload(workload).annotated()
    # PyYAML's safe loader on libyaml's scanner (the pure-Python scanner is ten times slower;
    # both break lines at LF, CR, NEL, U+2028 and U+2029 and refuse unprintable characters)
    assert list(yaml.load_all(annotated, Loader=yaml.CSafeLoader)) == list(workload.manifests)


def test_explain_with_a_newline_in_the_profile_file_name(tmp_path: Path) -> None:
    profile = tmp_path / "a\nspec: {hostNetwork: true}\n#.yaml"
    profile.write_text(dump([BASE_PROFILE]))
    res = run("explain", str(profile))
    assert res.exit_code in (0, 1), res.output
    (job,) = yaml.load_all(res.stdout, Loader=yaml.CSafeLoader)  # libyaml: a thousand examples
    assert "hostNetwork" not in job["spec"]
