"""The Dockerfile, checked by parsing (no Docker engine here): a multi-stage build on a pinned
slim Python base that builds the wheel, installs it in a runtime stage, runs `pykueue serve`
as a numeric non-root user, writes nothing outside /tmp, and reads its certificates from the
Secret mount of manifests/manager/deployment.yaml. Also the .dockerignore allow-list."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

import pytest
import yaml
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
BASE_REPO_TAG = "python:3.11-slim-bookworm"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _parser() -> DockerfileParser:
    return DockerfileParser(path=str(ROOT / "Dockerfile"))


def _stages() -> list[list[dict]]:
    """Instructions grouped by stage (each list starts with its FROM)."""
    stages: list[list[dict]] = []
    for ins in _parser().structure:
        if ins["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _final() -> list[dict]:
    return _stages()[-1]


def _env(stage: list[dict]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins["instruction"] == "ENV":
            for m in re.finditer(r'([A-Z_][A-Z0-9_]*)=("[^"]*"|\S+)', ins["value"]):
                env[m.group(1)] = m.group(2).strip('"')
    return env


def _deployment_container() -> dict:
    dep = yaml.safe_load((ROOT / "manifests/manager/deployment.yaml").read_text())
    return dep["spec"]["template"]["spec"]["containers"][0]


def test_build_is_multi_stage_with_a_named_build_stage():
    stages = _stages()
    assert len(stages) >= 2, "expected a build stage and a runtime stage"
    assert re.search(r"\sAS\s+build$", stages[0][0]["value"], re.I), stages[0][0]["value"]


@pytest.mark.parametrize("stage_index", [0, -1], ids=["build stage", "runtime stage"])
def test_every_stage_uses_the_slim_python_base_pinned_by_tag_and_digest(stage_index):
    image = _stages()[stage_index][0]["value"].split()[0]
    assert image.startswith(BASE_REPO_TAG + "@"), image
    assert DIGEST.search(image), f"{image} is not pinned by a sha256 digest"


def test_both_stages_use_the_same_base_digest():
    images = {stage[0]["value"].split()[0] for stage in _stages()}
    assert len(images) == 1, images


def test_build_stage_builds_the_wheel_of_this_project():
    runs = [i["value"] for i in _stages()[0] if i["instruction"] == "RUN"]
    assert any(re.search(r"pip wheel\b.*\s\.$", r) or "python -m build" in r for r in runs), runs
    copied = " ".join(i["value"] for i in _stages()[0] if i["instruction"] == "COPY")
    for needed in ("pyproject.toml", "README.md", "app"):
        assert needed in copied, f"the build stage does not copy {needed}"


def test_runtime_stage_installs_the_wheels_from_the_build_stage_offline():
    runs = [i["value"] for i in _final() if i["instruction"] == "RUN"]
    install = [r for r in runs if "pip install" in r]
    assert install, "no pip install in the runtime stage"
    assert any("from=build" in r and "--no-index" in r and "pykueue" in r for r in install), install
    assert not any(i["instruction"] == "COPY" and "--from=build" not in i["value"]
                   and re.search(r"\bapp\b", i["value"]) for i in _final()), \
        "the runtime stage must install the wheel, not copy the source tree"


def test_runs_as_a_numeric_non_root_user_set_after_the_last_run():
    final = _final()
    users = [(n, i["value"]) for n, i in enumerate(final) if i["instruction"] == "USER"]
    assert users, "no USER in the runtime stage"
    index, user = users[-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {user} must be a numeric non-zero UID"
    last_run = max((n for n, i in enumerate(final) if i["instruction"] == "RUN"), default=-1)
    assert index > last_run, "USER must come after the last RUN (nothing else runs as root)"


def test_image_user_matches_the_deployment_security_context():
    uid = int([i for i in _final() if i["instruction"] == "USER"][-1]["value"].split(":")[0])
    dep = yaml.safe_load((ROOT / "manifests/manager/deployment.yaml").read_text())
    pod_sc = dep["spec"]["template"]["spec"]["securityContext"]
    assert pod_sc["runAsUser"] == uid


def test_read_only_root_filesystem_friendly():
    final = _final()
    env = _env(final)
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env.get("HOME", "").startswith("/tmp"), "HOME must be writable: under /tmp"
    workdirs = [i["value"] for i in final if i["instruction"] == "WORKDIR"]
    assert workdirs and workdirs[-1].startswith("/tmp"), workdirs
    assert not any(i["instruction"] == "VOLUME" for i in final), \
        "VOLUME would hide a writable path; the Deployment mounts /tmp as an emptyDir"
    mounts = {m["mountPath"] for m in _deployment_container()["volumeMounts"]}
    assert "/tmp" in mounts, "readOnlyRootFilesystem needs an emptyDir at /tmp in the Deployment"


def test_entrypoint_is_pykueue_serve_in_exec_form():
    entry = [i["value"] for i in _final() if i["instruction"] == "ENTRYPOINT"]
    assert entry, "no ENTRYPOINT"
    assert json.loads(entry[-1]) == ["pykueue", "serve"]


def test_certificates_come_from_the_secret_mount_of_the_deployment():
    env = _env(_final())
    container = _deployment_container()
    secret_mounts = {m["mountPath"] for m in container["volumeMounts"] if m["name"] == "certs"}
    for var in ("PYKUEUE_SERVER__CERT_FILE", "PYKUEUE_SERVER__KEY_FILE", "PYKUEUE_SERVER__CA_FILE"):
        path = PurePosixPath(env[var])
        assert path.is_absolute(), f"{var}={path}"
        assert str(path.parent) in secret_mounts, f"{var}={path} is not under the Secret mount"
        dep_env = {e["name"]: e.get("value") for e in container["env"]}
        assert dep_env.get(var, str(path)) == str(path), f"{var} differs in the Deployment"


def test_listens_on_all_interfaces_on_the_port_the_deployment_probes():
    env = _env(_final())
    assert env["PYKUEUE_SERVER__HOST"] == "0.0.0.0"
    exposed = [i["value"] for i in _final() if i["instruction"] == "EXPOSE"]
    assert exposed == [env["PYKUEUE_SERVER__PORT"]]
    ports = {p["containerPort"] for p in _deployment_container()["ports"]}
    assert int(env["PYKUEUE_SERVER__PORT"]) in ports


def test_no_remote_add_and_no_latest_tag():
    for ins in _parser().structure:
        assert ins["instruction"] != "ADD", "use COPY (ADD fetches URLs and unpacks archives)"
        assert ":latest" not in ins["value"]


# ---------------------------------------------------------------------------- .dockerignore


def _dockerignore_regexes() -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, regex) per pattern, with Docker's meaning of `*`, `?` and `**`."""
    out = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        rx = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif pattern[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif pattern[i] == "?":
                rx, i = rx + "[^/]", i + 1
            else:
                rx, i = rx + re.escape(pattern[i]), i + 1
        out.append((negated, re.compile(rx + "$")))
    return out


def _ignored(path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for negated, rx in _dockerignore_regexes():
        if any(rx.match(c) for c in candidates):
            ignored = not negated
    return ignored


@pytest.mark.parametrize("path", [".venv/bin/python", ".lab/kubeconfig", ".git/config",
                                  "certs/out/tls.key", ".k8sbin/current/kubectl",
                                  "app/__pycache__/cli.cpython-311.pyc", "tests/conftest.py",
                                  "certs/pki.py"])
def test_dockerignore_keeps_out(path):
    assert _ignored(path), f"{path} would be sent to the build context"


@pytest.mark.parametrize("path", ["pyproject.toml", "README.md", "app/cli/main.py",
                                  "app/core/quantity.py"])
def test_dockerignore_keeps_what_the_wheel_needs(path):
    assert not _ignored(path), f"{path} is needed by the build stage but ignored"
