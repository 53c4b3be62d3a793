"""``python -m clusterkit new-site NAME``: the files of a new site, with its facts left open.

It writes the profile skeleton, a job script and a recipe page for each framework, the
reference page, and the entries that make the pages reachable: a row of the landing matrix, the
toctrees of the reference and how-to sections and a section of sites/NOTES.md. It edits tables,
toctrees and sections only, never a sentence: lists that name every site or recipe (the
trainers' option pages list the recipes that run them) are rendered from the profiles and pages
when the site is built. Every fact is a marker, ``FILL-IN:`` and
a key (the same key wherever the same fact goes), which the fast pass (``nox -s check``) refuses
until it is replaced by the fact, with its source in the profile. :data:`PLACES` is the list
docs/contributing.md gives, and a test holds the two together.

Nothing is written when any file it would create exists or any place it would edit has changed
shape; it says which, in one line.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from clusterkit.pages.site_pages import MARKER
from clusterkit.sites.profiles import ROOT

NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")  # sites/schema.yaml, properties.name

# (path with <name>, what goes there, created or edited): docs/contributing.md's table.
PLACES = [
    ("sites/<name>.yaml", "the profile skeleton", "new"),
    ("examples/<name>/pytorch-ddp-1node.sbatch", "the PyTorch job script", "new"),
    ("examples/<name>/tensorflow-1node.sbatch", "the TensorFlow job script", "new"),
    ("docs/reference/sites/<name>.md", "the reference page, its `{site-facts}` tables", "new"),
    ("docs/howto/<name>/pytorch-ddp-one-node.md", "the PyTorch recipe", "new"),
    ("docs/howto/<name>/tensorflow-one-node.md", "the TensorFlow recipe", "new"),
    ("docs/index.md", "a row in the landing matrix", "edit"),
    ("docs/reference/index.md", "the reference page in the toctree", "edit"),
    ("docs/howto/index.md", "the recipes in the Site recipes toctree", "edit"),
    ("sites/NOTES.md", "a section for what the sources leave open", "edit"),
]


class ScaffoldError(Exception):
    """One line: the file, and why nothing was written."""


@dataclass(frozen=True)
class Write:
    path: Path
    text: str
    new: bool


# --------------------------------------------------------------------------- new files
PROFILE = """\
# {title} as its operator documents it in FILL-IN:docs-repository at FILL-IN:docs-commit,
# published at FILL-IN:docs-url. Written from the skeleton `python -m clusterkit new-site` makes:
# each marker is a fact to write from the site's documentation (sites/schema.yaml says what
# each field holds), and every section's sources say where it comes from and when you read it.
# Doubts go to sites/NOTES.md, under "{title}". The skeleton is a Slurm site with one kind of
# GPU node and framework modules; add node types, partitions, QoS, stacks, or delete the gpus
# of a CPU-only node type, as the site has them.
name: {name}
title: {title}
operator: FILL-IN:operator
summary: >-
  FILL-IN:summary
lifecycle:
  status: current
  in_service_since: "FILL-IN:in-service-since"  # YYYY-MM-DD
  sources:
    - title: FILL-IN:lifecycle-source-title
      url: FILL-IN:lifecycle-source-url
      retrieved: "FILL-IN:retrieved"  # YYYY-MM-DD, the day you read it
scheduler:
  kind: slurm
  submit: sbatch
  directive: "#SBATCH"
launchers:
  - name: srun
    status: current
account:
  required: true
  option: --account
  pattern: 'FILL-IN:account-pattern'  # a regular expression every real account matches
  example: FILL-IN:account-example  # the placeholder the pages and job scripts use
placeholders: []  # what the site's own documentation writes where a user's value goes
node_types:
  FILL-IN:gpu-node-type:
    description: FILL-IN:gpu-node-description
    arch: FILL-IN:arch  # x86_64, aarch64 or ppc64le
    cpu: FILL-IN:cpu
    sockets: FILL-IN:sockets
    cores_per_socket: FILL-IN:cores-per-socket
    threads_per_core: FILL-IN:threads-per-core
    memory_gb: FILL-IN:memory-gb
    gpus:
      count: FILL-IN:gpus-per-node
      model: FILL-IN:gpu-model
      vendor: FILL-IN:gpu-vendor  # nvidia or amd
partitions:
  FILL-IN:gpu-partition:
    description: FILL-IN:gpu-partition-description
    node_type: FILL-IN:gpu-node-type
    max_walltime: "FILL-IN:max-walltime"  # [D-]HH:MM:SS
module_inventory:
  coverage: partial
  note: FILL-IN:module-inventory-note
modules:
  - name: FILL-IN:pytorch-module  # what `module load` takes before the slash
    version: "FILL-IN:pytorch-module-version"
    status: current
    provides: FILL-IN:pytorch-module-provides
  - name: FILL-IN:tensorflow-module
    version: "FILL-IN:tensorflow-module-version"
    status: current
    provides: FILL-IN:tensorflow-module-provides
paths:
  home:
    path: FILL-IN:home-path
    description: FILL-IN:home-description
    kind: FILL-IN:home-kind
  scratch:
    path: FILL-IN:scratch-path
    description: FILL-IN:scratch-description
    kind: FILL-IN:scratch-kind
stacks:
  pytorch:
    title: FILL-IN:pytorch-stack-title
    status: current
    node_types:
      - FILL-IN:gpu-node-type
    python: "FILL-IN:pytorch-python"  # major.minor
    frameworks:
      torch: "FILL-IN:torch-version"
      torchvision: "FILL-IN:torchvision-version"
    accelerator:
      kind: FILL-IN:accelerator-kind  # cuda, rocm or cpu
      version: "FILL-IN:accelerator-version"
    install:
      module:
        name: FILL-IN:pytorch-module/FILL-IN:pytorch-module-version
    sources:
      - title: FILL-IN:pytorch-stack-source-title
        url: FILL-IN:pytorch-stack-source-url
        retrieved: "FILL-IN:retrieved"
  tensorflow:
    title: FILL-IN:tensorflow-stack-title
    status: current
    node_types:
      - FILL-IN:gpu-node-type
    python: "FILL-IN:tensorflow-python"
    frameworks:
      tensorflow: "FILL-IN:tensorflow-version"
    accelerator:
      kind: FILL-IN:accelerator-kind
      version: "FILL-IN:accelerator-version"
    install:
      module:
        name: FILL-IN:tensorflow-module/FILL-IN:tensorflow-module-version
    sources:
      - title: FILL-IN:tensorflow-stack-source-title
        url: FILL-IN:tensorflow-stack-source-url
        retrieved: "FILL-IN:retrieved"
sources:
  - title: FILL-IN:hardware-source-title
    url: FILL-IN:hardware-source-url
    retrieved: "FILL-IN:retrieved"
"""

PYTORCH_JOB = """\
#!/bin/bash
# ResNet-50 with PyTorch DDP on one {title} node: one rank per GPU, started by srun, trained on
# a shard set (train/*.tar and train/shards.json) read where it lies.
#
# Make the shards once (see "Pack many small files into few large ones" on the data page), then
# submit from the directory that holds train_resnet.py:   sbatch pytorch-ddp-1node.sbatch
#SBATCH --account=FILL-IN:account-example
#SBATCH --job-name=resnet50-ddp
#SBATCH --partition=FILL-IN:gpu-partition
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=FILL-IN:gpus-per-node
#SBATCH --gpus-per-node=FILL-IN:gpus-per-node
#SBATCH --cpus-per-task=FILL-IN:cores-per-rank
#SBATCH --time=01:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail

module load FILL-IN:pytorch-module/FILL-IN:pytorch-module-version
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK  # srun does not take it from sbatch

# The shard set, on a file system every node sees.
DATA=${{DATA:-FILL-IN:data-dir}}

# The batch script runs on the job's first node: its address is where the ranks meet.
MASTER_ADDR=$(hostname)
export MASTER_ADDR
export MASTER_PORT=29500

srun python train_resnet.py --data-dir "$DATA" --batch-size 64 --epochs 90 \\
    --checkpoint-dir "checkpoints/$SLURM_JOB_NAME"
"""

TENSORFLOW_JOB = """\
#!/bin/bash
# ResNet-50 with TensorFlow on one {title} node: one process, MirroredStrategy over the node's
# GPUs.
#
# Submit from the directory that holds train_resnet_keras.py:   sbatch tensorflow-1node.sbatch
#SBATCH --account=FILL-IN:account-example
#SBATCH --job-name=resnet50-keras
#SBATCH --partition=FILL-IN:gpu-partition
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gpus-per-node=FILL-IN:gpus-per-node
#SBATCH --cpus-per-task=FILL-IN:cores-per-node
#SBATCH --time=01:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail

module load FILL-IN:tensorflow-module/FILL-IN:tensorflow-module-version
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK

# --batch-size is per GPU.
srun python train_resnet_keras.py --batch-size 64 --epochs 90 \\
    --checkpoint-dir "checkpoints/$SLURM_JOB_NAME"
"""

REFERENCE = """\
# {title}

```{{site-status}} {name}
```

FILL-IN:reference-intro

Recipes: {{doc}}`/howto/{name}/pytorch-ddp-one-node`, {{doc}}`/howto/{name}/tensorflow-one-node`.

% Add a section for each part the profile gains: :show: qos for QoS, :show: affinity for a
% node type's cpu_gpu_map (the fast pass asks for every table the profile has rows for).

## Nodes

```{{site-facts}} {name}
:show: nodes
```

## Partitions

```{{site-facts}} {name}
:show: partitions
```

## Accounts

```{{site-facts}} {name}
:show: account
```

## Launchers

```{{site-facts}} {name}
:show: launchers
```

## Modules

```{{site-facts}} {name}
:show: modules
```

## Software stacks

```{{site-facts}} {name}
:show: stacks
```

## Filesystems

```{{site-facts}} {name}
:show: paths
```

## Sources

```{{site-facts}} {name}
:show: sources
```
"""

RECIPE = """\
---
site: {name}
frameworks: [{framework}]
stacks: [{name}/{framework}]
---

# {heading}

```{{site-status}} {name}
```

```{{last-verified}} {name}
```

FILL-IN:{framework}-recipe-intro

% What a node holds (cite the profile with substitutions, {{{{ <site>_<partition>_gpus }}}}, not
% figures), how this recipe uses it, and where the framework comes from.

```{{page-stacks}}
```

## The job script

```{{literalinclude}} ../../../examples/{name}/{script}
:language: bash
:caption: {script}
```

What the script asks for, judged against {title}'s profile ({{doc}}`/reference/sites/{name}`):

FILL-IN:{framework}-job-explained

## The training script
{data}
The job runs `{program}` ({{download}}`download it <../../../examples/{program_path}>` into
the directory you submit from). {{doc}}`/reference/trainers/{framework}` lists every option,
generated from the program itself; `python {program} --help` prints the same.

## Submit

```bash
sbatch {script}
```
"""

FRAMEWORKS = {
    "pytorch": {
        "heading": "Train with PyTorch DDP on one {title} node",
        "page": "pytorch-ddp-one-node",
        "script": "pytorch-ddp-1node.sbatch",
        "program": "train_resnet.py",
        "program_path": "pytorch/train_resnet.py",
        "job": PYTORCH_JOB,
        "cell": "[DDP on one node](howto/{name}/pytorch-ddp-one-node.md)",
        "data": (
            "\nIt trains on a shard set (`train/*.tar` with `train/shards.json`) read where it\n"
            "lies, at the path `DATA` holds; {doc}`/howto/data` makes one from an image folder\n"
            "and says when to copy it to a node's own storage first.\n"
        ),
    },
    "tensorflow": {
        "heading": "Train with TensorFlow on one {title} node",
        "page": "tensorflow-one-node",
        "script": "tensorflow-1node.sbatch",
        "program": "train_resnet_keras.py",
        "program_path": "tensorflow/train_resnet_keras.py",
        "job": TENSORFLOW_JOB,
        "cell": "[one node](howto/{name}/tensorflow-one-node.md)",
        "data": "",
    },
}

NOTES = """
## {title}

Checked on FILL-IN:notes-checked-date against FILL-IN:notes-sources. Each line below is a value
the sources leave in doubt, or where the profile departs from them; remove a line once it is
settled.
"""


# --------------------------------------------------------------------------- edits
def _edit(path: Path, root: Path, text: str | None = None) -> str:
    if text is not None:
        return text
    if not path.is_file():
        raise ScaffoldError(f"{path.relative_to(root)}: not found, so there is nothing to add to")
    return path.read_text(encoding="utf-8")


def landing_row(text: str, name: str, title: str, path: str) -> str:
    """The matrix of docs/index.md with a row for the site after the last site in service."""
    lines = text.splitlines(keepends=True)
    try:
        head = next(i for i, line in enumerate(lines) if line.startswith("| Site | PyTorch |"))
    except StopIteration:
        raise ScaffoldError(f"{path}: no site matrix (| Site | PyTorch | TensorFlow |)") from None
    end = head + 2
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    after = max(
        (i for i in range(head + 2, end) if "(in service" in lines[i].split("|")[1]),
        default=end - 1,
    )
    cells = [FRAMEWORKS[f]["cell"].format(name=name) for f in ("pytorch", "tensorflow")]
    row = f"| {title} (in service) | {cells[0]} | {cells[1]} |\n"
    return "".join([*lines[: after + 1], row, *lines[after + 1 :]])


def toctree_entries(text: str, path: str, entries: list[str], caption: str | None = None) -> str:
    """``entries`` added at the end of the toctree (the one with ``:caption: caption``)."""
    for m in re.finditer(r"^```\{toctree\}\n(?P<body>(?:(?!```).*\n)*?)```", text, re.M):
        if caption and not re.search(rf"^:caption: {re.escape(caption)}$", m["body"], re.M):
            continue
        end = m.end() - 3
        return text[:end] + "".join(f"{e}\n" for e in entries) + text[end:]
    what = f"with :caption: {caption}" if caption else ""
    raise ScaffoldError(f"{path}: no toctree {what}".rstrip())


# --------------------------------------------------------------------------- the plan
def plan(name: str, title: str | None = None, root: Path = ROOT) -> list[Write]:
    """Every file the scaffold writes, with its new text; nothing is written."""
    if not NAME.match(name):
        raise ScaffoldError(
            f"{name!r}: a site's name is lowercase words joined by hyphens (isambard-ai)"
        )
    title = title or "FILL-IN:title"
    if "|" in title or "\n" in title:
        raise ScaffoldError(f"{title!r}: a title holds no | and no line break")
    fields = {"name": name, "title": title}
    writes = [Write(root / "sites" / f"{name}.yaml", PROFILE.format(**fields), True)]
    for f in FRAMEWORKS.values():
        writes.append(
            Write(root / "examples" / name / f["script"], f["job"].format(**fields), True)
        )
    reference = root / "docs" / "reference" / "sites" / f"{name}.md"
    writes.append(Write(reference, REFERENCE.format(**fields), True))
    for framework, f in FRAMEWORKS.items():
        text = RECIPE.format(
            **fields,
            framework=framework,
            heading=f["heading"].format(**fields),
            script=f["script"],
            program=f["program"],
            program_path=f["program_path"],
            data=f["data"],
        )
        writes.append(Write(root / "docs" / "howto" / name / f"{f['page']}.md", text, True))
    for w in writes:
        if w.path.exists():
            raise ScaffoldError(f"{w.path.relative_to(root)}: exists already; nothing written")

    edits: dict[Path, str] = {}

    def edit(rel: str, change) -> None:
        path = root / rel
        edits[path] = change(_edit(path, root, edits.get(path)), rel)

    edit("docs/index.md", lambda t, p: landing_row(t, name, title, p))
    edit("docs/reference/index.md", lambda t, p: toctree_entries(t, p, [f"sites/{name}"]))
    pages = [f"{name}/{f['page']}" for f in FRAMEWORKS.values()]
    edit("docs/howto/index.md", lambda t, p: toctree_entries(t, p, pages, "Site recipes"))
    edit("sites/NOTES.md", lambda t, p: t.rstrip("\n") + "\n" + NOTES.format(**fields))
    writes += [Write(path, text, False) for path, text in edits.items()]
    return writes


def apply(writes: list[Write]) -> None:
    for w in writes:
        w.path.parent.mkdir(parents=True, exist_ok=True)
        w.path.write_text(w.text, encoding="utf-8")


def places(writes: list[Write], name: str, root: Path = ROOT) -> set[str]:
    """The paths written, as the guide writes them (``<name>`` for the site's name)."""
    return {
        str(w.path.relative_to(root))
        .replace(f"/{name}/", "/<name>/")
        .replace(f"/{name}.", "/<name>.")
        for w in writes
    }


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    ap = argparse.ArgumentParser(prog="clusterkit new-site", description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="the site's name: lowercase words joined by hyphens")
    ap.add_argument("--title", help="the site's name as its documentation writes it (LUMI)")
    ap.add_argument("--dry-run", action="store_true", help="list the files; write nothing")
    args = ap.parse_args(argv)
    try:
        writes = plan(args.name, args.title, root)
    except ScaffoldError as exc:
        print(f"new-site: {exc}", file=sys.stderr)
        return 1
    if not args.dry_run:
        apply(writes)
    for w in writes:
        print(f"{'new ' if w.new else 'edit'} {w.path.relative_to(root)}")
    markers = sum(len(MARKER.findall(w.text)) for w in writes)
    print(
        f"{len(writes)} file(s) {'to write' if args.dry_run else 'written'}; {markers} fill-in "
        "marker(s) to replace with sourced facts; `python -m clusterkit check` lists them"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
