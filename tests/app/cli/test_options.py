"""The LLM endpoint and codebook backend options, declared once (``backend_options``):
every codebook stage that calls the endpoint takes all of them, and what is given on the
command line arrives in the command's one ``BackendOptions``."""

from __future__ import annotations

import typer
from typer.main import get_command
from typer.testing import CliRunner

from rcea.app.cli.codebook_cmd import codebook_app
from rcea.app.cli.options import BACKEND_PARAMETERS, JSON_OPTION, backend_options
from rcea.study.codebook.backend import BackendOptions

STAGES = ("induce", "merge", "assign", "reconcile", "approve", "run")


def test_every_llm_stage_takes_every_backend_option() -> None:
    group = get_command(codebook_app)
    wanted = {option.param_decls[0] for _, _, _, option in BACKEND_PARAMETERS}
    assert len(wanted) == 12
    for name in STAGES:
        flags = {f for p in group.commands[name].params for f in p.opts}  # type: ignore[attr-defined]  # a Typer group's click command has .commands
        assert wanted <= flags, (name, wanted - flags)
        assert "--actor" in flags and "--json" in flags


def test_the_command_line_arrives_as_one_backend_options() -> None:
    seen: list[BackendOptions] = []
    app = typer.Typer()

    @app.command()
    @backend_options
    def stage(
        size: int = typer.Option(3), as_json: bool = JSON_OPTION, *, llm: BackendOptions
    ) -> None:
        seen.append(llm)
        typer.echo(f"{size} {as_json}")

    args = ["--size", "5", "--backend", "oracle", "--oracle", "m:f", "--seed", "7",
            "--concurrency", "2", "--timeout", "9.5", "--max-retries", "1",
            "--price-input", "0.5", "--price-output", "1.5", "--base-url", "http://x/v1",
            "--model", "m", "--api-key-env", "K", "--response-format", "none",
            "--json"]  # fmt: skip
    res = CliRunner().invoke(app, args, env={"RCEA_LLM_CONCURRENCY": "8"})
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "5 True"
    assert seen == [
        BackendOptions(
            kind="oracle", oracle="m:f", concurrency=2, timeout_s=9.5, max_retries=1,
            price_input_per_mtok=0.5, price_output_per_mtok=1.5, seed=7, json_mode="none",
            base_url="http://x/v1", model="m", api_key_env="K",
        )
    ]  # fmt: skip
