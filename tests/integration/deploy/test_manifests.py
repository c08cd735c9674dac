"""The deployment files, checked without a Docker engine or a cluster (issue 8).

``docker-compose.yml``, every manifest under ``deploy/k8s/``, ``deploy/prometheus/prometheus.yml``
and ``deploy/Dockerfile`` are parsed (PyYAML; the Dockerfile line by line) and checked against the
code: every ``RSI_*`` variable they set is accepted by :class:`~rsi_common.config.Settings`, every
command resolves (``rsi`` sub-commands against the typer app, ``celery`` ones against Celery's CLI),
the queues are :data:`rsi_common.dispatch.QUEUES`, and images and ports agree across files.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import typer
import yaml

from rsi_common.config import Settings
from rsi_common.dispatch import QUEUES
from rsi_worker.cli import app as rsi_app
from rsi_worker.cluster.app import TASK_ROUTES

pytestmark = pytest.mark.timeout(60)
REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "docker-compose.yml"
K8S = REPO / "deploy" / "k8s"
PROMETHEUS = REPO / "deploy" / "prometheus" / "prometheus.yml"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
RSI_IMAGE = "rsi-worker"
CELERY_APP = "rsi_worker.cluster.celery_app"
"""The app path every Celery tool of the deploy files takes (``celery -A``)."""


# --- loading ------------------------------------------------------------------------------------

def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")))


def services() -> dict[str, dict[str, Any]]:
    return dict(compose()["services"])


def rsi_services() -> dict[str, dict[str, Any]]:
    """Compose services that run the project's image with its entrypoint (``rsi``)."""
    return {n: s for n, s in services().items()
            if str(s.get("image", "")).startswith(RSI_IMAGE) and "entrypoint" not in s}


def celery_services() -> dict[str, dict[str, Any]]:
    """Compose services that run Celery's CLI (Flower included) from the project's image."""
    return {n: s for n, s in services().items()
            if str(s.get("image", "")).startswith(RSI_IMAGE) and s.get("entrypoint") == ["celery"]}


def k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                out.append((path.name, dict(doc)))
    return out


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in k8s_docs() if d.get("kind") == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("Deployment", "Job"):
        for doc in of_kind(kind):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def rsi_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """Containers of the project's image that run its entrypoint (``rsi``)."""
    for name, c in image_containers():
        if c.get("command") != ["celery"]:
            yield name, c


def celery_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """Containers of the project's image that run Celery's CLI (Flower included)."""
    for name, c in image_containers():
        if c.get("command") == ["celery"]:
            yield name, c


def image_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, spec in pod_specs():
        for c in spec["containers"]:
            if c["image"].split(":")[0] == RSI_IMAGE:
                yield name, c


_INTERPOLATION = re.compile(r"\$\{(?P<var>[A-Z0-9_]+)(?::-(?P<default>[^}]*))?\}")


def compose_env(service: Mapping[str, Any]) -> dict[str, str | None]:
    """The service's environment with ``${VAR:-default}`` resolved to the default (None = pass-through)."""
    env = service.get("environment") or {}
    assert isinstance(env, Mapping), "use the mapping form of environment"
    return {k: None if v is None else _INTERPOLATION.sub(lambda m: m["default"] or "", str(v))
            for k, v in env.items()}


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "dangling line continuation"
    return out


def instructions(word: str) -> list[str]:
    return [rest for w, rest in dockerfile() if w == word]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in instructions("ENV"):
        for token in shlex.split(rest):
            key, sep, value = token.partition("=")
            assert sep, f"ENV {rest!r}: use the KEY=value form"
            env[key] = value
    return env


# --- resolving commands ---------------------------------------------------------------------------

def resolve(group: Any, argv: list[str], prog: str) -> tuple[list[str], Any]:
    """Parse ``argv`` as the CLI would (options validated, callbacks run) without invoking anything.

    ``group`` is a click group (Celery) or a typer group (typer vendors its own click): both have
    ``make_context`` / ``resolve_command``.

    Returns:
        The sub-command path, e.g. ``["db", "upgrade"]``, and the leaf's parsed context.

    Raises:
        click.UsageError / typer.TyperException: an unknown sub-command or option, or a bad value.
    """
    ctx = group.make_context(prog, list(argv))
    cmd = group
    path: list[str] = []
    while hasattr(cmd, "resolve_command"):
        args = [*ctx._protected_args, *ctx.args]  # a group keeps its sub-command here after parsing
        if not args:
            raise click.UsageError(f"{prog} {' '.join(path)}: missing sub-command")
        name, sub, rest = cmd.resolve_command(ctx, args)
        assert name is not None and sub is not None
        path.append(name)
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub
    return path, ctx


def rsi(argv: list[str]) -> list[str]:
    """Resolve an ``rsi`` command; the extra arguments ``rsi worker`` / ``rsi beat`` hand to Celery
    are resolved against ``celery worker`` / ``celery beat``."""
    path, ctx = resolve(typer.main.get_command(rsi_app), argv, "rsi")
    if path in (["worker"], ["beat"]) and ctx.args:
        celery_cli([path[0], *ctx.args])
    return path


def celery_cli(argv: list[str]) -> list[str]:
    from celery.bin.celery import celery  # with Flower installed (dev extra), `celery flower` too

    return resolve(celery, argv, "celery")[0]


def app_of(argv: list[str]) -> str | None:
    """The ``-A`` / ``--app`` of a ``celery`` command line (without the leading ``celery``)."""
    for i, arg in enumerate(argv):
        if arg in ("-A", "--app"):
            return argv[i + 1]
        if arg.startswith("--app="):
            return arg.split("=", 1)[1]
    return None


def queues_of(argv: list[str]) -> list[str]:
    """The queues a ``worker`` command consumes (its ``-Q``/``--queues``; default: all)."""
    for i, arg in enumerate(argv):
        if arg in ("-Q", "--queues"):
            return argv[i + 1].split(",")
        if arg.startswith("--queues="):
            return arg.split("=", 1)[1].split(",")
    return list(QUEUES)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion in command arguments."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


# --- settings ---------------------------------------------------------------------------------------

def settings_from(env: Mapping[str, str | None], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``Settings()`` with exactly ``env`` as the RSI_* environment (unknown keys raise SettingsError)."""
    for key in [k for k in __import__("os").environ if k.upper().startswith("RSI_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        assert key.startswith("RSI_") and key == key.upper(), key
        if value is not None:
            monkeypatch.setenv(key, value)
    return Settings()


def configmap() -> dict[str, str]:
    return dict(one("ConfigMap", "rsi-config")["data"])


def secret() -> dict[str, str]:
    return dict(one("Secret", "rsi-secrets")["stringData"])


# --- tests -------------------------------------------------------------------------------------------

def test_every_manifest_parses_and_kustomization_lists_them_all() -> None:
    docs = k8s_docs()
    files = {p.name for p in K8S.glob("*.yaml")}
    kustomization = next(d for f, d in docs if f == "kustomization.yaml")
    assert set(kustomization["resources"]) == files - {"kustomization.yaml"}
    assert kustomization["namespace"] == "rsi"
    for fname, doc in docs:
        if fname == "kustomization.yaml":
            continue
        assert {"apiVersion", "kind", "metadata"} <= set(doc), fname
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "rsi", (fname, doc["metadata"]["name"])
    names = [(d["kind"], d["metadata"]["name"]) for f, d in docs if f != "kustomization.yaml"]
    assert len(names) == len(set(names))
    assert not list(K8S.glob("*.yml")), "use the .yaml extension"


def test_compose_and_every_rsi_env_var_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    svc = rsi_services()
    assert set(svc) == {"migrate", "worker-consolidate", "worker-replay", "worker-agents", "beat", "api"}
    for name, service in svc.items():
        env = compose_env(service)
        settings = settings_from(env, monkeypatch)
        assert settings.redis_url and settings.database_url.startswith("postgresql+psycopg://"), name
        for key, value in env.items():  # keys are passed through from the shell, never written here
            if key.endswith(("_API_KEY", "_TOKEN", "_SECRET")):
                assert value is None, (name, key)
    for key, value in dockerfile_env().items():
        if key.startswith("RSI_"):
            settings_from({key: value}, monkeypatch)
        assert not re.search(r"KEY|TOKEN|SECRET|PASSWORD", key), f"credential {key} baked into the image"


def test_k8s_config_is_settings_and_secrets_stay_in_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    cm, sec = configmap(), secret()
    assert not set(cm) & set(sec)
    settings = settings_from({**cm, **sec}, monkeypatch)
    assert settings.metrics_port is not None and settings.redis_url
    assert {k for k in sec} >= {"RSI_DATABASE_URL", "RSI_ANTHROPIC_API_KEY", "RSI_OPENAI_API_KEY"}
    for key in cm:
        assert not re.search(r"KEY|TOKEN|SECRET|PASSWORD|DATABASE_URL", key), f"{key} belongs in the Secret"
    assert urlsplit(cm["RSI_REDIS_URL"]).password is None, "a Redis password belongs in the Secret"
    for name, c in rsi_containers():
        refs = {next(iter(r.values()))["name"] for r in c.get("envFrom", [])}
        assert refs == {"rsi-config", "rsi-secrets"}, name
        literal = {e["name"]: e.get("value") for e in c.get("env", []) if e["name"].startswith("RSI_")}
        settings_from({**cm, **sec, **literal}, monkeypatch)


def test_every_command_exists() -> None:
    for name, service in rsi_services().items():
        assert rsi(list(service["command"])), name
    env = {"POD_NAME": "rsi-worker-replay-0"}
    for name, c in rsi_containers():
        assert "command" not in c, f"{name}: the image's entrypoint is rsi; set args only"
        rsi([expand(a, env) for a in c["args"]])
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            cmd = ((c.get(probe) or {}).get("exec") or {}).get("command")
            if cmd:
                argv = shlex.split(cmd[2]) if cmd[:2] == ["sh", "-c"] else list(cmd)
                assert argv[0] == "celery", cmd
                assert celery_cli(argv[1:])[0] == "inspect" and "ping" in argv, cmd
                assert app_of(argv[1:]) == CELERY_APP, cmd
    (cmd,) = [json.loads(r) for r in instructions("CMD")]
    (entrypoint,) = [json.loads(r) for r in instructions("ENTRYPOINT")]
    assert entrypoint == ["rsi"] and rsi(cmd) == ["worker"]
    assert celery_cli(list(services()["flower"]["command"])) == ["flower"]
    (flower,) = [c for name, c in celery_containers() if name == "rsi-flower"]
    assert celery_cli(list(flower["args"])) == ["flower"]
    assert rsi(["db", "upgrade"]) == ["db", "upgrade"]
    for bad in (["worker", "-Q", "replay,bogus"], ["db", "downgrade"], ["worker", "--no-such-option"]):
        with pytest.raises((typer.TyperException, click.UsageError)):  # rejects what is not there
            rsi(bad)
    with pytest.raises(click.UsageError):
        celery_cli(["inspect", "--no-such-option", "ping"])


def test_queues_match_the_dispatch_queues() -> None:
    assert set(TASK_ROUTES[t]["queue"] for t in TASK_ROUTES) == set(QUEUES)
    compose_queues = [queues_of(list(s["command"])) for s in rsi_services().values()
                      if s["command"][0] == "worker" and "agents" not in s.get("profiles", [])]
    k8s_queues = {n: queues_of(list(c["args"])) for n, c in rsi_containers() if c["args"][0] == "worker"}
    workers = [s["command"] for s in rsi_services().values() if s["command"][0] == "worker"]
    assert all("--no-supervise" in cmd for cmd in workers)  # compose's restart policy supervises
    for consumed in (compose_queues, list(k8s_queues.values())):
        flat = [q for qs in consumed for q in qs]
        assert set(flat) == set(QUEUES) and len(flat) == len(set(flat))  # every queue, by one pool each
    scaled = one("ScaledObject", "rsi-worker-replay")["spec"]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "redis" and k8s_queues[scaled["scaleTargetRef"]["name"]] == [
        trigger["metadata"]["listName"]]
    redis_url = urlsplit(configmap()["RSI_REDIS_URL"])
    assert trigger["metadata"]["address"] == f"{redis_url.hostname}:{redis_url.port}"
    assert trigger["metadata"]["databaseIndex"] == (redis_url.path.strip("/") or "0")


def test_worker_deployments() -> None:
    cm = configmap()
    for kind_name in ("rsi-worker-consolidate", "rsi-worker-replay"):
        dep = one("Deployment", kind_name)
        spec = dep["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
        assert c["resources"]["limits"]["memory"]
        assert c["livenessProbe"] and c["readinessProbe"]
        assert "rsi@$(POD_NAME)" in c["args"] and "$POD_NAME" in c["livenessProbe"]["exec"]["command"][2]
        assert "--no-supervise" in c["args"]  # the kubelet restarts the container, not an in-pod supervisor
        assert spec["terminationGracePeriodSeconds"] > int(cm["RSI_TASK_TIME_LIMIT_S"])
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert cm["RSI_HOME"] in mounts  # the only writable place besides /tmp
        selector = dep["spec"]["selector"]["matchLabels"]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
        budgets = [p for p in of_kind("PodDisruptionBudget")
                   if p["spec"]["selector"]["matchLabels"] == selector]
        assert len(budgets) == 1, kind_name
    assert "replicas" not in one("Deployment", "rsi-worker-replay")["spec"]  # KEDA owns the count
    beat = one("Deployment", "rsi-beat")["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate"
    assert beat["template"]["spec"]["containers"][0]["args"] == ["beat"]
    beat_labels = beat["template"]["metadata"]["labels"].items()
    budgets = [p["spec"]["selector"]["matchLabels"].items() for p in of_kind("PodDisruptionBudget")]
    assert not [sel for sel in budgets if sel <= beat_labels]  # a single replica must stay movable
    job = one("Job", "rsi-db-upgrade")["spec"]["template"]["spec"]
    assert job["restartPolicy"] in ("Never", "OnFailure")
    assert job["containers"][0]["args"] == ["db", "upgrade"]


def test_images_and_ports_agree() -> None:
    port = int(configmap()["RSI_METRICS_PORT"])
    tags = {c["image"] for _, c in rsi_containers()}
    kustomize = next(d for f, d in k8s_docs() if f == "kustomization.yaml")["images"]
    assert tags == {f"{RSI_IMAGE}:{kustomize[0]['newTag']}"} and kustomize[0]["name"] == RSI_IMAGE
    for name, service in rsi_services().items():
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (REPO / service["build"]["context"]).is_dir()
        assert int(compose_env(service)["RSI_METRICS_PORT"] or 0) == port, name
    for name, service in services().items():  # third-party images are pinned
        image = str(service["image"])
        assert ":" in image and not image.endswith(":latest"), name
    assert str(port) in instructions("EXPOSE")[0].split()
    for name in ("worker-consolidate", "worker-replay"):
        assert str(port) in [str(p) for p in services()[name]["expose"]]
        assert "ports" not in services()[name], "scaled replicas cannot share a host port"
    for _, c in rsi_containers():
        if c["args"][0] == "worker":
            assert [p["containerPort"] for p in c["ports"] if p["name"] == "metrics"] == [port]
            assert c["readinessProbe"]["httpGet"]["port"] == "metrics"
    for doc in [*of_kind("Service"), *[d["spec"]["template"]["metadata"] for d in of_kind("Deployment")]]:
        ann = (doc.get("metadata", doc)).get("annotations") or {}
        if ann.get("prometheus.io/scrape") == "true":
            assert ann["prometheus.io/port"] in (str(port), "9808")
            assert ann["prometheus.io/path"] == "/metrics"
    svc = one("Service", "rsi-worker-metrics")["spec"]
    assert svc["ports"][0]["port"] == port and svc["clusterIP"] == "None"
    selected = [d for d in of_kind("Deployment")
                if svc["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
    assert {d["metadata"]["name"] for d in selected} == {"rsi-worker-consolidate", "rsi-worker-replay"}


def test_prometheus_scrapes_what_the_workers_and_exporter_expose() -> None:
    prom = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    workers = jobs["rsi-workers"]["dns_sd_configs"]
    (sd,) = workers
    scraped = set(sd["names"])
    worker_services = {n for n, s in rsi_services().items() if s["command"][0] == "worker"}
    assert scraped == worker_services
    for name in worker_services:
        assert int(compose_env(services()[name])["RSI_METRICS_PORT"] or 0) == int(sd["port"])
    assert int(sd["port"]) == int(configmap()["RSI_METRICS_PORT"])
    exporter = services()["celery-exporter"]
    exporter_port = next(a.split("=", 1)[1] for a in exporter["command"] if a.startswith("--port="))
    broker = next(a.split("=", 1)[1] for a in exporter["command"] if a.startswith("--broker-url="))
    assert broker == compose_env(rsi_services()["beat"])["RSI_REDIS_URL"]
    assert jobs["celery-exporter"]["static_configs"][0]["targets"] == [f"celery-exporter:{exporter_port}"]
    assert compose_env(services()["flower"])["RSI_REDIS_URL"] == broker
    for job in jobs.values():
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host = target.split(":")[0]
                assert host == "localhost" or host in services(), target
    mount = next(v for v in services()["prometheus"]["volumes"] if "prometheus.yml" in v)
    assert (REPO / mount.split(":")[0]).resolve() == PROMETHEUS.resolve()


def test_dockerfile_is_sane() -> None:
    steps = dockerfile()
    froms = instructions("FROM")
    assert froms and froms[-1].split()[0] == "python:3.11-slim" and steps[0][0] in ("FROM", "ARG")
    users = instructions("USER")
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert steps.index(("USER", users[-1])) > max(i for i, (w, _) in enumerate(steps) if w == "RUN")
    ignored = [line.strip() for line in (REPO / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    stages = [rest.split() for rest in froms]
    assert [s[1:] for s in stages] == [["AS", "build"], []], "a build stage, then the runtime image"
    runtime = steps[steps.index(("FROM", froms[-1])):]
    copied = []
    for rest in instructions("COPY"):
        *sources, _dest = shlex.split(rest)
        if sources[0].startswith("--"):  # only the runtime's copy of the build stage's virtualenv
            assert sources == ["--from=build", "/opt/rsi"] and _dest == "/opt/rsi", rest
            assert ("COPY", rest) in runtime
            continue
        for src in sources:
            assert (REPO / src).exists(), f"COPY {src}: not in the build context"
            assert src.rstrip("/") not in ignored, f"COPY {src}: excluded by the .dockerignore"
            copied.append(src.rstrip("/"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {"pyproject.toml", project["readme"], "rsi_common", "rsi_worker", "scripts/install.sh",
            "scripts/build_compiled.py"} <= set(copied)
    assert project["scripts"]["rsi"] == "rsi_worker.cli:main"
    installs = [r for r in instructions("RUN") if "install" in r and "useradd" not in r]
    assert [r.split()[0] for r in installs] == ["apt-get", "scripts/install.sh"], installs
    assert "gcc" in installs[0] and all(("RUN", r) not in runtime for r in installs)  # no compiler shipped
    assert dockerfile_env()["PATH"].startswith("/opt/rsi/bin:")
    home = dockerfile_env()["RSI_HOME"]
    useradd = next(r for r in instructions("RUN") if "useradd" in r)
    assert f"--home-dir {home}" in useradd and "--create-home" in useradd
    assert instructions("WORKDIR")[-1] == home
    for w, rest in steps:
        assert w in {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "ENTRYPOINT", "CMD"}, w
        if w in ("ENTRYPOINT", "CMD"):
            assert isinstance(json.loads(rest), list), f"{w} must use the exec (JSON) form"
        if w == "RUN":
            assert "curl" not in rest and "wget" not in rest, "the build fetches nothing but packages"


def test_the_service_is_deployed_with_http_probes() -> None:
    """``rsi serve`` in compose and in k8s: a Deployment with /healthz liveness and /readyz readiness
    on its http port, and a Service in front of it."""
    assert rsi(list(services()["api"]["command"]))[0] == "serve"
    dep = one("Deployment", "rsi-api")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert rsi(list(c["args"]))[0] == "serve"
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "http")
    assert str(port) in c["args"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    svc = one("Service", "rsi-api")["spec"]
    assert svc["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert svc["ports"][0]["targetPort"] == "http"
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_celery_tools_take_the_project_app_and_flower_asks_for_a_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every Celery tool of the deploy files runs ``celery -A rsi_worker.cluster.celery_app`` (never a
    bare broker URL, which would purge and inspect Celery's default queue); Flower takes its login
    from the environment (compose: a required variable; k8s: a Secret), its API is never opened
    without one, and it is published on loopback (compose) or a ClusterIP Service (k8s) only."""
    import importlib.util

    assert importlib.util.find_spec(CELERY_APP) is not None  # its app: tests/unit/test_celery_app.py
    tools = [("compose " + n, list(s["command"])) for n, s in celery_services().items()]
    tools += [("k8s " + n, list(c["args"])) for n, c in celery_containers()]
    assert {name for name, _ in tools} == {"compose flower", "k8s rsi-flower"}
    for name, argv in tools:
        assert app_of(argv) == CELERY_APP and not any(a.startswith(("-b", "--broker")) for a in argv), name
    for path in [COMPOSE, *K8S.glob("*.yaml")]:
        assert "FLOWER_UNAUTHENTICATED_API" not in path.read_text(encoding="utf-8"), path.name
    flower = services()["flower"]
    login = str(flower["environment"]["FLOWER_BASIC_AUTH"])
    assert re.fullmatch(r"\$\{FLOWER_BASIC_AUTH:\?[^}]+\}", login), "a required variable, no default"
    assert flower["ports"] and all(str(p).startswith("127.0.0.1:") for p in flower["ports"])
    assert all(str(p).startswith("127.0.0.1:") for p in services()["celery-exporter"]["ports"])
    assert not [k for k in compose_env(flower) if k.endswith(("_API_KEY", "DATABASE_URL"))]
    settings_from({k: v for k, v in compose_env(flower).items() if k.startswith("RSI_")}, monkeypatch)
    (c,) = [c for name, c in celery_containers() if name == "rsi-flower"]
    env = {e["name"]: e for e in c["env"]}
    assert env["FLOWER_BASIC_AUTH"]["valueFrom"]["secretKeyRef"]["key"] == "FLOWER_BASIC_AUTH"
    assert env["RSI_REDIS_URL"]["valueFrom"]["configMapKeyRef"]["name"] == "rsi-config"
    assert "envFrom" not in c, "Flower gets the broker URL only: no database URL, no model keys"
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthcheck"
    svc = one("Service", "rsi-flower")["spec"]
    assert svc.get("type", "ClusterIP") == "ClusterIP" and not of_kind("Ingress")
    dep = one("Deployment", "rsi-flower")
    assert svc["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["image"] in {c2["image"] for _, c2 in rsi_containers()}
