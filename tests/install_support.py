"""The installs a user runs, rendered for the tests: the kustomize build of ``manifests/``
(``kubectl kustomize``, the lab's kubectl), the release manifest (``make release-manifest``)
and the Helm chart (``helm template``, Helm built by ``make helm`` into
~/.cache/pykueue/helm/<version>/helm)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "pykueue"

Obj = dict[str, Any]


def kubectl_binary() -> Path:
    """The lab's kubectl (``make controlplane``); the test is skipped without it."""
    path = Path(os.environ.get("LAB_BIN_DIR", ROOT / ".k8sbin" / "current")) / "kubectl"
    if not path.is_file():
        pytest.skip(f"{path} missing: run `make controlplane`")
    return path


def helm_binary() -> Path:
    """Helm at the version of hack/tools/helm/go.mod (``make helm``); the test is skipped
    without it, and fails in the lanes `make test` runs while Helm is still being built
    (``PYKUEUE_TEST_WAVE``, set by hack/test.sh): its file's NEEDS entry in
    hack/test_waves.py lacks helm."""
    gomod = (ROOT / "hack" / "tools" / "helm" / "go.mod").read_text()
    version = re.search(r"^require helm\.sh/helm/v4 (\S+)$", gomod, re.M)
    assert version, "hack/tools/helm/go.mod names no helm.sh/helm/v4 version"
    cache = Path(os.environ.get("PYKUEUE_HELM_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                 / "pykueue" / "helm")
    path = cache / version.group(1) / "helm"
    if not path.is_file():
        if os.environ.get("PYKUEUE_TEST_WAVE"):
            pytest.fail(f"{path} is still being built: add helm to this test's file's entry in "
                        "NEEDS in hack/test_waves.py (and list the file in LATER in "
                        "hack/test.sh)")
        pytest.skip(f"{path} missing: run `make helm`")
    return path


def docs_of(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(directory: str = "manifests/default") -> list[Obj]:
    """The objects ``kubectl kustomize ROOT/directory`` renders."""
    out = subprocess.run([str(kubectl_binary()), "kustomize", str(ROOT / directory)],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    return docs_of(out)


def helm_template(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``helm template pykueue charts/pykueue ARGS``; stdout is the rendered YAML."""
    return subprocess.run([str(helm_binary()), "template", "pykueue", str(CHART), *args],
                          check=check, capture_output=True, text=True, timeout=120)


def chart(*args: str) -> list[Obj]:
    """The objects the chart renders with ``args`` (``--set k=v``...)."""
    return docs_of(helm_template(*args).stdout)


def key(doc: Obj) -> tuple[str, str, str]:
    """(kind, namespace, name): what identifies an object in a cluster."""
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def by_key(docs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {key(d): d for d in docs}
    assert len(out) == len(docs), "two objects with the same kind, namespace and name"
    return out
