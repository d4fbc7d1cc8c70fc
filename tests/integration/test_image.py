"""The container image builds from what its Dockerfile copies, and the command
it installs runs. No Docker engine: the wheel is built from exactly the files
the build stage copies, with the wheels of its dependencies, as ``pip wheel``
in that stage would, and installed alone in a fresh virtual environment as the
run stage does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "reports-pipeline"


def build_stage_copies(dockerfile: str) -> list[tuple[str, str]]:
    """(source, destination) of each COPY of the first (build) stage."""
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    copies = []
    for line in stages[0].splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *sources, dest = line.split()[1:]
            copies += [(source, dest) for source in sources]
    return copies


def packaged() -> list[str]:
    """The top-level packages pyproject.toml puts in the wheel."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return [pattern.rstrip("*") for pattern in find["packages"]["find"]["include"]]


def test_the_build_stage_copies_every_packaged_package() -> None:
    copied = {source for source, _ in build_stage_copies((ROOT / "Dockerfile").read_text())}
    assert set(packaged()) <= copied, set(packaged()) - copied


def test_the_wheel_built_from_the_dockerfiles_files_runs(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for source, dest in build_stage_copies((ROOT / "Dockerfile").read_text()):
        target = context / (source if dest.endswith("/") or dest == "./" else dest)
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, target,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / source, target)
    # the build stage: the project's wheel and the wheels of everything it needs
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels),
                    str(context)], check=True, cwd=tmp_path, timeout=600)
    assert len(list(wheels.glob("reports_pipeline-*.whl"))) == 1

    # the run stage: a fresh environment with those wheels alone (no index, no
    # test environment), then the image's ENTRYPOINT with its CMD
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(wheels), "reports-pipeline"], check=True, cwd=tmp_path, env=env,
                   timeout=600)
    dockerfile = (ROOT / "Dockerfile").read_text()
    [entrypoint] = json.loads(re.search(r"^ENTRYPOINT (.*)$", dockerfile, re.M)[1])
    cmd = json.loads(re.search(r"^CMD (.*)$", dockerfile, re.M)[1])
    helped = subprocess.run([entrypoint, *cmd], capture_output=True, text=True, cwd=tmp_path,
                            env=env)
    assert helped.returncode == 0, helped.stderr
    assert "up" in helped.stdout and "bench" in helped.stdout
    # the benchmark needs its extra, which the image leaves out: it says so
    bench = subprocess.run([entrypoint, "bench", "--quick"], capture_output=True, text=True,
                           cwd=tmp_path, env=env)
    assert bench.returncode == 1 and "Traceback" not in bench.stderr, bench.stderr
    assert bench.stderr.strip().endswith("pip install -e '.[bench]'"), bench.stderr
    # every runtime module imports from the installed wheel alone
    modules = sorted({".".join(p.relative_to(ROOT).with_suffix("").parts)
                      for package in packaged() if package != "bench"
                      for p in (ROOT / package).rglob("*.py") if p.name != "__init__.py"})
    where = subprocess.run([str(python), "-c", "import importlib, sys\n"
                            "for m in sys.argv[1:]: importlib.import_module(m)\n"
                            "import launcher; print(launcher.__file__)", *modules],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout, where.stdout


def test_the_image_name_and_tag_agree_everywhere() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == version
    assert not values["image"]["tag"], "the tag is the chart's appVersion"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    ours = [s for s in compose["services"].values() if "command" in s]
    assert {s["image"] for s in ours} == {f"{values['image']['repository']}:{version}"}
    assert any("build" in s for s in ours)


def test_compose_runs_what_the_documented_queries_filter_on() -> None:
    """The cluster name docs/analytics.md's queries filter on, no service a comment names
    that does not exist."""
    text = (ROOT / "docker-compose.yml").read_text()
    compose = yaml.safe_load(text)
    for service in compose["services"].values():
        assert service.get("environment", {}).get("REPORTS_CLUSTER", "default") == "default"
    named = set(re.findall(r"^#.*`(\w+)`", text, flags=re.M)) - {"up"}
    assert named <= set(compose["services"]), named
    assert "cluster = 'default'" in (ROOT / "docs" / "analytics.md").read_text()
