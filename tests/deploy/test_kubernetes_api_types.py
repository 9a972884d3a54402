"""Every manifest of deploy/kubernetes/ decoded strictly into the Kubernetes API types by
``deploy/kubernetes/validate`` (Go: k8s.io/api, k8s.io/apimachinery, sigs.k8s.io/yaml at the
versions its go.mod pins, fetched from the Go module proxy into the clients' cache on first
use): the kinds ``podman kube play`` cannot run (StatefulSet, Service, PodDisruptionBudget)
are checked here, as an API server would. ``make test-image`` (the ``container`` marker):
the first build compiles the API types, about a minute and a half on two cores."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.clients import go_environment

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parent.parent.parent
VALIDATOR = ROOT / "deploy" / "kubernetes" / "validate"
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("**/cluster-*.yaml"))
BUILD_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def validator(tmp_path_factory) -> Path:
    assert shutil.which("go"), "Go is needed to check the manifests against the API types"
    binary = tmp_path_factory.mktemp("validate") / "validate"
    built = subprocess.run(
        ["nice", "-n", "10", "go", "build", "-o", str(binary), "."],
        cwd=VALIDATOR,
        env=go_environment(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return binary


def test_every_manifest_decodes_strictly_into_the_kubernetes_types(validator):
    assert len(MANIFESTS) == 4, MANIFESTS  # cluster-{3,6}.yaml and podman/cluster-{3,6}.yaml
    checked = subprocess.run(
        [str(validator), *map(str, MANIFESTS)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    kinds = {line.split(" ok ")[1].split("/")[0] for line in checked.stdout.splitlines()}
    assert {"StatefulSet", "Service", "PodDisruptionBudget", "Secret", "ConfigMap", "Pod"} <= kinds


@pytest.mark.parametrize(
    ("wrong", "instead", "said"),
    [
        (
            "  replicas: 3\n",
            "  replica: 3\n",
            'json: unknown field "replica"',
        ),
        ("  replicas: 3\n", "  replicas: three\n", "StatefulSet: error unmarshaling JSON"),
        (
            "  serviceName: ferrymq\n",
            "  serviceName: ferrymq-client\n",
            "ferrymq-g1: serviceName is no headless Service",
        ),
    ],
)
def test_a_wrong_manifest_is_refused(validator, tmp_path, wrong, instead, said):
    manifest = tmp_path / "cluster-3.yaml"
    text = (ROOT / "deploy" / "kubernetes" / "cluster-3.yaml").read_text()
    assert wrong in text
    manifest.write_text(text.replace(wrong, instead, 1))
    checked = subprocess.run([str(validator), str(manifest)], capture_output=True, text=True)
    assert checked.returncode == 1, checked.stdout
    assert said in checked.stdout
