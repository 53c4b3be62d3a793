"""``accelerate launch``'s options (accelerate 1.15's ``launch_command_parser``), to judge
launch lines without importing accelerate, and what a line asks for.

tests/test_launcher_contracts.py compares this table with accelerate's own parser, so a release
that adds or renames an option fails CI. Accelerate writes its long options with underscores
and adds a hyphenated twin of each (``--num-processes``); the names below are the underscored
ones, the twins are made by the same rule.

What a launch line starts: ``--num_processes`` counts the processes of all machines, and each of
the ``--num_machines`` machines starts ``num_processes // num_machines`` of them (accelerate's
``prepare_multi_gpu_env``). A value the line does not give comes from ``--config_file`` (its
YAML keys have the options' names); the line wins over the file.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from clusterkit.emulate.slurm_options import close_words

# Options that take no value, those that take one, and those given once per value
FLAGS = (
    "quiet",
    "cpu",
    "multi_gpu",
    "tpu",
    "enable_cpu_affinity",
    "dynamo_use_fullgraph",
    "dynamo_use_dynamic",
    "dynamo_use_regional_compilation",
    "use_deepspeed",
    "use_fsdp",
    "use_parallelism_config",
    "use_megatron_lm",
    "same_network",
    "module",
    "no_python",
    "tpu_cluster",
    "no_tpu_cluster",
    "tpu_use_sudo",
    "downcast_bf16",
    "fp8_use_autocast_during_eval",
    "debug",
)
VALUES = (
    "config_file",
    "mixed_precision",
    "num_processes",
    "num_machines",
    "num_cpu_threads_per_process",
    "dynamo_backend",
    "dynamo_mode",
    "gpu_ids",
    "machine_rank",
    "main_process_ip",
    "main_process_port",
    "tee",
    "log_dir",
    "role",
    "rdzv_backend",
    "rdzv_conf",
    "max_restarts",
    "monitor_interval",
    "main_training_function",
    "deepspeed_config_file",
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "offload_optimizer_nvme_path",
    "offload_param_nvme_path",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "zero3_init_flag",
    "zero3_save_16bit_model",
    "deepspeed_hostfile",
    "deepspeed_exclusion_filter",
    "deepspeed_inclusion_filter",
    "deepspeed_multinode_launcher",
    "deepspeed_moe_layer_cls_names",
    "fsdp_version",
    "fsdp_offload_params",
    "fsdp_min_num_params",
    "fsdp_sharding_strategy",
    "fsdp_reshard_after_forward",
    "fsdp_auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_backward_prefetch",
    "fsdp_state_dict_type",
    "fsdp_forward_prefetch",
    "fsdp_use_orig_params",
    "fsdp_cpu_ram_efficient_loading",
    "fsdp_sync_module_states",
    "fsdp_activation_checkpointing",
    "fsdp_activation_checkpointing_offload",
    "megatron_lm_tp_degree",
    "megatron_lm_use_custom_fsdp",
    "megatron_lm_no_load_optim",
    "megatron_lm_eod_mask_loss",
    "megatron_lm_overlap_cpu_optimizer_d2h_h2d",
    "megatron_lm_no_save_optim",
    "megatron_lm_optimizer_cpu_offload",
    "megatron_lm_use_precision_aware_optimizer",
    "megatron_lm_decoder_last_pipeline_num_layers",
    "megatron_lm_pp_degree",
    "megatron_lm_num_micro_batches",
    "megatron_lm_sequence_parallelism",
    "megatron_lm_recompute_activations",
    "megatron_lm_use_distributed_optimizer",
    "megatron_lm_gradient_clipping",
    "megatron_lm_recompute_granularity",
    "megatron_lm_recompute_method",
    "megatron_lm_recompute_num_layers",
    "megatron_lm_attention_backend",
    "megatron_lm_expert_model_parallel_size",
    "megatron_lm_context_parallel_size",
    "megatron_lm_attention_dropout",
    "megatron_lm_hidden_dropout",
    "megatron_lm_attention_softmax_in_fp32",
    "megatron_lm_expert_tensor_parallel_size",
    "megatron_lm_calculate_per_token_loss",
    "megatron_lm_use_rotary_position_embeddings",
    "fp8_backend",
    "fp8_margin",
    "fp8_interval",
    "fp8_format",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "fp8_override_linear_precision",
    "fp8_opt_level",
    "fp8_enable_fsdp_float8_all_gather",
    "fp8_pad_inner_dim",
    "aws_access_key_id",
    "aws_secret_access_key",
    "mpirun_hostfile",
    "parallelism_config_dp_replicate_size",
    "parallelism_config_dp_shard_size",
    "parallelism_config_tp_size",
    "parallelism_config_cp_size",
    "parallelism_config_cp_backend",
    "parallelism_config_cp_comm_strategy",
    "parallelism_config_sp_size",
    "parallelism_config_sp_backend",
    "parallelism_config_sp_seq_length",
    "parallelism_config_sp_seq_length_is_variable",
    "parallelism_config_sp_attn_implementation",
)
APPEND = (
    "vm",
    "env",
)
SHORT = {"-q": "quiet", "-t": "tee", "-m": "module"}

CHOICES = {
    "mixed_precision": ("no", "fp16", "bf16", "fp8"),
    "dynamo_mode": ("default", "reduce-overhead", "max-autotune"),
    "fsdp_version": ("1", "2"),
    "fp8_backend": ("ao", "te", "msamp"),
    "fp8_format": ("HYBRID", "E4M3", "E5M2"),
    "fp8_amax_compute_algo": ("max", "most_recent"),
    "fp8_opt_level": ("O1", "O2"),
    "parallelism_config_cp_backend": ("torch",),
    "parallelism_config_sp_backend": ("deepspeed",),
}
# The launch modes: each makes accelerate start its processes through torchrun (or DeepSpeed);
# without one, and without a GPU count of two or more to turn multi-GPU on, it runs one process
DISTRIBUTED = ("multi_gpu", "use_fsdp", "use_deepspeed", "use_megatron_lm")
# distributed_type values of a config file that start processes through torchrun or DeepSpeed
DISTRIBUTED_TYPES = {"MULTI_GPU", "FSDP", "DEEPSPEED", "MEGATRON_LM"}
SUBCOMMANDS = ("config", "env", "estimate-memory", "launch", "merge-weights", "test", "to-fsdp2")
SUBCOMMANDS += ("tpu-config",)


class LaunchError(Exception):
    """The line as accelerate would refuse it (its own words, with a hint where one helps)."""


def option_strings(name: str) -> list[str]:
    """``--name`` with its hyphenated twin and short form, as accelerate's parser has them."""
    out = [f"--{name}"]
    if "_" in name:
        out.append(f"--{name.replace('_', '-')}")
    return out + [short for short, long in SHORT.items() if long == name]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        words = message.removeprefix("unrecognized arguments: ").split()
        if message.startswith("unrecognized arguments:") and words:
            near = close_words(words[0], [o for n in ALL for o in option_strings(n)])
            if near:
                message += f" (did you mean {near[0]}?)"
        raise LaunchError(message)


ALL = FLAGS + VALUES + APPEND


@cache
def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="accelerate launch", add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true")
    for name in FLAGS:
        p.add_argument(*option_strings(name), dest=name, action="store_true")
    for name in VALUES:
        p.add_argument(*option_strings(name), dest=name)
    for name in APPEND:
        p.add_argument(*option_strings(name), dest=name, action="append")
    p.add_argument("training_script", nargs="?")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """(options, [script, args...]) as ``accelerate launch`` splits them. A value is kept as
    written (a shell variable may stand for it); only a literal outside its choices is refused."""
    ns = parser().parse_args(argv)
    for name, allowed in CHOICES.items():
        value = getattr(ns, name)
        if value is not None and "$" not in value and value not in allowed:
            shown = ", ".join(repr(a) for a in allowed)
            raise LaunchError(f"argument --{name}: invalid choice: {value!r} (choose from {shown})")
    if not ns.training_script and not ns.help:
        raise LaunchError("the following arguments are required: training_script")
    script = [ns.training_script] if ns.training_script else []
    return ns, script + list(ns.training_script_args)


def read_config(path: Path) -> dict:
    """A config file's settings (accelerate's YAML or JSON), or LaunchError naming the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise LaunchError(f"--config_file {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise LaunchError(f"--config_file {path}: not a mapping of settings")
    return data


def _count(value: object) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isascii() and text.isdigit() else None


@dataclass(frozen=True)
class Launch:
    """What a launch line asks for; None where it depends on what cannot be read here."""

    processes: int | None  # over all machines (None: one per GPU accelerate sees)
    machines: int | None
    distributed: bool  # a mode that starts processes through torchrun or DeepSpeed
    rdzv_backend: str
    machine_rank: str | None
    main_process_ip: str | None
    from_config: bool  # a config file was read

    @property
    def per_machine(self) -> int | None:
        if self.processes is None or not self.machines:
            return None
        return self.processes // self.machines


def settings(ns: argparse.Namespace, config: dict | None) -> Launch:
    """The line's settings, each from the line, else from the config file, else the default."""
    cfg = config or {}

    def pick(name: str, default: object = None) -> object:
        value = getattr(ns, name, None)
        return value if value is not None else cfg.get(name, default)

    distributed = any(getattr(ns, n) for n in DISTRIBUTED) or (
        not ns.cpu and str(cfg.get("distributed_type", "")).upper() in DISTRIBUTED_TYPES
    )
    rank = pick("machine_rank")
    ip = pick("main_process_ip")
    return Launch(
        processes=_count(pick("num_processes")),
        machines=_count(pick("num_machines", 1)),
        distributed=distributed and not ns.cpu,
        rdzv_backend=str(pick("rdzv_backend", "static")),
        machine_rank=None if rank is None else str(rank),
        main_process_ip=None if ip is None else str(ip),
        from_config=config is not None,
    )
