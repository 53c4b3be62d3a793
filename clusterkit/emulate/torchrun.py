"""torchrun's options (torch.distributed.run), for checking launch lines without importing torch.

tests/test_launcher_contracts.py compares this table with torch's own parser, so a torch release
that renames an option fails CI.
"""

from __future__ import annotations

import argparse

# (option strings, takes a value)
OPTIONS: list[tuple[tuple[str, ...], bool]] = [
    (("--nnodes",), True),
    (("--nproc-per-node", "--nproc_per_node"), True),
    (("--rdzv-backend", "--rdzv_backend"), True),
    (("--rdzv-endpoint", "--rdzv_endpoint"), True),
    (("--rdzv-id", "--rdzv_id"), True),
    (("--rdzv-conf", "--rdzv_conf"), True),
    (("--standalone",), False),
    (("--max-restarts", "--max_restarts"), True),
    (("--monitor-interval", "--monitor_interval"), True),
    (("--start-method", "--start_method"), True),
    (("--role",), True),
    (("-m", "--module"), False),
    (("--no-python", "--no_python"), False),
    (("--run-path", "--run_path"), False),
    (("--log-dir", "--log_dir"), True),
    (("-r", "--redirects"), True),
    (("-t", "--tee"), True),
    (("--local-ranks-filter", "--local_ranks_filter"), True),
    (("--node-rank", "--node_rank"), True),
    (("--master-addr", "--master_addr"), True),
    (("--master-port", "--master_port"), True),
    (("--local-addr", "--local_addr"), True),
    (("--logs-specs", "--logs_specs"), True),
    (("--numa-binding", "--numa_binding"), True),
    (("--event-log-handler", "--event_log_handler"), True),
    (("--virtual-local-rank", "--virtual_local_rank"), False),
    (("--signals-to-handle", "--signals_to_handle"), True),
    (("--shutdown-timeout", "--shutdown_timeout"), True),
    (("--duplicate-stdout-filters", "--duplicate_stdout_filters"), True),
    (("--duplicate-stderr-filters", "--duplicate_stderr_filters"), True),
    (("--log-line-prefix-template", "--log_line_prefix_template"), True),
    (("--print-completion", "--print_completion"), True),
]


class TorchrunError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise TorchrunError(message)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(options, [script, args...]) as torchrun splits them."""
    p = _Parser(prog="torchrun", add_help=False, allow_abbrev=False)
    for names, takes in OPTIONS:
        if takes:
            p.add_argument(*names, dest=names[-1].lstrip("-").replace("-", "_"))
        else:
            p.add_argument(
                *names, dest=names[-1].lstrip("-").replace("-", "_"), action="store_true"
            )
    p.add_argument("training_script")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    return ns, [ns.training_script, *ns.training_script_args]


def nproc_per_node(ns: argparse.Namespace, gpus: int) -> int | None:
    """The number of workers per node torchrun starts (None when it cannot be known statically)."""
    value = ns.nproc_per_node or "1"
    if value.isascii() and value.isdigit():
        return int(value)
    if value == "gpu":
        return gpus
    if value in {"auto", "cpu", "xpu"}:
        return gpus or None
    return None
