"""Container images named on the pages, judged against the recorded tag lists.

``contracts/containers.yaml`` lists each image (registry, name, platforms) and the tags known to
exist, each with its source. A ``docker://`` reference is judged against it: the image and the
tag must be recorded, and the image must be built for the architecture of the node the page
builds or runs it on. A moving tag (``latest``) passes with a warning.

``python -m clusterkit.sites.container_images --refresh`` asks each registry for its tags (needs the
network: ``skopeo list-tags``, else the registry's ``/v2/<image>/tags/list`` API with an
anonymous token) and reports the recorded tags it no longer has.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from functools import cache

import yaml

from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

RECORD = ROOT / "contracts" / "containers.yaml"
DEFAULT_REGISTRY = "docker.io"
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "ppc64le": "linux/ppc64le"}


@dataclass(frozen=True)
class ImageRef:
    registry: str
    image: str
    tag: str

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.image}:{self.tag}"


def parse_ref(uri: str) -> ImageRef | None:
    """``docker://[REGISTRY/]NAME[:TAG][@DIGEST]`` as Docker reads it (``docker.io``, tag
    ``latest`` and the ``library/`` namespace by default); None for other sources."""
    if not uri.startswith("docker://"):
        return None
    ref = uri[len("docker://") :].split("@", 1)[0]
    parts = ref.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, rest = parts[0], "/".join(parts[1:])
    else:
        registry, rest = DEFAULT_REGISTRY, ref
    name, _, tag = rest.partition(":")
    if registry == DEFAULT_REGISTRY and "/" not in name:
        name = f"library/{name}"
    return ImageRef(registry, name, tag or "latest")


@cache
def records() -> dict[tuple[str, str], dict]:
    data = yaml.safe_load(RECORD.read_text(encoding="utf-8")) or {}
    return {(i["registry"], i["image"]): i for i in data.get("images", [])}


def tag_record(ref: ImageRef) -> dict | None:
    image = records().get((ref.registry, ref.image))
    if image is None:
        return None
    return next((t for t in image["tags"] if t["tag"] == ref.tag), None)


def check_image(page, line: int, uri: str, arch: str | None) -> list[Finding]:
    """Findings for a ``docker://`` reference built or run on a node of ``arch``."""
    ref = parse_ref(uri)
    if ref is None:
        return []
    image = records().get((ref.registry, ref.image))
    if image is None:
        msg = (
            f"{ref.registry}/{ref.image} is not among the recorded images: add it with the "
            "tags its publisher documents to contracts/containers.yaml"
        )
        return [Finding(page, line, "container-image", msg)]
    tag = tag_record(ref)
    if tag is None:
        known = ", ".join(t["tag"] for t in image["tags"])
        msg = f"{ref.name}: no such tag is recorded (recorded: {known})"
        return [Finding(page, line, "container-tag", msg)]
    out = []
    platform = PLATFORMS.get(arch or "")
    if platform and platform not in image.get("platforms", []):
        have = ", ".join(image.get("platforms", []))
        msg = f"{ref.name} is built for {have}, not for the {arch} node this runs on"
        out.append(Finding(page, line, "container-platform", msg))
    if tag.get("moving"):
        msg = (
            f"{ref.name}: a moving tag, so the image changes under the page; a release tag "
            "names one image"
        )
        out.append(Finding(page, line, "container-moving-tag", msg, "warning"))
    return out


# --------------------------------------------------------------------------- refresh
def list_tags(registry: str, image: str) -> list[str]:
    """The registry's tags of ``image`` (needs the network)."""
    skopeo = shutil.which("skopeo")
    if skopeo:
        out = subprocess.run(
            [skopeo, "list-tags", f"docker://{registry}/{image}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        return list(json.loads(out)["Tags"])
    host = "registry-1.docker.io" if registry == DEFAULT_REGISTRY else registry
    url = f"https://{host}/v2/{image}/tags/list"
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return list(json.load(resp)["tags"])
    except urllib.error.HTTPError as exc:
        challenge = exc.headers.get("WWW-Authenticate", "")
        if exc.code != 401 or not challenge:
            raise
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token(challenge)}"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        return list(json.load(resp)["tags"])


def token(challenge: str) -> str:
    """An anonymous pull token for a ``Bearer realm=...,service=...,scope=...`` challenge."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    query = "&".join(f"{k}={params[k]}" for k in ("service", "scope") if k in params)
    with urllib.request.urlopen(f"{params['realm']}?{query}", timeout=60) as resp:
        body = json.load(resp)
    return body.get("token") or body["access_token"]


def stale_tags(lister=list_tags) -> list[str]:
    """``registry/image:tag`` of each recorded tag the registry no longer lists."""
    out = []
    for (registry, image), record in sorted(records().items()):
        have = set(lister(registry, image))
        out += [f"{registry}/{image}:{t['tag']}" for t in record["tags"] if t["tag"] not in have]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m clusterkit.sites.container_images", description=__doc__
    )
    p.add_argument("--refresh", action="store_true", help="ask the registries (needs network)")
    args = p.parse_args(argv)
    if not args.refresh:
        for (registry, image), record in sorted(records().items()):
            tags = ", ".join(t["tag"] for t in record["tags"])
            print(f"{registry}/{image}: {tags}")
        return 0
    gone = stale_tags()
    for name in gone:
        print(f"{name}: recorded, but the registry no longer lists it", file=sys.stderr)
    return 1 if gone else 0


if __name__ == "__main__":
    raise SystemExit(main())
