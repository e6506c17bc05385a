"""``mrbench advantages``: apply one method to rewards typed on the command line or read from a file."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from mrbench.core import limits


def register(app: typer.Typer) -> None:
    @app.command("advantages")
    def advantages_cmd(
        method: str = typer.Option(
            ..., "--method", help="Method name (see `mrbench methods`) or package.module:function."
        ),
        rewards: str = typer.Option(
            None, "--rewards", help='Rows "r,r,r;r,r,r;…" (one row per rollout; nan = unscorable).'
        ),
        rewards_file: Path = typer.Option(
            None, "--rewards-file", help="CSV or JSON file of reward rows instead of --rewards."
        ),
        group_size: int = typer.Option(
            None,
            "--group-size",
            min=1,
            max=limits.EVAL_LIMIT_MAX,  # more rows than anyone types or a rewards file holds
            help="Rollouts per group (default: all rows one group).",
        ),
        weights: str = typer.Option(
            None, "--weights", help="Comma-separated component weights (default: all 1)."
        ),
        param: list[str] = typer.Option([], "--param", help="Method hyper-parameter key=value (repeatable)."),
        as_json: bool = typer.Option(False, "--json", help='Print {"method", "advantages", "diagnostics"}.'),
    ) -> None:
        """Compute advantages for reward rows; each consecutive run of --group-size rows is one group."""
        import mrbench.methods as methods
        from mrbench.cli.reward_input import load_rewards_file, parse_rewards_text, parse_weights, to_groups
        from mrbench.core.errors import UserError
        from mrbench.kit.keyvalue import parse_key_values

        if (rewards is None) == (rewards_file is None):
            raise UserError("give exactly one of --rewards or --rewards-file")
        try:
            rows = parse_rewards_text(rewards) if rewards is not None else load_rewards_file(rewards_file)
        except UserError as exc:  # the file's errors name the file; the option's, the option
            raise UserError(f"--rewards: {exc}" if rewards is not None else str(exc)) from None
        grouped = to_groups(rows, group_size)
        w = parse_weights(weights, grouped.shape[-1])
        entry = methods.get_method(method)
        params = entry.resolve_params(parse_key_values(param, flag="--param"))
        adv = entry.obj(grouped, w, **params)
        diag = methods.diagnostics(grouped, w, adv)
        flat = [float(a) for a in adv.reshape(-1).tolist()]
        if as_json:
            payload = {"method": entry.name, "params": params, "advantages": flat}
            typer.echo(json.dumps({**payload, "diagnostics": diag.to_json()}))
            return
        typer.echo(f"method {entry.name} {params}")
        for i, value in enumerate(flat):
            typer.echo(f"{i:>4}  {value:+.6f}")
