"""The controller's command line: argparse over the table (every flag with its environment
variable as the default), Go-style ``-flag`` spellings, and the cross-setting checks that turn
a parsed command line into ``Settings``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from computedomain import distribution_version
from computedomain.api import constants as c
from computedomain.config.inert import INERT_FLAGS
from computedomain.config.parsers import ConfigError, as_bool, ignored_feature_gates
from computedomain.config.table import SETTINGS, Settings
from computedomain.domain.settings import DaemonSettings, ReconcilerSettings


class _Repeated(argparse.Action):
    """Go's StringSlice flag: each use adds its values; flags replace the environment's."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        marker = f"_given_{self.dest}"
        before = getattr(namespace, self.dest) if getattr(namespace, marker, False) else ""
        setattr(namespace, self.dest, ",".join(filter(None, (before, str(values)))))
        setattr(namespace, marker, True)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="computedomain-controller",
        description=(
            "Runs the ComputeDomain controller: watches resource.nvidia.com/v1beta1 "
            "ComputeDomains, creates their IMEX daemon DaemonSet and ResourceClaimTemplates "
            "exactly as NVIDIA's DRA driver expects, projects daemon state into status, and "
            "cleans up on deletion. Every flag can also be set by the environment variable "
            "shown in brackets (flags win). Also installed as compute-domain-controller, and "
            "it takes NVIDIA's compute-domain-controller command line unchanged: its flags and "
            "variables, Go-style -flag spellings, and every feature gate NVIDIA's components "
            "know."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    for row in SETTINGS:
        extra: dict[str, Any] = {}
        if row.repeatable:
            extra["action"] = _Repeated
        if row.parse is as_bool:
            extra.update(nargs="?", const="true")  # Go bool flags need no value
        envs = " or ".join((row.env, *row.fallback_env))
        parser.add_argument(
            *row.flags,
            dest=row.option,
            default=row.from_env(env),
            help=f"{row.help} [{envs}{'; ' + row.check.accepts if row.check else ''}]",
            **extra,
        )
    inert = parser.add_argument_group(
        "NVIDIA's flags without effect here",
        "Accepted so that NVIDIA's Deployment runs this controller unchanged; a value is checked "
        "as NVIDIA checks it, and one set is logged once at start.",
    )
    for flag in INERT_FLAGS:
        extra = {"nargs": "?", "const": "true"} if flag.boolean else {}
        inert.add_argument(
            flag.flag,
            dest=flag.option,
            default=env.get(flag.env, argparse.SUPPRESS),
            help=f"{flag.help} [{flag.env}; {flag.accepts}]",
            **extra,
        )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    return parser


def go_style(argv: Sequence[str]) -> list[str]:
    """``-name`` and ``-name=value`` as ``--name``: NVIDIA's binary parses flags with Go's flag
    package, which takes one dash or two for every flag (``-v`` stays as it is)."""
    long_flags = {f for row in SETTINGS for f in row.flags if f.startswith("--")}
    long_flags |= {row.flag for row in INERT_FLAGS} | {"--version", "--help"}
    out: list[str] = []
    for position, arg in enumerate(argv):
        if arg == "--":
            return out + list(argv[position:])
        if (
            arg.startswith("-")
            and not arg.startswith("--")
            and f"-{arg.split('=', 1)[0]}" in long_flags
        ):
            arg = f"-{arg}"
        out.append(arg)
    return out


def settings_from_namespace(ns: argparse.Namespace) -> Settings:
    values: dict[str, dict[str, Any]] = {"": {}, "reconciler": {}, "daemon": {}}
    for row in SETTINGS:
        raw = getattr(ns, row.option)
        group, _, field = row.dest.rpartition(".")
        values[group][field] = row.value(None if raw is None else str(raw))
    notices = []
    for flag in INERT_FLAGS:
        raw = getattr(ns, flag.option, None)
        if raw:
            flag.parse(str(raw), f"{flag.flag} / {flag.env}")
            notices.append(f"{flag.flag} / {flag.env}={raw} has no effect here: {flag.help}")
    ignored = ignored_feature_gates(str(getattr(ns, "feature_gates", None) or ""))
    if ignored:
        pairs = ",".join(f"{name}={str(on).lower()}" for name, on in ignored.items())
        notices.append(
            f"feature gates {pairs} concern NVIDIA's kubelet plugin or logging, not the "
            "ComputeDomain controller: ignored"
        )
    top = values[""]
    top["notices"] = tuple(notices)
    if not top["lease_duration"] > top["renew_deadline"] > 1.2 * top["retry_period"]:
        raise ConfigError(
            "leader election needs lease duration > renew deadline > 1.2 x retry period"
        )
    if values["reconciler"]["imex_mode"] == c.IMEX_MODE_HOST:
        gates = values["daemon"]["feature_gates"]
        if not gates[c.GATE_HOST_MANAGED_IMEX]:
            raise ConfigError(
                f'imex.mode="{c.IMEX_MODE_HOST}" requires the {c.GATE_HOST_MANAGED_IMEX} '
                "feature gate to be enabled"
            )
        # As upstream: no daemons, so neither DNS names nor cliques exist in this mode.
        values["daemon"]["feature_gates"] = {
            **gates,
            c.GATE_DNS_NAMES: False,
            c.GATE_CLIQUES: False,
        }
    reconciler = ReconcilerSettings(
        daemon=DaemonSettings(**values["daemon"]), **values["reconciler"]
    )
    top["lease_namespace"] = top["lease_namespace"] or reconciler.driver_namespace
    top["placement_webhook_hosts"] = top["placement_webhook_hosts"] or (
        f"computedomain-placement-webhook.{reconciler.driver_namespace}.svc",
    )
    return Settings(reconciler=reconciler, **top)


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Settings from flags and environment; raises ConfigError with a clear message."""
    args = go_style(sys.argv[1:] if argv is None else argv)
    return settings_from_namespace(build_parser(environ).parse_args(args))
