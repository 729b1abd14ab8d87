"""`mrjudge.config_flags`: a config dataclass as flags and back, and the flags `mrjudge` users already type."""

from __future__ import annotations

import argparse
import dataclasses
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from mrjudge.cli import build_parser
from mrjudge.config_flags import ConfigFlags, LazyFlagsParser, add_key_values, flag_name

from judge.config import ConfigError


@dataclass
class Inner:
    depth: int = 1


@dataclass
class Example:
    steps: int = 3
    rate: float | None = field(default=None, metadata={"help": "a rate; default: none", "metavar": "R"})
    name: str = field(default="x", metadata={"help": "a name"})
    mode: Literal["fast", "slow"] = field(default="fast", metadata={"help": "how"})
    verbose: bool = field(default=False, metadata={"help": "say more"})
    cache: bool = field(default=True, metadata={"help": "keep results"})
    sizes: list[int] = field(default_factory=lambda: [1, 2], metadata={"help": "sizes"})
    out: Path | None = None
    inner: Inner = field(default_factory=Inner)  # nested: YAML only

    def __post_init__(self) -> None:
        if isinstance(self.inner, dict):  # from YAML, as JudgeConfig's prompt
            self.inner = Inner(**self.inner)
        if self.steps < 1:
            raise ValueError(f"steps ({self.steps}) must be at least 1")


EXAMPLE = ConfigFlags(Example)


def _parse(argv: list[str], flags: ConfigFlags = EXAMPLE, **wording) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    flags.add_to(parser, **wording)
    return parser.parse_args(argv)


def test_each_field_kind_becomes_the_flag_its_type_says():
    assert ConfigFlags(Example).names == ("steps", "rate", "name", "mode", "verbose", "cache", "sizes", "out")
    argv = ["--steps", "5", "--rate", "0.5", "--mode", "slow", "--verbose", "--no-cache", "--sizes", "4", "5"]
    args = _parse([*argv, "--out", "o"])
    assert ConfigFlags(Example).values(args) == {
        "steps": 5,
        "rate": 0.5,
        "mode": "slow",
        "verbose": True,
        "cache": False,
        "sizes": [4, 5],
        "out": Path("o"),
    }
    assert ConfigFlags(Example).values(_parse([])) == {}  # nothing given: nothing overrides a YAML file


def test_bad_values_are_refused_by_argparse_with_the_flag(capsys):
    for argv, words in ((["--steps", "x"], "--steps"), (["--mode", "medium"], "invalid choice")):
        with pytest.raises(SystemExit) as exc:
            _parse(argv)
        assert exc.value.code == 2
        assert words in capsys.readouterr().err


def test_help_shows_the_field_help_and_default():
    parser = argparse.ArgumentParser()
    ConfigFlags(Example).add_to(parser, shown={"name": "the run's"})
    text = " ".join(parser.format_help().split())
    assert "--rate R a rate; default: none" in text
    assert "--steps STEPS default: 3" in text
    assert "a name (default: the run's)" in text
    assert "--mode {fast,slow} how (default: fast)" in text
    assert "--cache, --no-cache keep results" in text


def test_field_default_then_yaml_then_flag(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 7\nname: from-yaml\ninner: {depth: 4}\n")
    flags = ConfigFlags(Example)
    assert flags.config(_parse([]), path) == Example(steps=7, name="from-yaml", inner=Inner(4))
    assert flags.config(_parse(["--name", "flag"]), path) == Example(steps=7, name="flag", inner=Inner(4))
    assert flags.config(_parse([])) == Example()


def test_a_value_the_dataclass_refuses_names_the_field():
    with pytest.raises(ConfigError, match=r"steps \(0\) must be at least 1"):
        ConfigFlags(Example).config(_parse(["--steps", "0"]))


def test_prefix_skip_and_command_defaults():
    flags = ConfigFlags(Example, skip=("sizes",), prefix="stage")
    assert flag_name("max_tokens", "stage") == "--stage-max-tokens"
    args = _parse(["--stage-steps", "2"], flags, defaults={"name": "cmd"})
    assert args.stage_steps == 2 and not hasattr(args, "stage_sizes")
    assert flags.values(args) == {"steps": 2, "name": "cmd"}  # a command default counts as given
    with pytest.raises(ValueError, match="skip names no field"):
        ConfigFlags(Example, skip=("nope",)).add_to(argparse.ArgumentParser())


def test_same_reading_as_hf_argument_parser():
    """Our type rules are HfArgumentParser's: the same kebab-case flags give the same dataclass."""
    from transformers import HfArgumentParser

    @dataclass
    class Plain:
        steps: int = 3
        rate: float | None = None
        mode: Literal["fast", "slow"] = "fast"
        verbose: bool = False
        sizes: list[int] = field(default_factory=lambda: [1])

    for argv in ([], ["--steps", "4", "--rate", "2", "--mode", "slow", "--verbose", "--sizes", "3", "4"]):
        (theirs,) = HfArgumentParser(Plain).parse_args_into_dataclasses(argv, look_for_args_file=False)
        ours = ConfigFlags(Plain).config(_parse(argv, ConfigFlags(Plain)))
        assert ours == theirs, argv


@pytest.mark.parametrize(
    "cls",
    ["judge.judging.JudgeConfig", "reward_server.config.ServerConfig", "data_synthesis.sampling.StageSampling"]
    + ["data_synthesis.assemble.AssembleConfig"],
)
def test_every_field_of_a_config_with_flags_has_help(cls):
    import importlib

    module, name = cls.rsplit(".", 1)
    missing = [
        f.name for f in dataclasses.fields(getattr(importlib.import_module(module), name)) if not f.metadata.get("help")
    ]
    assert not missing, f"{cls}: add metadata={{'help': ...}} to {missing}"


# -- the flags users type today keep their names, defaults and meanings ------------------------------------


def _cli(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_judge_flags_and_defaults_are_unchanged():
    from mrjudge.judge_cmd import judge_config_from

    from judge.judging import JudgeConfig

    base = ["judge", "--model", "m", "--input", "i.jsonl", "--output", "o.jsonl"]
    assert judge_config_from(_cli(*base)) == JudgeConfig()
    argv = ["--orders", "3", "--samples", "2", "--temperature", "0.7", "--max-new-tokens", "64", "--batch-size", "2"]
    args = _cli(*base, *argv, "--seed", "5", "--min-pixels", "3136", "--max-pixels", "200704")
    assert judge_config_from(args) == JudgeConfig(
        orders=3,
        samples=2,
        temperature=0.7,
        max_new_tokens=64,
        batch_size=2,
        seed=5,
        min_pixels=3136,
        max_pixels=200704,
    )


def test_eval_keeps_its_run_level_seed_and_batch_size_and_the_official_top_p():
    from mrjudge.eval_cmd import EVAL_JUDGE_FLAGS
    from mrjudge.judge_cmd import judge_config_from

    from judge.judging import JudgeConfig

    args = _cli("eval", "vl-rewardbench", "--data", "d", "--out", "o", "--top-p", "0.3")
    assert (args.seed, args.batch_size, args.top_p, args.k, args.mode) == (0, 8, 0.3, 10, "mc")
    assert judge_config_from(args, EVAL_JUDGE_FLAGS) == JudgeConfig()  # official mode's top_p stays out of mc
    args = _cli("eval", "multimodal-rewardbench", "--data", "d", "--out", "o", "--seed", "2", "--orders", "1")
    assert judge_config_from(args, EVAL_JUDGE_FLAGS) == JudgeConfig(seed=2, orders=1)


def test_serve_flags_fill_both_configs(monkeypatch):
    from mrjudge.judge_cmd import judge_config_from
    from mrjudge.serve_cmd import server_config_from

    from reward_server.config import ServerConfig

    monkeypatch.delenv("MRJUDGE_SERVER_API_KEY", raising=False)
    assert server_config_from(_cli("serve", "--model", "m")) == ServerConfig()
    argv = ["--port", "0", "--max-wait-ms", "5", "--host", "0.0.0.0", "--allow-unauthenticated", "--orders", "1"]
    args = _cli("serve", "--model", "m", *argv, "--no-batching")
    assert server_config_from(args) == ServerConfig(
        port=0, max_wait_ms=5.0, host="0.0.0.0", allow_unauthenticated=True, max_batch_items=1
    )
    assert judge_config_from(args).orders == 1


def test_synth_stage_flags_are_unchanged():
    from mrjudge.synth_cmd import _assemble_flags, _sampling_from

    from data_synthesis.assemble import AssembleConfig

    args = _cli("synth", "assemble", "--input", "a", "--out", "b")
    assert AssembleConfig(**_assemble_flags().values(args)) == AssembleConfig()
    args = _cli("synth", "assemble", "--input", "a", "--out", "b", "--min-options", "3", "--val-fraction", "0.2")
    assert AssembleConfig(**_assemble_flags().values(args)) == AssembleConfig(min_options=3, val_fraction=0.2)
    argv = ["--input", "a", "--out", "b", "--reasoner-temperature", "0.7", "--rewriter-seed", "3"]
    args = _cli("synth", "distill", *argv, "--reasoner-max-tokens", "100")
    assert _sampling_from(args, "reasoner") == {"temperature": 0.7, "max_tokens": 100}
    assert _sampling_from(args, "rewriter") == {"seed": 3}


# -- one convention: flags and `key=value` on every command -------------------------------------------------


class Speed(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass
class TrlLike:
    """TRL's field shapes: an enum or a string, a tri-state bool, a mapping (key=value only)."""

    speed: Speed | str = field(default="fast", metadata={"help": "an enum or its value"})
    bf16: bool | None = field(default=None, metadata={"help": "None: decided later"})
    kwargs: dict | str | None = field(default=None, metadata={"help": "a mapping"})


def test_enum_or_str_and_tri_state_bool_fields_get_flags():
    flags = ConfigFlags(TrlLike)
    assert flags.names == ("speed", "bf16")  # the mapping is key=value only
    assert flags.values(_parse(["--speed", "slow", "--no-bf16"], flags)) == {"speed": "slow", "bf16": False}
    assert flags.values(_parse(["--bf16"], flags)) == {"bf16": True} and flags.values(_parse([], flags)) == {}
    with pytest.raises(SystemExit):
        _parse(["--speed", "medium"], flags)


def test_key_value_is_the_same_as_the_flag():
    parser = argparse.ArgumentParser()
    EXAMPLE.add_to(parser)
    add_key_values(parser, "steps=2")
    as_flags = parser.parse_args(["--steps", "5", "--sizes", "4", "5", "--no-cache"])
    as_pairs = parser.parse_args(["steps=5", "sizes=[4, 5]", "cache=false"])
    assert EXAMPLE.values(as_flags) == EXAMPLE.values(as_pairs) == {"steps": 5, "sizes": [4, 5], "cache": False}
    assert EXAMPLE.values(parser.parse_args(["inner={depth: 2}"])) == {"inner": {"depth": 2}}  # YAML-only fields too
    with pytest.raises(ConfigError, match=r"must look like key=value \(e\.g\. steps=2\)"):
        EXAMPLE.values(parser.parse_args(["steps"]))


def test_lazy_flags_are_added_only_for_the_command_that_runs():
    added = []
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", parser_class=LazyFlagsParser)
    for name in ("a", "b"):
        commands.add_parser(name, add_flags=lambda p, name=name: (added.append(name), EXAMPLE.add_to(p)))
    assert parser.parse_args(["b", "--steps", "4"]).steps == 4
    assert added == ["b"]


def test_train_takes_flags_and_key_value_alike():
    """`mrjudge train` reads TRL's fields as flags, added when the stage runs; key=value is the same thing."""
    from mrjudge.train_cmd import _flags

    from training.config import load_config
    from training.sft import JudgeSFTConfig

    base = ["train", "sft", "model_name_or_path=m", "train_file=t.jsonl", "output_dir=o"]
    flags = _cli(*base, "--max-steps", "3", "--lr-scheduler-type", "cosine", "--use-lora", "--no-bf16")
    pairs = _cli(*base, "max_steps=3", "lr_scheduler_type=cosine", "use_lora=true", "bf16=false")
    assert _flags("sft").values(flags) == _flags("sft").values(pairs)
    config = load_config(JudgeSFTConfig, None, _flags("sft").values(flags))
    assert (config.max_steps, config.lr_scheduler_type.value, config.use_lora, config.bf16) == (
        3,
        "cosine",
        True,
        False,
    )


def test_demo_takes_flags_key_value_and_old_names(tmp_path):
    from mrjudge.demo import DEMO_FLAGS

    from tiny_world.demo.config import load_demo_config

    flags = DEMO_FLAGS.values(_cli("demo", "--quick", "--sft-max-steps", "7", "--num-generations", "2", "--no-shaded"))
    pairs = DEMO_FLAGS.values(_cli("demo", "quick=true", "sft_max_steps=7", "num_generations=2", "shaded=false"))
    assert flags == pairs and load_demo_config(None, flags).sft_max_steps == 7
    with pytest.warns(FutureWarning, match="`grpo_generations` is now `num_generations`"):
        old = load_demo_config(None, {"grpo_generations": 2, "sft_steps": 7, "shaded": False}, quick=True)
    assert old == load_demo_config(None, flags)
    path = tmp_path / "old.yaml"
    path.write_text("quick: true\npolicy_generations: 2\n")
    with pytest.warns(FutureWarning, match="old.yaml: `policy_generations` is now `policy_num_generations`"):
        assert load_demo_config(path).policy_num_generations == 2
