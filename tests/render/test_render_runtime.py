"""render's normal path: the shipped templates' compiled code run on render/runtime.py, without
jinja2, byte for byte what Jinja renders; Jinja's own output or error wherever it does not cover."""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import jinja2.runtime
import jinja2.utils
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import soft_str

from conftest import EXAMPLES, ROOT
from mpi_presets import mpi_presets, mpi_profile
from runai_spec import render
from runai_spec.errors import InputError, InternalError, RunaiSpecError
from runai_spec.load.registry import PresetRegistry
from runai_spec.pipeline.smoke import smoke_plan
from runai_spec.pipeline.workload import prepare_workload
from runai_spec.plan.launcher import MPIJOB
from runai_spec.render import runtime

JOB = render.TEMPLATES["kubeflow"]
CONFIGMAP = render.CONFIGMAP_TEMPLATE
PROFILES = [ROOT / "examples" / e / "profile.yaml" for e in EXAMPLES] + sorted(
    (ROOT / "tests" / "rules").glob("*/*.yaml")
)


def both_ways(name: str, **context: Any) -> str:
    """Template NAME's output on runtime.py (which must cover it: no fallback), equal to Jinja's."""
    compiled = render.render_compiled(name, **context)
    assert compiled == render.render_with_jinja(name, **context)
    return compiled


def planned(path: Path) -> Any:
    """The plan of the profile at PATH (None for a rule case that is bad input)."""
    today = re.search(r"^# today: (\S+)$", path.read_text(encoding="utf-8"), re.M)
    registry = PresetRegistry(ROOT / "presets", today=dt.date.fromisoformat(today[1]) if today else None)
    try:
        return prepare_workload(path, registry).plan
    except RunaiSpecError:
        return None


@pytest.fixture(scope="module")
def plans() -> list[Any]:
    found = [plan for plan in map(planned, PROFILES) if plan is not None]
    assert len(found) > len(PROFILES) * 3 // 4  # the rule cases that are bad input are few
    return found


def test_every_example_and_rule_case_renders_the_same_both_ways(plans: list[Any]) -> None:
    for plan in plans:
        both_ways(JOB, plan=plan, smoke=None)


def test_every_smoke_test_renders_the_same_both_ways(plans: list[Any]) -> None:
    for plan in plans:
        try:
            smoke = smoke_plan(plan)
        except InputError:  # a name too long for the smoke test's pods (the rule cases have one)
            continue
        both_ways(CONFIGMAP, config_map=smoke.config_map)
        both_ways(JOB, plan=smoke.job, smoke=smoke)


def test_the_examples_render_to_their_committed_manifests_without_importing_jinja2() -> None:
    # a process of its own: render and render_smoke of every example, then what it imported
    code = (
        "import json, sys\nfrom pathlib import Path\n"
        "from runai_spec.pipeline.workload import prepare_workload\n"
        "from runai_spec.pipeline.smoke import smoke_plan\nfrom runai_spec.render import render_smoke\n"
        "texts = [prepare_workload(Path(p)).text for p in sys.argv[1:]]\n"
        "[render_smoke(smoke_plan(prepare_workload(Path(p)).plan)) for p in sys.argv[1:]]\n"
        "print(json.dumps([texts, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jinja2', 'markupsafe'))]))"
    )
    paths = [str(ROOT / "examples" / e / "profile.yaml") for e in EXAMPLES]
    done = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    texts, imported = json.loads(done.stdout)
    # with another Jinja installed, Jinja renders (test_render_other_jinja.py)
    expected = set() if jinja2.__version__ == runtime.JINJA_VERSION else {"jinja2", "markupsafe"}
    assert {m.split(".")[0] for m in imported} == expected
    assert texts == [(ROOT / "examples" / e / "manifest.yaml").read_text(encoding="utf-8") for e in EXAMPLES]


def test_the_runtime_stands_for_the_installed_jinja_only_where_it_is_the_one_it_follows() -> None:
    # read from jinja2/__init__.py without importing it: what the imported package says
    assert runtime.installed_jinja() == jinja2.__version__
    assert runtime.stands_for_installed_jinja() == (jinja2.__version__ == runtime.JINJA_VERSION)


def test_every_template_renders_the_same_both_ways_for_every_example(
    monkeypatch: pytest.MonkeyPatch, presets_dir: Path, _engineer_key: Path, tmp_path: Path
) -> None:
    # whichever templates render_plan and render_smoke choose: each compared, and none left out;
    # an MPIJob's too (its site and preset are signed in a copy: tests/mpi_presets.py)
    compared: set[str] = set()

    def compare(name: str, **context: Any) -> str:
        compared.add(name)
        return both_ways(name, **context)

    monkeypatch.setattr(render, "_render", compare)
    mpi = PresetRegistry(mpi_presets(presets_dir, _engineer_key))
    for profile, registry in [
        *((ROOT / "examples" / e / "profile.yaml", None) for e in EXAMPLES),
        (mpi_profile(tmp_path), mpi),
    ]:
        plan = prepare_workload(profile, registry).plan
        render.render_plan(plan)
        render.render_smoke(smoke_plan(plan))
    assert compared == {path.name for path in (ROOT / "templates").glob("*.j2")}


# Plan-like objects (the attributes the job template and env_entries read), their structure
# drawn: volumes, replicas (`loop.last`), the optional blocks, a smoke test or none.
TEXT = st.text(max_size=12)
PAIRS = st.lists(st.tuples(TEXT, TEXT | st.integers()), max_size=3).map(tuple)
VOLUME = st.builds(
    SimpleNamespace,
    name=TEXT,
    mount_path=TEXT,
    read_only=st.booleans(),
    claim=st.none() | TEXT,
    memory_size=TEXT,
)
PLAN = st.builds(
    SimpleNamespace,
    name=TEXT,
    namespace=TEXT,
    labels=PAIRS,
    annotations=PAIRS,
    procs_per_pod=st.integers(0, 16),
    run_policy=PAIRS,
    elastic=st.none()
    | st.builds(SimpleNamespace, min_pods=st.integers(), max_pods=st.integers(), max_restarts=st.integers()),
    replicas=st.lists(st.builds(SimpleNamespace, role=TEXT, replicas=st.integers(0, 8)), max_size=3),
    restart_policy=TEXT,
    pod_labels=PAIRS,
    pod_annotations=PAIRS,
    scheduler_name=TEXT,
    termination_grace_period_seconds=st.integers(0, 600),
    image=TEXT,
    command=st.lists(TEXT, max_size=3),
    working_dir=TEXT,
    master_port=st.integers(1, 65535),
    limits=PAIRS,
    requests=PAIRS,
    capabilities=st.lists(TEXT, max_size=2),
    volumes=st.lists(VOLUME, max_size=3),
    field_env=st.lists(st.tuples(TEXT, TEXT), max_size=2),
    env=st.lists(st.tuples(TEXT, TEXT), max_size=2),
    secret_env=st.lists(st.tuples(TEXT, TEXT, TEXT), max_size=2),
    launcher_files=st.lists(
        st.builds(SimpleNamespace, volume=TEXT, mount_dir=TEXT, name=TEXT, field_path=TEXT), max_size=2
    ),
    workload=st.builds(SimpleNamespace, api_version=TEXT, kind=TEXT),
    mpi=st.builds(
        SimpleNamespace,
        ssh_auth_mount_path=TEXT,
        launcher_creation_policy=TEXT,
        implementation=TEXT,
        launcher_restart_policy=TEXT,
        worker_restart_policy=TEXT,
        worker_command=st.lists(TEXT, max_size=3),
    ),
)
SMOKE = st.none() | st.builds(
    SimpleNamespace,
    volume=TEXT,
    mount_path=TEXT,
    label=TEXT,
    config_map=st.builds(
        SimpleNamespace, name=TEXT, namespace=TEXT, labels=PAIRS, annotations=PAIRS, data=PAIRS
    ),
    run_policy_after=PAIRS,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAN, SMOKE)
def test_any_plan_and_smoke_test_render_the_same_both_ways(plan: Any, smoke: Any) -> None:
    both_ways(JOB, plan=plan, smoke=smoke)
    both_ways(MPIJOB.template, plan=plan, smoke=smoke)
    if smoke is not None:
        both_ways(CONFIGMAP, config_map=smoke.config_map)


# Where runtime.py does not cover a render, render takes Jinja's path: its output, its error.


@pytest.fixture
def multi_node() -> Any:
    return prepare_workload(ROOT / "examples" / "multi-node" / "profile.yaml").plan


def stand_in(plan: Any, **changes: Any) -> SimpleNamespace:
    """PLAN as a plain object of the attributes the template reads, with CHANGES."""
    names = ["volumes", "name", "namespace", "labels", "annotations", "procs_per_pod", "run_policy"]
    names += ["elastic", "replicas", "restart_policy", "pod_labels", "pod_annotations", "scheduler_name"]
    names += ["termination_grace_period_seconds", "image", "command", "working_dir", "master_port"]
    names += ["limits", "requests", "capabilities", "field_env", "env", "secret_env", "workload"]
    names += ["launcher_files", "mpi"]
    return SimpleNamespace(**{**{n: getattr(plan, n) for n in names}, **changes})


def jinja_error(**context: Any) -> list[str]:
    with pytest.raises(InternalError) as caught:
        render.render_with_jinja(JOB, **context)
    return caught.value.lines()


def render_error(plan: Any) -> list[str]:
    with pytest.raises(InternalError) as caught:
        render.render_text(plan)
    return caught.value.lines()


def test_the_stand_in_renders_as_the_plan_does(multi_node: Any) -> None:
    assert both_ways(JOB, plan=stand_in(multi_node), smoke=None) == render.render_text(multi_node)


def test_an_undefined_attribute_is_jinjas_error_on_its_line(multi_node: Any) -> None:
    plan = stand_in(multi_node)
    del plan.image
    with pytest.raises(runtime.Fallback):
        render.render_compiled(JOB, plan=plan, smoke=None)
    lines = render_error(plan)
    assert lines == jinja_error(plan=plan, smoke=None)
    line = next(
        i for i, t in enumerate((ROOT / "templates" / JOB).read_text().splitlines(), 1) if "plan.image" in t
    )
    assert lines[0].startswith(f"error: {JOB}:{line}: template uses an undefined value: "), lines
    assert "has no attribute 'image'" in lines[0]


def test_an_error_inside_a_filter_is_jinjas_error_on_its_line(multi_node: Any) -> None:
    plan = stand_in(multi_node, annotations=((1, "one"),))  # the mapping filter refuses the key
    with pytest.raises(InternalError, match="as a mapping key"):
        render.render_compiled(JOB, plan=plan, smoke=None)
    lines = render_error(plan)
    assert lines == jinja_error(plan=plan, smoke=None)
    line = next(
        i
        for i, t in enumerate((ROOT / "templates" / JOB).read_text().splitlines(), 1)
        if "plan.annotations" in t
    )
    assert lines[0] == (
        f"error: {JOB}:{line}: template produced a value it cannot encode: cannot encode int as a mapping key"
    )


@pytest.fixture
def changed_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The shipped templates copied to a folder of this test's own, the configmap one changed."""
    (tmp_path / "templates").mkdir()
    for path in (ROOT / "templates").glob("*.j2"):
        (tmp_path / "templates" / path.name).write_bytes(path.read_bytes())
    (tmp_path / "templates" / CONFIGMAP).write_text("changed {{ config_map.name }}\n")
    render.template.cache_clear()
    render.environment.cache_clear()
    monkeypatch.setattr(render, "shipped_dir", lambda name: tmp_path / name)
    yield tmp_path / "templates"
    render.template.cache_clear()
    render.environment.cache_clear()


def test_a_template_that_differs_from_its_compiled_module_is_rendered_by_jinja(
    changed_template: Path,
) -> None:
    config_map = SimpleNamespace(name="cm")
    with pytest.raises(runtime.Fallback, match="no compiled module"):
        render.render_compiled(CONFIGMAP, config_map=config_map)
    assert render._render(CONFIGMAP, config_map=config_map) == 'changed "cm"\n'


def compiled_code(name: str, edit: tuple[str, str] | None = None) -> Any:
    text = (Path(render.__file__).parent / "compiled" / f"{render.compiled_module_name(name)}.py").read_text()
    if edit:
        assert text.count(edit[0]) == 1
        text = text.replace(*edit)
    return compile(text, "compiled", "exec")


def shipped_stamp(name: str) -> str:
    return render.compiled_stamp((ROOT / "templates" / name).read_bytes(), runtime.JINJA_VERSION)


def test_the_runtime_loads_only_a_module_of_the_right_stamp_using_only_its_names() -> None:
    env, stamp = render.RUNTIME_ENVIRONMENT, shipped_stamp(CONFIGMAP)
    assert runtime.load_root(compiled_code(CONFIGMAP), env, stamp) is not None
    assert runtime.load_root(compiled_code(CONFIGMAP), env, stamp.replace("7", "8", 1)) is None
    assert runtime.load_root(compiled_code(CONFIGMAP), env, shipped_stamp(JOB)) is None
    lacking = ("RUNTIME = (", "RUNTIME = ('markup_join', ")  # its code would load a name not here
    assert runtime.load_root(compiled_code(CONFIGMAP, lacking), env, stamp) is None
    other = ("from jinja2.runtime import", "from jinja2.utils import missing\nfrom jinja2.runtime import")
    assert runtime.load_root(compiled_code(CONFIGMAP, other), env, stamp) is None
    assert runtime.load_root(compiled_code(CONFIGMAP, ("RUNTIME = ", "_ = ")), env, stamp) is None


def declared(source: str) -> set[str]:
    """The RUNTIME a compiled module's SOURCE declares."""
    (line,) = re.findall(r"^RUNTIME = (.*)$", source, re.M)
    return set(ast.literal_eval(line))


def test_the_shipped_modules_use_only_names_the_runtime_has() -> None:
    for name in (JOB, CONFIGMAP):
        assert declared(render.compiled_source(name)) <= runtime.NAMES.keys(), name


def compiled_on_runtime(folder: Path, text: str) -> runtime.Root | None:
    """Template TEXT (as the configmap template in FOLDER) compiled and loaded on runtime.py."""
    (folder / CONFIGMAP).write_text(text)
    stamp = render.compiled_stamp((folder / CONFIGMAP).read_bytes(), runtime.JINJA_VERSION)
    code = compile(render.compiled_source(CONFIGMAP), "compiled", "exec")
    return runtime.load_root(code, render.RUNTIME_ENVIRONMENT, stamp)


def test_a_module_whose_code_loads_a_name_the_runtime_lacks_is_not_run(changed_template: Path) -> None:
    (changed_template / CONFIGMAP).write_text("{{ a ~ b }}\n")  # `~` compiles to str_join
    assert "str_join" in declared(render.compiled_source(CONFIGMAP))
    assert compiled_on_runtime(changed_template, "{{ a ~ b }}\n") is None
    assert compiled_on_runtime(changed_template, "{{ a }}\n") is not None


def test_an_attribute_of_the_loop_but_last_falls_back(changed_template: Path) -> None:
    root = compiled_on_runtime(changed_template, "{% for x in y %}{{ loop.index }}{% endfor %}\n")
    assert root is not None
    with pytest.raises(runtime.Fallback, match="attribute index"):
        runtime.render(root, render.GLOBALS, {"y": [1]})


# runtime.py beside jinja2's own objects (3.1.6): the same answers, or a Fallback.


@pytest.mark.parametrize("items", [[], ["a"], ["a", "b"], ["a", "b", "c"]])
def test_loop_last_is_jinjas(items: list[str]) -> None:
    ours = [(item, loop.last) for item, loop in runtime.LoopContext(iter(items), runtime.undefined)]
    theirs = [(item, loop.last) for item, loop in jinja2.runtime.LoopContext(iter(items), jinja2.Undefined)]
    assert ours == theirs == [(item, i == len(items) - 1) for i, item in enumerate(items)]
    # the next item is read when `last` is asked, not before, in both
    assert reads(runtime.LoopContext) == reads(jinja2.runtime.LoopContext) == [1, 2, 2, 3]


def reads(loop_type: Any) -> list[int]:
    """How many items LOOP_TYPE has read of its source at each item, before and after `last`
    is asked at the first."""
    seen: list[int] = []

    def source() -> Iterator[int]:
        for i in range(3):
            seen.append(i)
            yield i

    counts = []
    for item, loop in loop_type(source(), jinja2.Undefined):
        counts.append(len(seen))
        if item == 0:
            assert not loop.last
            counts.append(len(seen))
    return counts


def test_a_namespace_is_jinjas() -> None:
    ours, theirs = runtime.Namespace(mounts=[1]), jinja2.utils.Namespace(mounts=[1])
    for ns in (ours, theirs):
        ns["volumes"] = [2]
        assert (ns.mounts, ns.volumes) == ([1], [2])
        with pytest.raises(AttributeError):
            _ = ns.other
    assert runtime.Namespace({"self": 1}).self == jinja2.utils.Namespace({"self": 1}).self == 1


@pytest.mark.parametrize("value", ["x", "", 0, 7, -1.5, True, None, [1], SimpleNamespace()])
def test_the_string_filter_is_jinjas_or_falls_back(value: Any) -> None:
    if isinstance(value, (str, int, float)):
        assert runtime.do_string(value) == soft_str(value)
    else:
        with pytest.raises(runtime.Fallback):
            runtime.do_string(value)


def test_what_the_runtime_does_not_cover_falls_back() -> None:
    env = render.RUNTIME_ENVIRONMENT
    loop = runtime.LoopContext(["a"], runtime.undefined)
    for obj, attribute in [(loop, "index"), (loop, "_after"), (SimpleNamespace(x=1), "y"), ({"k": 1}, "k")]:
        with pytest.raises(runtime.Fallback):
            env.getattr(obj, attribute)
    assert env.getattr(SimpleNamespace(x=1), "x") == 1
    with pytest.raises(runtime.Fallback):
        env.undefined(name="x")
    context = runtime.Context({"f": len})
    assert context.resolve_or_missing("f") is len and context.resolve_or_missing("g") is runtime.missing
    assert context.call(len, [1, 2], _loop_vars={}) == 2
    with pytest.raises(runtime.Fallback):
        context.call(jinja2.pass_context(lambda ctx: 1))
    with pytest.raises(runtime.Fallback):
        context.call(next, iter([]))
    with pytest.raises(runtime.Fallback):
        render.render_compiled(JOB, plan=SimpleNamespace(), smoke=None)
    # the filters the compiled code finds: the project's, and Jinja's `string`
    assert set(env.filters) == {*render.FILTERS, "string"}
    assert runtime.GLOBALS["namespace"] is runtime.Namespace
